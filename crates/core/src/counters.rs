//! What happened on a device or a QP, one count per kind of event: traffic each way by
//! opcode class, every drop and rejection by reason, retransmissions, NAKs each way,
//! timeouts, probes, congestion notification. Each counter has its own name and, where
//! the meaning matches, the name Linux rxe's `hw_counters` or mlx5's give it, so an
//! operator's dashboards and habits carry over.
//!
//! A QP counts what happens to it (`Qp::counters`); the engine counts what it sees before
//! a QP is known or for the device as a whole (traffic, drops), and a device's figures are
//! its own counts plus, for the counters only QPs keep, the sum over its QPs, live and
//! destroyed (`Engine::counters`). Counting is an add to an array the QP or the engine
//! owns: no atomics, nothing shared on the data path.

use crate::drops::RxDrop;
use std::ops::{Index, IndexMut};

macro_rules! counters {
    ($( $(#[doc = $doc:literal])* $v:ident = $name:literal, $scope:ident, $rxe:expr, $mlx5:expr; )*) => {
        /// One kind of event.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(usize)]
        pub enum Counter {
            $( $(#[doc = $doc])* $v, )*
        }

        impl Counter {
            /// Every counter, in the order of [`Counters`].
            pub const ALL: &'static [Counter] = &[$(Counter::$v,)*];

            /// Its name (snake case, stable: `oxrdma stats` and the Prometheus names use it).
            pub fn name(self) -> &'static str {
                match self { $(Counter::$v => $name,)* }
            }

            /// The name of Linux rxe's `hw_counters` entry with this meaning, if any.
            pub fn rxe(self) -> Option<&'static str> {
                match self { $(Counter::$v => $rxe,)* }
            }

            /// The name mlx5's counters give this meaning, if any.
            pub fn mlx5(self) -> Option<&'static str> {
                match self { $(Counter::$v => $mlx5,)* }
            }

            /// Whether QPs keep it (a device adds up its QPs'), rather than the device.
            pub fn per_qp(self) -> bool {
                match self { $(Counter::$v => counters!(@scope $scope),)* }
            }

            /// What it counts, in a sentence.
            pub fn describe(self) -> &'static str {
                match self { $(Counter::$v => concat!($($doc,)*).trim_ascii(),)* }
            }
        }
    };
    (@scope qp) => { true };
    (@scope dev) => { false };
}

