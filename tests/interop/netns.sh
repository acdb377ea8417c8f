#!/bin/bash
# Create or delete the private network namespace of one harness run.
#   netns.sh up NS      -> NS with lo, bridge br0 (10.78.0.254/24, fd78::fe/64) and tap0 on it
#   netns.sh down NS    -> delete NS (its tap and bridge go with it)
# Nothing outside NS is touched. Address plan: host 10.78.0.254 and fd78::fe, guest 10.78.0.1
# and fd78::1 (IPv6 without duplicate address detection, so it is usable at once).
set -euo pipefail
NS=${2:?usage: netns.sh up|down NAME}
HOST_CIDR=${OXR_HOST_CIDR:-10.78.0.254/24}
HOST_CIDR6=${OXR_HOST_CIDR6:-fd78::fe/64}
case "$1" in
up)
    ip netns add "$NS"
    ip -n "$NS" link set lo up
    ip -n "$NS" link add br0 type bridge
    ip -n "$NS" link set br0 type bridge stp_state 0 forward_delay 0 2>/dev/null || true
    ip -n "$NS" tuntap add dev tap0 mode tap
    ip -n "$NS" link set tap0 master br0
    ip -n "$NS" addr add "$HOST_CIDR" dev br0
    ip -n "$NS" addr add "$HOST_CIDR6" dev br0 nodad
    # The guest's link MTU (OXR_MTU): jumbo frames carry RoCE MTU 4096.
    ip -n "$NS" link set tap0 mtu "${OXR_MTU:-1500}"
    ip -n "$NS" link set br0 mtu "${OXR_MTU:-1500}"
    ip -n "$NS" link set tap0 up
    ip -n "$NS" link set br0 up
    ;;
down)
    ip netns del "$NS" 2>/dev/null || true
    ;;
*) echo "usage: netns.sh up|down NAME" >&2; exit 2 ;;
esac
