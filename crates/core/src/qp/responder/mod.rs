//! The responder: accepts requests in PSN order, executes them against registered memory,
//! consumes receive WQEs, and queues ACKs, NAKs, READ responses and atomic ACKs.

use crate::build::{bth, finish_packet, finish_sealed, packets_for, part_for};
use crate::counters::{Counter, Counters};
use crate::ctx::Ctx;
use crate::drops::RxDrop;
use crate::keys::{MrTable, RemoteRange};
use crate::memory::SharedBuffer;
use crate::mr::{scatter, Segment};
use crate::qp::post::QpPost;
use crate::verbs::{Access, EventType, Mtu, QpState, WcOpcode, WcStatus};
use crate::wr::{RecvWr, WorkCompletion};
use crate::Nanos;
use oxrdma_wire::aeth::{rnr_timer_micros, INVALID_CREDIT};
use oxrdma_wire::sack;
use oxrdma_wire::{
    AethRepr, AtomicAckEthRepr, ExtHeaders, NakCode, Opcode, OpcodeInfo, Operation, PacketRepr,
    Psn, Syndrome,
};
use read_budget::ReadBudget;
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;

mod read_budget;
mod reorder;
mod run;
mod uc;
mod ud;

use reorder::Reorder;
pub(crate) use reorder::ReorderPool;
pub(crate) use reorder::MAX_SPAN;

/// Atomic results remembered for replaying duplicate atomics: twice the most a requester
/// may have outstanding (max_qp_rd_atom), so a retransmitted atomic is always found.
const ATOMIC_CACHE: usize = 256;

/// A receive WQE being filled by a multi-packet SEND.
#[derive(Debug)]
pub(crate) struct RecvProgress {
    pub wr_id: u64,
    /// The WQE as posted, to put back if the message is abandoned (UC).
    pub sges: crate::SgeList,
    segs: Vec<Segment>,
    off: usize,
}

/// A multi-packet RDMA WRITE in progress.
#[derive(Debug)]
pub(crate) struct WriteProgress {
    seg: Option<Segment>,
    off: usize,
    total: usize,
}

impl WriteProgress {
    /// Places the next packet's `payload`, if the message has room for it (exactly, if it
    /// `ends` the message; otherwise with more to come).
    fn place(&mut self, payload: &[u8], ends: bool) -> bool {
        let end = self.off + payload.len();
        if end > self.total || (end == self.total) != ends {
            return false;
        }
        if let Some(seg) = &self.seg {
            seg.buffer.write(seg.offset + self.off, payload);
        }
        self.off = end;
        true
    }
}

/// READ response data still to send.
#[derive(Debug)]
struct ReadReply {
    first_psn: Psn,
    next_psn: Psn,
    /// Stop before this PSN: the requester went back and asked again from here.
    cut: Option<Psn>,
    /// Answers a new request (not a retransmitted one): holds a responder resource.
    original: bool,
    seg: Option<Segment>,
    sent: usize,
    len: usize,
    msn: u32,
}

impl ReadReply {
    /// One past the last PSN this stream will send.
    fn end(&self, mtu: Mtu) -> Psn {
        self.cut
            .unwrap_or_else(|| self.first_psn.add(packets_for(self.len as u64, mtu)))
    }
}

/// A reply waiting to be sent.
#[derive(Debug)]
enum Reply {
    Ack {
        psn: Psn,
        syndrome: Syndrome,
        msn: u32,
    },
    AtomicAck {
        psn: Psn,
        original: u64,
        msn: u32,
        replay: bool,
    },
    Read(ReadReply),
}

/// The responder of one QP: its receive queue and everything it tracks of incoming
/// requests and the replies it owes.
#[derive(Debug)]
pub(crate) struct Responder {
    /// The QP's posting side: its receive queue (unless it uses an SRQ).
    post: Arc<QpPost>,
    /// Receive WQEs taken for a UC message that was dropped, to be used first.
    returned: VecDeque<RecvWr>,
    /// The only PSN accepted next.
    epsn: Psn,
    /// Messages completed (24-bit on the wire).
    msn: u32,
    /// A PSN-sequence NAK went out for the current gap.
    nak_sent: bool,
    /// UC: the message in progress lost a packet; drop the rest of it.
    uc_dropping: bool,
    recv: Option<RecvProgress>,
    write: Option<WriteProgress>,
    replies: VecDeque<Reply>,
    atomics: VecDeque<(Psn, u64)>,
    /// The requester speaks selective repeat (its requests carry the bit): packets ahead of
    /// a gap are kept, and ACKs carry the bit and a SACK.
    sr_peer: bool,
    /// Packets kept ahead of a gap.
    reorder: Reorder,
    /// What it counts: duplicates, requests out of sequence, the NAKs it sends and why.
    pub counts: Counters,
    /// The PSN of the last RNR NAK sent, and when: the same request again before the RNR
    /// timer it named has run out gets no second NAK (an RNR storm is not reflected).
    rnr_naked: Option<(Psn, Nanos)>,
    /// What duplicate READs may still cost.
    read_budget: ReadBudget,
    /// A duplicate asked for an ACK again (a tail-loss probe) since the QP last looked.
    re_asked: bool,
}