counters! {
    /// Packets sent.
    SentPkts = "sent_pkts", dev, Some("sent_pkts"), None;
    /// Packets received (those the driver's ICRC check passed; the rest are `drop_bad_icrc`).
    RcvdPkts = "rcvd_pkts", dev, Some("rcvd_pkts"), None;
    /// Bytes sent (RoCE headers and payload, without IP and UDP headers).
    SentBytes = "sent_bytes", dev, None, None;
    /// Bytes received (RoCE headers and payload).
    RcvdBytes = "rcvd_bytes", dev, None, None;
    /// SEND packets sent.
    SentSend = "sent_send", dev, Some("rdma_sends"), None;
    /// RDMA WRITE packets sent.
    SentWrite = "sent_write", dev, None, None;
    /// RDMA READ requests sent.
    SentReadRequest = "sent_read_request", dev, None, None;
    /// RDMA READ response packets sent.
    SentReadResponse = "sent_read_response", dev, None, None;
    /// Atomic requests sent.
    SentAtomic = "sent_atomic", dev, None, None;
    /// ACKs, NAKs and atomic ACKs sent.
    SentAck = "sent_ack", dev, None, None;
    /// Congestion notification packets sent.
    SentCnp = "sent_cnp", dev, None, Some("np_cnp_sent");
    /// Packets of other kinds sent (FLUSH).
    SentOther = "sent_other", dev, None, None;
    /// SEND packets received.
    RcvdSend = "rcvd_send", dev, Some("rdma_recvs"), None;
    /// RDMA WRITE packets received.
    RcvdWrite = "rcvd_write", dev, None, None;
    /// RDMA READ requests received.
    RcvdReadRequest = "rcvd_read_request", dev, None, None;
    /// RDMA READ response packets received.
    RcvdReadResponse = "rcvd_read_response", dev, None, None;
    /// Atomic requests received.
    RcvdAtomic = "rcvd_atomic", dev, None, None;
    /// ACKs, NAKs and atomic ACKs received.
    RcvdAck = "rcvd_ack", dev, None, None;
    /// Congestion notification packets received and handled.
    RcvdCnp = "rcvd_cnp", dev, None, Some("rp_cnp_handled");
    /// Packets of other kinds received (FLUSH, opcodes nobody defined).
    RcvdOther = "rcvd_other", dev, None, None;
    /// Received packets whose IP header said congestion experienced (ECN CE).
    EcnMarked = "ecn_marked", dev, None, Some("np_ecn_marked_roce_packets");
    /// Dropped: the ICRC did not verify.
    BadIcrc = "drop_bad_icrc", dev, None, None;
    /// Dropped: the headers do not parse.
    Malformed = "drop_malformed", dev, None, None;
    /// Dropped: no QP with the destination QPN.
    UnknownQp = "drop_unknown_qp", dev, None, None;
    /// Dropped: the source is not the connected QP's peer (a forged or stray packet).
    WrongPeer = "drop_wrong_peer", dev, None, None;
    /// Dropped: an opcode of another transport than the QP's.
    WrongTransport = "drop_wrong_transport", dev, None, None;
    /// Dropped: the QP's state takes no such packet.
    QpState = "drop_qp_state", dev, None, None;
    /// Dropped: an ACK or response outside the outstanding PSN window.
    StaleResponse = "drop_stale_response", dev, None, None;
    /// Dropped: a response that fits no outstanding request.
    UnexpectedResponse = "drop_unexpected_response", dev, None, None;
    /// Dropped: a request beyond the expected PSN that was not kept.
    OutOfSequenceDrop = "drop_out_of_sequence", dev, None, None;
    /// Dropped: a UD datagram with another Q_Key.
    QkeyMismatch = "drop_qkey_mismatch", dev, None, None;
    /// Dropped: a UD datagram or UC message with no receive posted.
    NoReceive = "drop_no_receive", dev, None, None;
    /// Dropped: a UC packet of a message that lost an earlier one, or a UC duplicate.
    UcIncomplete = "drop_uc_incomplete", dev, None, None;
    /// Dropped: a UC or UD request the QP may not execute.
    Invalid = "drop_invalid", dev, None, None;
    /// Dropped: a packet for a secure QP whose tag did not verify (tampered, forged,
    /// sent in the clear or under another key).
    AuthFailed = "drop_auth_failed", dev, None, None;
    /// Dropped: a packet for a secure QP whose sequence number was seen already (a replay).
    Replayed = "drop_replayed", dev, None, None;
    /// Dropped: a connection management MAD the CM ignored.
    Mad = "drop_mad", dev, None, None;
    /// Of those: connection requests a listener's full backlog turned away.
    CmBacklogFull = "cm_backlog_full", dev, None, None;
    /// Of those: connection requests beyond their peer's limits (`PeerLimits`).
    CmPeerLimited = "cm_peer_limited", dev, None, None;
    /// Dropped by the kernel: the socket's receive buffer was full (`SO_RXQ_OVFL`).
    RxqOverflow = "drop_rxq_overflow", dev, None, None;
    /// Packets the kernel refused to send.
    SendErr = "send_err", dev, Some("send_err"), None;
    /// Times the link went down (never: oxrdma's link is a socket).
    LinkDowned = "link_downed", dev, Some("link_downed"), None;
    /// Requests that arrived again (a retransmission): answered again, not executed again.
    DuplicateRequest = "duplicate_request", qp, Some("duplicate_request"), None;
    /// Requests beyond the expected PSN (a packet before them was lost).
    OutOfSeqRequest = "out_of_seq_request", qp, Some("out_of_seq_request"), Some("out_of_sequence");
    /// Duplicate READ requests not answered: their responses were already queued, or
    /// the QP's budget for answering READs again was spent (a duplicate-READ flood is
    /// bounded: `PeerLimits::dup_read_bytes_per_sec`).
    DuplicateReadLimited = "duplicate_read_limited", qp, None, None;
    /// PSN-sequence NAKs sent.
    SentSeqNak = "sent_seq_nak", qp, None, None;
    /// RNR NAKs sent (a SEND came with no receive posted).
    SendRnrErr = "send_rnr_err", qp, Some("send_rnr_err"), None;
    /// Requests that found no receive again before the RNR timer of the NAK sent for them
    /// ran out: dropped unanswered (an RNR storm is not reflected packet for packet).
    RnrNakLimited = "rnr_nak_limited", qp, None, None;
    /// Remote access error NAKs sent (the three causes below).
    RespRemoteAccessErrors = "resp_remote_access_errors", qp, None, Some("resp_remote_access_errors");
    /// Of those: the rkey names no region or window this QP may use.
    BadRkey = "resp_bad_rkey", qp, None, None;
    /// Of those: the access falls outside the region or window.
    OutOfBounds = "resp_out_of_bounds", qp, None, None;
    /// Of those: the QP or the key does not allow the operation.
    AccessDenied = "resp_access_denied", qp, None, None;
    /// Invalid request NAKs sent.
    RespInvalidRequest = "resp_invalid_request", qp, None, None;
    /// Remote operational error NAKs sent.
    RespRemoteOpErrors = "resp_remote_op_errors", qp, None, None;
    /// ACKs held to ride on a later packet or to cover several requests.
    AckDeferred = "ack_deferred", qp, Some("ack_deferred"), None;
    /// PSN-sequence NAKs received.
    RcvdSeqErr = "rcvd_seq_err", qp, Some("rcvd_seq_err"), Some("packet_seq_err");
    /// RNR NAKs received.
    RcvdRnrErr = "rcvd_rnr_err", qp, Some("rcvd_rnr_err"), None;
    /// Remote access error NAKs received.
    ReqRemoteAccessErrors = "req_remote_access_errors", qp, None, Some("req_remote_access_errors");
    /// Other NAKs received (invalid request, remote operational error).
    RcvdNakOther = "rcvd_nak_other", qp, None, None;
    /// ACK timeouts: the retransmission timer expired.
    LocalAckTimeout = "local_ack_timeout_err", qp, None, Some("local_ack_timeout_err");
    /// Tail-loss probes sent.
    Probes = "probes", qp, None, None;
    /// Retries begun (after a timeout or a PSN-sequence NAK).
    CompleterRetry = "completer_retry_err", qp, Some("completer_retry_err"), None;
    /// Packets sent again.
    Retransmitted = "retransmitted_pkts", qp, None, None;
    /// Work requests ended with RETRY_EXC_ERR: the retry count ran out.
    RetryExceeded = "retry_exceeded_err", qp, Some("retry_exceeded_err"), None;
    /// Work requests ended with RNR_RETRY_EXC_ERR: the RNR retry count ran out.
    RnrRetryExceeded = "retry_rnr_exceeded_err", qp, Some("retry_rnr_exceeded_err"), Some("rnr_nak_retry_err");
    /// iWARP: FPDUs written to the QP's TCP stream.
    IwarpFpdusSent = "iwarp_fpdus_sent", qp, None, None;
    /// iWARP: FPDUs read from the QP's TCP stream.
    IwarpFpdusRcvd = "iwarp_fpdus_rcvd", qp, None, None;
    /// iWARP: TERMINATEs this side sent (it refused something of the peer's, or failed).
    IwarpTerminateSent = "iwarp_terminate_sent", qp, None, None;
    /// iWARP: TERMINATEs the peer sent.
    IwarpTerminateRcvd = "iwarp_terminate_rcvd", qp, None, None;
    /// iWARP: FPDUs whose CRC32c did not match (the stream ends with a TERMINATE).
    IwarpCrcErr = "iwarp_crc_err", qp, None, None;
    /// iWARP: FPDUs whose framing or DDP header was malformed.
    IwarpMalformed = "iwarp_malformed", qp, None, None;
    /// iWARP: streams that ended (closed by the peer, or failed) under a running QP.
    IwarpStreamClosed = "iwarp_stream_closed", qp, None, None;
    /// iWARP: of those, streams that ended in the middle of an FPDU.
    IwarpClosedMidFpdu = "iwarp_closed_mid_fpdu", qp, None, None;
}

