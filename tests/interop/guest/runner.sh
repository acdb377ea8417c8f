#!/bin/sh
# Command runner inside the guest (copied to /mnt/share/runner.sh on every run,
# started by /sbin/oxr-init). Protocol with the host, all files in /mnt/share:
#   guest.conf   written by the host before boot: NAME, IP4, MTU, HOST_IP
#   guest.env    written here once rxe is up: IDX4=..., KERNEL=...
#   runner.ready written here when cmd.N may be sent
#   cmd.N        host -> guest, shell script (created by rename, so complete);
#                first line may be "# timeout=SECONDS" (default 300);
#                a file whose only line is "exit" stops the runner (power off)
#   out.N        stdout+stderr of cmd.N
#   rc.N         its exit status (124 = killed by the timeout), written by rename
# Commands run one at a time, in order. Before each command any qdisc left on
# eth0 by an earlier (maybe killed) command is removed.
S=/mnt/share
. $S/guest.conf
IF=eth0
hostname "${NAME:-oxr-guest}"
echo "kernel $(uname -r)"
ethtool -K $IF tso off gso off gro off tx off rx off sg off 2>/dev/null
ip link set $IF mtu "${MTU:-1500}" up
ip addr add "$IP4" dev $IF
sysctl -qw net.ipv6.conf.all.disable_ipv6=1 2>/dev/null   # no RS/MLD noise
modprobe rdma_rxe || echo "modprobe rdma_rxe failed"
modprobe sch_netem || echo "modprobe sch_netem failed"
rdma link add rxe0 type rxe netdev $IF || echo "rdma link add failed"
# The RoCE v2 GID index of our IPv4 address (::ffff:a.b.c.d).
ip4=${IP4%/*}
hex4=$(printf '%02x%02x:%02x%02x' $(echo "$ip4" | tr . ' '))
P=/sys/class/infiniband/rxe0/ports/1
IDX4=""
for try in $(seq 1 100); do
    for i in $(seq 0 15); do
        [ "$(cat $P/gid_attrs/types/$i 2>/dev/null)" = "RoCE v2" ] || continue
        [ "$(cat $P/gids/$i 2>/dev/null)" = "0000:0000:0000:0000:0000:ffff:$hex4" ] && { IDX4=$i; break; }
    done
    [ -n "$IDX4" ] && break
    sleep 0.1
done
echo "IDX4=$IDX4"
rdma link
ibv_devinfo -d rxe0 2>&1 | grep -E 'hca_id|state|active_mtu|transport'
{ echo "IDX4=$IDX4"; echo "KERNEL=$(uname -r)"; } > $S/.guest.env.tmp && mv $S/.guest.env.tmp $S/guest.env
export IDX4 HOST_IP
echo ready > $S/.ready.tmp && mv $S/.ready.tmp $S/runner.ready
n=1
while :; do
    if [ ! -f $S/cmd.$n ]; then sleep 0.1; continue; fi
    grep -qx exit $S/cmd.$n && break
    t=$(sed -n '1s/^# timeout=\([0-9][0-9]*\).*/\1/p' $S/cmd.$n)
    tc qdisc del dev $IF root 2>/dev/null
    echo "$(date +%T) cmd.$n start (timeout ${t:-300}s)"
    OXR_N=$n timeout -k 5 "${t:-300}" sh $S/cmd.$n > $S/out.$n 2>&1
    echo $? > $S/.rc.$n.tmp && mv $S/.rc.$n.tmp $S/rc.$n
    echo "$(date +%T) cmd.$n rc $(cat $S/rc.$n)"
    n=$((n + 1))
done
tc qdisc del dev $IF root 2>/dev/null
echo "runner: stop after $((n - 1)) commands"
