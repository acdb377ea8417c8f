#!/bin/bash
# Validate one RoCEv2 capture with two independent decoders:
#   tshark -d udp.port==4791,infiniband : no malformed packet, no expert error
#   oxrdma decode --strict              : every packet parses and its ICRC verifies
# Usage: check-pcap.sh OXRDMA_BIN FILE.pcap
# Prints one line "N roce pkts; tshark ok|...; decode ok|..." and exits 0 when
# both decoders are happy (an empty capture is a failure: the case sent nothing).
OXR=$1 F=$2
# The RoCE headers and ICRC are what is checked; the payload is application data. tshark
# guesses at it (its "infiniband.payload" heuristics: RPC-over-RDMA, an EtherType reading
# of the first two bytes that hands tiny payloads to CRTP, Boardwalk, ...) and then flags
# its own guesses as "Malformed Packet" for packets of either implementation. So a flagged
# frame counts only when the problem is in the RoCE layers themselves: its protocol stack
# (frame.protocols) must not continue past "infiniband" into a payload dissector.
TS=(tshark -r "$F" -d udp.port==4791,infiniband)
[ -s "$F" ] || { echo "missing or empty capture $(basename "$F")"; exit 1; }
rc=0
n=$("${TS[@]}" -Y infiniband 2>/dev/null | wc -l)
# Linux rxe sends every UDP checksum as zero, which RFC 8200 forbids for IPv6 and tshark
# reports as an error ("Illegal checksum value (0)"); receivers that expect RoCE accept it
# (oxrdma sets UDP_NO_CHECK6_RX). That message alone does not make a frame bad; frames with
# it are counted and reported.
zero6=$("${TS[@]}" -Y 'ipv6 && udp.checksum == 0' 2>/dev/null | wc -l)
bad=$("${TS[@]}" -Y '_ws.malformed || _ws.expert.severity >= error' -T fields -E separator=/t \
        -e frame.number -e frame.protocols -e _ws.expert.message 2>&1 \
    | grep -v '^Running as user' | grep -vE ':infiniband:[a-z_]' \
    | awk -F'\t' '{ m = $3; gsub(/Illegal checksum value \(0\),?/, "", m); if (m != "") print $1 "\t" $2 "\t" m }')
if [ -n "$bad" ]; then
    ts="tshark: $(printf '%s\n' "$bad" | wc -l) bad: $(printf '%s\n' "$bad" | head -1 | cut -c1-120)"; rc=1
else ts="tshark ok"; fi
dec=$("$OXR" decode "$F" --strict 2>&1); drc=$?
if [ $drc -ne 0 ]; then
    ds="decode --strict rc $drc: $(printf '%s\n' "$dec" | grep -iE 'bad|fail|error|malformed|icrc' | head -1 | cut -c1-120)"; rc=1
else ds="decode ok"; fi
[ "$n" -gt 0 ] || { rc=1; ts="no RoCE packets; $ts"; }
[ "$zero6" -gt 0 ] && ts="$ts ($zero6 IPv6 zero UDP checksums, as rxe sends)"
echo "$n roce pkts; $ts; $ds"
exit $rc
