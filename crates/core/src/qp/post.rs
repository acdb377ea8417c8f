//! The posting side of a QP, shared with application threads. A work request is checked
//! and queued here without the engine, as a verbs library writes WQEs into a NIC's rings;
//! a doorbell then tells the engine which QP has new send work. So threads posting on
//! different QPs share nothing, and none of them waits for the engine.

use crate::attr::QpCap;
use crate::error::{Result, VerbsError};
use crate::limits::MAX_MESSAGE;
use crate::verbs::{QpState, QpType, WrOpcode};
use crate::wr::{RecvWr, SendData, SendWr};
use crossbeam_queue::{ArrayQueue, SegQueue};
use std::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};

/// The QPs with send work posted since the engine last looked, each once per ring.
#[derive(Debug, Default)]
pub struct Doorbells(SegQueue<u32>);

impl Doorbells {
    /// The next QP that rang.
    pub(crate) fn pop(&self) -> Option<u32> {
        // Two loads answer the common case, where nothing rang; `pop` on an empty queue
        // costs a full fence.
        if self.0.is_empty() {
            return None;
        }
        self.0.pop()
    }
}

/// A queue of work requests with a fixed depth: posting threads push, the engine takes.
/// A slot stays used from the post until the engine retires the WR (completed, or
/// discarded by a reset), so the depth bounds everything outstanding, as on a NIC.
///
/// The ring's memory is allocated at the first post, for the whole depth, and reused: an
/// unbounded queue (`SegQueue`) allocated and zeroed a block every 31 WRs (about 3,300
/// instructions a block, a WR's worth of memory written for each). A QP that never posts
/// (one of 10,000 idle ones) still costs nothing.
#[derive(Debug)]
pub(crate) struct Ring<T> {
    /// Boxed: a queue's head and tail sit on cache lines of their own, 384 bytes that an
    /// idle QP should not carry.
    queue: OnceLock<Box<ArrayQueue<T>>>,
    depth: u32,
    free: AtomicU32,
}

impl<T> Ring<T> {
    fn new(depth: u32) -> Self {
        Ring {
            queue: OnceLock::new(),
            depth,
            free: AtomicU32::new(depth),
        }
    }

    /// Queues `v` if a slot is free.
    fn push(&self, v: T) -> bool {
        let reserved = self.reserve(1);
        if reserved {
            self.put(v);
        }
        reserved
    }

    /// Queues the `n` items of `v` if `n` slots are free, and nothing otherwise.
    fn push_all(&self, v: impl IntoIterator<Item = T>, n: u32) -> bool {
        let reserved = self.reserve(n);
        if reserved {
            v.into_iter().for_each(|x| self.put(x));
        }
        reserved
    }

    /// Takes `n` free slots, if there are.
    fn reserve(&self, n: u32) -> bool {
        self.free
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |f| f.checked_sub(n))
            .is_ok()
    }

    /// Queues `v` into a slot reserved for it.
    fn put(&self, v: T) {
        let queue = self
            .queue
            .get_or_init(|| Box::new(ArrayQueue::new(self.depth.max(1) as usize)));
        // Never full: a slot was reserved for each WR, and the queue holds `depth`.
        if queue.push(v).is_err() {
            unreachable!("a reserved slot is always free");
        }
    }

    /// The oldest WR posted and not yet taken (its slot stays used).
    pub fn take(&self) -> Option<T> {
        // An empty queue answers with two loads: `pop` finding it empty costs a fence.
        let queue = self.queue.get()?;
        if queue.is_empty() {
            return None;
        }
        queue.pop()
    }

    pub fn is_empty(&self) -> bool {
        self.queue.get().is_none_or(|q| q.is_empty())
    }

    /// Frees the slots of `n` WRs the engine is done with.
    pub fn retire(&self, n: usize) {
        self.free.fetch_add(n as u32, Ordering::AcqRel);
    }

    /// Discards every WR not yet taken (QP reset), freeing their slots.
    pub fn discard(&self) {
        let mut n = 0;
        while self.take().is_some() {
            n += 1;
        }
        self.retire(n);
    }
}

