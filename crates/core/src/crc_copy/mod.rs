//! Copying bytes out of shared memory while taking their CRC-32, in one pass.
//!
//! A packet's payload is copied from a memory region into the send buffer, and the ICRC
//! must hash the same bytes. Done one after the other, the hash reads them again (from L1
//! at best) and costs as much as the copy; fused, each 64-byte load feeds both the store
//! and the CRC's carry-less multiplications, and the hash rides on the copy's loads.
//!
//! The CRC is folded the classic way (Intel, "Fast CRC Computation for Generic Polynomials
//! Using PCLMULQDQ"), 16 lanes of 128 bits, each lane folded forward 2048 bits per 256-byte
//! block: across four 512-bit registers with AVX-512 (`x86::avx512`), across eight 256-bit
//! ones with AVX2 (`x86::avx2`: Zen 3, and Intel cores without AVX-512); the lanes are then
//! folded into one, whose CRC from a zero register is the CRC of everything before it.
//! Where the CPU has neither with VPCLMULQDQ, the bytes are copied and then hashed by
//! crc32fast while they are in L1.
//!
//! Hashes here are in crc32fast's form (`Hasher::new_with_initial` in, `finalize` out).

use crate::memory::{copy_from_shared, SharedBuffer};

/// Bytes per block of the fused loop: four 64-byte registers.
const BLOCK: usize = 256;

impl SharedBuffer {
    /// [`Self::read`] that also continues `hash` (crc32fast's form) over the bytes it
    /// copies, in the same pass; None when the range is out of bounds.
    pub fn read_hashing(&self, offset: usize, dst: &mut [u8], hash: u32) -> Option<u32> {
        let src = self.range_start(offset, dst.len())?;
        // SAFETY: `src` is valid for `dst.len()` bytes (in bounds), and other threads'
        // writes to them are the racing copies `copy_hashing` allows.
        Some(unsafe { copy_hashing(src, dst, hash) })
    }
}

/// Copies `dst.len()` bytes from `src` to `dst` and returns `hash` continued over them.
///
/// # Safety
/// `src` is valid for reads of `dst.len()` bytes, which other threads may write meanwhile
/// (memory under DMA: a racing copy sees some old and some new bytes, and so does its hash).
pub(crate) unsafe fn copy_hashing(src: *const u8, dst: &mut [u8], hash: u32) -> u32 {
    let blocks = dst.len() / BLOCK;
    #[cfg(target_arch = "x86_64")]
    if blocks > 0 && x86::fused() != x86::Fused::No {
        let (head, tail) = dst.split_at_mut(blocks * BLOCK);
        // SAFETY: `src` is valid for `dst.len()` bytes, `head` is the start of `dst`, and
        // the CPU has the features of the loop chosen (checked by `fused`).
        let hash = unsafe {
            match x86::fused() {
                x86::Fused::Avx512 => x86::avx512::copy_hashing_blocks(src, head, hash),
                _ => x86::avx2::copy_hashing_blocks(src, head, hash),
            }
        };
        // SAFETY: the rest of the caller's range.
        unsafe { copy_from_shared(src.add(head.len()), tail) };
        return oxrdma_wire::icrc_part::hash_more(hash, tail);
    }
    // SAFETY: the caller's promise.
    unsafe { copy_then_hash(src, dst, hash) }
}

/// [`copy_hashing`] in two passes, the second over bytes in L1.
///
/// # Safety
/// As `copy_hashing`.
unsafe fn copy_then_hash(src: *const u8, dst: &mut [u8], hash: u32) -> u32 {
    // SAFETY: the caller's promise.
    unsafe { copy_from_shared(src, dst) };
    oxrdma_wire::icrc_part::hash_more(hash, dst)
}

