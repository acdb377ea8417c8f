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

    /// Copies the bytes of a local SGE list from `at` on into `out`, with no segment list
    /// built (an iWARP FPDU's payload, taken at each FPDU). LOC_PROT_ERR on any bad key, PD,
    /// bounds or permission among the list's SGEs, as `local` gives, else LOC_LEN_ERR if
    /// the list is too short.
    pub fn gather_at(
        &self,
        pd: u32,
        sges: &[crate::Sge],
        need: Access,
        at: usize,
        out: &mut [u8],
    ) -> Result<(), crate::verbs::WcStatus> {
        let len = out.len();
        self.walk_at(pd, sges, need, at, len, |mr, off, r| {
            mr.buffer.read(off, &mut out[r])
        })
    }

    /// Copies `data` into a local SGE list from `at` on, as `gather_at` reads (a
    /// one-packet message from 0: no segment list is built). On an error the bytes copied
    /// stay, as a receive buffer's contents are undefined after an error completion.
    pub fn scatter_at(
        &self,
        pd: u32,
        sges: &[crate::Sge],
        need: Access,
        at: usize,
        data: &[u8],
    ) -> Result<(), crate::verbs::WcStatus> {
        self.walk_at(pd, sges, need, at, data.len(), |mr, off, r| {
            mr.buffer.write(off, &data[r])
        })
    }

    /// Walks `len` bytes of a local SGE list from `at` on, every SGE checked; `f` gets each
    /// piece's region, its offset there and the matching range of the caller's bytes.
    fn walk_at(
        &self,
        pd: u32,
        sges: &[crate::Sge],
        need: Access,
        mut at: usize,
        len: usize,
        mut f: impl FnMut(&MemoryRegion, usize, core::ops::Range<usize>) -> bool,
    ) -> Result<(), crate::verbs::WcStatus> {
        use crate::verbs::WcStatus;
        let (mut done, mut prot_ok, mut copied) = (0, true, true);
        for s in sges.iter().filter(|s| s.length > 0) {
            let Some((mr, off)) = self.resolve(pd, s, need) else {
                prot_ok = false;
                continue;
            };
            let sl = s.length as usize;
            if !prot_ok || done == len {
                continue;
            }
            if at >= sl {
                at -= sl;
                continue;
            }
            let n = (sl - at).min(len - done);
            copied &= f(mr, off + at, done..done + n);
            done += n;
            at = 0;
        }
        match (prot_ok, copied && done == len) {
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
    fn scatter_at_0_scatters_across_sges_and_skips_empty_ones() {
        let (r, buf) = regions();
        let sges = [sge(0x1010, 3), sge(0x1000, 0), sge(0x1020, 8)];
        assert_eq!(
            r.scatter_at(1, &sges, Access::LOCAL_WRITE, 0, b"abcdefg"),
            Ok(())
        );
        let mut got = [0u8; 64];
        buf.read(0, &mut got);
        assert_eq!(&got[0x10..0x13], b"abc");
        assert_eq!(&got[0x20..0x24], b"defg");
        assert_eq!(got.iter().filter(|&&b| b != 0).count(), 7);
    }

    #[test]
    fn scatter_at_checks_every_sge_before_the_length() {
        let (r, _) = regions();
        // The data fits the first SGE, but the second is past the region: protection.
        let sges = [sge(0x1000, 16), sge(0x1038, 16)];
        assert_eq!(
            r.scatter_at(1, &sges, Access::LOCAL_WRITE, 0, b"abc"),
            Err(WcStatus::LocProtErr)
        );
        let bad_key = [Sge {
            lkey: 9,
            ..sge(0x1000, 4)
        }];
        assert_eq!(
            r.scatter_at(1, &bad_key, Access::LOCAL_WRITE, 0, b"a"),
            Err(WcStatus::LocProtErr)
        );
        assert_eq!(
            r.scatter_at(2, &[sge(0x1000, 4)], Access::LOCAL_WRITE, 0, b"a"),
            Err(WcStatus::LocProtErr),
            "another PD's region"
        );
        assert_eq!(
            r.scatter_at(1, &[sge(0x1000, 4)], Access::REMOTE_WRITE, 0, b"a"),
            Err(WcStatus::LocProtErr),
            "without the access asked for"
        );
        assert_eq!(
            r.scatter_at(
                1,
                &[sge(0x1000, 2), sge(0x1004, 2)],
                Access::LOCAL_WRITE,
                0,
                b"abcde"
            ),
            Err(WcStatus::LocLenErr)
        );
        assert_eq!(r.scatter_at(1, &[], Access::LOCAL_WRITE, 0, b""), Ok(()));
    }

    proptest::proptest! {
        /// `gather_at` and `scatter_at` (no segment list built) answer as `local` and then
        /// `gather`/`scatter` do, bytes and status, for any list (bad keys and bounds among
        /// it), offset and length.
        #[test]
        fn gather_at_and_scatter_at_match_the_segment_list(
            list in proptest::collection::vec(
                (0u64..72, 0u32..24, proptest::bool::weighted(0.9)),
                0..5,
            ),
            at in 0usize..48,
            len in 0usize..48,
            fill in proptest::prelude::any::<u8>(),
        ) {
            let (r, buf) = regions();
            let pattern: Vec<u8> = (0..64u8).map(|i| i.wrapping_mul(31)).collect();
            proptest::prop_assert!(buf.write(0, &pattern));
            let sges: Vec<Sge> = list
                .iter()
                .map(|&(off, length, good)| Sge {
                    addr: 0x1000 + off,
                    length,
                    lkey: if good { 7 } else { 9 },
                })
                .collect();
            let need = Access::LOCAL_WRITE;
            let old = |out: &mut [u8]| match r.local(1, &sges, need) {
                None => Err(WcStatus::LocProtErr),
                Some(segs) => gather(&segs, at, out, &mut None)
                    .then_some(())
                    .ok_or(WcStatus::LocLenErr),
            };
            let (mut a, mut b) = (vec![0u8; len], vec![0u8; len]);
            let (ra, rb) = (r.gather_at(1, &sges, need, at, &mut a), old(&mut b));
            proptest::prop_assert_eq!(ra, rb);
            if ra.is_ok() {
                proptest::prop_assert_eq!(&a, &b);
            }
            // Scattering: the same status, and (when it succeeds) the same memory after.
            let data = vec![fill; len];
            let new = r.scatter_at(1, &sges, need, at, &data);
            let mut after_new = vec![0u8; 64];
            buf.read(0, &mut after_new);
            proptest::prop_assert!(buf.write(0, &pattern));
            let old = match r.local(1, &sges, need) {
                None => Err(WcStatus::LocProtErr),
                Some(segs) => scatter(&segs, at, &data)
                    .then_some(())
                    .ok_or(WcStatus::LocLenErr),
            };
            let mut after_old = vec![0u8; 64];
            buf.read(0, &mut after_old);
            proptest::prop_assert_eq!(new, old);
            if new.is_ok() {
                proptest::prop_assert_eq!(after_new, after_old);
            }
        }
    }
}
