//! One engine per device: owns the verbs objects and drives every QP. Sans-IO: packets and
//! time come in through `handle_packet` / `handle_timeout`, packets go out through
//! `poll_transmit`, and `poll_timeout` says when to call back.

use crate::attr::{validate, AddressVector, AttrLimits, QpAttr, QpInitAttr};
use crate::cq::{Cq, CqRing};
use crate::drops::{RxDrop, RxDrops};
use crate::error::{Result, VerbsError};
use crate::gid::{rc_udp_sport, Gid};
use crate::keys::MrTable;
use crate::memory::SharedBuffer;
use crate::mr::MemoryRegion;
use crate::mw::Mw;
use crate::qp::{Ctx, Qp, SendWqe};
use crate::requester::MAX_MESSAGE;
use crate::srq::{Srq, SrqAttr};
use crate::timers::TimerQueue;
use crate::verbs::{Access, AsyncEvent, Mtu, MwType, QpState, QpType, WrOpcode};
use crate::wr::{MwBind, RecvWr, SendData, SendWr, WorkCompletion};
use crate::Nanos;
use oxrdma_wire::{Operation, PacketRepr, Psn, Transport};
use rand_chacha::ChaCha20Rng;
use rand_core::{RngCore, SeedableRng};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

/// The largest packet the engine writes: headers, a 4096-byte payload, pad and ICRC.
pub const MAX_PACKET: usize = 4096 + 64;

/// Device limits (`struct ibv_device_attr`, the fields oxrdma enforces).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceAttr {
    pub max_qp: u32,
    pub max_qp_wr: u32,
    pub max_sge: u32,
    pub max_cq: u32,
    pub max_cqe: u32,
    pub max_mr: u32,
    pub max_mr_size: u64,
    pub max_pd: u32,
    pub max_qp_rd_atom: u8,
    pub max_inline_data: u32,
    /// Atomics are atomic with respect to the host's CPUs too (they are CPU atomics).
    pub atomic_cap: AtomicCap,
    pub max_mw: u32,
    pub max_srq: u32,
    pub max_srq_wr: u32,
    pub max_srq_sge: u32,
    pub max_ah: u32,
}

impl Default for DeviceAttr {
    fn default() -> Self {
        DeviceAttr {
            max_qp: 16_384,
            max_qp_wr: 16_384,
            max_sge: 32,
            max_cq: 16_384,
            max_cqe: 1 << 20,
            max_mr: 1 << 16,
            max_mr_size: 1 << 40,
            max_pd: 1 << 16,
            // As rxe (and so what perftest asks for).
            max_qp_rd_atom: 128,
            max_inline_data: 256,
            atomic_cap: AtomicCap::Glob,
            max_mw: 1 << 16,
            max_srq: 1 << 16,
            max_srq_wr: 16_384,
            max_srq_sge: 27,
            max_ah: 1 << 16,
        }
    }
}

/// `enum ibv_atomic_cap`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum AtomicCap {
    None = 0,
    Hca = 1,
    Glob = 2,
}

/// What identifies a device on the network.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineConfig {
    /// The device's GID (its IP address).
    pub gid: Gid,
    /// The largest path MTU the port supports.
    pub max_mtu: Mtu,
    pub attr: DeviceAttr,
}

/// A packet `poll_transmit` wrote: `len` bytes at the start of the caller's buffer, to go to
/// `dest` from UDP source port `src_port` (destination port 4791). The last 4 bytes are
/// the ICRC, left zero for the driver to fill in once it knows the IP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmit {
    pub dest: Gid,
    pub src_port: u16,
    pub len: usize,
}

/// Counters of what the engine did with received packets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    pub rx_packets: u64,
    /// Received packets not acted on, by reason.
    pub rx_drops: RxDrops,
    pub tx_packets: u64,
}

