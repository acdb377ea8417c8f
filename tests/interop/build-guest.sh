#!/bin/bash
# Build (or reuse) the cached Debian bookworm guest with Linux Soft-RoCE.
#   $OXR_INTEROP_DIR/guest/{rootfs/, vmlinuz, initrd.img, root.img, versions.txt}
# Idempotent: each step is skipped when its output exists and is up to date.
# Delete $OXR_INTEROP_DIR/guest to rebuild from scratch (~1.5 min + download).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
need_host_pkgs || die "cannot install host packages"
mkdir -p "$G"
cd "$G"

PKGS=linux-image-amd64,initramfs-tools,kmod,udev,rdma-core,ibverbs-utils,ibverbs-providers,libibverbs1,librdmacm1,perftest,rdmacm-utils,iproute2,iputils-ping,tcpdump,ethtool,procps,python3,python3-pyverbs

if [ ! -f rootfs/.oxr-done ]; then
    log "mmdebstrap bookworm -> $G/rootfs"
    rm -rf rootfs
    mmdebstrap --variant=minbase --include="$PKGS" \
        --dpkgopt='path-exclude=/usr/share/man/*' \
        --dpkgopt='path-exclude=/usr/share/doc/*' \
        --dpkgopt='path-exclude=/usr/share/locale/*' \
        --customize-hook='echo oxr-guest > "$1/etc/hostname"' \
        bookworm rootfs \
        "deb http://deb.debian.org/debian bookworm main" \
        "deb http://deb.debian.org/debian bookworm-updates main" \
        "deb http://deb.debian.org/debian-security bookworm-security main" >&2
    touch rootfs/.oxr-done
fi

# PID 1 of the guest (everything else comes through the 9p share at run time).
cmp -s "$IT_DIR/guest/init.sh" rootfs/sbin/oxr-init || install -m 0755 "$IT_DIR/guest/init.sh" rootfs/sbin/oxr-init

kver=$(ls -1 rootfs/boot/ | sed -n 's/^vmlinuz-//p' | sort -V | tail -1)
cp -f "rootfs/boot/vmlinuz-$kver" vmlinuz
cp -f "rootfs/boot/initrd.img-$kver" initrd.img
# Linux soft-iWARP (siw) for the iWARP cases: Debian's kernel does not build it
# (# CONFIG_RDMA_SIW is not set), so it is built here out of tree from Debian's
# linux-source-6.1 against the guest kernel's own headers (both installed on the host from
# the mirror the guest came from), and installed as an extra module of the guest kernel.
siw=rootfs/lib/modules/$kver/updates/siw.ko
if [ ! -f "$siw" ]; then
    log "building siw.ko for $kver (linux-source-6.1, linux-headers-$kver)"
    for p in "linux-headers-$kver" linux-source-6.1 make gcc; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" && continue
        apt-get update -q >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
            "linux-headers-$kver" linux-source-6.1 make gcc >&2
        break
    done
    src=$(mktemp -d)
    tar -xJf /usr/src/linux-source-6.1.tar.xz -C "$src" --strip-components=1 \
        linux-source-6.1/drivers/infiniband/sw/siw
    make -s -C "/usr/src/linux-headers-$kver" M="$src/drivers/infiniband/sw/siw" \
        CONFIG_RDMA_SIW=m modules >&2
    install -D -m 0644 "$src/drivers/infiniband/sw/siw/siw.ko" "$siw"
    rm -rf "$src"
fi
# The guest's own depmod (its kmod; a host may have none): again whenever siw.ko is newer
# than the module index, so that an image whose last build stopped here is mended.
if [ "$siw" -nt "rootfs/lib/modules/$kver/modules.dep" ]; then
    chroot rootfs /sbin/depmod "$kver"
fi

if [ ! -f versions.txt ] || [ rootfs/.oxr-done -nt versions.txt ] || [ "$siw" -nt versions.txt ]; then
    { echo "kernel $kver"
      chroot rootfs dpkg-query -W -f='${Package} ${Version}\n' rdma-core ibverbs-utils ibverbs-providers perftest rdmacm-utils iproute2 tcpdump
      echo "siw (out of tree) $(dpkg-query -W -f='${Version}' linux-source-6.1 2>/dev/null)"
    } > versions.txt
fi

if [ ! -f root.img ] || [ rootfs/sbin/oxr-init -nt root.img ] || [ rootfs/.oxr-done -nt root.img ] \
    || [ "$siw" -nt root.img ]; then
    log "mkfs.ext4 -d rootfs root.img"
    rm -f root.img
    truncate -s 2G root.img
    mkfs.ext4 -q -F -L oxr-root -d rootfs root.img
fi
log "guest image ready: $G ($(tr '\n' ' ' < versions.txt))"
