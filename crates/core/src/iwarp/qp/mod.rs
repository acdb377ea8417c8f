//! An iWARP QP's data path (RFC 5040 RDMAP over RFC 5041 DDP, each segment in an MPA
//! FPDU), without I/O: work requests go in and the bytes for the TCP stream come out;
//! bytes read from the stream go in, and the placements, completions and READ responses
//! they call for come out. RC only, as iWARP defines it; no atomics, no immediate data
//! (RFC 7306's extensions are not taken).
//!
//! Ordering is TCP's: a message's segments leave in order and whole messages leave one
//! after another, the QP's own messages and its READ responses alternating at message
//! boundaries (responses in the order the requests came). A SEND or WRITE completes once
//! its last segment is handed to the stream, a READ when its last response segment is
//! placed. An error the peer caused is answered with a TERMINATE that names the layer,
//! type and code (RFC 5040 section 7), after which the QP sends nothing and flushes its
//! work requests; a TERMINATE received does the same here.

mod buffers;
mod receive;
mod send;
mod terminate;

pub use buffers::Buffers;

use super::stream::{FpduReader, Segmenter};
use crate::verbs::{SendFlags, WcOpcode, WcStatus, WrOpcode};
use crate::wr::{RecvWr, SendData, SendWr, Sge, WorkCompletion};
use oxrdma_wire::iwarp::ddp::{Placement, Queue, ReadRequestRepr, TerminateRepr};
use std::collections::VecDeque;
use terminate::term;

/// Why a remote access was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccessError {
    /// No buffer has this STag (or it was invalidated).
    InvalidStag,
    /// The bytes lie outside the buffer.
    Bounds,
    /// The buffer does not allow this access.
    Rights,
}

/// The QP's registered memory: local SGE lists by lkey, remote accesses by STag.
pub trait Memory {
    /// Copies `out.len()` bytes of the SGE list, from byte `at` of it, into `out` (a work
    /// request's source). LOC_PROT_ERR on a bad key, bounds or right; LOC_LEN_ERR if the
    /// list is too short.
    fn gather(&self, sges: &[Sge], at: usize, out: &mut [u8]) -> Result<(), WcStatus>;
    /// Copies `data` into the SGE list from byte `at` of it (a receive's or a READ's
    /// sink), which must be locally writable; errors as `gather`.
    fn scatter(&mut self, sges: &[Sge], at: usize, data: &[u8]) -> Result<(), WcStatus>;
    /// Places `data` at tagged offset `to` of the buffer `stag` names (remotely writable).
    fn place(&mut self, stag: u32, to: u64, data: &[u8]) -> Result<(), AccessError>;
    /// Copies `out.len()` bytes at tagged offset `to` of `stag` (remotely readable).
    fn fetch(&self, stag: u32, to: u64, out: &mut [u8]) -> Result<(), AccessError>;
    /// Invalidates `stag` (a SEND with Invalidate's).
    fn invalidate(&mut self, stag: u32) -> Result<(), AccessError>;
    /// The next receive of the QP's shared receive queue, for a SEND that found none of
    /// the QP's own (None: the QP has no SRQ, or it is empty). The QP then holds it until
    /// the message completes it (or a flush does).
    fn shared_recv(&mut self) -> Option<crate::wr::RecvWr> {
        None
    }
}

/// What the QP was given when its stream was set up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpConfig {
    /// Its number, in its completions.
    pub qpn: u32,
    /// The longest FPDU it sends (the TCP segment it rides in, so one FPDU a segment).
    pub max_fpdu: usize,
    /// FPDUs carry a CRC32c (MPA's negotiation).
    pub crc: bool,
    /// READs it issues at once (its ORD).
    pub ord: usize,
    /// READs it answers at once (its IRD).
    pub ird: usize,
    /// Every send work request completes, signaled or not.
    pub sq_sig_all: bool,
}

impl QpConfig {
    /// The configuration MPA's exchange settled (`Negotiated`): CRCs, ORD and IRD.
    pub fn negotiated(qpn: u32, max_fpdu: usize, n: &super::Negotiated, sq_sig_all: bool) -> Self {
        QpConfig {
            qpn,
            max_fpdu,
            crc: n.crc,
            ord: usize::from(n.ord),
            ird: usize::from(n.ird),
            sq_sig_all,
        }
    }
}

