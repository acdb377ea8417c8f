# The test-case table (sourced by run.sh). One tcase line per case:
#
#   tcase NAME STATE FIRST TIMEOUT CHECK NETEM GUEST_CMD HOST_CMD
#
#   STATE   on | pending:REASON   (pending cases are listed as SKIP, never run)
#   FIRST   guest | host          which side listens (is started first); guest~N | host~N:
#                                 it listens on the RDMA CM, not on TCP 18515: the other side
#                                 starts N seconds after it
#   TIMEOUT seconds for each side's command
#   CHECK   bytes: both exit 0 and print the same "N bytes in S seconds" total
#                  (and it equals the expected 2*size*iters when EXPECT is set)
#           perf:  both exit 0 and the last result row ("#bytes #iterations ...", perftest's
#                  and oxrdma perf's) on each side is exactly EXPECT="SIZE ITERS"
#           perf1: as perf for the client; the server (passive in READ and atomic latency
#                  tests) prints no result row
#           rc:    both exit 0
#   NETEM   "" or netem arguments applied to the guest's eth0 egress for this
#           case (and, if OXR_NETEM_HOST=1, to tap0 in the namespace too)
#   GUEST_CMD  run by sh in the guest; has $IDX4 and $IDX6 (RoCE v2 GID indexes of its IPv4
#              and IPv6 addresses), $HOST_IP and $GUEST_IP (its own IPv4 address)
#   HOST_CMD   run by bash in the namespace; has $OXR, $HOST_IP, $GUEST_IP, $HOST_IP6 and
#              $PCAP (where oxrdma should write its own capture)
# IPv6 cases (family *_v6) carry RoCE over fd78::1 <-> fd78::fe; the TCP exchange stays on
# IPv4, as in the rxe captures.
# Keep single quotes around the commands so the variables expand on the right side.

MTU_ARG=${OXR_PATH_MTU:-1024}      # path MTU on both sides (1024 at guest link MTU 1500)
LOSS=${OXR_LOSS:-"loss 1% reorder 25% 50% delay 1ms"}

# --- RC SEND/RECV ping-pong: oxrdma pingpong <-> ibv_rc_pingpong ---------------
pp_iters() { case $1 in 1|4096) echo 200 ;; 16384) echo 100 ;; *) echo 50 ;; esac; }
for s in ${OXR_PP_SIZES:-1 4096 16384 65536}; do
    n=${OXR_PP_ITERS:-$(pp_iters "$s")}
    g="ibv_rc_pingpong -d rxe0 -g \$IDX4 -m $MTU_ARG -s $s -n $n"
    h="\"\$OXR\" pingpong -d \"\$HOST_IP\" -m $MTU_ARG -s $s -n $n --pcap \"\$PCAP\""
    EXPECT=$((2 * s * n))
    tcase "rc_pingpong/oxr-client/s$s" on guest 120 bytes "" "$g"               "$h \"\$GUEST_IP\""
    tcase "rc_pingpong/oxr-server/s$s" on host  120 bytes "" "$g \"\$HOST_IP\"" "$h"
done
# --- the same over IPv6: RoCE v2 GID of fd78::1 (-g $IDX6) <-> oxrdma on fd78::fe ----
for s in ${OXR_V6_PP_SIZES:-1 4096 65536}; do
    n=${OXR_PP_ITERS:-$(pp_iters "$s")}
    g="ibv_rc_pingpong -d rxe0 -g \$IDX6 -m $MTU_ARG -s $s -n $n"
    h="\"\$OXR\" pingpong -d \"\$HOST_IP6\" -m $MTU_ARG -s $s -n $n --pcap \"\$PCAP\""
    EXPECT=$((2 * s * n))
    tcase "rc_pingpong_v6/oxr-client/s$s" on guest 120 bytes "" "$g"               "$h \"\$GUEST_IP\""
    tcase "rc_pingpong_v6/oxr-server/s$s" on host  120 bytes "" "$g \"\$HOST_IP\"" "$h"
