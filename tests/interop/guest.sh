# Guest lifecycle and command channel (sourced by run.sh).
# The guest's NIC is tap0 in namespace $NS; its 9p share is $SHARE.
# QEMU is tracked by PID (QEMU_PID) and only ever killed by that PID.

QEMU_PID=""

# guest_boot NS SHARE CONSOLE_LOG: start QEMU inside NS (ip netns exec execs
# qemu, so $! is QEMU itself) and return at once.
guest_boot() {
    local ns=$1 share=$2 console=$3
    # shellcheck disable=SC2046
    ip netns exec "$ns" qemu-system-x86_64 $(oxr_accel_args) \
        -m "${OXR_GUEST_MEM:-1024}" -smp "${OXR_GUEST_CPUS:-1}" \
        -nographic -no-reboot -name oxr-interop-guest \
        -kernel "$G/vmlinuz" -initrd "$G/initrd.img" \
        -append "console=ttyS0 root=/dev/vda rw init=/sbin/oxr-init net.ifnames=0 quiet" \
        -drive "file=$G/root.img,if=virtio,format=raw,snapshot=on" \
        -virtfs "local,path=$share,mount_tag=share,security_model=none,id=share" \
        -netdev tap,id=n0,ifname=tap0,script=no,downscript=no \
        -device virtio-net-pci,netdev=n0,mac=52:54:00:78:00:01 \
        < /dev/null > "$console" 2>&1 &
    QEMU_PID=$!
}

guest_alive() { [ -n "$QEMU_PID" ] && kill -0 "$QEMU_PID" 2>/dev/null; }

# guest_ready SHARE TIMEOUT: wait for runner.ready (fails early if QEMU died).
guest_ready() {
    local s=$1 t=$2 start=$SECONDS
    while [ ! -f "$s/runner.ready" ]; do
        guest_alive || { log "QEMU exited before the guest was ready"; return 1; }
        [ $((SECONDS - start)) -ge "$t" ] && { log "guest not ready after ${t}s"; return 1; }
        sleep 0.5
    done
}

# guest_send SHARE TIMEOUT SCRIPT: queue a command; sets GCMD to its number.
# The sequence number is kept in a variable of the calling shell (not $(...)).
GSEQ=0
guest_send() {
    local s=$1 t=$2 body=$3
    GSEQ=$((GSEQ + 1)); GCMD=$GSEQ
    printf '# timeout=%s\n%s\n' "$t" "$body" > "$s/.cmd.$GCMD.tmp"
    mv "$s/.cmd.$GCMD.tmp" "$s/cmd.$GCMD"
}

# guest_wait SHARE N TIMEOUT: wait for rc.N; returns the command's status,
# 124 on host-side timeout, 125 if the guest died.
guest_wait() {
    local s=$1 n=$2 t=$3 start=$SECONDS
    while [ ! -f "$s/rc.$n" ]; do
        guest_alive || { echo "guest died while running cmd.$n" >> "$s/out.$n"; return 125; }
        [ $((SECONDS - start)) -ge "$t" ] && { echo "host gave up waiting for cmd.$n after ${t}s" >> "$s/out.$n"; return 124; }
        sleep 0.2
    done
    return "$(cat "$s/rc.$n")"
}

# guest_run SHARE TIMEOUT SCRIPT: run a command and wait for it; output on stdout.
guest_run() {
    guest_send "$1" "$2" "$3"; guest_wait "$1" "$GCMD" $(($2 + 15)); local rc=$?
    cat "$1/out.$GCMD" 2>/dev/null; return $rc
}

# guest_stop SHARE: ask the runner to power off; kill QEMU by PID if it lingers.
guest_stop() {
    local s=$1 i
    [ -n "$QEMU_PID" ] || return 0
    if guest_alive && [ "${2:-}" != now ]; then
        GSEQ=$((GSEQ + 1)); echo exit > "$s/.cmd.$GSEQ.tmp"; mv "$s/.cmd.$GSEQ.tmp" "$s/cmd.$GSEQ"
        for i in $(seq 1 40); do guest_alive || break; sleep 0.5; done
    fi
    if guest_alive; then kill "$QEMU_PID" 2>/dev/null; sleep 1; fi
    guest_alive && kill -9 "$QEMU_PID" 2>/dev/null
    wait "$QEMU_PID" 2>/dev/null
    QEMU_PID=""
}
