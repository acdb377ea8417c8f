//! A queue pair: its attributes, send queue and state machine. The requester, completer
//! and responder each own their state (`Requester`, `Completer`, `Responder`), private to
//! the file named after them. None calls another: each decides from a view of the QP and
//! returns what the QP is to do (`drive.rs` carries it between requester and completer).

use crate::attr::{AddressVector, QpAttr, QpInitAttr};
use crate::counters::{Counter, Counters};
pub(crate) use crate::ctx::Ctx;
use crate::drops::{RxDrop, RxDrops};
use crate::gid::rc_udp_sport;
use crate::gid::Gid;
use crate::grh::GRH_LEN;
use crate::mr::Segment;
use crate::verbs::{Access, AsyncEvent, EventType, Mtu, QpState, QpType, WcStatus};
use crate::wr::SendWr;
use crate::Nanos;
use ack_hold::{AckAsked, AckHold};
use completer::Completer;
use oxrdma_wire::{PacketRepr, Psn};
pub use post::{Doorbells, QpPost};
use requester::Requester;
pub(crate) use responder::ReorderPool;
use responder::{Fatal, QpView, Responder};
use send_queue::SendQueue;
use std::sync::Arc;

mod ack_hold;
mod arrived;
mod asks;
mod completer;
mod drive;
mod ecn;
mod go_back;
mod handoff;
mod post;
mod request_run;
mod requester;
mod responder;
mod scoreboard;
mod send_queue;
mod window;

/// What a QP's transport has been through (`oxrdma perf` prints it): why a path is slow.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QpTransport {
    /// Request packets sent, first times and again.
    pub packets_sent: u64,
    /// Request packets sent more than once (go-back, probes, selective repeat).
    pub packets_resent: u64,
    /// Of those, the packets selective repeat found lost and sent again alone.
    pub lost_resent: u64,
    /// The peer speaks selective repeat.
    pub selective_repeat: bool,
    /// The send window now, in PSNs.
    pub window: u32,
    /// The smoothed and the smallest round-trip time measured.
    pub srtt: Option<Nanos>,
    /// The smallest round-trip time measured.
    pub min_rtt: Option<Nanos>,
    /// RoCEv2 CNPs sent to the peer (requests that came marked CE), and received from it
    /// (ours did: the window yields).
    pub cnps_sent: u64,
    /// RoCEv2 CNPs received from the peer (the send window yields to each).
    pub cnps_received: u64,
}

/// A send WR as the requester tracks it.
#[derive(Debug)]
pub(crate) struct SendWqe {
    pub wr: SendWr,
    /// UD: the destination (and source GID), from the WR's address handle.
    pub ud_dest: Option<AddressVector>,
    pub len: u64,
    /// Local memory, resolved when the WQE is first sent (None for inline data).
    pub segs: Vec<Segment>,
    pub started: bool,
    pub first_psn: Psn,
    /// PSNs the WQE consumes (READ: one per response packet).
    pub npkts: u32,
    /// A local error found when starting it; reported when it reaches the front.
    pub local_error: Option<WcStatus>,
    /// A local operation (bind, invalidate) that has been executed, and how it went; it
    /// completes when it reaches the front.
    pub local_done: Option<WcStatus>,
    /// READ and atomic: responses that arrived ahead of `una` (placed already).
    pub arrived: arrived::Arrived,
    /// The number of the request packet of this WQE sent last (the requester counts
    /// them). The responder answers in request order, so a response tells which READ and
    /// atomic responses asked for before it are lost.
    pub asked: u64,
    /// READ: which request last asked for each response packet.
    pub asks: asks::Asks,
}

