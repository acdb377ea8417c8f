//! A `Memory` of plain buffers by key, for iWARP QPs driven outside an engine (the
//! simulator, tests, fuzzing): each buffer has a base address and its remote rights, and
//! its key serves as both lkey and STag.

use super::{AccessError, Memory};
use crate::verbs::WcStatus;
use crate::wr::{RecvWr, Sge};
use std::collections::{HashMap, VecDeque};

#[derive(Debug)]
struct Buffer {
    base: u64,
    bytes: Vec<u8>,
    remote_write: bool,
    remote_read: bool,
    valid: bool,
}

/// Buffers by key, and a shared receive queue if one is given.
#[derive(Debug, Default)]
pub struct Buffers {
    by_key: HashMap<u32, Buffer>,
    /// Receives the QP takes as its SEND messages begin (`Memory::shared_recv`).
    pub srq: VecDeque<RecvWr>,
}

impl Buffers {
    /// Registers `bytes` at `base` under `key`, with the remote rights given.
    pub fn add(
        &mut self,
        key: u32,
        base: u64,
        bytes: Vec<u8>,
        remote_write: bool,
        remote_read: bool,
    ) {
        let b = Buffer {
            base,
            bytes,
            remote_write,
            remote_read,
            valid: true,
        };
        self.by_key.insert(key, b);
    }

    /// The bytes of the buffer `key` names (empty if none).
    pub fn bytes(&self, key: u32) -> &[u8] {
        self.by_key.get(&key).map_or(&[], |b| &b.bytes)
    }

    /// The buffer and offset of `len` bytes at `addr` under `key`.
    fn at(&self, key: u32, addr: u64, len: usize) -> Result<(&Buffer, usize), AccessError> {
        let b = self.by_key.get(&key).filter(|b| b.valid);
        let b = b.ok_or(AccessError::InvalidStag)?;
        let off = addr.checked_sub(b.base).ok_or(AccessError::Bounds)?;
        let off = usize::try_from(off).map_err(|_| AccessError::Bounds)?;
        match off.checked_add(len) {
            Some(end) if end <= b.bytes.len() => Ok((b, off)),
            _ => Err(AccessError::Bounds),
        }
    }

    /// The pieces of `len` bytes of `sges` from byte `at`: (key, offset, range of the
    /// caller's bytes).
    fn pieces(
        &self,
        sges: &[Sge],
        mut at: usize,
        len: usize,
    ) -> Result<Vec<(u32, usize, std::ops::Range<usize>)>, WcStatus> {
        let mut out = Vec::new();
        let mut done = 0;
        for s in sges.iter().filter(|s| s.length > 0) {
            let (_, off) = self
                .at(s.lkey, s.addr, s.length as usize)
                .map_err(|_| WcStatus::LocProtErr)?;
            if at >= s.length as usize {
                at -= s.length as usize;
                continue;
            }
            let n = (s.length as usize - at).min(len - done);
            out.push((s.lkey, off + at, done..done + n));
            done += n;
            at = 0;
        }
        if done < len {
            return Err(WcStatus::LocLenErr);
        }
        Ok(out)
    }
}

impl Memory for Buffers {
    fn gather(&self, sges: &[Sge], at: usize, out: &mut [u8]) -> Result<(), WcStatus> {
        for (key, off, r) in self.pieces(sges, at, out.len())? {
            let src = &self.by_key[&key].bytes[off..off + r.len()];
            out[r].copy_from_slice(src);
        }
        Ok(())
    }

    fn scatter(&mut self, sges: &[Sge], at: usize, data: &[u8]) -> Result<(), WcStatus> {
        for (key, off, r) in self.pieces(sges, at, data.len())? {
            if let Some(b) = self.by_key.get_mut(&key) {
                b.bytes[off..off + r.len()].copy_from_slice(&data[r]);
            }
        }
        Ok(())
    }

    fn place(&mut self, stag: u32, to: u64, data: &[u8]) -> Result<(), AccessError> {
        let (b, off) = self.at(stag, to, data.len())?;
        if !b.remote_write {
            return Err(AccessError::Rights);
        }
        if let Some(b) = self.by_key.get_mut(&stag) {
            b.bytes[off..off + data.len()].copy_from_slice(data);
        }
        Ok(())
    }

    fn fetch(&self, stag: u32, to: u64, out: &mut [u8]) -> Result<(), AccessError> {
        let (b, off) = self.at(stag, to, out.len())?;
        if !b.remote_read {
            return Err(AccessError::Rights);
        }
        out.copy_from_slice(&b.bytes[off..off + out.len()]);
        Ok(())
    }

    fn invalidate(&mut self, stag: u32) -> Result<(), AccessError> {
        let b = self.by_key.get_mut(&stag).ok_or(AccessError::InvalidStag)?;
        b.valid = false;
        Ok(())
    }

    fn shared_recv(&mut self) -> Option<RecvWr> {
        self.srq.pop_front()
    }
}
