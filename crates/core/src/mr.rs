//! Memory regions and the key checks every access goes through.

use crate::memory::SharedBuffer;
use crate::verbs::Access;
use rustc_hash::FxHashMap as HashMap;
use std::sync::Arc;

/// A registered memory region.
#[derive(Debug, Clone)]
pub struct MemoryRegion {
    /// The protection domain the region is registered in.
    pub pd: u32,
    /// The registered memory.
    pub buffer: Arc<SharedBuffer>,
    /// The virtual address of the first byte as peers name it (by default the buffer's
    /// address, as `ibv_reg_mr` does).
    pub iova: u64,
    /// What the region allows: local write and the remote rights (`ibv_access_flags`).
    pub access: Access,
    /// Local key: names the region in the SGEs of local work requests.
    pub lkey: u32,
    /// Remote key: names the region in peers' RDMA and atomic requests.
    pub rkey: u32,
}

impl MemoryRegion {
    /// Offset of `[addr, addr+len)` in the buffer, if the range lies inside the region.
    pub fn offset_of(&self, addr: u64, len: u64) -> Option<usize> {
        let off = addr.checked_sub(self.iova)?;
        let end = off.checked_add(len)?;
        (end <= self.buffer.len() as u64).then_some(off as usize)
    }
}

/// A range of registered memory the engine may touch: buffer and offset.
#[derive(Debug, Clone)]
pub(crate) struct Segment {
    pub buffer: Arc<SharedBuffer>,
    pub offset: usize,
    pub len: usize,
}

/// Every MR of a device, by lkey and by rkey.
#[derive(Debug, Default)]
pub(crate) struct Regions {
    by_lkey: HashMap<u32, MemoryRegion>,
    rkey_to_lkey: HashMap<u32, u32>,
}

impl Regions {
    pub fn insert(&mut self, mr: MemoryRegion) {
        self.rkey_to_lkey.insert(mr.rkey, mr.lkey);
        self.by_lkey.insert(mr.lkey, mr);
    }
    pub fn remove(&mut self, lkey: u32) -> Option<MemoryRegion> {
        let mr = self.by_lkey.remove(&lkey)?;
        self.rkey_to_lkey.remove(&mr.rkey);
        Some(mr)
    }
    pub fn get(&self, lkey: u32) -> Option<&MemoryRegion> {
        self.by_lkey.get(&lkey)
    }
    /// The region whose rkey is `rkey`.
    pub fn by_rkey(&self, rkey: u32) -> Option<&MemoryRegion> {
        self.by_lkey.get(self.rkey_to_lkey.get(&rkey)?)
    }
    /// True when `key` is a region's lkey or rkey.
    pub fn key_taken(&self, key: u32) -> bool {
        self.by_lkey.contains_key(&key) || self.rkey_to_lkey.contains_key(&key)
    }
    pub fn count_in_pd(&self, pd: u32) -> usize {
        self.by_lkey.values().filter(|m| m.pd == pd).count()
    }
    pub fn len(&self) -> usize {
        self.by_lkey.len()
    }

    /// The region an SGE names and the SGE's offset in it, for an access needing `need`;
    /// None on a bad key, PD, bounds or permission.
    fn resolve(&self, pd: u32, s: &crate::Sge, need: Access) -> Option<(&MemoryRegion, usize)> {
        let mr = self
            .get(s.lkey)
            .filter(|m| m.pd == pd && m.access.contains(need))?;
        Some((mr, mr.offset_of(s.addr, u64::from(s.length))?))
    }

    /// Resolves a local SGE list for an access needing `need`; None on any bad key, PD,
    /// bounds or permission (→ LOC_PROT_ERR).
    pub fn local(&self, pd: u32, sges: &[crate::Sge], need: Access) -> Option<Vec<Segment>> {
        sges.iter()
            .filter(|s| s.length > 0)
            .map(|s| {
                let (mr, offset) = self.resolve(pd, s, need)?;
                Some(Segment {
                    buffer: mr.buffer.clone(),
                    offset,
                    len: s.length as usize,
                })
            })
            .collect()
    }

    /// Copies `data` into the memory a local SGE list names (a one-packet message: no
    /// segment list is built). Every SGE is checked, as `local` checks them, before the
    /// status is given: LOC_PROT_ERR on any bad key, PD, bounds or permission, else
    /// LOC_LEN_ERR if the list is too short. On an error the bytes copied stay, as a
    /// receive buffer's contents are undefined after an error completion.
    pub fn place(
        &self,
        pd: u32,
        sges: &[crate::Sge],
        need: Access,
        mut data: &[u8],
    ) -> Result<(), crate::verbs::WcStatus> {
        use crate::verbs::WcStatus;
        let mut prot_ok = true;
        for s in sges.iter().filter(|s| s.length > 0) {
            let Some((mr, off)) = self.resolve(pd, s, need) else {
                prot_ok = false;
                continue;
            };
            let n = data.len().min(s.length as usize);
            if prot_ok && n > 0 {
                let (now, rest) = data.split_at(n);
                mr.buffer.write(off, now);
                data = rest;
            }
        }
        match (prot_ok, data.is_empty()) {
            (false, _) => Err(WcStatus::LocProtErr),
            (true, false) => Err(WcStatus::LocLenErr),
            (true, true) => Ok(()),
        }
    }
}