/// The QP's state: sending and receiving, or ended by a TERMINATE either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Running.
    Rts,
    /// Ended: `sent` is the TERMINATE this side sent (None: the peer's came, `received`).
    Terminated {
        /// What this side reported, if it ended the stream.
        sent: Option<TerminateRepr>,
        /// What the peer reported, if it did.
        received: Option<TerminateRepr>,
    },
    /// The stream closed under a running QP (`mid_fpdu`: in the middle of an FPDU, a peer
    /// that stopped mid-message).
    Closed {
        /// Bytes of an FPDU had come and its end never did.
        mid_fpdu: bool,
    },
}

/// A READ this side issued, waiting for its response.
#[derive(Debug, Clone)]
struct ReadOut {
    /// Its place in the send queue's completion order (`Qp::finish`).
    slot: u64,
    wr_id: u64,
    sges: Vec<Sge>,
    sink_stag: u32,
    sink_to: u64,
    len: u64,
    signaled: bool,
}

/// The message being cut into FPDUs.
#[derive(Debug)]
struct Sending {
    segmenter: Segmenter,
    source: Source,
}

#[derive(Debug)]
enum Source {
    /// A work request's data (and its place in the completion order); it completes when
    /// the last segment leaves.
    Wr(SendWr, u64),
    /// A READ request's body.
    ReadRequest([u8; ReadRequestRepr::LEN]),
    /// A READ response: `len` bytes at `to` of `stag`.
    Response { stag: u32, to: u64 },
}

/// A SEND being received into the receive at the head of the queue.
#[derive(Debug, Clone, Copy)]
struct Receiving {
    msn: u32,
    len: u64,
}

/// An iWARP QP's data path.
#[derive(Debug)]
pub struct Qp {
    cfg: QpConfig,
    state: State,
    sq: VecDeque<SendWr>,
    sending: Option<Sending>,
    /// Next MSNs this side sends on queue 0 (SENDs) and queue 1 (READ requests).
    send_msn: u32,
    read_msn: u32,
    reads_out: VecDeque<ReadOut>,
    /// READ requests taken, answered in order.
    to_answer: VecDeque<ReadRequestRepr>,
    /// Whose turn at the next message boundary: the QP's own messages or the answers.
    answer_next: bool,
    reader: FpduReader,
    rq: VecDeque<RecvWr>,
    receiving: Option<Receiving>,
    /// MSNs expected next on queue 0 and queue 1.
    recv_msn: u32,
    read_req_msn: u32,
    cq: VecDeque<WorkCompletion>,
    /// Send WRs begun (or flushed) and not yet reported, in the order they were posted:
    /// each is done (with its completion, None if unsignaled) or still running. A WR's
    /// completion waits for those posted before it, as verbs promise (a SEND that left
    /// must not complete before the READ posted ahead of it has its response).
    send_done: VecDeque<Option<Option<WorkCompletion>>>,
    /// The slot number of `send_done`'s front.
    send_done_base: u64,
    /// The TERMINATE this side owes the stream, the last thing it sends.
    terminate_out: Option<Vec<u8>>,
    /// RFC 6581: the initiator's RTR, the first thing it sends.
    rtr_out: Option<Vec<u8>>,
    /// The responder sends nothing before the initiator's first FPDU came (RFC 5044).
    hold: bool,
    /// The initiator's RTR, kept to send again (`nudge`) until the responder is heard.
    rtr_again: Option<Vec<u8>>,
    /// What it counted (FPDUs, TERMINATEs, what it refused and why).
    counts: crate::Counters,
}

impl Qp {
    /// A QP whose stream is set up (MPA done), in RTS.
    pub fn new(cfg: QpConfig) -> Qp {
        Qp {
            cfg,
            state: State::Rts,
            sq: VecDeque::new(),
            sending: None,
            send_msn: 1,
            read_msn: 1,
            reads_out: VecDeque::new(),
            to_answer: VecDeque::new(),
            answer_next: false,
            reader: FpduReader::new(cfg.crc),
            rq: VecDeque::new(),
            receiving: None,
            recv_msn: 1,
            read_req_msn: 1,
            cq: VecDeque::new(),
            send_done: VecDeque::new(),
            send_done_base: 0,
            terminate_out: None,
            rtr_out: None,
            hold: false,
            rtr_again: None,
            counts: crate::Counters::default(),
        }
    }

