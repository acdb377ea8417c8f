//! Eight 256-bit registers (AVX2), for CPUs with VPCLMULQDQ but no AVX-512.

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
