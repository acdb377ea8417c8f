#!/bin/sh
# Command runner inside the guest (copied to /mnt/share/runner.sh on every run,
# started by /sbin/oxr-init). Protocol with the host, all files in /mnt/share:
#   guest.conf   written by the host before boot: NAME, IP4, IP6, MTU, HOST_IP
#   guest.env    written here once rxe is up: IDX4=..., IDX6=..., KERNEL=...
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
# IPv6 on eth0 only, with a fixed address and no router solicitations or DAD delay.
sysctl -qw net.ipv6.conf.all.disable_ipv6=1 2>/dev/null
sysctl -qw net.ipv6.conf.$IF.disable_ipv6=0 net.ipv6.conf.$IF.accept_ra=0 \
    net.ipv6.conf.$IF.router_solicitations=0 2>/dev/null
[ -n "${IP6:-}" ] && ip addr add "$IP6" dev $IF nodad
modprobe rdma_rxe || echo "modprobe rdma_rxe failed"
modprobe sch_netem || echo "modprobe sch_netem failed"
rdma link add rxe0 type rxe netdev $IF || echo "rdma link add failed"
# The RoCE v2 GID indexes of our IPv4 address (::ffff:a.b.c.d) and IPv6 address, as sysfs
# writes them (8 groups of 4 hex digits).
ip4=${IP4%/*}
hex4=$(printf '%02x%02x:%02x%02x' $(echo "$ip4" | tr . ' '))
gid4="0000:0000:0000:0000:0000:ffff:$hex4"
gid6=""
if [ -n "${IP6:-}" ]; then
    # fd78::1 -> fd78:0000:0000:0000:0000:0000:0000:0001 (one "::" at most, as here)
    a=${IP6%/*}; head=${a%%::*}; tail=${a#*::}; [ "$head" = "$a" ] && tail=""
    n=$(( 8 - $(echo "$head" | tr ':' ' ' | wc -w) - $(echo "$tail" | tr ':' ' ' | wc -w) ))
    groups="$(echo "$head" | tr ':' ' ') $(yes 0 | head -n $n | tr '\n' ' ') $(echo "$tail" | tr ':' ' ')"
    gid6=$(for g in $groups; do printf '%04x:' "0x$g"; done); gid6=${gid6%:}
fi
P=/sys/class/infiniband/rxe0/ports/1
IDX4=""; IDX6=""
for try in $(seq 1 100); do
    for i in $(seq 0 15); do
        [ "$(cat $P/gid_attrs/types/$i 2>/dev/null)" = "RoCE v2" ] || continue
        g=$(cat $P/gids/$i 2>/dev/null)
        [ "$g" = "$gid4" ] && IDX4=$i
        [ -n "$gid6" ] && [ "$g" = "$gid6" ] && IDX6=$i
    done
    [ -n "$IDX4" ] && { [ -z "$gid6" ] || [ -n "$IDX6" ]; } && break
    sleep 0.1
done
echo "IDX4=$IDX4 IDX6=$IDX6 ($gid6)"
rdma link
ibv_devinfo -d rxe0 2>&1 | grep -E 'hca_id|state|active_mtu|transport'
{ echo "IDX4=$IDX4"; echo "IDX6=$IDX6"; echo "KERNEL=$(uname -r)"; } > $S/.guest.env.tmp && mv $S/.guest.env.tmp $S/guest.env
GUEST_IP=$ip4
export IDX4 IDX6 HOST_IP GUEST_IP
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