/// What the responder needs of its QP, read afresh for each event.
#[derive(Debug, Clone, Copy)]
pub(crate) struct QpView {
    pub qpn: u32,
    pub dest_qpn: u32,
    pub pd: u32,
    pub recv_cq: u32,
    pub srq: Option<u32>,
    pub state: QpState,
    pub access: Access,
    pub mtu: Mtu,
    pub qkey: u32,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    /// The QP is secure: its packets are sealed once built, and their ICRC part taken then.
    pub sealed: bool,
}

/// A request the responder failed: its QP must go to ERR, raising this event.
pub(crate) type Fatal = Option<EventType>;

/// What happened to an in-order request.
pub(crate) enum Outcome {
    Accepted,
    /// No receive WQE: RNR NAK, PSN not consumed.
    Rnr,
}

impl Responder {
    /// The MSN once one more message is complete (24 bits on the wire).
    fn next_msn(&self) -> u32 {
        (self.msn + 1) & 0xff_ffff
    }

    /// Whether any reply (ACK, NAK, READ response, atomic ACK) waits to be sent.
    pub(crate) fn has_replies(&self) -> bool {
        !self.replies.is_empty()
    }

    /// Whether the one reply waiting is a positive ACK (which may be held back).
    pub(crate) fn only_an_ack_waits(&self) -> bool {
        self.replies.len() == 1
            && matches!(
                self.replies.front(),
                Some(Reply::Ack {
                    syndrome: Syndrome::Ack { .. },
                    ..
                })
            )
    }

    fn push_ack(&mut self, psn: Psn, syndrome: Syndrome, msn: u32) {
        // Coalesce: a newer positive ACK covers an older one not yet sent.
        if let (
            Syndrome::Ack { .. },
            Some(Reply::Ack {
                syndrome: Syndrome::Ack { .. },
                ..
            }),
        ) = (syndrome, self.replies.back())
        {
            self.replies.pop_back();
        }
        self.replies.push_back(Reply::Ack { psn, syndrome, msn });
    }

    /// A retransmitted READ asks for PSNs `first..end` again. Queued replies it covers
    /// are stale: drop them, or cut a READ stream where the new one takes over. Replies for
    /// other PSNs stay: a requester that asks again only for what it lost (ours) does not
    /// resend the later requests, and one that goes back (rxe) resends them, superseding
    /// each in turn. False if a queued stream already covers `first..end` (the request
    /// is then redundant).
    fn supersede(&mut self, first: Psn, end: Psn, mtu: Mtu) -> bool {
        let covers = |from: Psn, to: Psn| !from.before(first) && !end.before(to);
        let redundant = self.replies.iter().any(|r| match r {
            Reply::Read(q) => !first.before(q.next_psn) && !q.end(mtu).before(end),
            _ => false,
        });
        if redundant {
            return false;
        }
        self.replies.retain_mut(|r| match r {
            Reply::Ack { psn, .. } | Reply::AtomicAck { psn, .. } => !covers(*psn, psn.next()),
            Reply::Read(q) => {
                // What the stream has still to send, from `from` on, is in first..end?
                let from = if q.next_psn.before(first) {
                    first
                } else {
                    q.next_psn
                };
                let to = q.end(mtu);
                if !from.before(to) || !covers(from, to) {
                    true
                } else if from == q.next_psn {
                    false
                } else {
                    q.cut = Some(first);
                    true
                }
            }
        });
        true
    }

    /// READs and atomics of new requests still being answered (responder resources). A
    /// READ stream cut by a retransmitted request no longer counts.
    fn reads_queued(&self) -> usize {
        self.replies
            .iter()
            .filter(|r| match r {
                Reply::Read(q) => q.original && q.cut.is_none(),
                Reply::AtomicAck { replay, .. } => !replay,
                Reply::Ack { .. } => false,
            })
            .count()
    }
}

const ACK: Syndrome = Syndrome::Ack {
    credits: INVALID_CREDIT,
};

impl Responder {
    /// A request-type packet for this QP's responder. Err says why it was dropped;
    /// `Ok(Some(event))`: it was NAKed and the QP must go to ERR raising `event`.
    pub(crate) fn handle_request(
        &mut self,
        ctx: &mut Ctx<'_>,
        q: &QpView,
        pkt: &PacketRepr<'_>,
        raw: &[u8],
        selective_repeat: bool,
    ) -> Result<Fatal, RxDrop> {
        if !matches!(q.state, QpState::Rtr | QpState::Rts | QpState::Sqd) {
            return Err(RxDrop::QpState);
        }
        let psn = pkt.bth.psn;
        self.sr_peer |= selective_repeat && pkt.bth.selective_repeat;
        match psn.diff(self.epsn) {
            d if d > 0 => return self.ahead(pkt, raw),
            d if d < 0 => {
                self.counts.bump(Counter::DuplicateRequest);
                self.duplicate(ctx, q, pkt);
                return Ok(None);
            }
            _ => {}
        }
        let fatal = self.execute(ctx, q, pkt)?;
        if fatal.is_some() {
            return Ok(fatal);
        }
        self.execute_kept(ctx, q)
    }