done
# --- the same under loss/reordering/delay (netem in the guest) ------------------
for s in ${OXR_LOSS_SIZES:-4096 65536}; do
    n=${OXR_PP_ITERS:-$(pp_iters "$s")}
    g="ibv_rc_pingpong -d rxe0 -g \$IDX4 -m $MTU_ARG -s $s -n $n"
    h="\"\$OXR\" pingpong -d \"\$HOST_IP\" -m $MTU_ARG -s $s -n $n --pcap \"\$PCAP\""
    EXPECT=$((2 * s * n))
    tcase "rc_pingpong_loss/oxr-client/s$s" on guest 240 bytes "$LOSS" "$g"               "$h \"\$GUEST_IP\""
    tcase "rc_pingpong_loss/oxr-server/s$s" on host  240 bytes "$LOSS" "$g \"\$HOST_IP\"" "$h"
done
EXPECT=""

# --- UD ping-pong: oxrdma ud-pingpong <-> ibv_ud_pingpong ---------------------
# One datagram per message, so sizes stay <= the guest's active MTU (1024 at link MTU
# 1500); ibv_ud_pingpong checks that itself. No netem: UD does not retransmit, one lost
# datagram stalls both sides (oxrdma gives up after 20 s, ibv_ud_pingpong never).
for s in ${OXR_UD_SIZES:-1 512 1024}; do
    n=${OXR_UD_ITERS:-200}
    g="ibv_ud_pingpong -d rxe0 -g \$IDX4 -s $s -n $n"
    h="\"\$OXR\" ud-pingpong -d \"\$HOST_IP\" -s $s -n $n --pcap \"\$PCAP\""
    EXPECT=$((2 * s * n))
    tcase "ud_pingpong/oxr-client/s$s" on guest 120 bytes "" "$g"               "$h \"\$GUEST_IP\""
    tcase "ud_pingpong/oxr-server/s$s" on host  120 bytes "" "$g \"\$HOST_IP\"" "$h"
done
for s in ${OXR_V6_UD_SIZES:-1 1024}; do
    n=${OXR_UD_ITERS:-200}
    g="ibv_ud_pingpong -d rxe0 -g \$IDX6 -s $s -n $n"
    h="\"\$OXR\" ud-pingpong -d \"\$HOST_IP6\" -s $s -n $n --pcap \"\$PCAP\""
    EXPECT=$((2 * s * n))
    tcase "ud_pingpong_v6/oxr-client/s$s" on guest 120 bytes "" "$g"               "$h \"\$GUEST_IP\""
    tcase "ud_pingpong_v6/oxr-server/s$s" on host  120 bytes "" "$g \"\$HOST_IP\"" "$h"
done
EXPECT=""

# --- perftest <-> oxrdma perf --perftest ---------------------------------------
# Guest side: perftest 4.5+0.17 with the RoCE v2 GID (-x), -F (no CPU-frequency
# warning/abort under a VM), the path MTU and a fixed iteration count. Host side:
# `oxrdma perf --perftest` speaking perftest's TCP 18515 exchange (PERFTEST-OOB.md).
# CHECK perf: both exit 0 and both print a result row of exactly SIZE bytes x ITERS.
# The oxrdma server checks more itself: a send_bw server counts ITERS messages of SIZE
# bytes, an atomic_bw server sees its counters grow by ITERS, a bw server compares the
# client's REPORT with its own -s/-n, write_lat checks every counter byte.
perf_iters() { if [ "$1" -le 65536 ]; then echo 200; else echo 20; fi; }
pf_case() {  # pf_case TOOL OXR_SUBCMD SIZE ITERS NETEM STATE TAG [v6]
    local tool=$1 sub=$2 s=$3 n=$4 netem=$5 state=$6 tag=$7 g h sz="" t=180 idx=IDX4 dev=HOST_IP
    [ "${8:-}" = v6 ] && { idx=IDX6; dev=HOST_IP6; }
    [ "$tool" = ib_atomic_bw ] || sz="-s $s"
    g="$tool -d rxe0 -x \$$idx -F -m $MTU_ARG ${PF_CONN:-} $sz -n $n"
    h="\"\$OXR\" perf $sub ${PF_CONN:-} --perftest --no-progress -d \"\$$dev\" $sz -n $n --pcap \"\$PCAP\""
    case $tool in *_bw) g="$g --report_gbits"; h="$h --report_gbits" ;; esac
    [ "$tool" = ib_atomic_bw ] && g="$g -A FETCH_AND_ADD"
    [ -n "$netem" ] && t=300
    EXPECT="$s $n"
    tcase "$tool$tag/oxr-client/s$s" "$state" guest $t perf "$netem" "$g"               "$h \"\$GUEST_IP\""
    tcase "$tool$tag/oxr-server/s$s" "$state" host  $t perf "$netem" "$g \"\$HOST_IP\"" "$h"
    EXPECT=""
}
for tool_sub in ib_write_bw:write-bw ib_send_bw:send-bw ib_read_bw:read-bw ib_write_lat:write-lat; do
    for s in ${OXR_PERF_SIZES:-2 4096 1048576}; do
        pf_case "${tool_sub%%:*}" "${tool_sub#*:}" "$s" "$(perf_iters "$s")" "" "${OXR_PERF_STATE:-on}" ""
    done
