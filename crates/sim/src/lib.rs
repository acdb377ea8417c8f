//! A deterministic simulator for oxrdma: several engines on one virtual clock, joined by a
//! network with seeded loss, reordering, duplication, corruption, delay and partitions, plus
//! random workloads whose results are checked against invariants. A run replays exactly
//! from its seed.

pub mod cm;
pub mod net;
pub mod pair;
pub mod scenario;
pub mod unreliable;
pub mod world;

pub use net::{NetConfig, NetStats};
pub use pair::{Pair, PairOptions};
pub use scenario::{run, Expect, Report, ScenarioConfig};
pub use world::{Tap, TapAction, World};
