#!/bin/sh
# PID 1 of the interop guest (/sbin/oxr-init; kernel arg init=/sbin/oxr-init).
# Mounts the basics and the 9p share "share" on /mnt/share, runs
# /mnt/share/runner.sh (log -> /mnt/share/runner.log), then powers off.
# Kept tiny on purpose: the logic lives in runner.sh, which is copied into the
# share on every run, so changing it does not require rebuilding root.img.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
mount -t tmpfs tmpfs /run
mount -t tmpfs tmpfs /tmp
mount -o remount,rw / 2>/dev/null
ulimit -l unlimited 2>/dev/null
for m in virtio_pci virtio_net 9pnet_virtio 9p; do modprobe -q $m; done
ip link set lo up
mkdir -p /mnt/share
if mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 share /mnt/share; then
    sh /mnt/share/runner.sh > /mnt/share/runner.log 2>&1
    echo "runner.sh exited $?" >> /mnt/share/runner.log
    sync; umount /mnt/share
else
    echo "oxr-init: cannot mount the 9p share" > /dev/console
fi
sync
echo o > /proc/sysrq-trigger
sleep 10