impl SendWqe {
    fn new(wr: SendWr, ud_dest: Option<AddressVector>) -> Self {
        SendWqe {
            len: wr.length(),
            wr,
            ud_dest,
            segs: Vec::new(),
            started: false,
            first_psn: Psn::new(0),
            npkts: 0,
            local_error: None,
            local_done: None,
            arrived: arrived::Arrived::default(),
            asked: 0,
            asks: asks::Asks::default(),
        }
    }
    /// The WQE's last PSN (one before its first for a local WQE, which has none).
    pub fn last_psn(&self) -> Psn {
        self.first_psn.add(self.npkts).sub(1)
    }
    /// READ and atomic: the index of the first response at or after index `i` that has
    /// not arrived (`npkts` or more if none is missing); everything before `una` has.
    pub fn next_missing(&self, i: u32, una: Psn) -> u32 {
        let done = if una.before(self.first_psn) {
            0
        } else {
            self.first_psn.distance_to(una)
        };
        self.arrived.next_missing(i.max(done))
    }
    /// READ: whether a response has arrived (before `una`, or beyond a gap).
    pub fn any_response(&self, una: Psn) -> bool {
        self.next_missing(0, una) > 0 || self.arrived.next_arrived(0).is_some()
    }
    /// READ and atomic: some response is still to come.
    pub fn awaits_response(&self, una: Psn) -> bool {
        self.next_missing(0, una) < self.npkts
    }
    /// READ and atomic: the first missing response, if it will not come, knowing that the
    /// responder has answered request `through` up to its response `end` (it answers in
    /// request order, so what an earlier request asked for would have come before).
    pub fn first_lost(&self, through: u64, end: Psn, una: Psn) -> Option<u32> {
        let lost =
            |m: u32, n: u64| n < through || (n == through && self.first_psn.add(m).before(end));
        if self.wr.opcode.is_atomic() {
            return (self.awaits_response(una) && lost(0, self.asked)).then_some(0);
        }
        if self.wr.opcode != crate::verbs::WrOpcode::RdmaRead {
            return None;
        }
        // Only the lowest missing piece counts: it is asked for before any higher one (see
        // `read_request`).
        let m = self.next_missing(0, una);
        (m < self.npkts && lost(m, self.asks.of(m))).then_some(m)
    }
    /// True when `psn` is one of this WQE's PSNs.
    pub fn holds(&self, psn: Psn) -> bool {
        self.started && psn.in_window(self.first_psn, self.npkts)
    }
}

#[derive(Debug)]
pub(crate) struct Qp {
    pub qpn: u32,
    pub qp_type: QpType,
    pub pd: u32,
    send_cq: u32,
    recv_cq: u32,
    /// Receives come from this shared receive queue instead of the QP's own.
    pub srq: Option<u32>,
    sq_sig_all: bool,
    pub state: QpState,
    access: Access,
    qkey: u32,
    pub av: Option<AddressVector>,
    pub mtu: Mtu,
    timeout: u8,
    retry_cnt: u8,
    rnr_retry: u8,
    min_rnr_timer: u8,
    pub max_rd_atomic: u8,
    max_dest_rd_atomic: u8,
    dest_qpn: u32,
    pub udp_sport: u16,
    /// The posting side shared with application threads (WRs wait there until taken).
    post: Arc<QpPost>,
    /// Send WQEs taken from `post`, until they complete.
    sq: SendQueue,
    /// The requester: its place in the send queue and the PSNs it has sent.
    req: Requester,
    /// The completer: what is acknowledged, retries, RNR waits, probes, the timers.
    comp: Completer,
    /// Whether the responder's positive ACK waits for a request to take it along.
    ack: AckHold,
    /// Congestion notification to the peer (CNPs for requests that came marked CE).
    ecn: ecn::Notifier,
    /// The responder, with the QP's own receive queue.
    pub resp: Responder,
    /// Waiting in the engine's transmit round-robin.
    pub scheduled: bool,
    /// The deadline under which the engine's timer queue holds this QP.
    pub queued_deadline: Option<Nanos>,
    /// Counted among the QPs that share the host's window (`engine/share.rs`).
    pub counted_sending: bool,
    /// In SQD, IBV_EVENT_SQ_DRAINED is still to be raised (once the started WQEs are done).
    drain_pending: bool,
    /// The device speaks selective repeat (`EngineConfig::selective_repeat`).
    selective_repeat: bool,
    /// What the requester and completer decide from, kept as the attributes change
    /// (`refresh_views`): built once, not per packet.
    rview: requester::ReqView,
    cview: completer::CompView,
    /// What this QP counts itself (traffic, drops, held ACKs); its responder and
    /// completer count the rest (`counters`).
    pub counts: Counters,
    /// Its keys, if it is secure (`crate::secure`): every packet sealed and opened.
    pub secure: Option<Box<crate::secure::Secured>>,
}

