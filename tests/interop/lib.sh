# Shared settings and helpers for the interop harness. Source it, do not run it.
# Only variables and small functions live here; every script does one job.

OXR_INTEROP_DIR=${OXR_INTEROP_DIR:-/var/tmp/oxrdma-interop}
W=$OXR_INTEROP_DIR
G=$W/guest                         # cached guest image (rootfs/, vmlinuz, initrd.img, root.img)
IT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)   # tests/interop
REPO_DIR=$(cd "$IT_DIR/../.." && pwd)

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 2; }

# Accelerator: KVM when the host really has it (kvm_intel/kvm_amd). "kvm_pvm"
# (pagetable-based nested virtualization on some cloud VMs) exposes /dev/kvm
# but cannot boot an unmodified Debian kernel, so fall back to TCG there.
oxr_accel() {
    if [ -n "${OXR_ACCEL:-}" ]; then echo "$OXR_ACCEL"
    elif [ -d /sys/module/kvm_pvm ]; then echo tcg
    elif [ -c /dev/kvm ] && { [ -d /sys/module/kvm_intel ] || [ -d /sys/module/kvm_amd ]; }; then echo kvm
    else echo tcg; fi
}
oxr_accel_args() {
    case "$(oxr_accel)" in
        kvm) echo "-accel kvm -cpu host" ;;
        *)   echo "-accel tcg,thread=multi -cpu max" ;;
    esac
}

# Host packages the harness needs (installed with apt-get when missing).
HOST_PKGS="qemu-system-x86 mmdebstrap e2fsprogs tshark socat iproute2 tcpdump iputils-ping ibverbs-utils perftest"
need_host_pkgs() {
    local p missing=()
    for p in $HOST_PKGS; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    log "installing host packages: ${missing[*]}"
    apt-get update -q >&2 || return 1
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
}