/// How many counters there are.
pub const COUNTERS: usize = Counter::ALL.len();

/// One count per [`Counter`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counters(pub [u64; COUNTERS]);

impl Default for Counters {
    fn default() -> Counters {
        Counters([0; COUNTERS])
    }
}

impl Index<Counter> for Counters {
    type Output = u64;
    fn index(&self, c: Counter) -> &u64 {
        &self.0[c as usize]
    }
}

impl IndexMut<Counter> for Counters {
    fn index_mut(&mut self, c: Counter) -> &mut u64 {
        &mut self.0[c as usize]
    }
}

impl Counters {
    /// One more `c`.
    #[inline]
    pub fn bump(&mut self, c: Counter) {
        self[c] += 1;
    }

    /// Adds `other`'s counts of the counters `take` picks.
    pub fn add(&mut self, other: &Counters, take: impl Fn(Counter) -> bool) {
        for &c in Counter::ALL {
            if take(c) {
                self[c] += other[c];
            }
        }
    }

    /// Each counter with its count.
    pub fn iter(&self) -> impl Iterator<Item = (Counter, u64)> + '_ {
        Counter::ALL.iter().map(|&c| (c, self[c]))
    }

    /// Every drop by the engine, by its reason.
    pub fn drop_counter(why: RxDrop) -> Counter {
        match why {
            RxDrop::Malformed => Counter::Malformed,
            RxDrop::UnknownQp => Counter::UnknownQp,
            RxDrop::WrongPeer => Counter::WrongPeer,
            RxDrop::WrongTransport => Counter::WrongTransport,
            RxDrop::QpState => Counter::QpState,
            RxDrop::StaleResponse => Counter::StaleResponse,
            RxDrop::UnexpectedResponse => Counter::UnexpectedResponse,
            RxDrop::OutOfSequence => Counter::OutOfSequenceDrop,
            RxDrop::QkeyMismatch => Counter::QkeyMismatch,
            RxDrop::NoReceive => Counter::NoReceive,
            RxDrop::UcIncomplete => Counter::UcIncomplete,
            RxDrop::Invalid => Counter::Invalid,
            RxDrop::Mad => Counter::Mad,
            RxDrop::AuthFailed => Counter::AuthFailed,
            RxDrop::Replayed => Counter::Replayed,
        }
    }
}

