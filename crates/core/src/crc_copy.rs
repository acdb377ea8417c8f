//! Copying bytes out of shared memory while taking their CRC-32, in one pass.
//!
//! A packet's payload is copied from a memory region into the send buffer, and the ICRC
//! must hash the same bytes. Done one after the other, the hash reads them again (from L1
//! at best) and costs as much as the copy; fused, each 64-byte load feeds both the store
//! and the CRC's carry-less multiplications, and the hash rides on the copy's loads.
//!
//! The CRC is folded the classic way (Intel, "Fast CRC Computation for Generic Polynomials
//! Using PCLMULQDQ"), 16 lanes of 128 bits across four 512-bit registers, each lane folded
//! forward 2048 bits per 256-byte block; the lanes are then folded into one, whose CRC from a
//! zero register is the CRC of everything before it. Where the CPU lacks AVX-512 and
//! VPCLMULQDQ, the bytes are copied and then hashed by crc32fast while they are in L1.
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
    if blocks > 0 && x86::fused() {
        let (head, tail) = dst.split_at_mut(blocks * BLOCK);
        // SAFETY: `src` is valid for `dst.len()` bytes, `head` is the start of `dst`, and
        // the CPU has the features (checked by `fused`).
        let hash = unsafe { x86::copy_hashing_blocks(src, head, hash) };
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
mod x86 {
    use super::BLOCK;
    use oxrdma_wire::icrc_part::{fold_keys, hash_more};
    use std::arch::x86_64::*;
    use std::sync::OnceLock;

    /// Folding a lane past the other 15: 2048 bits; one register onto the next: 512; the
    /// last register's first three lanes to its end: 384, 256 and 128.
    const BY_BLOCK: (u64, u64) = fold_keys(2048);
    const BY_REGISTER: (u64, u64) = fold_keys(512);
    const BY_LANE: [(i64, i64); 3] = [
        wide(fold_keys(384)),
        wide(fold_keys(256)),
        wide(fold_keys(128)),
    ];

    const fn wide(k: (u64, u64)) -> (i64, i64) {
        (k.0 as i64, k.1 as i64)
    }

    /// The same pair of keys in every lane.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn broadcast(k: (u64, u64)) -> __m512i {
        let (lo, hi) = wide(k);
        _mm512_set_epi64(hi, lo, hi, lo, hi, lo, hi, lo)
    }

    /// Whether this CPU runs the fused loop.
    pub(super) fn fused() -> bool {
        static FUSED: OnceLock<bool> = OnceLock::new();
        *FUSED.get_or_init(|| {
            is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("vpclmulqdq")
        })
    }

    /// 64 bytes of shared memory. In assembly, so that to the language these are plain
    /// loads of bytes another thread may be writing (as `rep movsb` in `memory.rs`).
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn load(p: *const u8) -> __m512i {
        let v: __m512i;
        // SAFETY: the caller's promise that `p` is valid for 64 bytes; no alignment needed.
        unsafe {
            std::arch::asm!(
                "vmovdqu64 {v}, [{p}]",
                p = in(reg) p,
                v = out(zmm_reg) v,
                options(nostack, preserves_flags, readonly),
            );
        }
        v
    }

    /// Copies 64 bytes of shared memory at `src` into `out`, and returns them.
    ///
    /// # Safety
    /// `src` is valid for reads of 64 bytes.
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn copy64(src: *const u8, out: &mut [u8; 64]) -> __m512i {
        // SAFETY: the caller's promise.
        let v = unsafe { load(src) };
        // SAFETY: `out` is 64 writable bytes; no alignment needed.
        unsafe { _mm512_storeu_si512(out.as_mut_ptr().cast(), v) };
        v
    }

    /// `acc` moved forward by `k`'s distance, plus `data`.
    #[inline]
    #[target_feature(enable = "avx512f,vpclmulqdq")]
    fn fold(acc: __m512i, data: __m512i, k: __m512i) -> __m512i {
        let lo = _mm512_clmulepi64_epi128(acc, k, 0x00);
        let hi = _mm512_clmulepi64_epi128(acc, k, 0x11);
        _mm512_ternarylogic_epi64(lo, hi, data, 0x96) // lo ^ hi ^ data
    }

    /// [`super::copy_hashing`] for `dst.len()`, a non-zero multiple of 256.
    ///
    /// # Safety
    /// As `copy_hashing`, and the CPU has AVX-512F and VPCLMULQDQ.
    #[target_feature(enable = "avx512f,vpclmulqdq")]
    pub(super) unsafe fn copy_hashing_blocks(src: *const u8, dst: &mut [u8], hash: u32) -> u32 {
        debug_assert!(dst.len() >= BLOCK && dst.len().is_multiple_of(BLOCK));
        // Four registers, each folding every fourth 64 bytes; block 0 starts them, the
        // register so far (crc32fast's form inverted) in the first four bytes.
        let mut acc = [_mm512_setzero_si512(); 4];
        acc[0] = _mm512_zextsi128_si512(_mm_cvtsi32_si128(!hash as i32));
        let k = broadcast(BY_BLOCK);
        for (b, block) in dst.chunks_exact_mut(BLOCK).enumerate() {
            for (j, (a, out)) in acc.iter_mut().zip(block.chunks_exact_mut(64)).enumerate() {
                let out: &mut [u8; 64] = out.try_into().expect("chunks of 64");
                // SAFETY: these 64 bytes lie inside the `dst.len()` bytes `src` is valid
                // for (the caller's promise).
                let v = unsafe { copy64(src.wrapping_add(b * BLOCK + 64 * j), out) };
                *a = if b == 0 {
                    _mm512_xor_si512(*a, v)
                } else {
                    fold(*a, v, k)
                };
            }
        }
        // The four registers folded into the last (each lane 64 bytes on), then its four
        // lanes into one, each by its distance from the end, at once.
        let k = broadcast(BY_REGISTER);
        let mut x = fold(acc[0], acc[1], k);
        x = fold(x, acc[2], k);
        x = fold(x, acc[3], k);
        let k = _mm512_set_epi64(
            0,
            0,
            BY_LANE[2].1,
            BY_LANE[2].0,
            BY_LANE[1].1,
            BY_LANE[1].0,
            BY_LANE[0].1,
            BY_LANE[0].0,
        );
        let moved = fold(x, _mm512_setzero_si512(), k);
        let mut lanes = [[0u8; 16]; 8];
        // SAFETY: room for 64 bytes at lane 0 and at lane 4.
        unsafe {
            _mm512_storeu_si512(lanes[0].as_mut_ptr().cast(), moved);
            _mm512_storeu_si512(lanes[4].as_mut_ptr().cast(), x);
        }
        let mut last = lanes[7];
        for lane in &lanes[..3] {
            for (l, m) in last.iter_mut().zip(lane) {
                *l ^= m;
            }
        }
        // What is left has the CRC of all the bytes when hashed from a zero register.
        hash_more(!0, &last)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// crc32fast's answer (through `hash_more`, which is crc32fast and nothing else).
    fn crc32fast_of(hash: u32, bytes: &[u8]) -> u32 {
        oxrdma_wire::icrc_part::hash_more(hash, bytes)
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
