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
# One pass of tshark over the capture (it was three, a second each on a TCG run's host):
# per frame its protocol stack, UDP checksums, expert severities and messages, from which
# awk counts the RoCE frames, the IPv6 ones with a zero UDP checksum, and the bad ones: a
# malformed frame or an expert error (severity >= error, 0x800000), as the display filters
# `infiniband`, `ipv6 && udp.checksum == 0` and `_ws.malformed || _ws.expert.severity >=
# error` would pick them.
[ -s "$F" ] || { echo "missing or empty capture $(basename "$F")"; exit 1; }
rc=0
# An iWARP capture (TCP, the iw/... cases): tshark's MPA and DDP/RDMAP dissectors must see
# FPDUs and flag nothing in those layers as malformed or in error (TCP's own notes on
# retransmissions under netem are warnings), and `oxrdma decode --strict` must read every
# MPA frame and FPDU of both directions, their CRC32c checked.
if ! tshark -r "$F" -c 1 -Y udp 2>/dev/null | grep -q . && tshark -r "$F" -c 1 -Y tcp 2>/dev/null | grep -q .; then
    read -r n nbad bad < <(tshark -r "$F" -T fields -E separator=/t -e frame.number \
            -e frame.protocols -e _ws.expert.severity -e _ws.expert.message 2>/dev/null | awk -F'\t' '
        function any_error(list,   a, i) {
            split(list, a, ","); for (i in a) if (a[i] + 0 >= 8388608) return 1; return 0
        }
        {
            if ($2 ~ /iwarp_ddp_rdmap/) n++
            # As for RoCE: a frame counts only when its stack ends in the iWARP layers
            # (tshark guesses at payloads, RPC over RDMA first, and flags its own guesses).
            if ($2 ~ /iwarp/ && $2 !~ /:iwarp_ddp_rdmap:[a-z]/ && ($2 ~ /_ws.malformed/ || any_error($3))) {
                nbad++; if (first == "") first = $1 "\t" $2 "\t" $4
            }
        }
        END { printf "%d %d %s\n", n, nbad, first }')
    if [ "${nbad:-0}" -gt 0 ]; then
        ts="tshark: $nbad bad: $(printf '%s\n' "$bad" | cut -c1-120)"; rc=1
    else ts="tshark ok"; fi
    # tshark reads an FPDU only where a TCP segment begins with one (RFC 5044 asks senders
    # to align FPDUs with segments, as a NIC's TCP can; through a socket, and with the
    # host's segmentation offload in the capture, segments begin anywhere), so the CRCs
    # it calls bad are reported, not judged: `oxrdma decode --strict` reassembles each
    # direction and checks every CRC, and siw checks ours as it receives them.
    badcrc=$(tshark -r "$F" -V 2>/dev/null | grep -c "Bad CRC32")
    [ "$badcrc" -gt 0 ] && ts="$ts ($badcrc FPDUs misread where segments and FPDUs are not aligned)"
    dec=$("$OXR" decode "$F" --strict 2>&1); drc=$?
    if [ $drc -ne 0 ]; then
        ds="decode --strict rc $drc: $(printf '%s\n' "$dec" | grep -iE 'bad|fail|error|malformed|crc|gap' | head -1 | cut -c1-120)"; rc=1
    else ds="decode ok ($(printf '%s\n' "$dec" | grep -c ' iWARP ') iWARP lines)"; fi
    [ "${n:-0}" -gt 0 ] || { rc=1; ts="no iWARP FPDUs; $ts"; }
    echo "${n:-0} iwarp fpdus; $ts; $ds"
    exit $rc
fi
read -r n zero6 nbad bad < <(tshark -r "$F" -d udp.port==4791,infiniband -T fields -E separator=/t \
        -e frame.number -e frame.protocols -e udp.checksum -e _ws.expert.severity \
        -e _ws.expert.message 2>/dev/null | awk -F'\t' '
    function has(list, want,   a, i) {
        split(list, a, ":"); for (i in a) if (a[i] == want) return 1; return 0
    }
    function any(list, test,   a, i) {
        split(list, a, ","); for (i in a) if ((test == "zero" && a[i] == "0x0000") \
            || (test == "error" && a[i] + 0 >= 8388608)) return 1; return 0
    }
    {
        if (has($2, "infiniband")) n++
        if (has($2, "ipv6") && any($3, "zero")) zero6++
        # A flagged frame counts only when its stack ends in the RoCE layers (see above).
        if ((has($2, "_ws.malformed") || any($4, "error")) && $2 !~ /:infiniband:[a-z_]/) {
            m = $5; gsub(/Illegal checksum value \(0\),?/, "", m)
            if (m != "") { nbad++; if (first == "") first = $1 "\t" $2 "\t" m }
        }
    }
    END { printf "%d %d %d %s\n", n, zero6, nbad, first }')
if [ "${nbad:-0}" -gt 0 ]; then
    ts="tshark: $nbad bad: $(printf '%s\n' "$bad" | cut -c1-120)"; rc=1
else ts="tshark ok"; fi
dec=$("$OXR" decode "$F" --strict 2>&1); drc=$?
if [ $drc -ne 0 ]; then
    ds="decode --strict rc $drc: $(printf '%s\n' "$dec" | grep -iE 'bad|fail|error|malformed|icrc' | head -1 | cut -c1-120)"; rc=1
else ds="decode ok"; fi
[ "$n" -gt 0 ] || { rc=1; ts="no RoCE packets; $ts"; }
[ "$zero6" -gt 0 ] && ts="$ts ($zero6 IPv6 zero UDP checksums, as rxe sends)"
echo "$n roce pkts; $ts; $ds"
exit $rc
