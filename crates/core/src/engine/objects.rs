//! The verbs object tables of the engine: protection domains, memory regions and windows,
//! completion queues, shared receive queues and address handles (everything but QPs).

use super::Engine;
use crate::attr::AddressVector;
use crate::cq::{Cq, CqRing};
use crate::error::{Result, VerbsError};
use crate::memory::SharedBuffer;
use crate::mr::MemoryRegion;
use crate::mw::Mw;
use crate::srq::{Srq, SrqAttr};
use crate::verbs::{Access, MwType};
use crate::wr::{RecvWr, WorkCompletion};
use rand_core::RngCore;
use std::collections::VecDeque;
use std::sync::Arc;

impl Engine {
    /// `ibv_alloc_pd`: a new protection domain; returns its handle.
    pub fn alloc_pd(&mut self) -> Result<u32> {
        if self.pds.len() >= self.config.attr.max_pd as usize {
            return Err(VerbsError::Exhausted("protection domains"));
        }
        let pd = self.next_pd;
        self.next_pd += 1;
        self.pds.insert(pd);
        Ok(pd)
    }

    /// `ibv_dealloc_pd`: refused (busy) while memory regions or QPs are in it.
    pub fn dealloc_pd(&mut self, pd: u32) -> Result<()> {
        if !self.pds.contains(&pd) {
            return Err(VerbsError::NotFound("protection domain"));
        }
        if self.mrs.count_in_pd(pd) > 0
            || self.qps.values().any(|q| q.pd == pd)
            || self.iwarp_in_pd(pd)
        {
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
        if access.intersects(remote_modify) && !access.contains(Access::LOCAL_WRITE) {
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

    /// `ibv_dereg_mr` of the region whose lkey is `lkey`: refused (busy) while memory
    /// windows are bound to it.
    pub fn dereg_mr(&mut self, lkey: u32) -> Result<()> {
        if self.mrs.windows_on(lkey) > 0 {
            return Err(VerbsError::Busy("memory windows are bound to the region"));
        }
        self.mrs
            .remove(lkey)
            .map(|_| ())
            .ok_or(VerbsError::NotFound("memory region"))
    }

    /// `ibv_create_cq` with room for `depth` completions (1..=max_cqe); returns its handle.
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

    /// `ibv_destroy_cq`: refused (busy) while a QP uses it.
    pub fn destroy_cq(&mut self, cq: u32) -> Result<()> {
        if !self.cqs.contains_key(&cq) {
            return Err(VerbsError::NotFound("completion queue"));
        }
        if self.qps.values().any(|q| q.uses_cq(cq)) || self.iwarp_uses_cq(cq) {
            return Err(VerbsError::Busy("completion queue is used by a QP"));
        }
        self.cqs.remove(&cq);
        Ok(())
    }

    /// `ibv_resize_cq`: `cq` holds up to `depth` entries from now on (1..=max_cqe, and at
    /// least what it holds now).
    pub fn resize_cq(&mut self, cq: u32, depth: u32) -> Result<()> {
        if depth == 0 || depth > self.config.attr.max_cqe {
            return Err(VerbsError::InvalidArgument("CQ depth must be 1..=max_cqe"));
        }
        let q = self
            .cqs
            .get_mut(&cq)
            .ok_or(VerbsError::NotFound("completion queue"))?;
        if !q.resize(depth as usize) {
            return Err(VerbsError::InvalidArgument(
                "the CQ holds more completions than the new depth",
            ));
        }
        Ok(())
    }

    /// Takes up to `max` completions from `cq`, oldest first.
    pub fn poll_cq(&mut self, cq: u32, max: usize) -> Result<Vec<WorkCompletion>> {
        let mut out = Vec::new();
        self.poll_cq_each(cq, max, |wc| out.push(wc))?;
        Ok(out)
    }

    /// Hands up to `max` completions from `cq` to `f`, oldest first; returns how many
    /// (a poller's path: nothing is allocated).
    pub fn poll_cq_each(
        &mut self,
        cq: u32,
        max: usize,
        f: impl FnMut(WorkCompletion),
    ) -> Result<usize> {
        let q = self
            .cqs
            .get_mut(&cq)
            .ok_or(VerbsError::NotFound("completion queue"))?;
        Ok(q.take(max, f))
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

    /// `ibv_query_srq`: the SRQ's sizes, its armed limit and the receives posted.
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

    /// `ibv_destroy_srq`: refused (busy) while a QP uses it.
    pub fn destroy_srq(&mut self, srq: u32) -> Result<()> {
        if !self.srqs.contains_key(&srq) {
            return Err(VerbsError::NotFound("shared receive queue"));
        }
        if self.qps.values().any(|q| q.srq == Some(srq)) || self.iwarp_uses_srq(srq) {
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
        self.check_sgid(av)?;
        if self.ahs.len() >= self.config.attr.max_ah as usize {
            return Err(VerbsError::Exhausted("address handles"));
        }
        let id = self.next_ah;
        self.next_ah += 1;
        self.ahs.insert(id, (pd, av));
        Ok(id)
    }

    /// `ibv_destroy_ah`.
    pub fn destroy_ah(&mut self, ah: u32) -> Result<()> {
        self.ahs
            .remove(&ah)
            .map(|_| ())
            .ok_or(VerbsError::NotFound("address handle"))
    }

    /// Whether `av`'s source GID is in the device's table, of the destination's family
    /// (an IPv4 address cannot send to an IPv6 one).
    pub(super) fn check_sgid(&self, av: AddressVector) -> Result<()> {
        let Some(sgid) = self.gid_at(av.sgid_index) else {
            return Err(VerbsError::InvalidArgument(
                "sgid_index beyond the GID table",
            ));
        };
        if sgid.ip().is_ipv4() != av.dgid.ip().is_ipv4() {
            return Err(VerbsError::InvalidArgument(
                "the source GID and the destination GID are of two IP families",
            ));
        }
        Ok(())
    }
}