    /// A QP on a stream MPA's exchange just set up (`negotiated` its outcome): with RFC
    /// 6581's peer-to-peer mode the initiator's first FPDU is the RTR, a zero-length RDMA
    /// WRITE (to STag 0, placing nothing). The responder sends nothing until the
    /// initiator's first FPDU came, RTR or not (RFC 5044: the initiator speaks first; Linux
    /// siw takes bytes that follow the MPA reply before it is read as a protocol error).
    /// An RTR other than a WRITE is refused.
    pub fn after_setup(
        cfg: QpConfig,
        negotiated: &super::Negotiated,
        initiator: bool,
    ) -> Result<Qp, crate::VerbsError> {
        let mut qp = Qp::new(cfg);
        match (negotiated.rtr, initiator) {
            (None, true) => {}
            (Some(super::Rtr::Write), true) => {
                let header = oxrdma_wire::iwarp::ddp::DdpRepr {
                    last: true,
                    opcode: oxrdma_wire::iwarp::ddp::RdmapOpcode::Write,
                    placement: Placement::Tagged { stag: 0, offset: 0 },
                };
                let mut fpdu = vec![0u8; cfg.max_fpdu.max(32)];
                let n =
                    super::stream::write_fpdu(&mut fpdu, &header, &[], cfg.crc).map_err(|_| {
                        crate::VerbsError::InvalidArgument("FPDU too small for the RTR")
                    })?;
                fpdu.truncate(n);
                qp.rtr_again = Some(fpdu.clone());
                qp.rtr_out = Some(fpdu);
            }
            (Some(super::Rtr::Write) | None, false) => qp.hold = true,
            (Some(_), _) => {
                return Err(crate::VerbsError::InvalidArgument(
                    "an RTR other than a zero-length RDMA WRITE",
                ))
            }
        }
        Ok(qp)
    }

    /// An initiator that has heard nothing from its responder sends its RTR again (a
    /// zero-length RDMA WRITE, which places nothing): Linux siw's responder reads its
    /// socket only when new bytes come once its MPA reply is out, and FPDUs that came
    /// while it was sending that reply would wait for ever. Returns whether it will.
    pub fn nudge(&mut self) -> bool {
        if self.terminated() {
            return false;
        }
        match &self.rtr_again {
            Some(rtr) if self.rtr_out.is_none() => {
                self.rtr_out = Some(rtr.clone());
                true
            }
            _ => false,
        }
    }

    /// Its state.
    pub fn state(&self) -> State {
        self.state
    }

    /// What it counted: FPDUs each way, TERMINATEs each way, the refusals by cause, CRC
    /// errors, a stream that ended under it.
    pub fn counters(&self) -> &crate::Counters {
        &self.counts
    }

    /// Queues a send work request: RDMA WRITE, RDMA READ (one SGE: the sink is one
    /// buffer), SEND, SEND with Invalidate. Others are refused at once; after a TERMINATE
    /// the WR completes flushed.
    pub fn post_send(&mut self, wr: SendWr) -> Result<(), crate::VerbsError> {
        use crate::VerbsError::InvalidArgument;
        match wr.opcode {
            WrOpcode::RdmaWrite | WrOpcode::Send | WrOpcode::SendWithInv => {}
            WrOpcode::RdmaRead => {
                let SendData::Sges(s) = &wr.data else {
                    return Err(InvalidArgument("a READ's sink is registered memory"));
                };
                if s.iter().filter(|s| s.length > 0).count() > 1 {
                    return Err(InvalidArgument("an iWARP READ's sink is one SGE"));
                }
            }
            _ => return Err(InvalidArgument("not an iWARP operation")),
        }
        if self.terminated() {
            let slot = self.start_slot();
            self.complete(slot, &wr, WcStatus::WrFlushErr, 0, true);
            return Ok(());
        }
        self.sq.push_back(wr);
        Ok(())
    }

    /// Queues a receive for the next SEND (flushed at once after a TERMINATE).
    pub fn post_recv(&mut self, wr: RecvWr) {
        if self.terminated() {
            self.cq
                .push_back(self.wc(wr.wr_id, WcStatus::WrFlushErr, WcOpcode::Recv, 0));
        } else {
            self.rq.push_back(wr);
        }
    }

    /// The next completion.
    pub fn poll_cq(&mut self) -> Option<WorkCompletion> {
        self.cq.pop_front()
    }

    /// Send and receive work requests it holds that have not completed (an engine frees
    /// the slots of those that did, signaled or not).
    pub fn outstanding(&self) -> (usize, usize) {
        (self.sq.len() + self.send_done.len(), self.rq.len())
    }
}

impl Qp {
    /// Whether the stream has ended (a TERMINATE either way, or closed).
    pub fn terminated(&self) -> bool {
        !matches!(self.state, State::Rts)
    }

