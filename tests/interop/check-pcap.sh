#!/bin/bash
# Validate one RoCEv2 capture with two independent decoders:
#   tshark -d udp.port==4791,infiniband : no malformed packet, no expert error
#   oxrdma decode --strict              : every packet parses and its ICRC verifies
# Usage: check-pcap.sh OXRDMA_BIN FILE.pcap
# Prints one line "N roce pkts; tshark ok|...; decode ok|..." and exits 0 when
# both decoders are happy (an empty capture is a failure: the case sent nothing).
OXR=$1 F=$2
# tshark's heuristic RPC-over-RDMA dissector claims short RC SEND payloads
# (1-byte ping-pong messages, perftest control messages) and reports them as
# "Malformed Packet: RPCoRDMA"; that is not a RoCE problem, so switch it off.
# Likewise the InfiniBand dissector reads the first two payload bytes of small RDMA
# WRITEs as a PPP protocol number: ib_write_lat -s 2 sends 00 61, 00 63, 00 65 (its
# counter 97, 99, 101), which it hands to CRTP ("Malformed Packet: CRTP").
TS=(tshark -r "$F" --disable-protocol rpcordma --disable-protocol crtp -d udp.port==4791,infiniband)
[ -s "$F" ] || { echo "missing or empty capture $(basename "$F")"; exit 1; }
rc=0
n=$("${TS[@]}" -Y infiniband 2>/dev/null | wc -l)
bad=$("${TS[@]}" -Y '_ws.malformed || _ws.expert.severity >= error' 2>&1 | grep -v '^Running as user' )
if [ -n "$bad" ]; then
    ts="tshark: $(printf '%s\n' "$bad" | wc -l) bad: $(printf '%s\n' "$bad" | head -1 | cut -c1-120)"; rc=1
else ts="tshark ok"; fi
dec=$("$OXR" decode "$F" --strict 2>&1); drc=$?
if [ $drc -ne 0 ]; then
    ds="decode --strict rc $drc: $(printf '%s\n' "$dec" | grep -iE 'bad|fail|error|malformed|icrc' | head -1 | cut -c1-120)"; rc=1
else ds="decode ok"; fi
[ "$n" -gt 0 ] || { rc=1; ts="no RoCE packets; $ts"; }
echo "$n roce pkts; $ts; $ds"
exit $rc