/// What posting needs of a QP, shared by the engine and every thread that posts on it.
#[derive(Debug)]
pub struct QpPost {
    qpn: u32,
    qp_type: QpType,
    cap: QpCap,
    on_srq: bool,
    /// UD: the largest message (one packet of the port's MTU).
    max_ud_message: u64,
    /// The QP's state and max_rd_atomic, kept current by the engine.
    state: AtomicU8,
    max_rd_atomic: AtomicU8,
    pub(crate) sq: Ring<SendWr>,
    pub(crate) rq: Ring<RecvWr>,
    /// The QP is on the doorbell list, or about to be.
    rung: AtomicBool,
    bells: Arc<Doorbells>,
    /// An iWARP QP: RDMAP's operations only (`iwarp_only`).
    iwarp: bool,
}

const STATES: [QpState; 7] = [
    QpState::Reset,
    QpState::Init,
    QpState::Rtr,
    QpState::Rts,
    QpState::Sqd,
    QpState::Sqe,
    QpState::Err,
];

impl QpPost {
    pub(crate) fn new(
        qpn: u32,
        qp_type: QpType,
        cap: QpCap,
        on_srq: bool,
        max_ud_message: u64,
        bells: Arc<Doorbells>,
    ) -> Self {
        QpPost {
            qpn,
            qp_type,
            cap,
            on_srq,
            max_ud_message,
            state: AtomicU8::new(QpState::Reset as u8),
            max_rd_atomic: AtomicU8::new(1),
            sq: Ring::new(cap.max_send_wr),
            rq: Ring::new(cap.max_recv_wr),
            rung: AtomicBool::new(false),
            bells,
            iwarp: false,
        }
    }

    /// The posting side of an iWARP QP: RDMAP's operations (WRITE, READ into one SGE,
    /// SEND, SEND with Invalidate) are taken, others refused when posted.
    pub(crate) fn iwarp_only(mut self) -> Self {
        self.iwarp = true;
        self
    }

    /// The capacities the QP was created with.
    pub fn cap(&self) -> QpCap {
        self.cap
    }

    /// The QP's number.
    pub fn qpn(&self) -> u32 {
        self.qpn
    }

    /// The QP's state, as the engine last set it.
    pub fn state(&self) -> QpState {
        STATES[usize::from(self.state.load(Ordering::SeqCst))]
    }

    /// `ibv_post_send` of one WR: checked, queued, and the doorbell rung. Errors are
    /// synchronous and queue nothing. A WR that cannot be executed for a reason found later
    /// (a bad lkey, a vanished address handle) completes with an error status.
    pub fn post_send(&self, wr: SendWr) -> Result<()> {
        self.check_sendable()?;
        self.check_send(&wr)?;
        if !self.sq.push(wr) {
            return Err(VerbsError::Exhausted("send queue is full"));
        }
        self.ring();
        Ok(())
    }

    /// The extended send API's `ibv_wr_complete`: every WR of `wrs` checked and queued,
    /// in order, or (on the first error) none of them.
    pub fn post_send_batch(&self, wrs: Vec<SendWr>) -> Result<()> {
        self.check_sendable()?;
        for wr in &wrs {
            self.check_send(wr)?;
        }
        let n = u32::try_from(wrs.len()).unwrap_or(u32::MAX);
        if !self.sq.push_all(wrs, n) {
            return Err(VerbsError::Exhausted("send queue is full"));
        }
        if n > 0 {
            self.ring();
        }
        Ok(())
    }

    /// Posting sends needs RTS (or a later state that flushes).
    fn check_sendable(&self) -> Result<()> {
        let state = self.state();
        if matches!(state, QpState::Reset | QpState::Init | QpState::Rtr) {
            return Err(VerbsError::BadState {
                qpn: self.qpn,
                state,
                what: "post_send needs RTS",
            });
        }
        Ok(())
    }