impl Qp {
    /// A QP in RESET; `selective_repeat`: the device speaks it (keeping packets ahead of
    /// a gap in `pool`); `mtu`: the path MTU until modify sets one (a UD QP's for good:
    /// its messages are one packet of up to it).
    pub(crate) fn new(
        qpn: u32,
        pd: u32,
        init: &QpInitAttr,
        post: Arc<QpPost>,
        (selective_repeat, pool): (bool, Arc<ReorderPool>),
        mtu: Mtu,
    ) -> Qp {
        let mut qp = Qp {
            qpn,
            qp_type: init.qp_type,
            pd,
            send_cq: init.send_cq,
            recv_cq: init.recv_cq,
            srq: init.srq,
            sq_sig_all: init.sq_sig_all,
            state: QpState::Reset,
            access: Access::empty(),
            qkey: 0,
            av: None,
            mtu,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 12,
            max_rd_atomic: 1,
            max_dest_rd_atomic: 1,
            dest_qpn: 0,
            udp_sport: 0xc000,
            sq: SendQueue::new(post.clone(), qpn, init.send_cq, init.sq_sig_all),
            req: Requester::default(),
            comp: Completer::default(),
            ack: AckHold::default(),
            ecn: ecn::Notifier::default(),
            resp: Responder::new(post.clone(), pool),
            post,
            scheduled: false,
            queued_deadline: None,
            counted_sending: false,
            drain_pending: false,
            selective_repeat,
            counts: Counters::default(),
            secure: None,
            // Placeholders: `refresh_views` below builds both from the fields above.
            rview: requester::ReqView {
                state: QpState::Reset,
                qp_type: init.qp_type,
                mtu,
                pd,
                qpn,
                dest_qpn: 0,
                qkey: 0,
                max_rd_atomic: 1,
                selective_repeat,
                sealed: false,
            },
            cview: completer::CompView {
                state: QpState::Reset,
                mtu,
                retry_cnt: 7,
                rnr_retry: 7,
                ack_timeout: None,
                selective_repeat,
            },
        };
        qp.refresh_views();
        qp
    }

    /// The local ACK timeout in nanoseconds, or None for "wait forever" (timeout 0).
    pub fn ack_timeout(&self) -> Option<Nanos> {
        (self.timeout != 0).then(|| 4096u64 << self.timeout)
    }

    /// `ibv_modify_qp` once `attr` has been validated for the transition to `to` (rules in
    /// `attr.rs`): takes the attributes given and enters the new state.
    pub(crate) fn modify(&mut self, ctx: &mut Ctx<'_>, attr: &QpAttr, to: QpState) {
        let from = self.state;
        if let Some(a) = attr.qp_access_flags {
            self.access = a;
        }
        if let Some(k) = attr.qkey {
            self.qkey = k;
        }
        if let Some(av) = attr.ah_attr {
            self.av = Some(av);
        }
        if let Some(m) = attr.path_mtu {
            self.mtu = m;
        }
        if let Some(t) = attr.timeout {
            self.timeout = t;
        }
        if let Some(r) = attr.retry_cnt {
            self.retry_cnt = r;
        }
        if let Some(r) = attr.rnr_retry {
            self.rnr_retry = r;
        }
        if let Some(t) = attr.min_rnr_timer {
            self.min_rnr_timer = t;
        }
        if let Some(n) = attr.max_rd_atomic {
            self.max_rd_atomic = n;
            self.post.set_max_rd_atomic(n);
        }
        if let Some(n) = attr.max_dest_rd_atomic {
            self.max_dest_rd_atomic = n;
        }
        if let Some(d) = attr.dest_qp_num {
            self.dest_qpn = d;
            self.udp_sport = rc_udp_sport(self.qpn, d);
        }
        if let Some(p) = attr.rq_psn {
            self.resp.set_epsn(Psn::new(p));
        }
        if let Some(p) = attr.sq_psn {
            let p = Psn::new(p);
            self.req.start_at(p);
            self.comp.start_at(p);
        }
        if to != QpState::Sqd {
            self.drain_pending = false;
        }
        self.refresh_views();
        match to {
            QpState::Reset => self.reset(),
            QpState::Err => self.enter_error(ctx, None),
            QpState::Sqd if from == QpState::Rts => {
                self.set_state(to);
                self.drain_pending = true;
                self.check_drained(ctx);
            }
            QpState::Rts if from == QpState::Rtr => {
                self.comp.refill_retries(self.retry_cnt, self.rnr_retry);
                self.set_state(to);
            }
            _ => self.set_state(to),
        }
    }

