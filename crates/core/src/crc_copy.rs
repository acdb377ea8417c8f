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
mod x86 {
    use oxrdma_wire::icrc_part::fold_keys;
    use std::sync::OnceLock;

    /// Folding a lane past the other 15: 2048 bits.
    const BY_BLOCK: (u64, u64) = fold_keys(2048);

    const fn wide(k: (u64, u64)) -> (i64, i64) {
        (k.0 as i64, k.1 as i64)
    }

    /// Which fused loop this CPU runs.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub(super) enum Fused {
        Avx512,
        Avx2,
        No,
    }

    /// Which fused loop this CPU runs.
    pub(super) fn fused() -> Fused {
        static FUSED: OnceLock<Fused> = OnceLock::new();
        *FUSED.get_or_init(|| {
            if !is_x86_feature_detected!("vpclmulqdq") || !is_x86_feature_detected!("pclmulqdq") {
                Fused::No
            } else if is_x86_feature_detected!("avx512f") {
                Fused::Avx512
            } else if is_x86_feature_detected!("avx2") {
                Fused::Avx2
            } else {
                Fused::No
            }
        })
    }

    /// Four 512-bit registers (AVX-512F).
    pub(super) mod avx512 {
        use super::super::BLOCK;
        use super::{wide, BY_BLOCK};
        use oxrdma_wire::icrc_part::{fold_keys, hash_more};
        use std::arch::x86_64::*;

        /// One register onto the next: 512 bits; the last register's first three lanes to its
        /// end: 384, 256 and 128.
        const BY_REGISTER: (u64, u64) = fold_keys(512);
        const BY_LANE: [(i64, i64); 3] = [
            wide(fold_keys(384)),
            wide(fold_keys(256)),
            wide(fold_keys(128)),
        ];

        /// The same pair of keys in every lane.
        #[inline]
        #[target_feature(enable = "avx512f")]
        fn broadcast(k: (u64, u64)) -> __m512i {
            let (lo, hi) = wide(k);
            _mm512_set_epi64(hi, lo, hi, lo, hi, lo, hi, lo)
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
        pub(in super::super) unsafe fn copy_hashing_blocks(
            src: *const u8,
            dst: &mut [u8],
            hash: u32,
        ) -> u32 {
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

    /// Eight 256-bit registers (AVX2), for CPUs with VPCLMULQDQ but no AVX-512.
    pub(super) mod avx2 {
        use super::super::BLOCK;
        use super::{wide, BY_BLOCK};
        use oxrdma_wire::icrc_part::{fold_keys, hash_more};
        use std::arch::x86_64::*;

        /// One register onto the next: 256 bits; its first lane onto its second: 128.
        const BY_REGISTER: (u64, u64) = fold_keys(256);
        const BY_LANE: (u64, u64) = fold_keys(128);

        /// The same pair of keys in both lanes.
        #[inline]
        #[target_feature(enable = "avx2")]
        fn broadcast(k: (u64, u64)) -> __m256i {
            let (lo, hi) = wide(k);
            _mm256_set_epi64x(hi, lo, hi, lo)
        }

        /// 32 bytes of shared memory, loaded as `avx512::load` loads 64.
        #[inline]
        #[target_feature(enable = "avx2")]
        unsafe fn load(p: *const u8) -> __m256i {
            let v: __m256i;
            // SAFETY: the caller's promise that `p` is valid for 32 bytes; no alignment
            // needed.
            unsafe {
                std::arch::asm!(
                    "vmovdqu {v}, [{p}]",
                    p = in(reg) p,
                    v = out(ymm_reg) v,
                    options(nostack, preserves_flags, readonly),
                );
            }
            v
        }

        /// `acc` moved forward by `k`'s distance, plus `data`.
        #[inline]
        #[target_feature(enable = "avx2,vpclmulqdq")]
        fn fold(acc: __m256i, data: __m256i, k: __m256i) -> __m256i {
            let lo = _mm256_clmulepi64_epi128(acc, k, 0x00);
            let hi = _mm256_clmulepi64_epi128(acc, k, 0x11);
            _mm256_xor_si256(_mm256_xor_si256(lo, hi), data)
        }

        /// [`super::super::copy_hashing`] for `dst.len()`, a non-zero multiple of 256.
        ///
        /// # Safety
        /// As `copy_hashing`, and the CPU has AVX2, PCLMULQDQ and VPCLMULQDQ.
        #[target_feature(enable = "avx2,pclmulqdq,vpclmulqdq")]
        pub(in super::super) unsafe fn copy_hashing_blocks(
            src: *const u8,
            dst: &mut [u8],
            hash: u32,
        ) -> u32 {
            debug_assert!(dst.len() >= BLOCK && dst.len().is_multiple_of(BLOCK));
            // Eight registers, each folding every eighth 32 bytes; block 0 starts them, the
            // register so far (crc32fast's form inverted) in the first four bytes.
            let mut acc = [_mm256_setzero_si256(); 8];
            acc[0] = _mm256_zextsi128_si256(_mm_cvtsi32_si128(!hash as i32));
            let k = broadcast(BY_BLOCK);
            for (b, block) in dst.chunks_exact_mut(BLOCK).enumerate() {
                for (j, (a, out)) in acc.iter_mut().zip(block.chunks_exact_mut(32)).enumerate() {
                    // SAFETY: these 32 bytes lie inside the `dst.len()` bytes `src` is valid
                    // for (the caller's promise).
                    let v = unsafe { load(src.wrapping_add(b * BLOCK + 32 * j)) };
                    // SAFETY: `out` is 32 writable bytes; no alignment needed.
                    unsafe { _mm256_storeu_si256(out.as_mut_ptr().cast(), v) };
                    *a = if b == 0 {
                        _mm256_xor_si256(*a, v)
                    } else {
                        fold(*a, v, k)
                    };
                }
            }
            // The eight registers folded into the last (each 32 bytes on), then its first
            // lane onto its second.
            let k = broadcast(BY_REGISTER);
            let x = acc[1..].iter().fold(acc[0], |x, &a| fold(x, a, k));
            let (first, second) = (_mm256_castsi256_si128(x), _mm256_extracti128_si256(x, 1));
            let (lo, hi) = wide(BY_LANE);
            let k = _mm_set_epi64x(hi, lo);
            let moved = _mm_xor_si128(
                _mm_xor_si128(
                    _mm_clmulepi64_si128(first, k, 0x00),
                    _mm_clmulepi64_si128(first, k, 0x11),
                ),
                second,
            );
            let mut last = [0u8; 16];
            // SAFETY: room for 16 bytes.
            unsafe { _mm_storeu_si128(last.as_mut_ptr().cast(), moved) };
            // What is left has the CRC of all the bytes when hashed from a zero register.
            hash_more(!0, &last)
        }
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