#[cfg(target_arch = "x86_64")]
mod x86;

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// crc32fast's answer (through `hash_more`, which is crc32fast and nothing else).
    fn crc32fast_of(hash: u32, bytes: &[u8]) -> u32 {
        oxrdma_wire::icrc_part::hash_more(hash, bytes)
    }

    /// Every fused loop this CPU can run, over whole blocks (not only the one `copy_hashing`
    /// picks: an AVX-512 CPU runs the AVX2 loop too).
    #[allow(clippy::type_complexity)]
    fn fused_loops() -> Vec<(&'static str, unsafe fn(*const u8, &mut [u8], u32) -> u32)> {
        let mut loops: Vec<(&'static str, unsafe fn(*const u8, &mut [u8], u32) -> u32)> =
            Vec::new();
        #[cfg(target_arch = "x86_64")]
        {
            let clmul =
                is_x86_feature_detected!("vpclmulqdq") && is_x86_feature_detected!("pclmulqdq");
            if clmul && is_x86_feature_detected!("avx512f") {
                loops.push(("avx512", x86::avx512::copy_hashing_blocks));
            }
            if clmul && is_x86_feature_detected!("avx2") {
                loops.push(("avx2", x86::avx2::copy_hashing_blocks));
            }
        }
        loops
    }

    proptest! {
        /// Copies exactly and hashes as crc32fast does, at any length, offset and start.
        #[test]
        fn copies_and_hashes_as_crc32fast(
            bytes in proptest::collection::vec(any::<u8>(), 0..5000),
            skip in 0usize..64,
            hash in any::<u32>(),
        ) {
            let skip = skip.min(bytes.len());
            let src = &bytes[skip..];
            let mut dst = vec![0u8; src.len()];
            // SAFETY: `src` is valid for its length, and nobody writes it.
            let got = unsafe { copy_hashing(src.as_ptr(), &mut dst, hash) };
            prop_assert_eq!(&dst[..], src);
            prop_assert_eq!(got, crc32fast_of(hash, src));
            // The fallback too, wherever the fused loop runs above.
            let mut again = vec![0u8; src.len()];
            // SAFETY: as above.
            let slow = unsafe { copy_then_hash(src.as_ptr(), &mut again, hash) };
            prop_assert_eq!((&again[..], slow), (src, got));
            // And each fused loop over the whole blocks.
            let whole = src.len() / BLOCK * BLOCK;
            if whole > 0 {
                for (name, fused) in fused_loops() {
                    let mut out = vec![0u8; whole];
                    // SAFETY: as above, and the CPU has the loop's features.
                    let h = unsafe { fused(src.as_ptr(), &mut out, hash) };
                    prop_assert_eq!(&out[..], &src[..whole], "{}", name);
                    prop_assert_eq!(h, crc32fast_of(hash, &src[..whole]), "{}", name);
                }
            }
        }
    }

    #[test]
    fn this_cpu_runs_a_fused_loop_where_it_can() {
        // The machines this project runs on have one (AVX-512 or AVX2 with VPCLMULQDQ);
        // where they lack it, say so rather than pass on the fallback alone.
        let loops = fused_loops();
        println!(
            "fused loops: {:?}",
            loops.iter().map(|l| l.0).collect::<Vec<_>>()
        );
        #[cfg(target_arch = "x86_64")]
        if is_x86_feature_detected!("vpclmulqdq") && is_x86_feature_detected!("avx2") {
            assert_ne!(x86::fused(), x86::Fused::No);
            assert!(!loops.is_empty());
        }
    }

    #[test]
    fn every_block_count_and_tail() {
        let bytes: Vec<u8> = (0..9 * BLOCK as u32 + 7)
            .map(|i| (i * 131 % 251) as u8)
            .collect();
        for len in (0..=bytes.len())
            .step_by(37)
            .chain([BLOCK, 2 * BLOCK, 4096, 4096 + 4])
        {
            let len = len.min(bytes.len());
            let mut dst = vec![0u8; len];
            // SAFETY: as above.
            let got = unsafe { copy_hashing(bytes.as_ptr(), &mut dst, 0x1234_5678) };
            assert_eq!(dst, bytes[..len], "len {len}");
            assert_eq!(got, crc32fast_of(0x1234_5678, &bytes[..len]), "len {len}");
        }
    }
}
