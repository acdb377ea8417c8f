//! The fused loops of x86_64, and which one this CPU runs.

pub(super) mod avx2;
pub(super) mod avx512;

use oxrdma_wire::icrc_part::fold_keys;
use std::sync::OnceLock;

/// Folding a lane past the other 15: 2048 bits.
const BY_BLOCK: (u64, u64) = fold_keys(2048);

const fn wide(k: (u64, u64)) -> (i64, i64) {
    (k.0 as i64, k.1 as i64)
}

/// The fused loops, and none.
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