    /// `ibv_query_qp`: every attribute as it stands (the PSNs are the next to send and the
    /// next expected).
    pub fn query(&self) -> QpAttr {
        let rc = self.qp_type == QpType::Rc;
        let rc_only = |v| rc.then_some(v);
        QpAttr {
            qp_state: Some(self.state),
            cur_qp_state: Some(self.state),
            qp_access_flags: Some(self.access),
            pkey_index: Some(0),
            port_num: Some(1),
            qkey: Some(self.qkey),
            ah_attr: self.av,
            path_mtu: Some(self.mtu),
            timeout: rc_only(self.timeout),
            retry_cnt: rc_only(self.retry_cnt),
            rnr_retry: rc_only(self.rnr_retry),
            rq_psn: Some(self.resp.epsn().value()),
            max_rd_atomic: rc_only(self.max_rd_atomic),
            min_rnr_timer: rc_only(self.min_rnr_timer),
            sq_psn: Some(self.req.next_psn().value()),
            max_dest_rd_atomic: rc_only(self.max_dest_rd_atomic),
            dest_qp_num: Some(self.dest_qpn),
        }
    }

    /// Whether every send WR completes, signaled or not.
    pub fn sq_sig_all(&self) -> bool {
        self.sq_sig_all
    }

    fn set_state(&mut self, s: QpState) {
        self.state = s;
        self.post.set_state(s);
        self.refresh_views();
    }

    /// The posting side, for application threads.
    pub fn post(&self) -> &Arc<QpPost> {
        &self.post
    }

    /// Answers the doorbell: takes the send WRs posted since the last time (resolving a UD
    /// WR's address handle with `ah`), and flushes what was posted in ERR.
    pub(crate) fn take_posted(
        &mut self,
        ctx: &mut Ctx<'_>,
        ah: impl Fn(u32) -> Option<AddressVector>,
    ) {
        self.post.answer();
        while let Some(wr) = self.post.sq.take() {
            let dest = wr.ud.and_then(|u| ah(u.ah));
            self.sq.push_back(SendWqe::new(wr, dest));
        }
        match self.state {
            QpState::Err => self.flush(ctx),
            // Posted in RTS, taken after a reset: discarded as the reset discards.
            QpState::Reset | QpState::Init | QpState::Rtr => self.discard_send_queue(),
            _ => {}
        }
    }

    /// Whether this QP completes to `cq` (so the CQ may not be destroyed).
    pub fn uses_cq(&self, cq: u32) -> bool {
        self.send_cq == cq || self.recv_cq == cq
    }

    /// What the responder needs to know of this QP.
    pub fn view(&self) -> QpView {
        QpView {
            qpn: self.qpn,
            dest_qpn: self.dest_qpn,
            pd: self.pd,
            recv_cq: self.recv_cq,
            srq: self.srq,
            state: self.state,
            access: self.access,
            mtu: self.mtu,
            qkey: self.qkey,
            max_dest_rd_atomic: self.max_dest_rd_atomic,
            min_rnr_timer: self.min_rnr_timer,
            sealed: self.secure.is_some(),
        }
    }

    /// Goes to ERR when the responder says the QP must.
    fn apply(&mut self, ctx: &mut Ctx<'_>, r: Result<Fatal, RxDrop>) -> Result<(), RxDrop> {
        if let Some(event) = r? {
            self.enter_error(ctx, Some(event));
        }
        Ok(())
    }