    /// A request ahead of the expected PSN: kept if the requester speaks selective repeat
    /// (an ACK with its SACK goes back when it asks for one, or when the packet opens a new
    /// run of kept PSNs: that tells the requester of the gap at once); otherwise, or if
    /// there is no room, a PSN-sequence NAK, once per gap.
    fn ahead(&mut self, pkt: &PacketRepr<'_>, raw: &[u8]) -> Result<Fatal, RxDrop> {
        let (psn, epsn, msn) = (pkt.bth.psn, self.epsn, self.msn);
        self.counts.bump(Counter::OutOfSeqRequest);
        if self.sr_peer {
            let opens_block = !self.reorder.holds(psn.sub(1));
            if self.reorder.hold(epsn, psn, raw) {
                if pkt.bth.ack_req || opens_block {
                    self.push_ack(epsn.sub(1), ACK, msn);
                }
                return Ok(None);
            }
        }
        if !self.nak_sent {
            self.nak_sent = true;
            self.counts.bump(Counter::SentSeqNak);
            self.push_ack(epsn, Syndrome::Nak(NakCode::PsnSequenceError), msn);
        }
        Err(RxDrop::OutOfSequence)
    }

    /// Executes the kept packets the expected PSN has reached, in order, until a gap (or
    /// one that cannot be executed yet: no receive WQE, RNR).
    fn execute_kept(&mut self, ctx: &mut Ctx<'_>, q: &QpView) -> Result<Fatal, RxDrop> {
        while let Some(raw) = self.reorder.take(self.epsn) {
            let Ok(pkt) = PacketRepr::parse(&raw) else {
                continue;
            };
            let before = self.epsn;
            match self.execute(ctx, q, &pkt) {
                Ok(Some(event)) => return Ok(Some(event)),
                Ok(None) if self.epsn == before => {
                    self.reorder.put_back(before, raw);
                    break;
                }
                _ => {}
            }
        }
        Ok(None)
    }

    /// Executes the request at the expected PSN.
    fn execute(
        &mut self,
        ctx: &mut Ctx<'_>,
        q: &QpView,
        pkt: &PacketRepr<'_>,
    ) -> Result<Fatal, RxDrop> {
        let psn = pkt.bth.psn;
        let info = pkt.bth.opcode.info().map_err(|_| RxDrop::Malformed)?;
        let result = match info.operation {
            Operation::Send | Operation::SendWithImm | Operation::SendWithInv => {
                self.recv_send(ctx, q, pkt, &info)
            }
            Operation::Write | Operation::WriteWithImm => self.recv_write(ctx, q, pkt, &info),
            Operation::ReadRequest => self.recv_read(ctx, q, pkt),
            Operation::CompareSwap | Operation::FetchAdd => self.recv_atomic(ctx, q, pkt),
            _ => Err(NakCode::InvalidRequest),
        };
        let r = &mut *self;
        match result {
            Ok(Outcome::Accepted) => {
                let replies_itself = matches!(
                    info.operation,
                    Operation::ReadRequest | Operation::CompareSwap | Operation::FetchAdd
                );
                r.accepted(psn, pkt.bth.ack_req && !replies_itself);
            }
            Ok(Outcome::Rnr) => {
                // A requester waits out the timer an RNR NAK names before it sends again:
                // the same request sooner is a copy or a storm, and is dropped unanswered.
                let wait = Nanos::from(rnr_timer_micros(q.min_rnr_timer)) * 1000;
                if r.rnr_naked
                    .is_some_and(|(p, at)| p == psn && ctx.now < at + wait)
                {
                    r.counts.bump(Counter::RnrNakLimited);
                    return Ok(None);
                }
                r.rnr_naked = Some((psn, ctx.now));
                r.counts.bump(Counter::SendRnrErr);
                let msn = r.msn;
                r.push_ack(
                    psn,
                    Syndrome::RnrNak {
                        timer: q.min_rnr_timer,
                    },
                    msn,
                );
            }
            Err(code) => {
                let msn = r.msn;
                r.push_ack(psn, Syndrome::Nak(code), msn);
                let why = match code {
                    NakCode::RemoteAccessError => {
                        r.counts.bump(access_fault(ctx.mrs, q, pkt, info.operation));
                        Counter::RespRemoteAccessErrors
                    }
                    NakCode::RemoteOperationalError => Counter::RespRemoteOpErrors,
                    _ => Counter::RespInvalidRequest,
                };
                r.counts.bump(why);
                let event = match code {
                    NakCode::RemoteAccessError => EventType::QpAccessErr,
                    NakCode::InvalidRequest => EventType::QpReqErr,
                    _ => EventType::QpFatal,
                };
                return Ok(Some(event));
            }
        }
        Ok(None)
    }

    /// A request at `psn` was executed: a PSN-sequence NAK may go again for a later gap,
    /// and an ACK goes if the request asked for one (`ack`).
    fn accepted(&mut self, psn: Psn, ack: bool) {
        self.nak_sent = false;
        if ack {
            let msn = self.msn;
            self.push_ack(psn, ACK, msn);
        }
    }

