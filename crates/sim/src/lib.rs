//! A deterministic simulator for oxrdma: several engines on one virtual clock, joined by a
//! network with seeded loss, reordering, duplication, corruption, delay and partitions, plus
//! random workloads whose results are checked against invariants. A run replays exactly
//! from its seed.

pub mod cm;
pub mod iwarp;
pub mod net;
pub mod pair;
pub mod scenario;
pub mod threads;
mod trace;
pub mod unreliable;
pub mod world;

pub use net::{NetConfig, NetStats};
pub use pair::{End, Pair, PairOptions};
pub use scenario::{run, Expect, Report, ScenarioConfig};
pub use world::{address_bytes, Tap, TapAction, World, WorldStats};

/// How many times its seeds a sweep runs: `OXRDMA_SIM_SCALE` (default 1).
pub fn scale() -> u64 {
    std::env::var("OXRDMA_SIM_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
}

/// The seeds of a sweep: `count` times [`scale`] from `base`; or only `OXRDMA_SIM_SEED`,
/// to re-run one that failed.
pub fn seeds(base: u64, count: u64) -> Vec<u64> {
    if let Ok(s) = std::env::var("OXRDMA_SIM_SEED") {
        return vec![s.parse().expect("OXRDMA_SIM_SEED must be a number")];
    }
    (base..base + count * scale()).collect()
}