    /// An RC request packet (the responder's), parsed from `raw`; Err says why it was
    /// dropped.
    pub(crate) fn handle_request(
        &mut self,
        ctx: &mut Ctx<'_>,
        pkt: &PacketRepr<'_>,
        raw: &[u8],
    ) -> Result<(), RxDrop> {
        let r = self
            .resp
            .handle_request(ctx, &self.view(), pkt, raw, self.selective_repeat);
        if self.resp.take_re_asked() {
            self.ack.release();
        } else {
            self.hold_ack(ctx.now, ctx.app_serves_timers);
        }
        self.apply(ctx, r)
    }

    /// Lets a held ACK go at the next transmit (before the QP is destroyed: the peer must
    /// not be left retrying).
    pub(crate) fn release_ack(&mut self) {
        self.ack.release();
    }

    /// Whether an ACK is being held (`AckHold`).
    pub(crate) fn ack_held(&self) -> bool {
        self.ack.held()
    }

    /// A request just asked for an ACK: the policy may hold it (`AckHold::asked`).
    fn hold_ack(&mut self, now: Nanos, app_serves_timers: bool) {
        if !self.ack.held() {
            self.hold_ack_anew(now, app_serves_timers);
            if self.ack.held() {
                self.counts.bump(Counter::AckDeferred);
            }
        }
    }

    fn hold_ack_anew(&mut self, now: Nanos, app_serves_timers: bool) {
        self.ack.asked(AckAsked {
            app_serves_timers,
            ack_timeout: self.ack_timeout(),
            now,
            only_an_ack_waits: self.qp_type == QpType::Rc && self.resp.only_an_ack_waits(),
            ours_outstanding: self.comp.una() != self.req.high_psn(),
            ours_sent_at: self.req.last_msg_sent_at(),
            ours_queued: self.sq.len(),
        });
    }

    /// A UC request packet; Err says why it was dropped.
    pub(crate) fn handle_uc_request(
        &mut self,
        ctx: &mut Ctx<'_>,
        pkt: &PacketRepr<'_>,
    ) -> Result<(), RxDrop> {
        self.resp.handle_uc_request(ctx, &self.view(), pkt)
    }

    /// A datagram for this UD QP, from `src` with GRH area `grh`; Err says why it was
    /// dropped.
    pub(crate) fn handle_datagram(
        &mut self,
        ctx: &mut Ctx<'_>,
        pkt: &PacketRepr<'_>,
        src: Gid,
        grh: &[u8; GRH_LEN],
    ) -> Result<(), RxDrop> {
        let r = self.resp.handle_datagram(ctx, &self.view(), pkt, src, grh);
        self.apply(ctx, r)
    }

    /// A request for this RC QP arrived with its ECN field marked CE: a queue on the path
    /// is filling. A peer that speaks selective repeat (`offers`: the request's bit) gets a
    /// CNP (`ecn.rs`).
    pub(crate) fn congestion_marked(&mut self, now: Nanos, offers: bool) {
        if offers && self.selective_repeat && self.state != QpState::Err {
            self.ecn.marked(now);
        }
    }

    /// The peer's CNP: a queue on the path our requests take is filling.
    pub(crate) fn handle_cnp(&mut self) {
        self.comp.cnp();
    }

    /// The responder's next reply packet (or a CNP that is due), written into `buf`;
    /// returns its length.
    pub(crate) fn next_response(&mut self, buf: &mut [u8]) -> Option<usize> {
        if self.ecn.due() {
            return Some(self.ecn.emit(self.dest_qpn, buf));
        }
        // Other replies than the held ACK: it goes now, with them.
        if self.ack.waits(self.resp.only_an_ack_waits()) {
            return None;
        }
        let v = self.view();
        self.resp.next_response(&v, buf)
    }

    /// In SQD: raises SQ_DRAINED once no WQE that had started is outstanding (those not
    /// started stay queued until the QP returns to RTS).
    pub fn check_drained(&mut self, ctx: &mut Ctx<'_>) {
        if self.drain_pending && self.state == QpState::Sqd && !self.sq.iter().any(|w| w.started) {
            self.drain_pending = false;
            ctx.events.push_back(AsyncEvent::Qp {
                qpn: self.qpn,
                event: EventType::SqDrained,
            });
        }
    }