done
pf_case ib_atomic_bw atomic-bw 8 200 "" "${OXR_PERF_STATE:-on}" ""
for tool_sub in ib_write_bw:write-bw ib_send_bw:send-bw ib_read_bw:read-bw ib_atomic_bw:atomic-bw ib_write_lat:write-lat; do
    s=65536; [ "${tool_sub%%:*}" = ib_atomic_bw ] && s=8
    pf_case "${tool_sub%%:*}" "${tool_sub#*:}" "$s" 100 "loss 1%" "${OXR_PERF_STATE:-on}" "_loss"
done
# UC and UD (perftest's -c): no ACKs, no retransmission. UD: one packet per message, so
# the size is the path MTU (and UC sends are one packet too: a burst the guest drops a
# packet of loses its message for good). 200 messages fit the send_bw server's receives.
for c_tool_sub_s in UC:ib_write_bw:write-bw:65536 UC:ib_send_bw:send-bw:1024 \
                    UD:ib_send_bw:send-bw:1024 UC:ib_write_lat:write-lat:8; do
    IFS=: read -r c tool sub s <<< "$c_tool_sub_s"
    PF_CONN="-c $c" pf_case "$tool" "$sub" "$s" 200 "" "${OXR_PERF_STATE:-on}" "_${c,,}"
done
# IPv6: every bw test, both roles, at one size that spans several packets.
for tool_sub in ib_write_bw:write-bw ib_send_bw:send-bw ib_read_bw:read-bw ib_atomic_bw:atomic-bw; do
    s=65536; [ "${tool_sub%%:*}" = ib_atomic_bw ] && s=8
    pf_case "${tool_sub%%:*}" "${tool_sub#*:}" "$s" 200 "" "${OXR_PERF_STATE:-on}" "_v6" v6
done