    /// `ibv_post_recv` of one WR. The responder takes it from the queue when a message
    /// needs it; in ERR the engine is rung to flush it.
    pub fn post_recv(&self, wr: RecvWr) -> Result<()> {
        let state = self.state();
        if state == QpState::Reset {
            return Err(VerbsError::BadState {
                qpn: self.qpn,
                state,
                what: "post_recv needs INIT or later",
            });
        }
        if self.on_srq {
            return Err(VerbsError::InvalidArgument(
                "this QP receives from an SRQ: post there",
            ));
        }
        if wr.sges.len() > self.cap.max_recv_sge as usize {
            return Err(VerbsError::InvalidArgument("more SGEs than max_recv_sge"));
        }
        if !self.rq.push(wr) {
            return Err(VerbsError::Exhausted("receive queue is full"));
        }
        // Either the engine's flush on entering ERR sees this WR, or we see ERR here.
        fence(Ordering::SeqCst);
        if self.state() == QpState::Err {
            self.ring();
        }
        Ok(())
    }

    /// The argument checks of `ibv_post_send` that need nothing but the QP.
    fn check_send(&self, wr: &SendWr) -> Result<()> {
        let op = wr.opcode;
        match &wr.data {
            SendData::Sges(s) if s.len() > self.cap.max_send_sge as usize => {
                return Err(VerbsError::InvalidArgument("more SGEs than max_send_sge"));
            }
            SendData::Inline(d) if d.len() > self.cap.max_inline_data as usize => {
                return Err(VerbsError::InvalidArgument(
                    "inline data longer than max_inline_data",
                ));
            }
            SendData::Inline(_) if op.is_read_or_atomic() => {
                return Err(VerbsError::InvalidArgument(
                    "READ and atomics cannot be inline",
                ));
            }
            _ => {}
        }
        let len = wr.length();
        if op.is_atomic() && len != 8 {
            return Err(VerbsError::InvalidArgument(
                "atomics need 8 bytes of local memory",
            ));
        }
        if op.is_read_or_atomic() && self.max_rd_atomic.load(Ordering::Acquire) == 0 {
            return Err(VerbsError::InvalidArgument(
                "READ/atomic on a QP with max_rd_atomic 0",
            ));
        }
        if len > MAX_MESSAGE {
            return Err(VerbsError::InvalidArgument(
                "message longer than 2^31 bytes",
            ));
        }
        if op == WrOpcode::BindMw && wr.bind.is_none() {
            return Err(VerbsError::InvalidArgument("BIND_MW without a binding"));
        }
        if self.iwarp {
            if !matches!(
                op,
                WrOpcode::RdmaWrite | WrOpcode::RdmaRead | WrOpcode::Send | WrOpcode::SendWithInv
            ) {
                return Err(VerbsError::InvalidArgument(
                    "iWARP (RDMAP) has no atomics, immediate data, or memory-window work \
                     requests",
                ));
            }
            let parts = match &wr.data {
                SendData::Sges(s) => s.iter().filter(|s| s.length > 0).count(),
                SendData::Inline(_) => 0,
            };
            if op == WrOpcode::RdmaRead && parts > 1 {
                return Err(VerbsError::InvalidArgument(
                    "an iWARP READ's sink is one SGE (its STag names one buffer)",
                ));
            }
        }
        let allowed = match self.qp_type {
            QpType::Rc => true,
            QpType::Uc => !op.is_read_or_atomic() && op != WrOpcode::SendWithInv,
            QpType::Ud => matches!(op, WrOpcode::Send | WrOpcode::SendWithImm),
        };
        if !allowed {
            return Err(VerbsError::InvalidArgument(
                "opcode not supported on this QP type",
            ));
        }
        if self.qp_type == QpType::Ud {
            let ud = wr.ud.ok_or(VerbsError::InvalidArgument(
                "a UD send needs a destination (address handle, QPN, Q_Key)",
            ))?;
            if ud.remote_qpn >= 1 << 24 {
                return Err(VerbsError::InvalidArgument("remote QPN is 24-bit"));
            }
            if len > self.max_ud_message {
                return Err(VerbsError::InvalidArgument(
                    "UD messages fit in one packet: at most the port's MTU",
                ));
            }
        }
        Ok(())
    }

