#!/bin/sh
# Gives the guest rxe0 back after the iWARP cases took it away for siw0 (guest/siw.sh), so
# what runs after them on rxe0 (the conformance suite) finds it as at boot: the same
# interface, so the same GID table and indexes.
rdma link show rxe0/1 >/dev/null 2>&1 && exit 0
rdma link delete siw0 2>/dev/null
rdma link add rxe0 type rxe netdev eth0 || { echo "rdma link add rxe0 failed"; exit 93; }
for i in $(seq 100); do
    [ "$(cat /sys/class/infiniband/rxe0/ports/1/gid_attrs/types/$IDX4 2>/dev/null)" = "RoCE v2" ] && exit 0
    sleep 0.1
done
echo "rxe0's GID $IDX4 did not come back"; exit 94
