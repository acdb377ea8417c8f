# Sourced by the bench scripts. veth_pair NS_A NS_B IF: two network namespaces joined by a
# veth pair (IF0 in NS_A, IF1 in NS_B) with Ethernet's MTU; 10.99.0.1 and .2 exist only
# inside them. The caller removes the namespaces (`ip netns del`).
veth_pair() {
  local ns=("$1" "$2") dev=$3 i
  ip netns add "${ns[0]}" && ip netns add "${ns[1]}"
  ip link add "${dev}0" netns "${ns[0]}" mtu 1500 type veth peer name "${dev}1" netns "${ns[1]}" mtu 1500
  for i in 0 1; do
    ip -n "${ns[$i]}" addr add "10.99.0.$((i + 1))/24" dev "$dev$i"
    ip -n "${ns[$i]}" link set "$dev$i" up
    ip -n "${ns[$i]}" link set lo up
  done
}