    /// Puts the QP on the doorbell list unless it is there already.
    fn ring(&self) {
        if !self.rung.swap(true, Ordering::AcqRel) {
            self.bells.0.push(self.qpn);
        }
    }

    /// The engine answers the doorbell: WRs posted before this are visible to it now, and
    /// a later post rings again.
    pub(crate) fn answer(&self) {
        self.rung.swap(false, Ordering::AcqRel);
    }

    /// The engine changed the QP's state (a post that raced with ERR then rings: see
    /// `post_recv`).
    pub(crate) fn set_state(&self, s: QpState) {
        self.state.store(s as u8, Ordering::SeqCst);
        fence(Ordering::SeqCst);
    }

    pub(crate) fn set_max_rd_atomic(&self, n: u8) {
        self.max_rd_atomic.store(n, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ring_holds_its_depth_until_slots_are_retired() {
        let r = Ring::new(2);
        assert!(r.push(1) && r.push(2));
        assert!(!r.push(3), "a third WR in a queue of two");
        assert_eq!(r.take(), Some(1));
        assert!(!r.push(3), "taken is not retired: the slot is still in use");
        r.retire(1);
        assert!(r.push(3));
        r.discard();
        assert!(r.is_empty());
        assert!(
            r.push(4) && r.push(5) && !r.push(6),
            "discard frees exactly its slots"
        );
    }

    #[test]
    fn a_qp_rings_once_until_the_engine_answers() {
        let bells = Arc::new(Doorbells::default());
        let p = QpPost::new(7, QpType::Rc, QpCap::default(), false, 4096, bells.clone());
        p.set_state(QpState::Rts);
        let wr = || SendWr::new(1, WrOpcode::RdmaWrite, SendData::Inline(vec![1].into()));
        p.post_send(wr()).unwrap();
        p.post_send(wr()).unwrap();
        assert_eq!((bells.pop(), bells.pop()), (Some(7), None));
        p.answer();
        p.post_send(wr()).unwrap();
        assert_eq!(bells.pop(), Some(7));
    }

    #[test]
    fn a_batch_is_posted_whole_or_not_at_all() {
        let bells = Arc::new(Doorbells::default());
        let cap = QpCap {
            max_send_wr: 3,
            max_inline_data: 4,
            ..QpCap::default()
        };
        let p = QpPost::new(7, QpType::Rc, cap, false, 4096, bells.clone());
        let wr = |id, n| SendWr::new(id, WrOpcode::RdmaWrite, SendData::Inline(vec![0; n].into()));
        assert!(
            p.post_send_batch(vec![wr(1, 1)]).is_err(),
            "RESET cannot send"
        );
        p.set_state(QpState::Rts);
        // The second WR's inline data is over the limit: the first is not queued either.
        assert!(p.post_send_batch(vec![wr(1, 1), wr(2, 5)]).is_err());
        // Four WRs in a queue of three: none queued.
        let four = (1..=4).map(|i| wr(i, 1)).collect();
        assert!(matches!(
            p.post_send_batch(four),
            Err(VerbsError::Exhausted(_))
        ));
        assert!(p.sq.is_empty() && bells.pop().is_none());
        p.post_send_batch(vec![wr(1, 1), wr(2, 1), wr(3, 1)])
            .unwrap();
        let ids: Vec<u64> = std::iter::from_fn(|| p.sq.take())
            .map(|w| w.wr_id)
            .collect();
        assert_eq!((ids, bells.pop()), (vec![1, 2, 3], Some(7)));
    }
}