    /// After the requester or completer completed WQEs: SQ_DRAINED if due, and ERR if one
    /// failed.
    fn settle_queue(&mut self, ctx: &mut Ctx<'_>) {
        if self.sq.take_failed() {
            self.enter_error(ctx, None);
        }
        if self.drain_pending {
            self.check_drained(ctx);
        }
    }

    /// Moves the QP to ERR: every outstanding WR completes with WR_FLUSH_ERR. Replies already
    /// queued (a final NAK among them) are still sent.
    pub fn enter_error(&mut self, ctx: &mut Ctx<'_>, event: Option<EventType>) {
        if self.state == QpState::Err {
            return;
        }
        self.set_state(QpState::Err);
        if let Some(event) = event {
            ctx.events.push_back(AsyncEvent::Qp {
                qpn: self.qpn,
                event,
            });
        }
        self.flush(ctx);
        if self.srq.is_some() {
            // Nothing more will be taken from the SRQ for this QP.
            ctx.events.push_back(AsyncEvent::Qp {
                qpn: self.qpn,
                event: EventType::QpLastWqeReached,
            });
        }
        self.comp.stop_timers();
        self.ack.release();
    }

    /// Completes everything queued with WR_FLUSH_ERR (used in and on entry to ERR).
    pub fn flush(&mut self, ctx: &mut Ctx<'_>) {
        while let Some(wr) = self.post.sq.take() {
            self.sq.push_back(SendWqe::new(wr, None));
        }
        self.sq.flush(ctx);
        let v = self.view();
        self.resp.flush(ctx, &v);
    }

    /// Drops every send WR, taken or not, without completions, freeing their slots.
    fn discard_send_queue(&mut self) {
        self.sq.discard();
        self.post.sq.discard();
    }

    /// Back to RESET: queues are emptied without completions, as libibverbs specifies.
    pub fn reset(&mut self) {
        // A new connection needs new keys: its sequence numbers start again.
        self.secure = None;
        self.set_state(QpState::Reset);
        self.discard_send_queue();
        // The counts outlive the connection.
        self.counts = self.counters();
        self.req = Requester::default();
        self.comp = Completer::default();
        self.ack = AckHold::default();
        self.ecn = ecn::Notifier::default();
        self.resp.reset();
    }

    /// Everything this QP counted: its own counts, its responder's and completer's, and
    /// the packets its requester sent again.
    pub fn counters(&self) -> Counters {
        let mut c = self.counts;
        c.add(&self.resp.counts, |_| true);
        c.add(&self.comp.counts, |_| true);
        c[Counter::Retransmitted] += self.req.packets_resent();
        c
    }

    /// A packet for this QP dropped for `why`, before it reached the QP's handlers.
    pub fn dropped(&mut self, drops: &mut RxDrops, why: RxDrop) {
        drops.count(why);
        self.counts.bump(Counters::drop_counter(why));
    }

    /// What its transport has been through.
    pub fn transport(&self) -> QpTransport {
        QpTransport {
            packets_sent: self.req.packets_sent(),
            packets_resent: self.req.packets_resent(),
            lost_resent: self.comp.resent(),
            selective_repeat: self.comp.selective(),
            window: self.comp.window(),
            srtt: self.comp.srtt(),
            min_rtt: self.comp.min_rtt(),
            cnps_sent: self.ecn.sent,
            cnps_received: self.comp.cnps(),
        }
    }

    /// Whether this QP has work outstanding that a window bounds: an RC send queue that
    /// is not empty.
    pub fn sending(&self) -> bool {
        self.qp_type == QpType::Rc && !self.sq.is_empty()
    }

    /// Packets this QP may send in its turn in the engine's round robin, the next one
    /// included (None: no other QP waits); the turn's last asks for an ACK.
    pub fn set_turn(&mut self, packets: Option<u32>) {
        self.req.set_turn(packets);
    }

    /// This QP's part of the host's window (`engine/share.rs`).
    pub fn set_window_share(&mut self, share: u32) {
        self.comp.set_share(share);
    }

    /// The earliest deadline this QP is waiting for.
    pub fn next_deadline(&self) -> Option<Nanos> {
        match (self.comp.next_deadline(), self.ack.deadline()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}