/// Walks `len` bytes of a scatter/gather list starting `at` bytes in, calling `f` with each
/// segment, the offset in its buffer, and the matching range of the caller's bytes.
fn sg_walk(
    segs: &[Segment],
    mut at: usize,
    len: usize,
    mut f: impl FnMut(&Segment, usize, core::ops::Range<usize>) -> bool,
) -> bool {
    let mut done = 0;
    for s in segs {
        if done == len {
            break;
        }
        if at >= s.len {
            at -= s.len;
            continue;
        }
        let n = (s.len - at).min(len - done);
        if !f(s, s.offset + at, done..done + n) {
            return false;
        }
        done += n;
        at = 0;
    }
    done == len
}

/// Copies bytes of the list, from `at` on, into `out`; false if the list is too short.
/// With a `hash` (crc32fast's form), continues it over the bytes in the same pass.
pub(crate) fn gather(segs: &[Segment], at: usize, out: &mut [u8], hash: &mut Option<u32>) -> bool {
    sg_walk(segs, at, out.len(), |s, off, r| match hash {
        None => s.buffer.read(off, &mut out[r]),
        Some(h) => s
            .buffer
            .read_hashing(off, &mut out[r], *h)
            .map(|n| *h = n)
            .is_some(),
    })
}

/// Copies `data` into the list from `at` on; false if the list is too short.
pub(crate) fn scatter(segs: &[Segment], at: usize, data: &[u8]) -> bool {
    sg_walk(segs, at, data.len(), |s, off, r| {
        s.buffer.write(off, &data[r])
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verbs::WcStatus;
    use crate::Sge;

    /// One region of 64 bytes at iova 0x1000, lkey 7, in PD 1, locally writable.
    fn regions() -> (Regions, Arc<SharedBuffer>) {
        let buffer = Arc::new(SharedBuffer::new(64).unwrap());
        let mut r = Regions::default();
        r.insert(MemoryRegion {
            pd: 1,
            buffer: buffer.clone(),
            iova: 0x1000,
            access: Access::LOCAL_WRITE,
            lkey: 7,
            rkey: 8,
        });
        (r, buffer)
    }

    fn sge(addr: u64, length: u32) -> Sge {
        Sge {
            addr,
            length,
            lkey: 7,
        }
    }

    #[test]
    fn place_scatters_across_sges_and_skips_empty_ones() {
        let (r, buf) = regions();
        let sges = [sge(0x1010, 3), sge(0x1000, 0), sge(0x1020, 8)];
        assert_eq!(r.place(1, &sges, Access::LOCAL_WRITE, b"abcdefg"), Ok(()));
        let mut got = [0u8; 64];
        buf.read(0, &mut got);
        assert_eq!(&got[0x10..0x13], b"abc");
        assert_eq!(&got[0x20..0x24], b"defg");
        assert_eq!(got.iter().filter(|&&b| b != 0).count(), 7);
    }

    #[test]
    fn place_checks_every_sge_before_the_length() {
        let (r, _) = regions();
        // The data fits the first SGE, but the second is past the region: protection.
        let sges = [sge(0x1000, 16), sge(0x1038, 16)];
        assert_eq!(
            r.place(1, &sges, Access::LOCAL_WRITE, b"abc"),
            Err(WcStatus::LocProtErr)
        );
        let bad_key = [Sge {
            lkey: 9,
            ..sge(0x1000, 4)
        }];
        assert_eq!(
            r.place(1, &bad_key, Access::LOCAL_WRITE, b"a"),
            Err(WcStatus::LocProtErr)
        );
        assert_eq!(
            r.place(2, &[sge(0x1000, 4)], Access::LOCAL_WRITE, b"a"),
            Err(WcStatus::LocProtErr),
            "another PD's region"
        );
        assert_eq!(
            r.place(1, &[sge(0x1000, 4)], Access::REMOTE_WRITE, b"a"),
            Err(WcStatus::LocProtErr),
            "without the access asked for"
        );
        assert_eq!(
            r.place(
                1,
                &[sge(0x1000, 2), sge(0x1004, 2)],
                Access::LOCAL_WRITE,
                b"abcde"
            ),
            Err(WcStatus::LocLenErr)
        );
        assert_eq!(r.place(1, &[], Access::LOCAL_WRITE, b""), Ok(()));
    }
}