/// The class a packet's opcode byte puts it in, for the traffic counters: the sent one
/// and the received one.
pub fn classes(opcode: u8) -> (Counter, Counter) {
    use oxrdma_wire::{Opcode, Operation as O};
    use Counter::*;
    match Opcode(opcode).info().map(|i| i.operation) {
        Ok(O::Send | O::SendWithImm | O::SendWithInv) => (SentSend, RcvdSend),
        Ok(O::Write | O::WriteWithImm) => (SentWrite, RcvdWrite),
        Ok(O::ReadRequest) => (SentReadRequest, RcvdReadRequest),
        Ok(O::ReadResponse) => (SentReadResponse, RcvdReadResponse),
        Ok(O::Acknowledge | O::AtomicAcknowledge) => (SentAck, RcvdAck),
        Ok(O::CompareSwap | O::FetchAdd | O::AtomicWrite) => (SentAtomic, RcvdAtomic),
        Ok(O::Cnp) => (SentCnp, RcvdCnp),
        Ok(O::Flush) | Err(_) => (SentOther, RcvdOther),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oxrdma_wire::Opcode;

    #[test]
    fn names_are_unique_and_the_known_ones_are_there() {
        let mut names: Vec<&str> = Counter::ALL.iter().map(|c| c.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), COUNTERS);
        let rxe: Vec<&str> = Counter::ALL.iter().filter_map(|c| c.rxe()).collect();
        for n in [
            "sent_pkts",
            "rcvd_pkts",
            "duplicate_request",
            "out_of_seq_request",
            "rcvd_rnr_err",
            "send_rnr_err",
            "rcvd_seq_err",
            "ack_deferred",
            "retry_exceeded_err",
            "retry_rnr_exceeded_err",
            "completer_retry_err",
            "send_err",
            "link_downed",
            "rdma_sends",
            "rdma_recvs",
        ] {
            assert!(rxe.contains(&n), "rxe's {n}");
        }
        let mlx5: Vec<&str> = Counter::ALL.iter().filter_map(|c| c.mlx5()).collect();
        for n in [
            "out_of_sequence",
            "packet_seq_err",
            "local_ack_timeout_err",
            "rnr_nak_retry_err",
            "resp_remote_access_errors",
            "req_remote_access_errors",
            "np_cnp_sent",
            "rp_cnp_handled",
            "np_ecn_marked_roce_packets",
        ] {
            assert!(mlx5.contains(&n), "mlx5's {n}");
        }
        assert!(Counter::ALL.iter().all(|c| !c.describe().is_empty()));
        for (i, c) in Counter::ALL.iter().enumerate() {
            assert_eq!(*c as usize, i);
        }
    }

    #[test]
    fn opcodes_fall_in_their_classes() {
        use Counter::*;
        let cases = [
            (Opcode::RC_SEND_ONLY, SentSend, RcvdSend),
            (Opcode::UD_SEND_ONLY_WITH_IMMEDIATE, SentSend, RcvdSend),
            (Opcode::RC_SEND_LAST_WITH_INVALIDATE, SentSend, RcvdSend),
            (Opcode::RC_RDMA_WRITE_FIRST, SentWrite, RcvdWrite),
            (
                Opcode::UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
                SentWrite,
                RcvdWrite,
            ),
            (
                Opcode::RC_RDMA_READ_REQUEST,
                SentReadRequest,
                RcvdReadRequest,
            ),
            (
                Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
                SentReadResponse,
                RcvdReadResponse,
            ),
            (Opcode::RC_ACKNOWLEDGE, SentAck, RcvdAck),
            (Opcode::RC_ATOMIC_ACKNOWLEDGE, SentAck, RcvdAck),
            (Opcode::RC_COMPARE_SWAP, SentAtomic, RcvdAtomic),
            (Opcode::RC_FETCH_ADD, SentAtomic, RcvdAtomic),
            (Opcode::CNP, SentCnp, RcvdCnp),
            (Opcode(0x1f), SentOther, RcvdOther),
        ];
        for (op, sent, rcvd) in cases {
            assert_eq!(classes(op.0), (sent, rcvd), "{op:?}");
        }
    }
}