    /// A responder taking receives from `post`'s queue.
    pub(crate) fn new(post: Arc<QpPost>, pool: Arc<ReorderPool>) -> Self {
        Responder {
            post,
            returned: VecDeque::new(),
            epsn: Psn::default(),
            msn: 0,
            nak_sent: false,
            uc_dropping: false,
            recv: None,
            write: None,
            replies: VecDeque::new(),
            atomics: VecDeque::new(),
            sr_peer: false,
            reorder: Reorder::new(pool),
            counts: Counters::default(),
            rnr_naked: None,
            read_budget: ReadBudget::default(),
            re_asked: false,
        }
    }

    /// Whether a duplicate asked for an ACK again since the last call: the requester
    /// waits for it (its probe), so a held ACK goes now.
    pub(crate) fn take_re_asked(&mut self) -> bool {
        std::mem::take(&mut self.re_asked)
    }

    /// Back to RESET: everything posted is discarded without completions.
    pub(crate) fn reset(&mut self) {
        let held = self.returned.len() + usize::from(self.recv.is_some());
        self.post.rq.discard();
        self.post.rq.retire(held);
        *self = Responder::new(self.post.clone(), self.reorder.pool());
    }

    /// A receive WQE of the QP's own queue is finished (its completion follows at once):
    /// its slot is free for the next post.
    fn release(&self, q: &QpView) {
        if q.srq.is_none() {
            self.post.rq.retire(1);
        }
    }

    /// Whether a receive WQE is waiting for this QP (in its own queue or its SRQ).
    pub(crate) fn has_recv(&self, ctx: &Ctx<'_>, q: &QpView) -> bool {
        match q.srq {
            Some(s) => ctx.srqs.get(&s).is_some_and(|srq| !srq.queue.is_empty()),
            None => !self.returned.is_empty() || !self.post.rq.is_empty(),
        }
    }

    /// Takes the next receive WQE; from an SRQ, this may fire its limit event.
    pub(crate) fn take_recv(&mut self, ctx: &mut Ctx<'_>, q: &QpView) -> Option<RecvWr> {
        match q.srq {
            Some(s) => ctx.srqs.get_mut(&s)?.take(s, ctx.events),
            None => self.returned.pop_front().or_else(|| self.post.rq.take()),
        }
    }

    /// Puts back a WQE a dropped message had started (UC), at the head.
    pub(crate) fn return_recv(&mut self, ctx: &mut Ctx<'_>, q: &QpView, wr: RecvWr) {
        match q.srq.and_then(|s| ctx.srqs.get_mut(&s)) {
            Some(srq) => srq.queue.push_front(wr),
            None => self.returned.push_front(wr),
        }
    }

    /// The QP went to ERR: every receive it holds (one being filled, those queued)
    /// completes with WR_FLUSH_ERR.
    pub(crate) fn flush(&mut self, ctx: &mut Ctx<'_>, q: &QpView) {
        self.reorder.clear();
        let started = self.recv.take().map(|r| r.wr_id);
        let mut queued: Vec<u64> = self.returned.drain(..).map(|r| r.wr_id).collect();
        if q.srq.is_none() {
            queued.extend(std::iter::from_fn(|| self.post.rq.take()).map(|r| r.wr_id));
        }
        for wr_id in started.into_iter().chain(queued) {
            let wc = WorkCompletion::new(wr_id, WcStatus::WrFlushErr, WcOpcode::Recv, q.qpn);
            self.release(q);
            ctx.complete(q.recv_cq, wc);
        }
    }

    /// Sets the next PSN expected (modify QP's rq_psn).
    pub(crate) fn set_epsn(&mut self, psn: Psn) {
        self.epsn = psn;
    }

    /// The next PSN expected (query QP's rq_psn).
    pub(crate) fn epsn(&self) -> Psn {
        self.epsn
    }

    /// Completes receive WQE `wr_id` with error `status`.
    fn recv_failed(&self, ctx: &mut Ctx<'_>, q: &QpView, wr_id: u64, status: WcStatus) {
        let wc = WorkCompletion::new(wr_id, status, WcOpcode::Recv, q.qpn);
        self.complete_recv(ctx, q, wc);
    }

    /// Puts `wc`, a receive's completion, on the receive CQ (with the source QP added).
    fn complete_recv(&self, ctx: &mut Ctx<'_>, q: &QpView, wc: WorkCompletion) {
        let src_qp = q.dest_qpn;
        self.release(q);
        ctx.complete(q.recv_cq, WorkCompletion { src_qp, ..wc });
    }

    /// Checks a packet's payload length against its position in the message.
    fn length_ok(q: &QpView, info: &OpcodeInfo, n: usize) -> bool {
        match info.position {
            oxrdma_wire::Position::First | oxrdma_wire::Position::Middle => n == q.mtu.bytes(),
            _ => n <= q.mtu.bytes(),
        }
    }

