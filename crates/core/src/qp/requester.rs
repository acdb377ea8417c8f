//! The requester: turns send WQEs into request packets, segmenting by path MTU, and
//! rewinds for go-back-N retransmission. It sends within what the completer says is in
//! flight (`InFlight`), says what it sent (`Sent`) and goes back when the completer asks
//! (`ReqCmd`); the QP carries each between them.

use crate::build::{bth, finish_packet, finish_sealed, packets_for, part_for};
use crate::limits::MAX_PACKET;
use crate::mr::gather;
use crate::qp::handoff::{Cursor, InFlight, ReqCmd, RunSent, Sent};
use crate::qp::send_queue::SendQueue;
use crate::qp::{Ctx, SendWqe};
use crate::verbs::{Access, Mtu, QpState, QpType, WcStatus, WrOpcode};
use crate::wr::{SendData, SendWr};
use crate::Nanos;
use oxrdma_wire::bth::Bth;
use oxrdma_wire::reth::Reth;
use oxrdma_wire::{
    AtomicEthRepr, BthRepr, DethRepr, ExtHeaders, Opcode, PacketRepr, Psn, RethRepr,
};

/// Messages that end without asking for an ACK, at most, before one asks anyway.
const UNASKED_MSGS: u32 = 16;
/// A stream asks for an ACK once in (WQEs outstanding / this) messages, at least once in
/// one (`acked_at_end`).
const STREAM_ASK_SHARE: u32 = 4;
/// An RC RDMA WRITE (without immediate) longer than the path MTU goes as one WRITE ONLY
/// per packet, each with its own RETH, rather than as FIRST, MIDDLE..., LAST. The bytes
/// land where they would, in the same order, and the responder sees nothing else that a
/// WRITE shows it (no completion, no receive consumed); only its MSN counts the packets.
/// Every packet is then the same length, so a WRITE goes through the kernel as whole GSO
/// runs: a FIRST, 16 bytes longer than a MIDDLE, was a datagram of its own. With the UDP
/// driver's 60-packet batches: 64 KiB WRITE 1.19x on loopback and on a veth pair (README).
const WRITE_TRAINS: bool = true;
/// AckReq at least this often inside long messages (Linux rxe: every 64+ packets).
pub(crate) const ACK_REQ_EVERY: u32 = 64;
/// A QP that sent this many packets since it last sent one again is quiet: nothing was
/// lost lately, and it asks for fewer ACKs (`Sender::quiet`).
const QUIET_AFTER: u64 = 2048;
/// How many times fewer packets ask by the cadence on a quiet QP, at most: an ask at
/// least once in `QUIET_ASK_BYTES` (on loopback's 4 KiB MTU, at the usual cadence).
const QUIET_CADENCE: u32 = 4;
const QUIET_ASK_BYTES: u32 = 256 << 10;
const BTH_LEN: usize = Bth::<&[u8]>::LEN;

/// What the requester owns: its place in the send queue and the PSNs it has sent.
#[derive(Debug, Default)]
pub(crate) struct Requester {
    /// PSN of the next packet to send.
    next_psn: Psn,
    /// One past the highest PSN ever sent.
    high_psn: Psn,
    /// Index in the send queue of the WQE being sent, and byte offset into it.
    idx: usize,
    off: u64,
    /// The send queue's `popped` when `idx` was last brought up to date (`sync`).
    popped: u64,
    /// Packets sent since the last one with AckReq.
    since_ack_req: u32,
    /// Messages ended since the last one that asked for an ACK.
    unasked_msgs: u32,
    /// When the last message's last packet was first sent.
    last_msg_at: Option<Nanos>,
    /// Request packets built so far (`SendWqe::asked` numbers them).
    asks: u64,
    /// A repair pass under way (see `repair`).
    repair: Option<Repair>,
    /// Request packets built more than once.
    resent: u64,
    /// `asks` when a packet was last built again (see `Sender::quiet`).
    resent_at: u64,
    /// A message whose completion waits for its ACK did not ask (a WQE queued behind it
    /// would): the next message to end asks.
    ask_owed: bool,
    /// The packet at the cursor is a one-packet probe: then back to `high_psn`.
    one_shot: bool,
    /// Packets this QP may send, the next one included, before its turn in the engine's
    /// round robin ends with another QP waiting (None: none waits). See `cadence_asks`.
    turn: Option<u32>,
}

/// A repair pass: the READ and atomic responses that the answer to request `through`,
/// up to its response `end`, shows lost are asked for again, and nothing else; then
/// sending goes on at `resume`.
#[derive(Clone, Copy, Debug)]
struct Repair {
    through: u64,
    end: Psn,
    resume: Psn,
}

impl Requester {
    /// Request packets built, ever.
    pub(crate) fn packets_sent(&self) -> u64 {
        self.asks
    }

    /// Request packets built more than once, ever.
    pub(crate) fn packets_resent(&self) -> u64 {
        self.resent
    }

    /// When the last message's last packet was first sent.
    pub(crate) fn last_msg_sent_at(&self) -> Option<Nanos> {
        self.last_msg_at
    }

    /// Packets this QP may send in its turn, the next one included (None: no other QP
    /// waits).
    pub(crate) fn set_turn(&mut self, packets: Option<u32>) {
        self.turn = packets;
    }

    /// The first PSN to send (modify QP's sq_psn).
    pub(crate) fn start_at(&mut self, psn: Psn) {
        self.next_psn = psn;
        self.high_psn = psn;
    }

    pub(crate) fn next_psn(&self) -> Psn {
        self.next_psn
    }

    /// One past the highest PSN ever sent: the end of what is outstanding.
    pub(crate) fn high_psn(&self) -> Psn {
        self.high_psn
    }

