//! `riomap`/`riowrite`: memory one side maps for the peer to write straight into with
//! plain RDMA WRITEs. A writable mapping takes a slot of the peer's iomap table and is
//! written there (an IOMAP_SGL message) before the next send; `iowrite` looks the target
//! up in this side's table, where the peer's mappings landed.

use super::flow::{Flow, IOMAP_LEN};
use super::maps::Mapping;
use super::stream::RStream;
use super::{io, os, partial};
use crate::lock::lock;
use oxrdma_core::{Access, SendFlags, SendWr, WrOpcode};
use oxrdma_wire::rsocket::{Op, RsSge};
use rustix::io::Errno;
use std::io::Result;
use std::sync::MutexGuard;

impl RStream {
    /// `riomap`: registers `len` bytes at `buf` and, if `writable`, offers them to the
    /// peer's `riowrite` at `offset` (the address itself if None). Returns the offset.
    ///
    /// # Safety
    /// `buf` must stay valid for `len` bytes until `iounmap` or the stream's end; the
    /// peer may write it at any time meanwhile.
    pub unsafe fn iomap(
        &self,
        buf: *mut u8,
        len: usize,
        writable: bool,
        offset: Option<u64>,
    ) -> Result<u64> {
        let peer_slots = self.lock_flow().remote_iomap.length as usize;
        let mut m = lock(&self.maps);
        let access = if writable {
            Access::LOCAL_WRITE | Access::REMOTE_WRITE
        } else {
            Access::LOCAL_WRITE
        };
        let slot = if writable {
            m.slots.resize_with(peer_slots, || None);
            Some(
                m.slots
                    .iter()
                    .position(Option::is_none)
                    .ok_or(os(Errno::NOMEM))?,
            )
        } else {
            None
        };
        // SAFETY: the caller's promise covers the registration's life.
        let mr = unsafe { self.pd.register_raw(buf, len, buf as u64, access) }.map_err(io)?;
        let offset = offset.unwrap_or(buf as u64);
        let map = Mapping { mr, offset };
        match slot {
            Some(i) => {
                m.slots[i] = Some(map);
                m.pending.push_back(i);
            }
            None => m.other.push(map),
        }
        Ok(offset)
    }

    /// `riounmap`: ends the mapping of exactly `len` bytes at `buf`.
    pub fn iounmap(&self, buf: *const u8, len: usize) -> Result<()> {
        let mut m = lock(&self.maps);
        let same = |map: &Mapping| map.mr.addr() == buf as u64 && map.mr.len() == len;
        if let Some(i) = m.slots.iter().position(|s| s.as_ref().is_some_and(same)) {
            m.slots[i] = None;
            m.pending.retain(|&p| p != i);
            return Ok(());
        }
        if let Some(i) = m.other.iter().position(same) {
            m.other.remove(i);
            return Ok(());
        }
        Err(os(Errno::INVAL))
    }

    /// Writes the mappings not yet sent into the peer's table.
    pub(super) fn send_iomaps<'a>(
        &'a self,
        mut f: MutexGuard<'a, Flow>,
        nonblock: bool,
    ) -> Result<MutexGuard<'a, Flow>> {
        loop {
            let next = {
                let m = lock(&self.maps);
                m.pending.front().and_then(|&i| {
                    let map = m.slots.get(i)?.as_ref()?;
                    Some((i, map.offset, map.mr.addr(), map.mr.rkey(), map.mr.len()))
                })
            };
            let Some((i, offset, addr, key, len)) = next else {
                lock(&self.maps).pending.clear();
                return Ok(f);
            };
            if !f.can_send(self.target_room(&f)) {
                drop(f);
                f = self.send_room(nonblock)?;
                continue;
            }
            let net = cfg!(target_endian = "big") != f.swap;
            let mut b = [0u8; IOMAP_LEN as usize];
            b[..8].copy_from_slice(&if net {
                offset.to_be_bytes()
            } else {
                offset.to_le_bytes()
            });
            let sge = RsSge {
                addr,
                key,
                length: len as u32,
            };
            let _ = sge.emit_order(&mut b[8..], net);
            let data = self.stage(&mut f, &b, true);
            let at = f.remote_iomap.addr + i as u64 * u64::from(IOMAP_LEN);
            let key = f.remote_iomap.key;
            self.post_write_msg(&f, Op::IomapSgl.imm(i as u32), data, at, key)?;
            lock(&self.maps).pending.pop_front();
        }
    }

    /// `riowrite`: writes `buf` at `offset` of what the peer mapped, with no message to
    /// it. Returns the bytes written (fewer where no mapping covers the rest).
    pub fn iowrite(&self, buf: &[u8], mut offset: u64, nonblock: bool) -> Result<usize> {
        let shared = self.cq.engine_cq().map(|cq| cq.ctx.shared());
        let received = shared.and_then(|s| s.requests_received());
        let mut f = self.send_iomaps(self.lock_flow(), nonblock)?;
        let mut sent = 0;
        let mut olen = f.first_chunk();
        while sent < buf.len() {
            let local = lock(&self.maps).local_size() as usize;
            let hit = (0..local)
                .map(|i| self.iomap_entry(i))
                .find(|(o, s)| offset >= *o && offset < o.saturating_add(u64::from(s.length)));
            let Some((base, sge)) = hit else { break };
            if !f.can_send(self.target_room(&f)) {
                drop(f);
                f = match self.send_room(nonblock) {
                    Ok(f) => f,
                    Err(e) => return partial(sent, e),
                };
                continue;
            }
            let room = (base + u64::from(sge.length) - offset).min(u64::from(u32::MAX)) as u32;
            let x = f.chunk(buf.len() - sent, &mut olen, room) as usize;
            let data = self.stage(&mut f, &buf[sent..sent + x], false);
            // rsockets' local-only "write" op: completes like data, tells the peer nothing.
            let msg = u64::from(Op::Reserved(2).imm(x as u32));
            let wr = SendWr {
                remote_addr: sge.addr + (offset - base),
                rkey: sge.key,
                flags: SendFlags::SIGNALED,
                ..SendWr::new(msg, WrOpcode::RdmaWrite, data)
            };
            self.qp.post_send(wr).map_err(io)?;
            sent += x;
            offset += x as u64;
        }
        // Non-blocking calls too (riostream's are): the wait never sleeps, and is bounded.
        let wait = received.filter(|&r| sent > 0 && f.answer.wants(r));
        drop(f);
        if let (Some(shared), Some(since)) = (shared, wait) {
            let caught = shared.poll_for_request(since, super::answer::BUDGET);
            self.lock_flow().answer.waited(caught);
        }
        // The program may now spin on its own memory for the answer (riostream does),
        // never polling: the engine thread must take what comes.
        if let Some(shared) = shared {
            shared.app_leaves();
        }
        Ok(sent)
    }
}