    pub(crate) fn recv_send(
        &mut self,
        ctx: &mut Ctx<'_>,
        q: &QpView,
        pkt: &PacketRepr<'_>,
        info: &OpcodeInfo,
    ) -> Result<Outcome, NakCode> {
        if info.position.starts_message() {
            if self.recv.is_some() {
                return Err(NakCode::InvalidRequest);
            }
            let Some(wr) = self.take_recv(ctx, q) else {
                return Ok(Outcome::Rnr);
            };
            if info.position.ends_message() && Self::length_ok(q, info, pkt.payload.len()) {
                return self.recv_send_only(ctx, q, pkt, info, wr);
            }
            let Some(segs) = ctx.mrs.local(q.pd, &wr.sges, Access::LOCAL_WRITE) else {
                self.recv_failed(ctx, q, wr.wr_id, WcStatus::LocProtErr);
                return Err(NakCode::RemoteOperationalError);
            };
            self.recv = Some(RecvProgress {
                wr_id: wr.wr_id,
                sges: wr.sges,
                segs,
                off: 0,
            });
        }
        if !Self::length_ok(q, info, pkt.payload.len()) {
            return Err(NakCode::InvalidRequest);
        }
        let Some(rp) = self.recv.as_mut() else {
            return Err(NakCode::InvalidRequest);
        };
        if !scatter(&rp.segs, rp.off, pkt.payload) {
            let wr_id = rp.wr_id;
            self.recv = None;
            // As rxe: the receive completes with a local QP operation error, and the
            // requester is NAKed with a remote operational error.
            self.recv_failed(ctx, q, wr_id, WcStatus::LocQpOpErr);
            return Err(NakCode::RemoteOperationalError);
        }
        rp.off += pkt.payload.len();
        if info.position.ends_message() {
            // On an error the receive stays in progress: the QP's flush completes it.
            let (wr_id, off) = (rp.wr_id, rp.off);
            self.end_send(ctx, q, pkt, info, wr_id, off)?;
            self.recv = None;
        }
        self.epsn = self.epsn.next();
        Ok(Outcome::Accepted)
    }

    /// A SEND of one packet: placed straight into the receive WQE's SGEs (no segment list,
    /// nothing kept between packets), with the statuses the general path gives.
    fn recv_send_only(
        &mut self,
        ctx: &mut Ctx<'_>,
        q: &QpView,
        pkt: &PacketRepr<'_>,
        info: &OpcodeInfo,
        wr: RecvWr,
    ) -> Result<Outcome, NakCode> {
        let placed = ctx
            .mrs
            .scatter_at(q.pd, &wr.sges, Access::LOCAL_WRITE, 0, pkt.payload);
        if let Err(status) = placed {
            // A message longer than the receive: rxe's status (see `recv_send`).
            let status = match status {
                WcStatus::LocLenErr => WcStatus::LocQpOpErr,
                s => s,
            };
            self.recv_failed(ctx, q, wr.wr_id, status);
            return Err(match status {
                // What the receive WQE could not take: rxe says remote operational error.
                WcStatus::LocProtErr | WcStatus::LocQpOpErr => NakCode::RemoteOperationalError,
                _ => NakCode::InvalidRequest,
            });
        }
        let n = pkt.payload.len();
        if let Err(nak) = self.end_send(ctx, q, pkt, info, wr.wr_id, n) {
            // In progress, as the general path leaves it: the QP's flush completes it.
            self.recv = Some(RecvProgress {
                wr_id: wr.wr_id,
                sges: wr.sges,
                segs: Vec::new(),
                off: n,
            });
            return Err(nak);
        }
        self.epsn = self.epsn.next();
        Ok(Outcome::Accepted)
    }

    /// The last packet of a SEND was placed: its invalidation, if it asks for one, and the
    /// receive's completion.
    fn end_send(
        &mut self,
        ctx: &mut Ctx<'_>,
        q: &QpView,
        pkt: &PacketRepr<'_>,
        info: &OpcodeInfo,
        wr_id: u64,
        byte_len: usize,
    ) -> Result<(), NakCode> {
        // SEND_WITH_INV: the rkey must name a type 2 window bound to this QP.
        let inv = pkt
            .ext
            .ieth
            .filter(|_| info.operation == Operation::SendWithInv);
        if let Some(rkey) = inv {
            if !ctx.mrs.invalidate(q.pd, rkey, Some(q.qpn)) {
                return Err(NakCode::InvalidRequest);
            }
        }
        let wc = WorkCompletion {
            byte_len: byte_len as u32,
            imm: pkt.ext.immdt,
            invalidated_rkey: inv,
            ..WorkCompletion::new(wr_id, WcStatus::Success, WcOpcode::Recv, q.qpn)
        };
        self.complete_recv(ctx, q, wc);
        self.msn = self.next_msn();
        Ok(())
    }

    /// Resolves remote access to `[va, va+len)` with `rkey`, checking the QP's access flags
    /// too. Zero-length accesses check nothing, as the spec allows.
    fn remote(
        &self,
        ctx: &Ctx<'_>,
        q: &QpView,
        rkey: u32,
        va: u64,
        len: u64,
        need: Access,
    ) -> Result<Option<Segment>, NakCode> {
        let at = self.remote_at(ctx, q, rkey, va, len, need)?;
        Ok(at.map(|(buffer, offset)| Segment {
            buffer: buffer.clone(),
            offset,
            len: len as usize,
        }))
    }