/// The sans-IO RDMA engine of one device.
#[derive(Debug)]
pub struct Engine {
    config: EngineConfig,
    rng: ChaCha20Rng,
    pds: BTreeSet<u32>,
    next_pd: u32,
    cqs: BTreeMap<u32, Cq>,
    next_cq: u32,
    mrs: MrTable,
    qps: BTreeMap<u32, Qp>,
    srqs: BTreeMap<u32, Srq>,
    next_srq: u32,
    /// Address handles: their PD and destination.
    ahs: BTreeMap<u32, (u32, AddressVector)>,
    next_ah: u32,
    /// QPs that may have something to send, in round-robin order.
    active: VecDeque<u32>,
    /// Every QP's next deadline.
    timers: TimerQueue,
    events: VecDeque<AsyncEvent>,
    stats: Stats,
}

/// The context a QP works in, borrowed field by field from the engine (so a QP borrowed
/// from `self.qps` can use it).
macro_rules! ctx {
    ($e:ident, $now:expr) => {
        Ctx {
            now: $now,
            mrs: &mut $e.mrs,
            cqs: &mut $e.cqs,
            srqs: &mut $e.srqs,
            events: &mut $e.events,
            drops: &mut $e.stats.rx_drops,
        }
    };
}

/// After an event on `qp`: queue it to transmit, and move it in the timer queue if its next
/// deadline changed.
fn touched(active: &mut VecDeque<u32>, timers: &mut TimerQueue, qp: &mut Qp) {
    schedule(active, qp);
    rearm(timers, qp);
}

fn rearm(timers: &mut TimerQueue, qp: &mut Qp) {
    let next = qp.next_deadline();
    timers.requeue(qp.qpn, qp.queued_deadline, next);
    qp.queued_deadline = next;
}

fn schedule(active: &mut VecDeque<u32>, qp: &mut Qp) {
    if !qp.scheduled {
        qp.scheduled = true;
        active.push_back(qp.qpn);
    }
}

impl Engine {
    /// A new engine. `seed` feeds the CSPRNG that draws keys, QPNs and PSNs: take it from the
    /// OS in production, from the test's seed in simulation.
    pub fn new(config: EngineConfig, seed: [u8; 32]) -> Engine {
        Engine {
            config,
            rng: ChaCha20Rng::from_seed(seed),
            pds: BTreeSet::new(),
            next_pd: 1,
            cqs: BTreeMap::new(),
            next_cq: 1,
            mrs: MrTable::default(),
            qps: BTreeMap::new(),
            ahs: BTreeMap::new(),
            next_ah: 1,
            srqs: BTreeMap::new(),
            next_srq: 1,
            active: VecDeque::new(),
            timers: TimerQueue::default(),
            events: VecDeque::new(),
            stats: Stats::default(),
        }
    }

    pub fn config(&self) -> &EngineConfig {
        &self.config
    }
    pub fn gid(&self) -> Gid {
        self.config.gid
    }
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// A random 24-bit PSN, for a QP's initial send PSN.
    pub fn random_psn(&mut self) -> u32 {
        self.rng.next_u32() & 0xff_ffff
    }

    pub fn alloc_pd(&mut self) -> Result<u32> {
        if self.pds.len() >= self.config.attr.max_pd as usize {
            return Err(VerbsError::Exhausted("protection domains"));
        }
        let pd = self.next_pd;
        self.next_pd += 1;
        self.pds.insert(pd);
        Ok(pd)
    }

    pub fn dealloc_pd(&mut self, pd: u32) -> Result<()> {
        if !self.pds.contains(&pd) {
            return Err(VerbsError::NotFound("protection domain"));
        }
        if self.mrs.count_in_pd(pd) > 0 || self.qps.values().any(|q| q.pd == pd) {
            return Err(VerbsError::Busy(
                "protection domain still has memory regions or QPs",
            ));
        }
        self.pds.remove(&pd);
        Ok(())
    }

    /// A random key not in use as an lkey or rkey.
    fn fresh_key(&mut self) -> u32 {
        loop {
            let k = self.rng.next_u32();
            if k != 0 && !self.mrs.key_taken(k) {
                return k;
            }
        }
    }