    /// Whether the cursor is behind the highest PSN sent: the next packet goes out again.
    pub(crate) fn resending(&self) -> bool {
        self.next_psn != self.high_psn
    }

    /// Where the requester stands, for the completer.
    pub(crate) fn cursor(&self) -> Cursor {
        Cursor {
            high_psn: self.high_psn,
            repairing: self.repair.is_some(),
            next_psn: self.next_psn,
            moved: false,
        }
    }

    /// The index in the send queue of the WQE at the cursor.
    pub(crate) fn at(&mut self, sq: &SendQueue) -> usize {
        self.sync(sq);
        self.idx
    }

    /// Brings the cursor's index up to date with the WQEs completed since: if the one it
    /// pointed at is gone, the cursor restarts at the front.
    fn sync(&mut self, sq: &SendQueue) {
        let gone = sq.popped() - self.popped;
        if gone > 0 {
            self.popped = sq.popped();
            if gone > self.idx as u64 {
                (self.idx, self.off) = (0, 0);
            } else {
                self.idx -= gone as usize;
            }
        }
    }
}

/// What the requester needs to know of its QP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ReqView {
    pub state: QpState,
    pub qp_type: QpType,
    pub mtu: Mtu,
    pub pd: u32,
    pub qpn: u32,
    pub dest_qpn: u32,
    pub qkey: u32,
    pub max_rd_atomic: u8,
    /// The device speaks selective repeat: RC requests offer it.
    pub selective_repeat: bool,
    /// The QP is secure: its packets are sealed once built, and their ICRC part taken then.
    pub sealed: bool,
}

/// The requester at work for one call: itself, its QP's attributes, the send queue, and
/// what is in flight.
pub(crate) struct Sender<'a> {
    pub r: &'a mut Requester,
    pub q: &'a ReqView,
    pub sq: &'a mut SendQueue,
    pub f: InFlight<'a>,
}

impl<'a> Sender<'a> {
    pub(crate) fn new(
        r: &'a mut Requester,
        q: &'a ReqView,
        sq: &'a mut SendQueue,
        f: InFlight<'a>,
    ) -> Self {
        r.sync(sq);
        Sender { r, q, sq, f }
    }
}

/// Opcode of a SEND/WRITE packet by QP type, operation and position.
fn send_write_opcode(t: QpType, op: WrOpcode, first: bool, last: bool) -> Opcode {
    match t {
        QpType::Rc => rc_send_write_opcode(op, first, last),
        QpType::Uc => rc_send_write_opcode(op, first, last).rc_to_uc(),
        QpType::Ud if op == WrOpcode::SendWithImm => Opcode::UD_SEND_ONLY_WITH_IMMEDIATE,
        QpType::Ud => Opcode::UD_SEND_ONLY,
    }
}

/// RC opcode of a SEND/WRITE packet by operation and position.
fn rc_send_write_opcode(op: WrOpcode, first: bool, last: bool) -> Opcode {
    use WrOpcode::{RdmaWrite, RdmaWriteWithImm, Send, SendWithImm, SendWithInv};
    match (op, first, last) {
        (Send, true, true) => Opcode::RC_SEND_ONLY,
        (SendWithImm, true, true) => Opcode::RC_SEND_ONLY_WITH_IMMEDIATE,
        (SendWithInv, true, true) => Opcode::RC_SEND_ONLY_WITH_INVALIDATE,
        (SendWithInv, false, true) => Opcode::RC_SEND_LAST_WITH_INVALIDATE,
        (Send | SendWithImm | SendWithInv, true, false) => Opcode::RC_SEND_FIRST,
        (Send | SendWithImm | SendWithInv, false, false) => Opcode::RC_SEND_MIDDLE,
        (Send, false, true) => Opcode::RC_SEND_LAST,
        (SendWithImm, false, true) => Opcode::RC_SEND_LAST_WITH_IMMEDIATE,
        (RdmaWrite, true, true) => Opcode::RC_RDMA_WRITE_ONLY,
        (RdmaWriteWithImm, true, true) => Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
        (_, true, false) => Opcode::RC_RDMA_WRITE_FIRST,
        (_, false, false) => Opcode::RC_RDMA_WRITE_MIDDLE,
        (RdmaWrite, false, true) => Opcode::RC_RDMA_WRITE_LAST,
        (RdmaWriteWithImm, false, true) => Opcode::RC_RDMA_WRITE_LAST_WITH_IMMEDIATE,
        _ => unreachable!("READ and atomics are not segmented"),
    }
}

/// What the next packet of a WQE is, before its BTH is written.
struct NextPacket {
    opcode: Opcode,
    ext: ExtHeaders,
    /// Payload bytes it carries.
    payload: usize,
    /// PSNs it consumes (a READ request: one per response packet).
    psns: u32,
    /// It is the WQE's last packet.
    ends_wqe: bool,
    /// It asks for an ACK whatever the cadence says.
    ack_req: bool,
}

/// The RETH naming bytes `off..off + n` of the remote buffer of `wr`: a whole WRITE's on
/// its FIRST or ONLY packet, one packet's on each of a train's (`WRITE_TRAINS`), the piece
/// of a READ asked for.
fn reth_for(wr: &SendWr, off: u64, n: usize) -> RethRepr {
    RethRepr {
        virtual_address: wr.remote_addr.wrapping_add(off),
        rkey: wr.rkey,
        dma_length: n as u32,
    }
}