# --- Debian's own binaries on oxrdma's libibverbs.so.1 <-> the same binaries on rxe -------
# The host runs unmodified ibverbs-utils and perftest with only LD_LIBRARY_PATH ($OXR_LIB,
# where libibverbs.so.1 is) and OXRDMA_DEVICES (device oxr0 at the host's address, GID
# index 0) set; the guest runs them on rxe0. Both roles. CHECK as above: pingpongs' byte
# totals agree (and equal 2*size*iters where the program counts that way), perftest's last
# result row is SIZE ITERS on both sides.
C_ENV4="OXRDMA_DEVICES=oxr0=\$HOST_IP LD_LIBRARY_PATH=\$OXR_LIB"
C_ENV6="OXRDMA_DEVICES=oxr0=[\$HOST_IP6] LD_LIBRARY_PATH=\$OXR_LIB"
c_pp() {  # c_pp TOOL SIZE ITERS TAG [v6]: one pingpong, both roles
    local tool=$1 s=$2 n=$3 tag=$4 idx=IDX4 env=$C_ENV4 mtu="-m $MTU_ARG" g h
    [ "${5:-}" = v6 ] && { idx=IDX6; env=$C_ENV6; }
    [ "$tool" = ibv_ud_pingpong ] && mtu=""     # UD: one datagram per message, no -m
    g="$tool -d rxe0 -g \$$idx $mtu -s $s -n $n"
    h="$env $tool -d oxr0 -g 0 $mtu -s $s -n $n"
    # ibv_srq_pingpong runs 16 QPs and counts its own way: only the totals must agree.
    EXPECT=$((2 * s * n)); [ "$tool" = ibv_srq_pingpong ] && EXPECT=""
    tcase "c_${tool#ibv_}$tag/lib-client/s$s" on guest 120 bytes "" "$g"               "$h \"\$GUEST_IP\""
    tcase "c_${tool#ibv_}$tag/lib-server/s$s" on host  120 bytes "" "$g \"\$HOST_IP\"" "$h"
    EXPECT=""
}
c_pp ibv_rc_pingpong 4096 100 ""
c_pp ibv_uc_pingpong 4096 100 ""
c_pp ibv_ud_pingpong 1024 100 ""
c_pp ibv_srq_pingpong 4096 50 ""
c_pp ibv_rc_pingpong 4096 100 _v6 v6
c_perf() {  # c_perf TOOL SIZE ITERS TAG [v6]: one perftest test, both roles ($C_EXTRA: more
    #         arguments, the same on both sides)
    local tool=$1 s=$2 n=$3 tag=$4 idx=IDX4 env=$C_ENV4 sz="-s $2" g h
    [ "${5:-}" = v6 ] && { idx=IDX6; env=$C_ENV6; }
    case $tool in ib_atomic_*) sz="" ;; esac
    g="$tool -d rxe0 -x \$$idx -F -m $MTU_ARG $sz -n $n ${C_EXTRA:-}"
    h="$env $tool -d oxr0 -x 0 -F -m $MTU_ARG $sz -n $n ${C_EXTRA:-}"
    case $tool in *_bw) g="$g --report_gbits"; h="$h --report_gbits" ;; esac
    local chk=perf; case $tool in ib_read_lat|ib_atomic_lat) chk=perf1 ;; esac
    EXPECT="$s $n"
    tcase "c_$tool$tag/lib-client/s$s" on guest 180 $chk "" "$g"               "$h \"\$GUEST_IP\""
    tcase "c_$tool$tag/lib-server/s$s" on host  180 $chk "" "$g \"\$HOST_IP\"" "$h"
    EXPECT=""
}
for tool in ib_write_bw ib_read_bw ib_send_bw; do c_perf $tool 65536 200 ""; done
c_perf ib_atomic_bw 8 200 ""
for tool in ib_write_lat ib_read_lat ib_send_lat; do c_perf $tool 8 200 ""; done
c_perf ib_atomic_lat 8 200 ""
c_perf ib_write_bw 65536 200 _v6 v6
# Event mode (-e), both sides sleeping on their completion channels: each event taken,
# the CQ re-armed, then polled once (perftest's loop). perftest has no -e for WRITE.
# ib_send_lat -e runs with -u 21 (an 8.6 s ACK timeout, not 67 ms): rxe arms its
# retransmission timer once and does not push it back as ACKs come, so 67 ms after the first
# SEND it resends whatever is out, though answered. Debian's ib_send_lat (4.5-0.17: one
# completion channel for both CQs, each event followed by one poll of the CQ it expected)
# can then take the receive event while it waits for the send completion, poll its send CQ
# empty and go on; the late completion fills that one-entry CQ, the next overflows it and
# rxe drops it with its event: both programs wait for ever (about 1 run in 90 with
# oxrdma answering the retransmission at once; 1 in 12-20 when it answered a few ms late,
# tests/duplicate_ack.rs). The timer's resends are rxe's and perftest's to fix.
C_EXTRA="-e -u 21" c_perf ib_send_lat 8 200 _e
for tool in ib_read_lat ib_atomic_lat; do C_EXTRA=-e c_perf $tool 8 200 _e; done
C_EXTRA=-e c_perf ib_send_bw 65536 200 _e