    /// Registers `buffer` in `pd`. Peers address it from `iova` (default: its address).
    pub fn reg_mr(
        &mut self,
        pd: u32,
        buffer: Arc<SharedBuffer>,
        iova: Option<u64>,
        access: Access,
    ) -> Result<MemoryRegion> {
        if !self.pds.contains(&pd) {
            return Err(VerbsError::NotFound("protection domain"));
        }
        if !Access::ALL.contains(access) {
            return Err(VerbsError::InvalidArgument("unknown access flags"));
        }
        let remote_modify = Access::REMOTE_WRITE.union(Access::REMOTE_ATOMIC);
        if access.0 & remote_modify.0 != 0 && !access.contains(Access::LOCAL_WRITE) {
            return Err(VerbsError::InvalidArgument(
                "REMOTE_WRITE and REMOTE_ATOMIC need LOCAL_WRITE",
            ));
        }
        if buffer.len() as u64 > self.config.attr.max_mr_size {
            return Err(VerbsError::InvalidArgument(
                "memory region larger than max_mr_size",
            ));
        }
        let iova = iova.unwrap_or(buffer.addr());
        if iova.checked_add(buffer.len() as u64).is_none() {
            return Err(VerbsError::InvalidArgument("iova + length overflows"));
        }
        if self.mrs.count_all() >= self.config.attr.max_mr as usize {
            return Err(VerbsError::Exhausted("memory regions"));
        }
        let lkey = self.fresh_key();
        let rkey = loop {
            let k = self.fresh_key();
            if k != lkey {
                break k;
            }
        };
        let mr = MemoryRegion {
            pd,
            buffer,
            iova,
            access,
            lkey,
            rkey,
        };
        self.mrs.insert(mr.clone());
        Ok(mr)
    }

    pub fn dereg_mr(&mut self, lkey: u32) -> Result<()> {
        if self.mrs.windows_on(lkey) > 0 {
            return Err(VerbsError::Busy("memory windows are bound to the region"));
        }
        self.mrs
            .remove(lkey)
            .map(|_| ())
            .ok_or(VerbsError::NotFound("memory region"))
    }

    pub fn create_cq(&mut self, depth: u32) -> Result<u32> {
        if depth == 0 || depth > self.config.attr.max_cqe {
            return Err(VerbsError::InvalidArgument("CQ depth must be 1..=max_cqe"));
        }
        if self.cqs.len() >= self.config.attr.max_cq as usize {
            return Err(VerbsError::Exhausted("completion queues"));
        }
        let id = self.next_cq;
        self.next_cq += 1;
        self.cqs.insert(id, Cq::new(depth as usize));
        Ok(id)
    }

    pub fn destroy_cq(&mut self, cq: u32) -> Result<()> {
        if !self.cqs.contains_key(&cq) {
            return Err(VerbsError::NotFound("completion queue"));
        }
        if self
            .qps
            .values()
            .any(|q| q.send_cq == cq || q.recv_cq == cq)
        {
            return Err(VerbsError::Busy("completion queue is used by a QP"));
        }
        self.cqs.remove(&cq);
        Ok(())
    }

    /// Takes up to `max` completions from `cq`, oldest first.
    pub fn poll_cq(&mut self, cq: u32, max: usize) -> Result<Vec<WorkCompletion>> {
        let q = self
            .cqs
            .get_mut(&cq)
            .ok_or(VerbsError::NotFound("completion queue"))?;
        Ok(q.take(max))
    }

    /// Completions waiting in `cq`.
    pub fn cq_len(&self, cq: u32) -> usize {
        self.cqs.get(&cq).map_or(0, Cq::len)
    }

    /// The lock-free ring of `cq`, for pollers on other threads. Completions beyond the
    /// depth reach it as pollers make room and the engine runs (`poll_cq` or any event).
    pub fn cq_ring(&self, cq: u32) -> Option<std::sync::Arc<CqRing>> {
        self.cqs.get(&cq).map(Cq::ring)
    }