/// The one packet of an atomic.
fn atomic_request(wr: &SendWr) -> NextPacket {
    let cas = wr.opcode == WrOpcode::AtomicCmpAndSwp;
    let ext = ExtHeaders {
        atomic_eth: Some(AtomicEthRepr {
            virtual_address: wr.remote_addr,
            rkey: wr.rkey,
            swap_add: if cas { wr.swap } else { wr.compare_add },
            compare: if cas { wr.compare_add } else { 0 },
        }),
        ..ExtHeaders::default()
    };
    NextPacket {
        opcode: if cas {
            Opcode::RC_COMPARE_SWAP
        } else {
            Opcode::RC_FETCH_ADD
        },
        ext,
        payload: 0,
        psns: 1,
        ends_wqe: true,
        ack_req: true,
    }
}

impl Sender<'_> {
    /// May the WQE at `idx` start now (fence and max_rd_atomic)?
    fn may_start(&self, idx: usize) -> bool {
        let w = &self.sq[idx];
        let earlier_reads = self
            .sq
            .iter()
            .take(idx)
            .filter(|e| e.wr.opcode.is_read_or_atomic());
        if w.wr.flags.contains(crate::SendFlags::FENCE) && earlier_reads.clone().next().is_some() {
            return false;
        }
        !w.wr.opcode.is_read_or_atomic()
            || earlier_reads.count() < usize::from(self.q.max_rd_atomic)
    }

    /// Resolves the WQE's local memory and assigns its PSNs.
    fn start(&mut self, ctx: &Ctx<'_>, idx: usize) -> Result<(), WcStatus> {
        let pd = self.q.pd;
        let first_psn = self.r.next_psn;
        let w = &self.sq[idx];
        if w.len > crate::limits::MAX_MESSAGE {
            return Err(WcStatus::LocLenErr);
        }
        if self.q.qp_type == QpType::Ud && w.ud_dest.is_none() {
            // Its address handle was destroyed, or is another PD's (rxe fails it the same way).
            return Err(WcStatus::LocQpOpErr);
        }
        let segs = match &w.wr.data {
            SendData::Inline(_) => Vec::new(),
            SendData::Sges(sges) => {
                let need = if w.wr.opcode.is_read_or_atomic() {
                    Access::LOCAL_WRITE
                } else {
                    Access::empty()
                };
                // As rxe: a READ or atomic whose local SGEs fail the check completes with a
                // local protection error, a SEND or WRITE that cannot gather its data with a
                // local QP operation error (rxe's requester fails every packet it cannot
                // build so).
                let bad = if w.wr.opcode.is_read_or_atomic() {
                    WcStatus::LocProtErr
                } else {
                    WcStatus::LocQpOpErr
                };
                ctx.mrs.local(pd, sges, need).ok_or(bad)?
            }
        };
        let npkts = if w.wr.opcode.is_atomic() {
            1
        } else {
            packets_for(w.len, self.q.mtu)
        };
        let w = &mut self.sq[idx];
        w.segs = segs;
        w.first_psn = first_psn;
        w.npkts = npkts;
        w.started = true;
        Ok(())
    }

    /// The next request packet at the cursor (after `next_middle` and resending what was
    /// lost found none), written into `buf`: its length and what was sent.
    pub(crate) fn next_request(
        &mut self,
        ctx: &mut Ctx<'_>,
        buf: &mut [u8],
    ) -> Option<(usize, Sent)> {
        let idx = loop {
            if self.q.state != QpState::Rts && self.q.state != QpState::Sqd {
                return None;
            }
            self.repair_position();
            self.skip_held();
            if self.f.rnr_wait.is_some() || self.r.idx >= self.sq.len() {
                return None;
            }
            if self.window_full() {
                return None;
            }
            let idx = self.r.idx;
            let w = &self.sq[idx];
            if w.wr.opcode.is_local() {
                if !self.run_local(ctx, idx) {
                    return None;
                }
            } else if !(w.started
                && w.wr.opcode.is_read_or_atomic()
                && self.step_over_answered(idx))
            {
                break idx;
            }
        };
        if !self.sq[idx].started {
            if self.q.state == QpState::Sqd || self.sq[idx].local_error.is_some() {
                return None;
            }
            if !self.may_start(idx) {
                return None;
            }
            if let Err(status) = self.start(ctx, idx) {
                self.sq[idx].local_error = Some(status);
                self.sq.report_local_errors(ctx);
                return None;
            }
        }
        Some(self.build_request(idx, buf, ctx.now))
    }

    /// The next packet if it is a MIDDLE packet of the SEND or WRITE under way, sent for
    /// the first time; None for any other. Most packets of a long message are these, and
    /// of `next_request`'s questions only the state, a repair, the window and an RNR
    /// wait can have a new answer since the message's packet before; the packet is a BTH
    /// (no extension header to check) and payload. callgrind, 1 KiB packets: 973
    /// instructions a packet against 1,188 the general way.
    pub(crate) fn next_middle(&mut self, now: Nanos, buf: &mut [u8]) -> Option<(usize, Sent)> {
        let w = self.middle_wqe()?;
        if self.window_full() {
            return None;
        }
        let (r, n) = (&*self.r, self.q.mtu.bytes());
        let psn = r.next_psn;
        let after = psn.add(1);
        let ack_req = self.q.qp_type == QpType::Rc && self.cadence_asks(after);
        let train = self.trains(w.wr.opcode);
        let opcode = send_write_opcode(self.q.qp_type, w.wr.opcode, train, train);
        self.request_bth(opcode, psn, ack_req, false)
            .emit(&mut Bth::new_unchecked(&mut buf[..BTH_LEN]));
        let mut ext = ExtHeaders::default();
        let mut hlen = BTH_LEN;
        if train {
            let reth = reth_for(&w.wr, r.off, n);
            reth.emit(&mut Reth::new_unchecked(
                &mut buf[hlen..hlen + Reth::<&[u8]>::LEN],
            ));
            hlen += Reth::<&[u8]>::LEN;
            ext.reth = Some(reth);
        }
        let next = NextPacket {
            opcode,
            ext,
            payload: n,
            psns: 1,
            ends_wqe: false,
            ack_req,
        };
        Some(self.finish_request(self.r.idx, buf, hlen, &next, now))
    }

    /// The WQE at the cursor, if the packet there is a middle one of its message, sent for
    /// the first time, that nothing holds back but maybe the window (what `next_middle`
    /// and `next_middles` both ask).
    fn middle_wqe(&self) -> Option<&SendWqe> {
        let r = &*self.r;
        let w = self.sq.get(r.idx)?;
        let middle = r.off > 0 && r.off + (self.q.mtu.bytes() as u64) < w.len && w.started;
        let sending = matches!(self.q.state, QpState::Rts | QpState::Sqd) && r.repair.is_none();
        let free = !r.resending() && !self.f.has_lost() && self.f.rnr_wait.is_none();
        (middle && sending && free && !w.wr.opcode.is_read_or_atomic()).then_some(w)
    }

    /// [`Self::next_middle`] for up to `limit` packets at once, written back to back into
    /// `slots` (room for `limit` packets of `MAX_PACKET` bytes; a secure QP's each followed
    /// by room for its trailer, to be sealed where it lies): the same packets and the
    /// same bookkeeping, what does not change between them worked out once. Only where
    /// nothing can change between them but what is counted here: the middle packets of a
    /// message gathered from memory, sent for the first time, on a QP that does not pace.
    /// Returns how many (at least one), their length, and what the completer is to record
    /// (`Completing::sent_run`); None: for `next_middle`, packet by packet.
    pub(crate) fn next_middles(
        &mut self,
        slots: &mut [u8],
        limit: usize,
    ) -> Option<(usize, usize, RunSent)> {
        let w = self.middle_wqe()?;
        if self.r.one_shot || self.f.paces || !matches!(w.wr.data, SendData::Sges(_)) {
            return None;
        }
        let (r, n) = (&*self.r, self.q.mtu.bytes());
        let idx = r.idx;
        let rc = self.q.qp_type == QpType::Rc;
        // Middle packets left (the message's last is not one), and the window's room (UC's
        // `una` follows its packets: no window).
        let left = (w.len - r.off - 1) / n as u64;
        let room = if rc {
            self.f.room(r.next_psn)
        } else {
            u32::MAX
        };
        let count = (limit as u64).min(left).min(u64::from(room)) as usize;
        if count == 0 {
            return None;
        }
        let train = self.trains(w.wr.opcode);
        let opcode = send_write_opcode(self.q.qp_type, w.wr.opcode, train, train);
        let hlen = BTH_LEN + if train { Reth::<&[u8]>::LEN } else { 0 };
        let (first, mut since) = (r.next_psn, r.since_ack_req);
        let mut first_ask = None;
        let mut len = 0;
        let gap = run_gap(self.q.sealed);
        for k in 0..count {
            let (psn, off) = (first.add(k as u32), r.off + (k * n) as u64);
            let asks = r.asks + k as u64;
            let ack = rc && self.cadence_asks_in_run(psn.add(1), since, asks, k as u32);
            let at = k * (len + gap);
            let buf = &mut slots[at..at + MAX_PACKET];
            self.request_bth(opcode, psn, ack, false)
                .emit(&mut Bth::new_unchecked(&mut buf[..BTH_LEN]));
            if train {
                reth_for(&w.wr, off, n).emit(&mut Reth::new_unchecked(&mut buf[BTH_LEN..hlen]));
            }
            // Bounds were checked when the WQE started; the buffer cannot shrink.
            // Copied and hashed for the ICRC in one pass (`crc_copy/`).
            let sealed = self.q.sealed;
            let mut hashed = if sealed {
                None
            } else {
                part_for(&buf[..hlen], n)
            };
            let ok = gather(&w.segs, off as usize, &mut buf[hlen..hlen + n], &mut hashed);
            debug_assert!(ok);
            len = if sealed {
                finish_sealed(buf, hlen, n)
            } else {
                finish_packet(buf, hlen, n, hashed)
            };
            since = if ack { 0 } else { since + 1 };
            if ack && first_ask.is_none() {
                first_ask = Some(psn);
            }
        }
        // What `finish_request` and `advance_cursor` leave after the last of them.
        let r = &mut *self.r;
        r.asks += count as u64;
        self.sq[idx].asked = r.asks;
        let end = first.add(count as u32);
        (r.next_psn, r.high_psn) = (end, end);
        r.off += (count * n) as u64;
        r.since_ack_req = since;
        r.ask_owed &= first_ask.is_none();
        let run = RunSent {
            first,
            count: count as u32,
            first_ask,
        };
        Some((count, len, run))
    }

    /// The BTH of a request to the connected peer. Every RC request offers selective
    /// repeat; a peer that does not speak it ignores the bit (a reserved one to it) and
    /// never sets it in its responses.
    fn request_bth(&self, opcode: Opcode, psn: Psn, ack_req: bool, solicited: bool) -> BthRepr {
        BthRepr {
            selective_repeat: self.q.selective_repeat && self.q.qp_type == QpType::Rc,
            ..bth(self.q.dest_qpn, opcode, psn, ack_req, solicited)
        }
    }

    /// Whether a packet found lost may go again now (`resend`).
    pub(crate) fn may_resend(&self) -> bool {
        matches!(self.q.state, QpState::Rts | QpState::Sqd)
            && self.r.repair.is_none()
            && self.f.rnr_wait.is_none()
            && self.f.has_lost()
            && !self.f.window_full_again()
    }

    /// Selective repeat: sends `psn`, found lost, again, and puts the cursor back where it
    /// was. None if no WQE holds it any more.
    pub(crate) fn resend(&mut self, psn: Psn, now: Nanos, buf: &mut [u8]) -> Option<(usize, Sent)> {
        let idx = self
            .sq
            .iter()
            .position(|w| w.started && w.npkts > 0 && w.holds(psn))?;
        let (at, off, next) = (self.r.idx, self.r.off, self.r.next_psn);
        self.put_cursor(idx, psn);
        let built = self.build_request(idx, buf, now);
        let r = &mut *self.r;
        (r.idx, r.off, r.next_psn) = (at, off, next);
        Some(built)
    }

    /// Selective repeat: a go-back pass steps over the SENDs and WRITEs the responder
    /// holds. Not over a READ or atomic: that the responder has the request does not bring
    /// its response, which asking again does (the responder replays it). Nor over `una`:
    /// a go-back or a probe sends at least that packet, whose ACK (the lost one, perhaps)
    /// says how far the responder got.
    fn skip_held(&mut self) {
        let skips = |q: &Sender<'_>| {
            let p = q.r.next_psn;
            q.r.resending()
                && p != q.f.una
                && q.f.held(p)
                && q.sq
                    .get(q.r.idx)
                    .is_some_and(|w| !w.wr.opcode.is_read_or_atomic())
        };
        while skips(self) {
            let mut p = self.r.next_psn;
            while p != self.r.high_psn && self.f.held(p) {
                p = p.next();
            }
            let before = self.r.next_psn;
            self.seek(p);
            if self.r.next_psn == before {
                return;
            }
        }
    }

    /// Moves the cursor past the responses of the READ or atomic at `idx` that already
    /// arrived; true if every one has (the cursor is then on the next WQE).
    fn step_over_answered(&mut self, idx: usize) -> bool {
        let mtu = self.q.mtu.bytes() as u64;
        let w = &self.sq[idx];
        let at = (self.r.off / mtu) as u32;
        let k = w.next_missing(at, self.f.una);
        let r = &mut *self.r;
        if k >= w.npkts {
            r.idx = idx + 1;
            r.off = 0;
            r.next_psn = w.first_psn.add(w.npkts);
            return true;
        }
        if k > at {
            let psn = w.first_psn.add(k);
            self.put_cursor(idx, psn);
        }
        false
    }

    /// Puts the cursor on PSN `psn` of the WQE at `idx` (its byte offset to match).
    fn put_cursor(&mut self, idx: usize, psn: Psn) {
        let off = u64::from(self.sq[idx].first_psn.distance_to(psn));
        let r = &mut *self.r;
        r.idx = idx;
        r.off = off * self.q.mtu.bytes() as u64;
        r.next_psn = psn;
    }

    /// Asks again for the responses that the stream of request `through` shows lost: the
    /// responder answers in request order, so a READ or atomic asked for no later than
    /// that request and still missing responses will not get them. Only those are asked
    /// for (the missing pieces alone); then sending goes on where it was.
    fn repair(&mut self, through: u64, end: Psn) {
        let rep = match self.r.repair {
            // What this pass has asked again has later numbers: it will not ask twice.
            Some(r) if r.through > through => r,
            Some(r) => Repair { through, end, ..r },
            None => Repair {
                through,
                end,
                resume: self.r.next_psn,
            },
        };
        self.r.repair = Some(rep);
        self.r.idx = 0;
    }

    /// In a repair pass: puts the cursor on the next lost response to ask for again, or
    /// ends the pass where sending had got to.
    fn repair_position(&mut self) {
        let Some(rep) = self.r.repair else { return };
        let una = self.f.una;
        let next = self
            .sq
            .iter()
            .enumerate()
            .skip(self.r.idx)
            .take_while(|(_, w)| w.started && w.first_psn.before(rep.resume))
            .find_map(|(i, w)| {
                Some((i, w.first_psn.add(w.first_lost(rep.through, rep.end, una)?)))
            });
        match next {
            Some((i, psn)) => self.put_cursor(i, psn),
            None => {
                self.r.repair = None;
                self.seek(rep.resume);
            }
        }
    }

    /// Executes the local operation at `idx` (once: after a rewind it is only stepped over)
    /// and moves the cursor past it; false if it may not run yet.
    fn run_local(&mut self, ctx: &mut Ctx<'_>, idx: usize) -> bool {
        if !self.sq[idx].started {
            if self.q.state == QpState::Sqd || !self.may_start(idx) {
                return false;
            }
            let (pd, qpn) = (self.q.pd, self.q.qpn);
            let w = &self.sq[idx];
            let status = match (w.wr.opcode, w.wr.bind) {
                (WrOpcode::BindMw, Some(b)) => match ctx.mrs.bind_mw(pd, qpn, &b) {
                    Ok(()) => WcStatus::Success,
                    Err(e) => e,
                },
                (WrOpcode::LocalInv, _) if ctx.mrs.invalidate(pd, w.wr.invalidate_rkey, None) => {
                    WcStatus::Success
                }
                _ => WcStatus::LocQpOpErr,
            };
            let first_psn = self.r.next_psn;
            let w = &mut self.sq[idx];
            (w.started, w.first_psn, w.npkts, w.local_done) = (true, first_psn, 0, Some(status));
        }
        self.r.idx += 1;
        self.r.off = 0;
        self.sq.drain_local_front(ctx);
        self.r.sync(self.sq);
        true
    }

    /// Builds the packet at the requester's cursor and advances the cursor; returns its
    /// length and what was sent.
    fn build_request(&mut self, idx: usize, buf: &mut [u8], now: Nanos) -> (usize, Sent) {
        let psn = self.r.next_psn;
        let off = self.r.off;
        let w = &self.sq[idx];
        let mut next = match w.wr.opcode {
            WrOpcode::RdmaRead => self.read_request(w, off),
            WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd => atomic_request(&w.wr),
            _ => self.send_write_packet(w, off),
        };
        let after = psn.add(next.psns);
        // Only RC asks for ACKs: at the end of a message whose completion someone waits
        // for (`acked_at_end`), on a packet sent again (its first ACK was lost, or never
        // asked for), every ACK_REQ_EVERY packets, and when the window fills.
        let (again, ends, rc) = (
            self.r.resending(),
            next.ack_req,
            self.q.qp_type == QpType::Rc,
        );
        next.ack_req =
            rc && (ends && self.acked_at_end(idx, now) || again || self.cadence_asks(after));
        if rc && ends && !next.ack_req && self.waits_for_ack(idx) {
            self.r.ask_owed = true;
        }
        let solicited = next.ends_wqe && w.wr.flags.contains(crate::SendFlags::SOLICITED);
        let mut bth = self.request_bth(next.opcode, psn, next.ack_req, solicited);
        if let Some(ud) = w.wr.ud.filter(|_| self.q.qp_type == QpType::Ud) {
            bth.dest_qpn = ud.remote_qpn;
        }
        let repr = PacketRepr {
            bth,
            ext: next.ext,
            payload: &[],
        };
        let hlen = repr
            .emit_headers_for(next.payload, buf)
            .expect("requester builds valid packets");
        self.finish_request(idx, buf, hlen, &next, now)
    }

    /// Writes the payload of `next`, the packet at the cursor in WQE `idx`, after its
    /// `hlen` bytes of headers, ends the packet, counts it and moves the cursor past it;
    /// returns the packet's length and what was sent.
    fn finish_request(
        &mut self,
        idx: usize,
        buf: &mut [u8],
        hlen: usize,
        next: &NextPacket,
        now: Nanos,
    ) -> (usize, Sent) {
        let (off, n, again) = (self.r.off, next.payload, self.r.resending());
        let after = self.r.next_psn.add(next.psns);
        let w = &self.sq[idx];
        let mut hashed = None;
        match &w.wr.data {
            SendData::Inline(data) => {
                buf[hlen..hlen + n].copy_from_slice(&data[off as usize..off as usize + n])
            }
            SendData::Sges(_) => {
                // Copied and hashed for the ICRC in one pass (`crc_copy/`). Bounds were
                // checked when the WQE started; the buffer cannot shrink.
                if !self.q.sealed {
                    hashed = part_for(&buf[..hlen], n);
                }
                let ok = gather(&w.segs, off as usize, &mut buf[hlen..hlen + n], &mut hashed);
                debug_assert!(ok);
            }
        }
        let total = if self.q.sealed {
            finish_sealed(buf, hlen, n)
        } else {
            finish_packet(buf, hlen, n, hashed)
        };
        let (first, npkts) = (w.first_psn, w.npkts);
        let sent = Sent {
            psn: self.r.next_psn,
            psns: next.psns,
            fresh: !again,
            ack_req: next.ack_req,
            asks: w.wr.opcode.is_read_or_atomic(),
        };
        self.r.asks += 1;
        self.r.resent += u64::from(again);
        if again {
            self.r.resent_at = self.r.asks;
        }
        // A probe asking again for a READ or atomic nothing has answered yet, out of order
        // (later requests were asked after the first copy): its answer may be the first
        // copy's, from a slow responder, which shows nothing about the later ones. Counted
        // as asked now, it made them look lost, and all went again (rxe: 127 atomics).
        let unanswered = self.r.one_shot && !w.any_response(self.f.una);
        let w = &mut self.sq[idx];
        if !unanswered {
            w.asked = self.r.asks;
            if w.wr.opcode == WrOpcode::RdmaRead {
                let from = (off / self.q.mtu.bytes() as u64) as u32;
                w.asks.record(from, from + next.psns, self.r.asks);
            }
        }
        if next.ends_wqe && !again {
            self.r.last_msg_at = Some(now);
        }
        self.advance_cursor(after, next, first, npkts);
        if std::mem::take(&mut self.r.one_shot) {
            let high = self.r.high_psn;
            self.seek(high);
        }
        (total, sent)
    }

    /// Whether a WQE of operation `op` goes as a train of WRITE ONLYs (`WRITE_TRAINS`).
    fn trains(&self, op: WrOpcode) -> bool {
        WRITE_TRAINS && op == WrOpcode::RdmaWrite && self.q.qp_type == QpType::Rc
    }

    /// Whether the window is full: nothing new is sent until an ACK. Under selective
    /// repeat, what is sent again (behind the highest PSN sent) replaces what was lost and
    /// is not held back.
    fn window_full(&self) -> bool {
        let resend = self.f.selective() && self.r.resending();
        !resend && self.f.window_full(self.r.next_psn)
    }

    /// Whether the packet before `after` asks for an ACK by the cadence: every
    /// `ACK_REQ_EVERY` packets (up to four times fewer on a quiet QP), when it fills
    /// the window, and when it is the last of the QP's turn while others wait. Without
    /// the last, a turn (60 packets) ended short of the cadence's ask, and the QP heard
    /// nothing while 7 others took theirs: longer than its probe timeout, which sent its
    /// packets again; 8 QPs streaming on a simulated 10 Gbit/s link sent 6,520 of their
    /// 8,192 packets twice (`host_window.rs`).
    fn cadence_asks(&self, after: Psn) -> bool {
        self.cadence_asks_in_run(after, self.r.since_ack_req, self.r.asks, 0)
    }

    /// [`Self::cadence_asks`] for the packet `k` of a run (`next_middles`): `since` and
    /// `asks` as they will stand then, `k` packets not yet in the scoreboard.
    fn cadence_asks_in_run(&self, after: Psn, since: u32, asks: u64, k: u32) -> bool {
        let every = if self.quiet_at(asks) {
            let most = QUIET_ASK_BYTES / self.q.mtu.bytes() as u32;
            most.clamp(ACK_REQ_EVERY, ACK_REQ_EVERY * QUIET_CADENCE)
        } else {
            ACK_REQ_EVERY
        };
        since + 1 >= every || self.f.fills_window(after, k) || self.r.turn == Some(k + 1)
    }

    /// Whether nothing was lost lately: no packet went again in the last `QUIET_AFTER`
    /// built, and none is known lost. A quiet QP asks for fewer ACKs, by the cadence and at
    /// the end of messages (`acked_at_end`): each ACK is a datagram that both ends pay a
    /// system call for, and the responder does not wait for an ask to report a gap. Once
    /// something is lost, the ACKs come at the usual pace again, for the repair.
    fn quiet(&self) -> bool {
        self.quiet_at(self.r.asks)
    }

    /// [`Self::quiet`] once `asks` packets have been built.
    fn quiet_at(&self, asks: u64) -> bool {
        asks - self.r.resent_at >= QUIET_AFTER && !self.f.has_lost()
    }

    /// Moves the requester's cursor past the packet `next` just built, of the WQE whose
    /// PSNs are the `npkts` from `first`.
    fn advance_cursor(&mut self, after: Psn, next: &NextPacket, first: Psn, npkts: u32) {
        let r = &mut *self.r;
        r.next_psn = after;
        if r.high_psn.before(after) {
            r.high_psn = after;
        }
        r.since_ack_req = if next.ack_req { 0 } else { r.since_ack_req + 1 };
        r.ask_owed &= !next.ack_req;
        if next.ends_wqe {
            r.unasked_msgs = if next.ack_req { 0 } else { r.unasked_msgs + 1 };
            r.idx += 1;
            r.off = 0;
            // Past the end of a READ asked for again in part.
            r.next_psn = first.add(npkts);
        } else {
            r.off += next.payload as u64;
        }
    }

    /// A READ request for `w` from byte `off` (its first response still missing) up to the
    /// first response that already arrived. A READ is asked for again one piece at a time,
    /// lowest first: rxe replays a piece of a READ only at or above the last piece it
    /// replayed (it moves the start it checks against), so a lower piece asked for after a
    /// higher one would never be answered.
    fn read_request(&self, w: &SendWqe, off: u64) -> NextPacket {
        let mtu = self.q.mtu.bytes() as u64;
        let i = (off / mtu) as u32;
        let until = w.arrived.next_arrived(i + 1).filter(|&a| a < w.npkts);
        let end = until.map_or(w.len, |a| u64::from(a) * mtu);
        let ext = ExtHeaders {
            reth: Some(reth_for(&w.wr, off, (end - off) as usize)),
            ..ExtHeaders::default()
        };
        NextPacket {
            opcode: Opcode::RC_RDMA_READ_REQUEST,
            ext,
            payload: 0,
            psns: packets_for(end - off, self.q.mtu),
            ends_wqe: true,
            ack_req: true,
        }
    }

    /// Whether the message of the WQE at `idx`, ending `now`, asks for an ACK with its last
    /// packet. A READ or atomic always does (its response is the answer), and so does a
    /// SEND or WRITE that is signaled (its completion waits for the ACK), one of a stream
    /// (less than half a round trip after the message before it) once in a quarter of the
    /// WQEs outstanding (its ACKs free the send queue's slots: asking at every message cost
    /// 8 B WRITE's message rate 1/1.17 at perftest's depth of 128, and 4 KiB WRITE's
    /// bandwidth 1/1.21; asking once in 8 at a depth of 16 cost 0.79x), and one in 16
    /// whatever its flags. The others do not: in a ping-pong each message leaves a round
    /// trip after the last, and its ACK was a second datagram each way per message (1.5x
    /// the half round trip here); a later ACK covers it. A tail left unacknowledged is
    /// asked again by the tail-loss probe, whose resent packet asks.
    ///
    /// On a quiet QP a signaled SEND or WRITE with another WQE queued behind it that will
    /// send does not ask either: the ACK that a later message asks for covers it. The next
    /// message to end then asks unless it is covered in turn, so the last of a run of
    /// signaled WRs always does. A 64 KiB WRITE stream (every WR signaled, as perftest
    /// posts them) then asks once in four messages, by the cadence.
    fn acked_at_end(&self, idx: usize, now: Nanos) -> bool {
        let w = &self.sq[idx];
        let streaming = match (self.r.last_msg_at, self.f.srtt) {
            (Some(at), Some(srtt)) => now.saturating_sub(at) < srtt / 2,
            _ => true,
        };
        w.wr.opcode.is_read_or_atomic()
            || (self.waits_for_ack(idx) || self.r.ask_owed) && !self.covered(idx)
            || streaming && self.r.unasked_msgs + 1 >= self.stream_asks_every()
            || self.r.unasked_msgs + 1 >= UNASKED_MSGS
    }

    /// Whether the completion of the WQE at `idx` waits for an ACK.
    fn waits_for_ack(&self, idx: usize) -> bool {
        let w = &self.sq[idx];
        w.wr.opcode.is_read_or_atomic()
            || self.sq.sig_all()
            || w.wr.flags.contains(crate::SendFlags::SIGNALED)
    }

    /// Whether the ACK of the WQE at `idx` can be left to a later message: the QP is quiet
    /// and the WQE queued behind it will send (a bind or a local invalidate sends nothing).
    fn covered(&self, idx: usize) -> bool {
        let sends = |i: usize| {
            i < self.sq.len()
                && !matches!(self.sq[i].wr.opcode, WrOpcode::BindMw | WrOpcode::LocalInv)
        };
        self.quiet() && sends(idx + 1)
    }

    /// How many messages of a stream end per one that asks for an ACK: a quarter of the
    /// WQEs outstanding, so the ACKs free the send queue's slots at a pace its depth can
    /// wait for.
    fn stream_asks_every(&self) -> u32 {
        (self.sq.len() as u32 / STREAM_ASK_SHARE).max(1)
    }

    /// The packet of a SEND or WRITE that starts at byte `off` of `w`.
    fn send_write_packet(&self, w: &SendWqe, off: u64) -> NextPacket {
        let (wr, op) = (&w.wr, w.wr.opcode);
        let n = (self.q.mtu.bytes() as u64).min(w.len - off);
        let train = self.trains(op);
        // A train's every packet is a message of its own (an ONLY); `last` stays the WQE's.
        let (first, last) = (off == 0 || train, off + n == w.len);
        let mut ext = ExtHeaders::default();
        if train {
            ext.reth = Some(reth_for(wr, off, n as usize));
        } else if first && matches!(op, WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm) {
            ext.reth = Some(reth_for(wr, 0, w.len as usize));
        }
        if last && matches!(op, WrOpcode::SendWithImm | WrOpcode::RdmaWriteWithImm) {
            ext.immdt = Some(wr.imm);
        }
        if last && op == WrOpcode::SendWithInv {
            ext.ieth = Some(wr.invalidate_rkey);
        }
        if let (QpType::Ud, Some(ud)) = (self.q.qp_type, wr.ud) {
            // Bit 31 of the WR's Q_Key: use the QP's own.
            let qkey = if ud.remote_qkey & 0x8000_0000 != 0 {
                self.q.qkey
            } else {
                ud.remote_qkey
            };
            ext.deth = Some(DethRepr {
                qkey,
                src_qpn: self.q.qpn,
            });
        }
        NextPacket {
            opcode: send_write_opcode(self.q.qp_type, op, first, last || train),
            ext,
            payload: n as usize,
            psns: 1,
            ends_wqe: last,
            ack_req: last && self.q.qp_type == QpType::Rc,
        }
    }

    /// Go-back-N: the next packet sent will be the one with PSN `from` (or, if that PSN
    /// belonged to a WQE already completed, the first outstanding one after it); a repair
    /// pass under way ends.
    fn rewind(&mut self, from: Psn) {
        self.r.repair = None;
        self.r.one_shot = false;
        self.seek(from);
    }

    /// Puts the cursor on PSN `from` (see `rewind`), stepping over READ and atomic
    /// responses that already arrived.
    fn seek(&mut self, from: Psn) {
        // Never before what the peer already acknowledged.
        let una = self.f.una;
        let from = if from.before(una) { una } else { from };
        let found = self
            .sq
            .iter()
            .position(|w| w.started && !w.last_psn().before(from));
        match found {
            Some(i) => {
                let w = &self.sq[i];
                let from = if w.holds(from) { from } else { w.first_psn };
                // A READ goes on at its first response still missing (`next_request`
                // steps over one with none missing).
                let from = if w.wr.opcode == WrOpcode::RdmaRead {
                    let k = w.next_missing(w.first_psn.distance_to(from), una);
                    w.first_psn.add(k.min(w.npkts))
                } else {
                    from
                };
                self.put_cursor(i, from);
            }
            None => {
                // Nothing sent at or after `from`: continue with the first unsent WQE.
                let r = &mut *self.r;
                r.idx = self
                    .sq
                    .iter()
                    .position(|w| !w.started)
                    .unwrap_or(self.sq.len());
                r.off = 0;
                r.next_psn = r.high_psn;
            }
        }
        self.r.since_ack_req = 0;
    }

    /// Does what the completer asks.
    pub(crate) fn apply(&mut self, cmd: ReqCmd) {
        match cmd {
            ReqCmd::Rewind(from) => self.rewind(from),
            ReqCmd::SeekPast(una) => {
                if self.r.next_psn.before(una) {
                    if std::mem::take(&mut self.r.one_shot) {
                        // The packet a one-packet probe waited to send (the window was
                        // full) is acknowledged: the probe is answered. Sending the packet
                        // now at the cursor instead asked a READ that was answering again.
                        let high = self.r.high_psn;
                        self.seek(high);
                    } else {
                        // An ACK for packets we are about to resend: skip them.
                        self.seek(una);
                    }
                }
            }
            ReqCmd::Repair { through, end } => self.repair(through, end),
            ReqCmd::ProbeOldest => {
                let una = self.f.una;
                self.rewind(una);
                self.r.one_shot = true;
            }
            ReqCmd::Probe { beyond_gap } => {
                // The last packet sent, again (it asks for an ACK): the ACK says how far
                // the peer got, or the NAK where a gap begins. From `una` if a resend is
                // already under way, or the responder holds packets beyond a gap.
                let from = if self.r.resending() || beyond_gap {
                    self.f.una
                } else {
                    self.r.high_psn.sub(1)
                };
                self.rewind(from);
            }
        }
    }
}

/// The room a run leaves after each packet: a secure QP's trailer, so that each is sealed
/// where it was built (`Engine::poll_transmit_many`).
pub(crate) fn run_gap(sealed: bool) -> usize {
    if sealed {
        crate::secure::TRAILER
    } else {
        0
    }
}