    /// [`Self::remote`] for an access done at once: the memory and offset, borrowed.
    fn remote_at<'c>(
        &self,
        ctx: &'c Ctx<'_>,
        q: &QpView,
        rkey: u32,
        va: u64,
        len: u64,
        need: Access,
    ) -> Result<Option<(&'c Arc<SharedBuffer>, usize)>, NakCode> {
        if len == 0 {
            return Ok(None);
        }
        Self::remote_range(ctx.mrs, q, rkey, need)
            .and_then(|r| r.at(va, len))
            .map(Some)
            .ok_or(NakCode::RemoteAccessError)
    }

    /// What `rkey` lets this QP reach with accesses needing `need`: the QP's own remote
    /// rights, then the key's (`MrTable::remote_range`). None: NAK remote access error.
    fn remote_range<'m>(
        mrs: &'m MrTable,
        q: &QpView,
        rkey: u32,
        need: Access,
    ) -> Option<RemoteRange<'m>> {
        if !q.access.contains(need) {
            return None;
        }
        mrs.remote_range(q.pd, q.qpn, rkey, need)
    }

    pub(crate) fn recv_write(
        &mut self,
        ctx: &mut Ctx<'_>,
        q: &QpView,
        pkt: &PacketRepr<'_>,
        info: &OpcodeInfo,
    ) -> Result<Outcome, NakCode> {
        let n = pkt.payload.len();
        let ends = info.position.ends_message();
        let with_imm = info.operation == Operation::WriteWithImm;
        if ends && with_imm && !self.has_recv(ctx, q) {
            // Before touching anything, so the retried packet finds the same state.
            return Ok(Outcome::Rnr);
        }
        if info.position.starts_message() {
            if self.write.is_some() {
                return Err(NakCode::InvalidRequest);
            }
            let reth = pkt.ext.reth.ok_or(NakCode::InvalidRequest)?;
            let total = reth.dma_length as usize;
            if u64::from(reth.dma_length) > crate::limits::MAX_MESSAGE {
                return Err(NakCode::InvalidRequest);
            }
            let (rkey, va) = (reth.rkey, reth.virtual_address);
            if ends {
                // A message in one packet (every packet of a WRITE train): placed at once,
                // through the region, with no segment kept for packets to come.
                let at = self.remote_at(ctx, q, rkey, va, total as u64, Access::REMOTE_WRITE)?;
                if !Self::length_ok(q, info, n) || n != total {
                    return Err(NakCode::InvalidRequest);
                }
                if let Some((buffer, offset)) = at {
                    buffer.write(offset, pkt.payload);
                }
                self.write_done(ctx, q, pkt, total, with_imm);
                return Ok(Outcome::Accepted);
            }
            let seg = self.remote(ctx, q, rkey, va, total as u64, Access::REMOTE_WRITE)?;
            self.write = Some(WriteProgress { seg, off: 0, total });
        }
        if !Self::length_ok(q, info, n) {
            return Err(NakCode::InvalidRequest);
        }
        let Some(wp) = self.write.as_mut() else {
            return Err(NakCode::InvalidRequest);
        };
        if !wp.place(pkt.payload, ends) {
            return Err(NakCode::InvalidRequest);
        }
        if ends {
            let total = wp.total;
            self.write = None;
            self.write_done(ctx, q, pkt, total, with_imm);
        } else {
            self.epsn = self.epsn.next();
        }
        Ok(Outcome::Accepted)
    }

    /// The last packet of a WRITE of `total` bytes is placed: its receive WQE completes
    /// (with immediate), the message counts, the PSN moves on.
    fn write_done(
        &mut self,
        ctx: &mut Ctx<'_>,
        q: &QpView,
        pkt: &PacketRepr<'_>,
        total: usize,
        with_imm: bool,
    ) {
        if with_imm {
            // `recv_write` checked first that a receive WQE waits.
            let wr = self.take_recv(ctx, q).expect("checked above");
            let wc = WorkCompletion {
                byte_len: total as u32,
                imm: pkt.ext.immdt,
                ..WorkCompletion::new(
                    wr.wr_id,
                    WcStatus::Success,
                    WcOpcode::RecvRdmaWithImm,
                    q.qpn,
                )
            };
            self.complete_recv(ctx, q, wc);
        }
        self.message_written();
    }

    /// A WRITE's last packet is placed: the message counts, the PSN moves on.
    fn message_written(&mut self) {
        self.msn = self.next_msn();
        self.epsn = self.epsn.next();
    }

    /// Validates a READ request and builds its reply.
    fn read_reply(
        &self,
        ctx: &Ctx<'_>,
        q: &QpView,
        pkt: &PacketRepr<'_>,
        msn: u32,
    ) -> Result<ReadReply, NakCode> {
        let reth = pkt.ext.reth.ok_or(NakCode::InvalidRequest)?;
        let len = u64::from(reth.dma_length);
        if len > crate::limits::MAX_MESSAGE {
            return Err(NakCode::InvalidRequest);
        }
        let seg = self.remote(
            ctx,
            q,
            reth.rkey,
            reth.virtual_address,
            len,
            Access::REMOTE_READ,
        )?;
        let psn = pkt.bth.psn;
        Ok(ReadReply {
            first_psn: psn,
            next_psn: psn,
            cut: None,
            original: false,
            seg,
            sent: 0,
            len: len as usize,
            msn,
        })
    }

    fn recv_read(
        &mut self,
        ctx: &mut Ctx<'_>,
        q: &QpView,
        pkt: &PacketRepr<'_>,
    ) -> Result<Outcome, NakCode> {
        if self.reads_queued() >= usize::from(q.max_dest_rd_atomic.max(1)) {
            return Err(NakCode::InvalidRequest);
        }
        let msn = self.next_msn();
        let mut reply = self.read_reply(ctx, q, pkt, msn)?;
        reply.original = true;
        let rate = ctx.limits.dup_read_bytes_per_sec;
        self.read_budget.earn(ctx.now, rate, reply.len as u64);
        let npkts = packets_for(reply.len as u64, q.mtu);
        self.msn = msn;
        self.replies.push_back(Reply::Read(reply));
        self.epsn = self.epsn.add(npkts);
        Ok(Outcome::Accepted)
    }

    fn recv_atomic(
        &mut self,
        ctx: &mut Ctx<'_>,
        q: &QpView,
        pkt: &PacketRepr<'_>,
    ) -> Result<Outcome, NakCode> {
        let a = pkt.ext.atomic_eth.ok_or(NakCode::InvalidRequest)?;
        if a.virtual_address % 8 != 0 {
            return Err(NakCode::InvalidRequest);
        }
        let seg = self
            .remote(ctx, q, a.rkey, a.virtual_address, 8, Access::REMOTE_ATOMIC)?
            .ok_or(NakCode::InvalidRequest)?;
        // A region whose iova is aligned but whose memory is not cannot do CPU atomics.
        let cell = seg
            .buffer
            .atomic_u64(seg.offset)
            .ok_or(NakCode::InvalidRequest)?;
        let original = if pkt.bth.opcode == Opcode::RC_COMPARE_SWAP {
            match cell.compare_exchange(a.compare, a.swap_add, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(v) | Err(v) => v,
            }
        } else {
            cell.fetch_add(a.swap_add, Ordering::SeqCst)
        };
        let r = &mut *self;
        r.msn = r.next_msn();
        let psn = pkt.bth.psn;
        if r.atomics.len() == ATOMIC_CACHE {
            r.atomics.pop_front();
        }
        r.atomics.push_back((psn, original));
        let msn = r.msn;
        r.replies.push_back(Reply::AtomicAck {
            psn,
            original,
            msn,
            replay: false,
        });
        r.epsn = r.epsn.next();
        Ok(Outcome::Accepted)
    }

    /// Retransmitted requests: re-ACK, re-execute READs, replay atomics.
    fn duplicate(&mut self, ctx: &mut Ctx<'_>, q: &QpView, pkt: &PacketRepr<'_>) {
        let Ok(info) = pkt.bth.opcode.info() else {
            return;
        };
        let msn = self.msn;
        match info.operation {
            Operation::ReadRequest => {
                let Ok(reply) = self.read_reply(ctx, q, pkt, msn) else {
                    return;
                };
                let rate = ctx.limits.dup_read_bytes_per_sec;
                if !self.read_budget.affords(ctx.now, rate) {
                    self.counts.bump(Counter::DuplicateReadLimited);
                    return;
                }
                if self.supersede(reply.first_psn, reply.end(q.mtu), q.mtu) {
                    self.read_budget.pay(reply.len as u64);
                    self.replies.push_back(Reply::Read(reply));
                } else {
                    self.counts.bump(Counter::DuplicateReadLimited);
                }
            }
            Operation::CompareSwap | Operation::FetchAdd => {
                let psn = pkt.bth.psn;
                let r = &mut *self;
                if let Some(&(_, original)) = r.atomics.iter().find(|(p, _)| *p == psn) {
                    r.replies.push_back(Reply::AtomicAck {
                        psn,
                        original,
                        msn,
                        replay: true,
                    });
                }
            }
            _ if pkt.bth.ack_req => {
                let psn = self.epsn.sub(1);
                self.push_ack(psn, ACK, msn);
                self.re_asked = true;
            }
            _ => {}
        }
    }

    /// The next reply packet, written into `buf`; returns its length.
    pub(crate) fn next_response(&mut self, q: &QpView, buf: &mut [u8]) -> Option<usize> {
        if q.state == QpState::Reset {
            return None;
        }
        let mtu = q.mtu.bytes();
        // Drop READ streams that reached their cut.
        while let Some(Reply::Read(r)) = self.replies.front() {
            if r.cut != Some(r.next_psn) {
                break;
            }
            self.replies.pop_front();
        }
        // Under selective repeat the last ACK queued covers everything executed: packets
        // executed from the kept ones without asking for an ACK must not look lost.
        let (epsn, msn_now, last) = (self.epsn, self.msn, self.replies.len() == 1);
        let sr_peer = self.sr_peer;
        let front = self.replies.front_mut()?;
        if let Reply::Ack {
            psn,
            syndrome: Syndrome::Ack { .. },
            msn,
        } = front
        {
            if sr_peer && last {
                (*psn, *msn) = (epsn.sub(1), msn_now);
            }
        }
        let mut ext = ExtHeaders::default();
        let (opcode, psn, n, done) = match front {
            Reply::Ack { psn, syndrome, msn } => {
                ext.aeth = Some(AethRepr {
                    syndrome: *syndrome,
                    msn: *msn,
                });
                (Opcode::RC_ACKNOWLEDGE, *psn, 0, true)
            }
            Reply::AtomicAck {
                psn, original, msn, ..
            } => {
                ext.aeth = Some(AethRepr {
                    syndrome: ACK,
                    msn: *msn,
                });
                ext.atomic_ack_eth = Some(AtomicAckEthRepr {
                    original: *original,
                });
                (Opcode::RC_ATOMIC_ACKNOWLEDGE, *psn, 0, true)
            }
            Reply::Read(r) => {
                let n = mtu.min(r.len - r.sent);
                let (first, last) = (r.sent == 0, r.sent + n == r.len);
                let opcode = match (first, last) {
                    (true, true) => Opcode::RC_RDMA_READ_RESPONSE_ONLY,
                    (true, false) => Opcode::RC_RDMA_READ_RESPONSE_FIRST,
                    (false, true) => Opcode::RC_RDMA_READ_RESPONSE_LAST,
                    (false, false) => Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
                };
                if first || last {
                    ext.aeth = Some(AethRepr {
                        syndrome: ACK,
                        msn: r.msn,
                    });
                }
                (opcode, r.next_psn, n, last)
            }
        };
        let mut bth = bth(q.dest_qpn, opcode, psn, false, false);
        bth.selective_repeat = self.sr_peer;
        let sack = self.sr_peer
            && matches!(
                front,
                Reply::Ack {
                    syndrome: Syndrome::Ack { .. },
                    ..
                }
            );
        let repr = PacketRepr {
            bth,
            ext,
            payload: &[],
        };
        // (An ACK's `n` is 0: its SACK is whole words, so it needs no pad either.)
        let hlen = repr
            .emit_headers_for(n, buf)
            .expect("responder builds valid packets");
        if sack {
            // The ACK's payload: what is kept beyond the PSN it acknowledges (and what was
            // executed after it, if it is not the last ACK queued).
            let (epsn, r) = (self.epsn, &self.reorder);
            let held = |p: Psn| p.before(epsn) || r.holds(p);
            let end = r.end().filter(|e| e.after(epsn)).unwrap_or(epsn);
            let first = psn.next();
            let span = if end.after(first) {
                first.distance_to(end).min(sack::MAX_LEN as u32 * 8)
            } else {
                0
            };
            let n = sack::emit(psn, span, held, &mut buf[hlen..]);
            self.replies.pop_front();
            return Some(finish_packet(buf, hlen, n, None));
        }
        let mut hashed = None;
        if let Some(Reply::Read(r)) = self.replies.front_mut() {
            if let Some(seg) = &r.seg {
                // The payload copied and its ICRC part taken in one pass (`crc_copy/`).
                let at = seg.offset + r.sent;
                if !q.sealed {
                    hashed = part_for(&buf[..hlen], n);
                }
                let to = &mut buf[hlen..hlen + n];
                match hashed {
                    Some(h) => hashed = seg.buffer.read_hashing(at, to, h),
                    None => _ = seg.buffer.read(at, to),
                }
            }
            r.sent += n;
            r.next_psn = r.next_psn.next();
        }
        if done {
            self.replies.pop_front();
        }
        if q.sealed {
            return Some(finish_sealed(buf, hlen, n));
        }
        Some(finish_packet(buf, hlen, n, hashed))
    }
}