# --- rdma_cm programs: Debian's rdmacm-utils and perftest -R on oxrdma's librdmacm.so.1
# and libibverbs.so.1 <-> the same on rxe (the kernel's CM). Both roles; the connection
# is found by address (the REQ to the peer's QP1), not exchanged over TCP. CHECK rc: both
# exit 0 (rping -v: the client checks each ping's data); the perftest row as above.
cm_case() {  # cm_case NAME TIMEOUT CHECK 'SERVER ARGS' 'CLIENT ARGS' (the client's last
    #           argument is the server's address, added here)
    local name=$1 t=$2 chk=$3 srv=$4 cli=$5
    tcase "cm/$name/lib-client" on guest~5 "$t" "$chk" "" "$srv" "$C_ENV4 $cli \$GUEST_IP"
    tcase "cm/$name/lib-server" on host~3  "$t" "$chk" "" "$cli \$HOST_IP" "$C_ENV4 $srv"
}
cm_case rping 120 rc "rping -s -C 20" "rping -c -v -C 20 -a"
cm_case ucmatose 120 rc "ucmatose -c 2" "ucmatose -c 2 -s"
cm_case udaddy 120 rc "udaddy" "udaddy -s"
# rsockets: rdma-core's stream sockets on rxe <-> oxrdma's, every byte checked (-T v);
# riostream adds riomap/riowrite (RDMA WRITEs straight into the peer's mapped buffer).
cm_case rstream 240 rc "rstream -T v -S 1048576 -C 20" "rstream -T v -S 1048576 -C 20 -s"
cm_case rstream_small 240 rc "rstream -T v -S 100 -C 500" "rstream -T v -S 100 -C 500 -s"
cm_case riostream 240 rc "riostream -T v -S 65536 -C 20" "riostream -T v -S 65536 -C 20 -s"
# Unequal buffers: rdma-core at 128 KiB (-B 65536; SO_RCVBUF doubles it) against oxrdma's
# 1 MiB, each side writing into the halves the other advertised.
rs_cmd="rstream -T v -S 1048576 -C 20"
tcase "cm/rstream_unequal/lib-client" on guest~5 240 rc "" "$rs_cmd -B 65536" "$C_ENV4 $rs_cmd -s \$GUEST_IP"
tcase "cm/rstream_unequal/lib-server" on host~3  240 rc "" "$rs_cmd -B 65536 -s \$HOST_IP" "$C_ENV4 $rs_cmd"
EXPECT="65536 200"
cm_case ib_write_bw_R 180 perf "ib_write_bw -R -F -m $MTU_ARG -s 65536 -n 200 --report_gbits" \
    "ib_write_bw -R -F -m $MTU_ARG -s 65536 -n 200 --report_gbits"
EXPECT=""

# --- the Rust API on rdma-core (issue 59): oxrdma's own tool in the guest, built on the
# host, its verbs on rxe0 through the guest's libibverbs (OXRDMA_BACKEND=rdma-core) <->
# oxrdma's engine on the host; both roles. The same program on both sides, each side on
# another implementation of the API.
RS_G="OXRDMA_BACKEND=rdma-core /mnt/share/oxrdma"
for s in ${OXR_RS_PP_SIZES:-1 65536}; do
    n=$(pp_iters "$s")
    g="$RS_G pingpong -d \$GUEST_IP -m $MTU_ARG -s $s -n $n"
    h="\"\$OXR\" pingpong -d \"\$HOST_IP\" -m $MTU_ARG -s $s -n $n --pcap \"\$PCAP\""
    EXPECT=$((2 * s * n))
    tcase "rs_rdma_core_pingpong/oxr-client/s$s" on guest 120 bytes "" "$g"               "$h \"\$GUEST_IP\""
    tcase "rs_rdma_core_pingpong/oxr-server/s$s" on host  120 bytes "" "$g \"\$HOST_IP\"" "$h"