    /// The driver saw the stream end (the peer closed it, or the connection failed): a QP
    /// still running ends too, every WR flushed; the state says whether the peer stopped
    /// in the middle of an FPDU. What ended before stays as it was.
    pub fn stream_closed(&mut self) {
        if self.terminated() {
            return;
        }
        self.flush(true);
        self.terminate_out = None;
        self.rtr_out = None;
        let mid_fpdu = self.reader.held() > 0;
        self.counts.bump(crate::Counter::IwarpStreamClosed);
        if mid_fpdu {
            self.counts.bump(crate::Counter::IwarpClosedMidFpdu);
        }
        self.state = State::Closed { mid_fpdu };
    }

    /// Whether the QP has bytes to send (or a TERMINATE) now.
    pub fn wants_to_send(&self) -> bool {
        self.terminate_out.is_some()
            || self.rtr_out.is_some()
            || !self.terminated()
                && !self.hold
                && (self.sending.is_some() || !self.sq.is_empty() || !self.to_answer.is_empty())
    }

    fn signaled(&self, wr: &SendWr) -> bool {
        self.cfg.sq_sig_all || wr.flags.contains(SendFlags::SIGNALED)
    }

    fn wc(&self, wr_id: u64, status: WcStatus, opcode: WcOpcode, byte_len: u32) -> WorkCompletion {
        WorkCompletion {
            wr_id,
            status,
            opcode,
            byte_len,
            imm: None,
            qp_num: self.cfg.qpn,
            src_qp: 0,
            src_gid: None,
            invalidated_rkey: None,
        }
    }

    /// A place in the send queue's completion order for the WR begun now.
    fn start_slot(&mut self) -> u64 {
        self.send_done.push_back(None);
        self.send_done_base + self.send_done.len() as u64 - 1
    }

    /// The WR in `slot` is done (`wc`: its completion, None if unsignaled): it and the
    /// done ones after it are reported, up to the first still running.
    fn finish(&mut self, slot: u64, wc: Option<WorkCompletion>) {
        let at = slot.wrapping_sub(self.send_done_base) as usize;
        if let Some(entry) = self.send_done.get_mut(at) {
            *entry = Some(wc);
        }
        while let Some(Some(_)) = self.send_done.front() {
            if let Some(Some(wc)) = self.send_done.pop_front() {
                self.cq.extend(wc);
            }
            self.send_done_base += 1;
        }
    }

    /// A send WR's completion: always for an error, else if it is signaled.
    fn complete(&mut self, slot: u64, wr: &SendWr, status: WcStatus, len: u32, force: bool) {
        let report = status != WcStatus::Success || force || self.signaled(wr);
        let opcode = match wr.opcode {
            WrOpcode::RdmaWrite => WcOpcode::RdmaWrite,
            WrOpcode::RdmaRead => WcOpcode::RdmaRead,
            _ => WcOpcode::Send,
        };
        let wc = report.then(|| self.wc(wr.wr_id, status, opcode, len));
        self.finish(slot, wc);
    }

    /// Every WR still queued completes flushed (receives with `receives`).
    fn flush(&mut self, receives: bool) {
        if let Some(Sending {
            source: Source::Wr(wr, slot),
            ..
        }) = self.sending.take()
        {
            self.complete(slot, &wr, WcStatus::WrFlushErr, 0, true);
        }
        while let Some(r) = self.reads_out.pop_front() {
            let wc = self.wc(r.wr_id, WcStatus::WrFlushErr, WcOpcode::RdmaRead, 0);
            self.finish(r.slot, Some(wc));
        }
        while let Some(wr) = self.sq.pop_front() {
            let slot = self.start_slot();
            self.complete(slot, &wr, WcStatus::WrFlushErr, 0, true);
        }
        self.to_answer.clear();
        if receives {
            while let Some(wr) = self.rq.pop_front() {
                self.cq
                    .push_back(self.wc(wr.wr_id, WcStatus::WrFlushErr, WcOpcode::Recv, 0));
            }
        }
    }
}

/// An untagged placement at the start of message `msn` of `queue`.
fn untagged(queue: Queue, msn: u32, offset: u32) -> Placement {
    Placement::Untagged {
        ulp: 0,
        queue,
        msn,
        offset,
    }
}

/// The bytes a send WR moves.
fn data_len(wr: &SendWr) -> u64 {
    match &wr.data {
        SendData::Sges(s) => s.iter().map(|s| u64::from(s.length)).sum(),
        SendData::Inline(b) => b.len() as u64,
    }
}
