//! Four 512-bit registers (AVX-512F).

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
/// loads of bytes another thread may be writing (as the bulk copies in `memory/bulk.rs`).
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