done
# Through the RDMA CM: librdmacm in the guest (oxrdma::cm on rdma-core), the engine's CM on
# the host; the listener starts first, the other side 3 s after it.
g="$RS_G pingpong --cm -d \$GUEST_IP -p 7479 -m $MTU_ARG -s 4096 -n 200"
h="\"\$OXR\" pingpong --cm -d \"\$HOST_IP\" -p 7479 -m $MTU_ARG -s 4096 -n 200 --pcap \"\$PCAP\""
EXPECT=$((2 * 4096 * 200))
tcase "rs_rdma_core_pingpong_cm/oxr-client/s4096" on guest~3 120 bytes "" "$g"               "$h \"\$GUEST_IP\""
tcase "rs_rdma_core_pingpong_cm/oxr-server/s4096" on host~3  120 bytes "" "$g \"\$HOST_IP\"" "$h"
g="$RS_G ud-pingpong -d \$GUEST_IP -s 1024 -n 200"
h="\"\$OXR\" ud-pingpong -d \"\$HOST_IP\" -s 1024 -n 200 --pcap \"\$PCAP\""
EXPECT=$((2 * 1024 * 200))
tcase "rs_rdma_core_ud_pingpong/oxr-client/s1024" on guest 120 bytes "" "$g"               "$h \"\$GUEST_IP\""
tcase "rs_rdma_core_ud_pingpong/oxr-server/s1024" on host  120 bytes "" "$g \"\$HOST_IP\"" "$h"
for sub_s in write-bw:65536 read-bw:65536 atomic-bw:8; do
    sub=${sub_s%%:*}; s=${sub_s#*:}; sz="-s $s"; [ "$sub" = atomic-bw ] && sz=""
    g="$RS_G perf $sub --perftest --no-progress -d \$GUEST_IP $sz -n 200"
    h="\"\$OXR\" perf $sub --perftest --no-progress -d \"\$HOST_IP\" $sz -n 200 --pcap \"\$PCAP\""
    EXPECT="$s 200"
    tcase "rs_rdma_core_$sub/oxr-client/s$s" on guest 180 perf "" "$g"               "$h \"\$GUEST_IP\""
    tcase "rs_rdma_core_$sub/oxr-server/s$s" on host  180 perf "" "$g \"\$HOST_IP\"" "$h"
done
# The RDMA CM's event API (oxrdma::cm::CmId, EventChannel) on the guest's librdmacm: perf
# -R connects each QP with REQ/REP/RTU, the id moving its QP; a send-bw over UD goes
# through SIDR (RDMA_PS_UDP). The listener starts first.
for sub_s in write-bw:65536 send-bw-ud:1024; do
    sub=${sub_s%%:*}; s=${sub_s#*:}; ud=""
    [ "$sub" = send-bw-ud ] && ud="-c UD"
    g="$RS_G perf ${sub%-ud} -R $ud --no-progress -d \$GUEST_IP -p 7477 -s $s -n 200"
    h="\"\$OXR\" perf ${sub%-ud} -R $ud --no-progress -d \"\$HOST_IP\" -p 7477 -s $s -n 200 --pcap \"\$PCAP\""
    EXPECT="$s 200"
    # Without --perftest (not yet with -R) only the client prints its row.
    tcase "rs_rdma_core_${sub}_cm/oxr-client/s$s" on guest~3 180 perf1 "" "$g"               "$h \"\$GUEST_IP\""
    tcase "rs_rdma_core_${sub}_cm/oxr-server/s$s" on host~3  180 perf1 "" "$g \"\$HOST_IP\"" "$h"
done
# rsockets (oxrdma::rsocket::RStream) on the guest's librdmacm and rxe against the
# engine's, every byte checked both ways: large messages (credits go round the 1 MiB
# receive buffers) and small ones.
for sn in 65536:200 100:2000; do
    s=${sn%%:*}; n=${sn#*:}
    g="$RS_G rstream -d \$GUEST_IP -p 7476 -s $s -n $n"
    h="\"\$OXR\" rstream -d \"\$HOST_IP\" -p 7476 -s $s -n $n --pcap \"\$PCAP\""
    EXPECT=$((2 * s * n))
    tcase "rs_rdma_core_rstream/oxr-client/s$s" on guest~3 180 bytes "" "$g"               "$h \"\$GUEST_IP\""
    tcase "rs_rdma_core_rstream/oxr-server/s$s" on host~3  180 bytes "" "$g \"\$HOST_IP\"" "$h"
done
EXPECT=""

# --- two oxrdma processes on the host's one address at once (shared, as two processes
# share a NIC: one GID, the kernel hands each its packets), each with its own rxe peer in
# the guest, both roles. Both pairs must exit 0 (rping -v checks every ping's data).
both() {  # both 'CMD WITH %P' PORT1 PORT2: the command twice at once, each with its port
    # (a subshell: the harness runs the guest's command in the background, whole)
    echo "(${1//%P/$2} & a=\$!; ${1//%P/$3}; b=\$?; wait \$a; a=\$?; exit \$((a | b)))"
}
x2_case() {  # x2_case NAME TIMEOUT 'SERVER ARGS -p %P' 'CLIENT ARGS -p %P -a' ENV SERVER_ADDR CLIENT_ADDR
    local name=$1 t=$2 srv=$3 cli=$4 env=$5 saddr=$6 caddr=$7
    tcase "cm/$name/lib-client" on guest~5 "$t" rc "" "$(both "$srv" 7471 7472)" \
        "$(both "$env $cli $saddr" 7471 7472)"
    tcase "cm/$name/lib-server" on host~3 "$t" rc "" "$(both "$cli $caddr" 7473 7474)" \
        "$(both "$env $srv" 7473 7474)"
}
x2_case rping_x2 120 "rping -s -C 20 -p %P" "rping -c -v -C 20 -p %P -a" "$C_ENV4" '$GUEST_IP' '$HOST_IP'
x2_case rping_x2_v6 120 "rping -s -a :: -C 20 -p %P" "rping -c -v -C 20 -p %P -a" "$C_ENV6" fd78::1 fd78::fe
x2_case ib_write_bw_R_x2 180 "ib_write_bw -R -F -m $MTU_ARG -s 65536 -n 200 -p %P" \
    "ib_write_bw -R -F -m $MTU_ARG -s 65536 -n 200 -p %P" "$C_ENV4" '$GUEST_IP' '$HOST_IP'

# --- iWARP (issue 60): Linux soft-iWARP (siw0, built with the guest image) in the guest
# <-> oxrdma's iWARP device on the host (the C library's, OXRDMA_DEVICES name=iwarp:ADDR),
# Debian's unmodified rdma_cm programs on both, both roles: the connection is TCP and MPA
# (the RDMA CM's port is the TCP port), the data FPDUs. These run last: siw.sh takes rxe0
# away (the kernel's RDMA CM binds an address to the first device on its interface). Each
# capture (TCP) is read by tshark's iwarp_mpa and iwarp_ddp_rdmap dissectors and by
# `oxrdma decode --strict`.
IW_ENV4="OXRDMA_DEVICES=siw0=iwarp:\$HOST_IP LD_LIBRARY_PATH=\$OXR_LIB"
IW_ENV6="OXRDMA_DEVICES=siw0=iwarp:[fd78::fe] LD_LIBRARY_PATH=\$OXR_LIB"
SIW="sh /mnt/share/siw.sh &&"
iw_case() {  # iw_case NAME TIMEOUT CHECK NETEM 'SERVER ARGS' 'CLIENT ARGS' [v6] (the client's
    #          last argument is the server's address, added here)
    local name=$1 t=$2 chk=$3 netem=$4 srv=$5 cli=$6 env=$IW_ENV4 ga='$GUEST_IP' ha='$HOST_IP'
    [ "${7:-}" = v6 ] && { env=$IW_ENV6; ga=fd78::1; ha=fd78::fe; }
    tcase "iw/$name/lib-client" on guest~5 "$t" "$chk" "$netem" "$SIW $srv" "$env $cli $ga"
    tcase "iw/$name/lib-server" on host~3  "$t" "$chk" "$netem" "$SIW $cli $ha" "$env $srv"
}
iw_case rping 120 rc "" "rping -s -C 20" "rping -c -v -C 20 -a"
iw_case rping_v6 120 rc "" "rping -s -a :: -C 20" "rping -c -v -C 20 -a" v6
iw_case rping_loss 240 rc "$LOSS" "rping -s -C 50" "rping -c -v -C 50 -a"
iw_case rstream 240 rc "" "rstream -T v -S 1048576 -C 20" "rstream -T v -S 1048576 -C 20 -s"
iw_case riostream 240 rc "" "riostream -T v -S 65536 -C 20" "riostream -T v -S 65536 -C 20 -s"
for tool_s in ib_write_bw:65536 ib_read_bw:65536 ib_send_bw:65536 ib_send_lat:8; do
    tool=${tool_s%%:*}; s=${tool_s#*:}; chk=perf; rep=""
    case $tool in *_bw) rep=--report_gbits ;; esac
    EXPECT="$s 200"
    iw_case "${tool}_R" 180 $chk "" "$tool -R -F -s $s -n 200 $rep" "$tool -R -F -s $s -n 200 $rep"
done
EXPECT=""
