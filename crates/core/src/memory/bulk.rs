//! Long copies into and out of shared memory, as instructions the compiler cannot see into:
//! their loads and stores are relaxed byte accesses to the model (a race tears them at any
//! byte, as under DMA), which is defined.
//!
//! With AVX, 32-byte moves in assembly, 128 bytes a turn. `rep movsb` is the fallback: on
//! AMD Zen 3 it is no faster where source and destination sit well apart (4 KiB in 105-125
//! ns against the moves' 100-130), and 10-15 times slower where the destination lies 4-28
//! bytes past the source modulo 4 KiB (4K aliasing: 1.5-1.9 us for 4 KiB), which a packet's
//! payload copied out of a page-aligned region into a packet buffer does (12 or 28 bytes
//! of headers before it). The moves have no such case (`bench/copy_gap.c`).

/// Copies at least this long are bulk copies; shorter ones are the word loops'.
pub(super) const BULK_MIN: usize = 128;

/// `rep movsb` copies at least this long (1.4x the word loops' speed at 1-4 KiB, slower
/// below ~512 B).
#[cfg(target_arch = "x86_64")]
const STRING_COPY_MIN: usize = 512;

/// `rep movsb` whose destination lies this little past its source modulo 4 KiB is the slow
/// aliased kind (above): it leaves such copies to the word loops (150 ns for 4 KiB).
#[cfg(target_arch = "x86_64")]
pub(super) const ALIASED_GAP: usize = 32;

/// Whether a string copy from `src` to `dst` would be a slow aliased one (`ALIASED_GAP`).
#[cfg(target_arch = "x86_64")]
pub(super) fn aliased(src: *const u8, dst: *const u8) -> bool {
    let gap = (dst as usize).wrapping_sub(src as usize) % 4096;
    gap != 0 && gap < ALIASED_GAP
}

/// How this CPU copies `len` bytes in bulk, if it does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Bulk {
    /// 32-byte moves (AVX).
    Vector,
    /// One `rep movsb`.
    String,
}

/// The bulk copy this CPU makes of `len` bytes from `src` to `dst`, or None for the word
/// loops.
pub(super) fn bulk(src: *const u8, dst: *const u8, len: usize) -> Option<Bulk> {
    #[cfg(target_arch = "x86_64")]
    {
        if len >= BULK_MIN && std::arch::is_x86_feature_detected!("avx") {
            return Some(Bulk::Vector);
        }
        if len >= STRING_COPY_MIN && !aliased(src, dst) {
            return Some(Bulk::String);
        }
    }
    let _ = (src, dst, len);
    None
}

/// Copies `len` bytes from `src` to `dst` the way `how` says.
///
/// # Safety
/// `src` must be valid for reads and `dst` for writes of `len` bytes, and they must not
/// overlap; `how` is what [`bulk`] answered for them. Either may be shared memory that
/// other threads access at the same time (see the module's comment).
pub(super) unsafe fn copy(how: Bulk, src: *const u8, dst: *mut u8, len: usize) {
    match how {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the caller's promise; `bulk` saw AVX and `len` >= BULK_MIN.
        Bulk::Vector => unsafe { vector_copy(src, dst, len) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the caller's promise.
        Bulk::String => unsafe { string_copy(src, dst, len) },
        #[cfg(not(target_arch = "x86_64"))]
        _ => unreachable!("no bulk copies here"),
    }
}

/// Copies `len` (at least 128) bytes, 128 a turn; a length that is not a multiple of 128
/// ends with the last 128 bytes, moved again in part.
///
/// # Safety
/// As [`copy`], and the CPU has AVX.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
#[inline(never)]
unsafe fn vector_copy(src: *const u8, dst: *mut u8, len: usize) {
    debug_assert!(len >= BULK_MIN);
    let mut at = 0;
    while at + BULK_MIN <= len {
        // SAFETY: 128 bytes at `at` lie inside both ranges (the caller's promise).
        unsafe { move_128(src.add(at), dst.add(at)) };
        at += BULK_MIN;
    }
    if at < len {
        // SAFETY: the last 128 bytes of both ranges (`len` >= 128).
        unsafe { move_128(src.add(len - BULK_MIN), dst.add(len - BULK_MIN)) };
    }
    // Upper halves left dirty make later SSE code slow on Intel. Nothing vector lives in
    // this function, which no caller inlines (they lack AVX), and callers keep nothing in
    // vector registers across a call (the ABI saves none).
    // SAFETY: touches only the upper halves of the vector registers.
    unsafe { std::arch::asm!("vzeroupper", options(nostack, nomem, preserves_flags)) };
}

/// Moves 128 bytes from `src` to `dst`: four 32-byte loads, then four stores.
///
/// # Safety
/// `src` is valid for reads and `dst` for writes of 128 bytes; the CPU has AVX.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
#[inline]
unsafe fn move_128(src: *const u8, dst: *mut u8) {
    // SAFETY: the caller's promise.
    unsafe {
        std::arch::asm!(
            "vmovdqu {a}, [{s}]",
            "vmovdqu {b}, [{s} + 32]",
            "vmovdqu {c}, [{s} + 64]",
            "vmovdqu {d}, [{s} + 96]",
            "vmovdqu [{t}], {a}",
            "vmovdqu [{t} + 32], {b}",
            "vmovdqu [{t} + 64], {c}",
            "vmovdqu [{t} + 96], {d}",
            s = in(reg) src,
            t = in(reg) dst,
            a = out(ymm_reg) _,
            b = out(ymm_reg) _,
            c = out(ymm_reg) _,
            d = out(ymm_reg) _,
            options(nostack),
        );
    }
}

/// Copies `len` bytes with one `rep movsb`.
///
/// # Safety
/// As [`copy`].
#[cfg(target_arch = "x86_64")]
unsafe fn string_copy(src: *const u8, dst: *mut u8, len: usize) {
    // SAFETY: the caller's promise; the direction flag is clear on entry by the ABI.
    unsafe {
        std::arch::asm!(
            "rep movsb",
            inout("rcx") len => _,
            inout("rsi") src => _,
            inout("rdi") dst => _,
            options(nostack, preserves_flags),
        );
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;

    /// Every bulk copy this CPU makes, at lengths around the turns' 128 bytes and at every
    /// alignment of source and destination, copies exactly its bytes and no others.
    #[test]
    fn each_bulk_copy_this_cpu_makes_is_exact() {
        let mut kinds = vec![Bulk::String];
        if std::arch::is_x86_feature_detected!("avx") {
            kinds.push(Bulk::Vector);
        }
        let src: Vec<u8> = (0..5000u32).map(|i| (i * 7 + i / 251) as u8).collect();
        for how in kinds {
            for len in (128..=520).chain([1024, 1040, 4095, 4096, 4097]) {
                for (from, to) in [(0, 0), (1, 0), (0, 1), (12, 40), (31, 7), (64, 3)] {
                    let mut dst = vec![0xa5u8; len + to + 64];
                    // SAFETY: `src` holds `from + len` bytes and `dst` `to + len` (and more);
                    // two vectors do not overlap.
                    unsafe { copy(how, src.as_ptr().add(from), dst.as_mut_ptr().add(to), len) };
                    assert_eq!(&dst[to..to + len], &src[from..from + len], "{how:?} {len}");
                    assert!(dst[..to].iter().chain(&dst[to + len..]).all(|&b| b == 0xa5));
                }
            }
        }
    }
}
