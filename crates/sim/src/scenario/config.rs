//! What a scenario run is asked to do, and what it reports.

use crate::net::{NetConfig, NetStats};
use crate::world::WorldStats;
use oxrdma_core::Nanos;

/// Which errors a run may legitimately end with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// Every WR succeeds.
    Clean,
    /// A QP may fail with RETRY_EXC_ERR (then flush); heavy loss can exhaust retry_cnt.
    RetryErrorsAllowed,
    /// At least one QP must fail with RETRY_EXC_ERR (a partition outlasts the retry budget).
    RetryErrorsRequired,
}

/// One simulation run.
#[derive(Debug, Clone)]
pub struct ScenarioConfig {
    pub seed: u64,
    pub nodes: usize,
    pub qp_pairs: usize,
    /// Send WRs posted by each QP of each pair.
    pub wrs_per_qp: usize,
    /// Largest message; most are much smaller.
    pub max_len: usize,
    pub max_sge: usize,
    pub net: NetConfig,
    /// Post receives slowly, so senders meet RNR NAKs.
    pub late_recv: bool,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub expect: Expect,
    /// Give up (and report a hang) after this much virtual time.
    pub time_limit: Nanos,
    /// Only RDMA WRITEs of `max_len` bytes (for throughput measurements).
    pub write_only: bool,
    /// Every packet through the per-packet path, received (`World::per_packet`) and sent
    /// (`Engine::set_send_runs`).
    pub per_packet: bool,
    /// Packets an engine writes per call at most (`World::tx_slots`).
    pub tx_slots: usize,
    /// The share of QP ends that speak selective repeat (a pair uses it only where both
    /// do; the others go back N, as rxe).
    pub selective_repeat: f64,
    /// The share of QP pairs that are secure (`oxrdma_core::secure`: every packet sealed;
    /// the suite alternates between pairs).
    pub secure: f64,
}

impl ScenarioConfig {
    /// A small mixed workload on a clean network.
    pub fn new(seed: u64) -> Self {
        ScenarioConfig {
            seed,
            nodes: 2,
            qp_pairs: 4,
            wrs_per_qp: 24,
            max_len: 64 << 10,
            max_sge: 4,
            net: NetConfig::default(),
            late_recv: false,
            timeout: 12,
            retry_cnt: 7,
            expect: Expect::Clean,
            time_limit: 600_000_000_000,
            write_only: false,
            per_packet: false,
            tx_slots: 1,
            selective_repeat: 0.8,
            secure: 0.0,
        }
    }
}

/// What a run did and what went wrong.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Report {
    pub violations: Vec<String>,
    pub send_wrs: usize,
    pub succeeded: usize,
    pub failed: usize,
    /// Payload bytes of successful WRs.
    pub bytes: u64,
    /// Virtual time from start until the last WR completed.
    pub elapsed: Nanos,
    pub net: NetStats,
    pub world: WorldStats,
}

impl Report {
    /// Goodput in Gb/s of virtual time.
    pub fn gbps(&self) -> f64 {
        if self.elapsed == 0 {
            0.0
        } else {
            self.bytes as f64 * 8.0 / self.elapsed as f64
        }
    }
}