    pub fn create_qp(&mut self, pd: u32, init: &QpInitAttr) -> Result<u32> {
        let lim = self.config.attr;
        if !self.pds.contains(&pd) {
            return Err(VerbsError::NotFound("protection domain"));
        }
        if !self.cqs.contains_key(&init.send_cq) || !self.cqs.contains_key(&init.recv_cq) {
            return Err(VerbsError::NotFound("completion queue"));
        }
        let c = &init.cap;
        if c.max_send_wr > lim.max_qp_wr || c.max_recv_wr > lim.max_qp_wr {
            return Err(VerbsError::InvalidArgument(
                "max_send_wr/max_recv_wr above max_qp_wr",
            ));
        }
        if c.max_send_sge > lim.max_sge || c.max_recv_sge > lim.max_sge {
            return Err(VerbsError::InvalidArgument(
                "max_send_sge/max_recv_sge above max_sge",
            ));
        }
        if c.max_inline_data > lim.max_inline_data {
            return Err(VerbsError::InvalidArgument(
                "max_inline_data above the device limit",
            ));
        }
        if let Some(srq) = init.srq {
            let q = self
                .srqs
                .get(&srq)
                .ok_or(VerbsError::NotFound("shared receive queue"))?;
            if q.pd != pd {
                return Err(VerbsError::InvalidArgument(
                    "SRQ of another protection domain",
                ));
            }
            if init.qp_type == QpType::Uc {
                // As in rxe: SRQs serve RC and UD QPs.
                return Err(VerbsError::InvalidArgument("UC QPs cannot use an SRQ"));
            }
        }
        if self.qps.len() >= lim.max_qp as usize {
            return Err(VerbsError::Exhausted("queue pairs"));
        }
        let qpn = loop {
            // 24-bit, never 0 or 1 (QP0/QP1 are the management QPs).
            let q = self.rng.next_u32() & 0xff_ffff;
            if q > 1 && !self.qps.contains_key(&q) {
                break q;
            }
        };
        let mut qp = Qp::new(qpn, pd, init);
        if init.qp_type == QpType::Ud {
            // No path MTU for datagrams: a message is one packet of up to the port's MTU.
            qp.mtu = self.config.max_mtu;
        }
        self.qps.insert(qpn, qp);
        Ok(qpn)
    }

    /// `ibv_alloc_mw`: a window (unbound) in `pd`; returns its handle and initial rkey.
    pub fn alloc_mw(&mut self, pd: u32, mw_type: MwType) -> Result<(u32, u32)> {
        if !self.pds.contains(&pd) {
            return Err(VerbsError::NotFound("protection domain"));
        }
        if self.mrs.mw_count() >= self.config.attr.max_mw as usize {
            return Err(VerbsError::Exhausted("memory windows"));
        }
        let rkey = loop {
            // A random index (upper 24 bits); the key byte starts random too.
            let k = self.rng.next_u32();
            if k >> 8 != 0 && !self.mrs.mw_index_taken(k >> 8) && !self.mrs.key_taken(k) {
                break k;
            }
        };
        let mw = Mw {
            pd,
            mw_type,
            rkey,
            binding: None,
        };
        Ok((self.mrs.insert_mw(mw), rkey))
    }

    /// `ibv_dealloc_mw`: the window's rkey stops working at once.
    pub fn dealloc_mw(&mut self, mw: u32) -> Result<()> {
        self.mrs
            .remove_mw(mw)
            .map(|_| ())
            .ok_or(VerbsError::NotFound("memory window"))
    }

    /// The window's current rkey.
    pub fn mw_rkey(&self, mw: u32) -> Result<u32> {
        self.mrs
            .mw(mw)
            .map(|w| w.rkey)
            .ok_or(VerbsError::NotFound("memory window"))
    }