/// Why a request was NAKed with a remote access error (the data path does not keep the
/// cause: it is found again here, only on the error's path): the QP or the key does not
/// allow the operation, the key names nothing this QP may use, or the access falls
/// outside what it names (a WRITE's later packets: past the first packet's range).
fn access_fault(mrs: &MrTable, q: &QpView, pkt: &PacketRepr<'_>, op: Operation) -> Counter {
    let need = match op {
        Operation::Write | Operation::WriteWithImm => Access::REMOTE_WRITE,
        Operation::ReadRequest => Access::REMOTE_READ,
        _ => Access::REMOTE_ATOMIC,
    };
    let (rkey, va, len) = match (pkt.ext.reth, pkt.ext.atomic_eth) {
        (Some(r), _) => (r.rkey, r.virtual_address, u64::from(r.dma_length)),
        (None, Some(a)) => (a.rkey, a.virtual_address, 8),
        (None, None) => return Counter::OutOfBounds,
    };
    if !q.access.contains(need) {
        return Counter::AccessDenied;
    }
    match mrs.remote_range(q.pd, q.qpn, rkey, need) {
        Some(r) if r.at(va, len).is_none() => Counter::OutOfBounds,
        Some(_) => Counter::AccessDenied,
        None if mrs
            .remote_range(q.pd, q.qpn, rkey, Access::empty())
            .is_some() =>
        {
            Counter::AccessDenied
        }
        None => Counter::BadRkey,
    }
}