    /// `ibv_bind_mw` for a type 1 window: posts the bind on `qpn`'s send queue (it completes
    /// there, in order, with IBV_WC_BIND_MW when signaled).
    pub fn bind_mw(&mut self, qpn: u32, wr_id: u64, signaled: bool, bind: MwBind) -> Result<()> {
        match self.mrs.mw(bind.mw) {
            Some(w) if w.mw_type == MwType::Type1 => {}
            Some(_) => {
                return Err(VerbsError::InvalidArgument(
                    "type 2 windows are bound with a BIND_MW work request",
                ))
            }
            None => return Err(VerbsError::NotFound("memory window")),
        }
        let mut wr = SendWr::new(wr_id, WrOpcode::BindMw, SendData::Sges(Vec::new()));
        wr.flags = if signaled {
            crate::SendFlags::SIGNALED
        } else {
            crate::SendFlags::empty()
        };
        wr.bind = Some(bind);
        self.post_send(qpn, wr)
    }

    /// `ibv_create_srq`: `max_wr` receives of up to `max_sge` SGEs shared by the QPs created
    /// on it; `srq_limit` arms the limit event at once (0: not armed).
    pub fn create_srq(
        &mut self,
        pd: u32,
        max_wr: u32,
        max_sge: u32,
        srq_limit: u32,
    ) -> Result<u32> {
        let lim = self.config.attr;
        if !self.pds.contains(&pd) {
            return Err(VerbsError::NotFound("protection domain"));
        }
        if max_wr == 0 || max_wr > lim.max_srq_wr || max_sge > lim.max_srq_sge {
            return Err(VerbsError::InvalidArgument(
                "SRQ max_wr must be 1..=max_srq_wr and max_sge at most max_srq_sge",
            ));
        }
        if self.srqs.len() >= lim.max_srq as usize {
            return Err(VerbsError::Exhausted("shared receive queues"));
        }
        let mut srq = Srq {
            pd,
            max_wr,
            max_sge,
            limit: 0,
            queue: VecDeque::new(),
        };
        srq.arm(srq_limit)?;
        let id = self.next_srq;
        self.next_srq += 1;
        self.srqs.insert(id, srq);
        Ok(id)
    }

    /// `ibv_modify_srq` with IBV_SRQ_LIMIT: arms the limit event (0 disarms it).
    pub fn arm_srq(&mut self, srq: u32, limit: u32) -> Result<()> {
        self.srqs
            .get_mut(&srq)
            .ok_or(VerbsError::NotFound("shared receive queue"))?
            .arm(limit)
    }

    pub fn query_srq(&self, srq: u32) -> Result<SrqAttr> {
        let q = self
            .srqs
            .get(&srq)
            .ok_or(VerbsError::NotFound("shared receive queue"))?;
        Ok(SrqAttr {
            max_wr: q.max_wr,
            max_sge: q.max_sge,
            srq_limit: q.limit,
            posted: q.queue.len() as u32,
        })
    }

    /// `ibv_post_srq_recv` of one WR.
    pub fn post_srq_recv(&mut self, srq: u32, wr: RecvWr) -> Result<()> {
        self.srqs
            .get_mut(&srq)
            .ok_or(VerbsError::NotFound("shared receive queue"))?
            .post(wr)
    }

    pub fn destroy_srq(&mut self, srq: u32) -> Result<()> {
        if !self.srqs.contains_key(&srq) {
            return Err(VerbsError::NotFound("shared receive queue"));
        }
        if self.qps.values().any(|q| q.srq == Some(srq)) {
            return Err(VerbsError::Busy("shared receive queue is used by a QP"));
        }
        self.srqs.remove(&srq);
        Ok(())
    }

    /// `ibv_create_ah`: a destination for UD sends.
    pub fn create_ah(&mut self, pd: u32, av: AddressVector) -> Result<u32> {
        if !self.pds.contains(&pd) {
            return Err(VerbsError::NotFound("protection domain"));
        }
        if self.ahs.len() >= self.config.attr.max_ah as usize {
            return Err(VerbsError::Exhausted("address handles"));
        }
        let id = self.next_ah;
        self.next_ah += 1;
        self.ahs.insert(id, (pd, av));
        Ok(id)
    }

    pub fn destroy_ah(&mut self, ah: u32) -> Result<()> {
        self.ahs
            .remove(&ah)
            .map(|_| ())
            .ok_or(VerbsError::NotFound("address handle"))
    }

    pub fn destroy_qp(&mut self, qpn: u32) -> Result<()> {
        let qp = self
            .qps
            .remove(&qpn)
            .ok_or(VerbsError::NotFound("queue pair"))?;
        self.timers.requeue(qpn, qp.queued_deadline, None);
        Ok(())
    }

    pub fn qp_state(&self, qpn: u32) -> Result<QpState> {
        self.qps
            .get(&qpn)
            .map(|q| q.state)
            .ok_or(VerbsError::NotFound("queue pair"))
    }

    /// `ibv_modify_qp`: validates the attributes for the transition, then applies them.
    pub fn modify_qp(&mut self, qpn: u32, attr: &QpAttr) -> Result<()> {
        let lim = AttrLimits {
            max_rd_atomic: self.config.attr.max_qp_rd_atom,
            max_mtu: self.config.max_mtu,
        };
        let qp = self
            .qps
            .get_mut(&qpn)
            .ok_or(VerbsError::NotFound("queue pair"))?;
        let from = qp.state;
        let to = validate(qp.qp_type, from, attr, lim)?;
        if let Some(a) = attr.qp_access_flags {
            qp.access = a;
        }
        if let Some(k) = attr.qkey {
            qp.qkey = k;
        }
        if let Some(av) = attr.ah_attr {
            qp.av = Some(av);
        }
        if let Some(m) = attr.path_mtu {
            qp.mtu = m;
        }
        if let Some(t) = attr.timeout {
            qp.timeout = t;
        }
        if let Some(r) = attr.retry_cnt {
            qp.retry_cnt = r;
        }
        if let Some(r) = attr.rnr_retry {
            qp.rnr_retry = r;
        }
        if let Some(t) = attr.min_rnr_timer {
            qp.min_rnr_timer = t;
        }
        if let Some(n) = attr.max_rd_atomic {
            qp.max_rd_atomic = n;
        }
        if let Some(n) = attr.max_dest_rd_atomic {
            qp.max_dest_rd_atomic = n;
        }
        if let Some(d) = attr.dest_qp_num {
            qp.dest_qpn = d;
            qp.udp_sport = rc_udp_sport(qpn, d);
        }
        if let Some(p) = attr.rq_psn {
            qp.resp.epsn = Psn::new(p);
        }
        if let Some(p) = attr.sq_psn {
            let p = Psn::new(p);
            qp.req.next_psn = p;
            qp.req.high_psn = p;
            qp.req.una = p;
        }
        if to != QpState::Sqd {
            qp.drain_pending = false;
        }
        match to {
            QpState::Reset => qp.reset(),
            QpState::Err => {
                let mut ctx = ctx!(self, 0);
                qp.enter_error(&mut ctx, None);
            }
            QpState::Sqd if from == QpState::Rts => {
                qp.state = to;
                qp.drain_pending = true;
                let mut ctx = ctx!(self, 0);
                qp.check_drained(&mut ctx);
            }
            QpState::Rts if from == QpState::Rtr => {
                qp.req.retries_left = qp.retry_cnt;
                qp.req.rnr_retries_left = qp.rnr_retry;
                qp.state = to;
            }
            _ => qp.state = to,
        }
        touched(&mut self.active, &mut self.timers, qp);
        Ok(())
    }

    /// `ibv_post_send` of one WR. Errors are synchronous and leave the queue unchanged.
    pub fn post_send(&mut self, qpn: u32, wr: SendWr) -> Result<()> {
        let qp = self
            .qps
            .get_mut(&qpn)
            .ok_or(VerbsError::NotFound("queue pair"))?;
        if matches!(qp.state, QpState::Reset | QpState::Init | QpState::Rtr) {
            return Err(VerbsError::BadState {
                qpn,
                state: qp.state,
                what: "post_send needs RTS",
            });
        }
        if qp.sq.len() >= qp.cap.max_send_wr as usize {
            return Err(VerbsError::Exhausted("send queue is full"));
        }
        let op = wr.opcode;
        match &wr.data {
            SendData::Sges(s) if s.len() > qp.cap.max_send_sge as usize => {
                return Err(VerbsError::InvalidArgument("more SGEs than max_send_sge"));
            }
            SendData::Inline(d) if d.len() > qp.cap.max_inline_data as usize => {
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
        if op.is_read_or_atomic() && qp.max_rd_atomic == 0 {
            return Err(VerbsError::InvalidArgument(
                "READ/atomic on a QP with max_rd_atomic 0",
            ));
        }
        if len > MAX_MESSAGE {
            return Err(VerbsError::InvalidArgument(
                "message longer than 2^31 bytes",
            ));
        }
        let allowed = match qp.qp_type {
            QpType::Rc => true,
            QpType::Uc => !op.is_read_or_atomic() && op != WrOpcode::SendWithInv,
            QpType::Ud => matches!(op, WrOpcode::Send | WrOpcode::SendWithImm),
        };
        if op == WrOpcode::BindMw && wr.bind.is_none() {
            return Err(VerbsError::InvalidArgument("BIND_MW without a binding"));
        }
        if !allowed {
            return Err(VerbsError::InvalidArgument(
                "opcode not supported on this QP type",
            ));
        }
        let mut ud_dest = None;
        if qp.qp_type == QpType::Ud {
            let ud = wr.ud.ok_or(VerbsError::InvalidArgument(
                "a UD send needs a destination (address handle, QPN, Q_Key)",
            ))?;
            let &(ah_pd, av) = self
                .ahs
                .get(&ud.ah)
                .ok_or(VerbsError::NotFound("address handle"))?;
            if ah_pd != qp.pd {
                return Err(VerbsError::InvalidArgument(
                    "address handle of another protection domain",
                ));
            }
            if ud.remote_qpn >= 1 << 24 {
                return Err(VerbsError::InvalidArgument("remote QPN is 24-bit"));
            }
            if len > self.config.max_mtu.bytes() as u64 {
                return Err(VerbsError::InvalidArgument(
                    "UD messages fit in one packet: at most the port's MTU",
                ));
            }
            ud_dest = Some(av.dgid);
        }
        qp.sq.push_back(SendWqe {
            wr,
            ud_dest,
            len,
            segs: Vec::new(),
            started: false,
            first_psn: Psn::new(0),
            npkts: 0,
            local_error: None,
            local_done: None,
        });
        if qp.state == QpState::Err {
            let mut ctx = ctx!(self, 0);
            qp.flush(&mut ctx);
        }
        touched(&mut self.active, &mut self.timers, qp);
        Ok(())
    }

    /// `ibv_post_recv` of one WR.
    pub fn post_recv(&mut self, qpn: u32, wr: RecvWr) -> Result<()> {
        let qp = self
            .qps
            .get_mut(&qpn)
            .ok_or(VerbsError::NotFound("queue pair"))?;
        if qp.state == QpState::Reset {
            return Err(VerbsError::BadState {
                qpn,
                state: qp.state,
                what: "post_recv needs INIT or later",
            });
        }
        if qp.srq.is_some() {
            return Err(VerbsError::InvalidArgument(
                "this QP receives from an SRQ: post there",
            ));
        }
        if qp.rq.len() >= qp.cap.max_recv_wr as usize {
            return Err(VerbsError::Exhausted("receive queue is full"));
        }
        if wr.sges.len() > qp.cap.max_recv_sge as usize {
            return Err(VerbsError::InvalidArgument("more SGEs than max_recv_sge"));
        }
        qp.rq.push_back(wr);
        if qp.state == QpState::Err {
            let mut ctx = ctx!(self, 0);
            qp.flush(&mut ctx);
        }
        Ok(())
    }

    /// A UDP payload that arrived from `src`, with its ICRC already checked by the driver.
    pub fn handle_packet(&mut self, now: Nanos, src: Gid, data: &[u8]) {
        self.stats.rx_packets += 1;
        let drops = &mut self.stats.rx_drops;
        let Ok(pkt) = PacketRepr::parse(data) else {
            return drops.count(RxDrop::Malformed);
        };
        let Some(qp) = self.qps.get_mut(&pkt.bth.dest_qpn) else {
            return drops.count(RxDrop::UnknownQp);
        };
        let Ok(info) = pkt.bth.opcode.info() else {
            return drops.count(RxDrop::Malformed);
        };
        match (info.transport, qp.qp_type) {
            (Transport::Rc, QpType::Rc) | (Transport::Uc, QpType::Uc) => {
                if qp.av.map(|a| a.dgid) != Some(src) {
                    return drops.count(RxDrop::WrongPeer);
                }
            }
            (Transport::Ud, QpType::Ud) => {}
            _ => return drops.count(RxDrop::WrongTransport),
        }
        let mut ctx = ctx!(self, now);
        let result = match (qp.qp_type, info.operation) {
            (QpType::Ud, _) => {
                let grh = crate::ud::grh(src, self.config.gid, data.len());
                qp.handle_datagram(&mut ctx, &pkt, src, &grh)
            }
            (QpType::Uc, _) => qp.handle_uc_request(&mut ctx, &pkt),
            (
                _,
                Operation::Acknowledge | Operation::ReadResponse | Operation::AtomicAcknowledge,
            ) => qp.handle_response(&mut ctx, &pkt),
            _ => qp.handle_request(&mut ctx, &pkt),
        };
        if let Err(why) = result {
            ctx.drop_packet(why);
        }
        touched(&mut self.active, &mut self.timers, qp);
    }

    /// Fires every timer due at `now` (only the QPs that are due are visited).
    pub fn handle_timeout(&mut self, now: Nanos) {
        for qpn in self.timers.due(now) {
            let Some(qp) = self.qps.get_mut(&qpn) else {
                continue;
            };
            let mut ctx = ctx!(self, now);
            if qp.handle_timers(&mut ctx) {
                schedule(&mut self.active, qp);
            }
            rearm(&mut self.timers, qp);
        }
    }

    /// The earliest time `handle_timeout` has work to do.
    pub fn poll_timeout(&self) -> Option<Nanos> {
        self.timers.next()
    }

    /// `poll_timeout` the slow way, by asking every QP: for tests that check the timer
    /// queue never misses a change.
    #[doc(hidden)]
    pub fn poll_timeout_by_scan(&self) -> Option<Nanos> {
        self.qps.values().filter_map(|q| q.next_deadline()).min()
    }

    /// Writes the next packet to send into `buf` (at least [`MAX_PACKET`] bytes).
    pub fn poll_transmit(&mut self, now: Nanos, buf: &mut [u8]) -> Option<Transmit> {
        assert!(
            buf.len() >= MAX_PACKET,
            "poll_transmit needs a buffer of MAX_PACKET bytes"
        );
        while let Some(qpn) = self.active.pop_front() {
            let Some(qp) = self.qps.get_mut(&qpn) else {
                continue;
            };
            qp.scheduled = false;
            let mut ctx = ctx!(self, now);
            let (len, dest) = match qp.next_response(buf) {
                Some(len) => (Some(len), None),
                None => {
                    let (len, dest) = qp.next_request(&mut ctx, buf);
                    (len, dest)
                }
            };
            rearm(&mut self.timers, qp);
            if let Some(len) = len {
                schedule(&mut self.active, qp);
                self.stats.tx_packets += 1;
                let dest = dest.or(qp.av.map(|a| a.dgid)).unwrap_or_default();
                return Some(Transmit {
                    dest,
                    src_port: qp.udp_sport,
                    len,
                });
            }
        }
        None
    }

    /// The next asynchronous event, if any.
    pub fn poll_event(&mut self) -> Option<AsyncEvent> {
        self.events.pop_front()
    }
}
