//! The seeded simulation suite. Each test sweeps many seeds; a failure prints the seed and
//! the command that re-runs it alone:
//!
//!     OXRDMA_SIM_SEED=<seed> cargo test --release -p oxrdma-sim --test sim_suite <test>
//!
//! `OXRDMA_SIM_SCALE=<n>` multiplies the number of seeds (default 1).

use oxrdma_sim::{run, seeds, Expect, NetConfig, ScenarioConfig};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn sweep(test: &str, base: u64, count: u64, make: impl Fn(u64) -> ScenarioConfig) {
    let mut failures = Vec::new();
    for seed in seeds(base, count) {
        let cfg = make(seed);
        let r = run(&cfg);
        if !r.violations.is_empty() {
            failures.push(format!(
                "seed {seed}: {} violation(s), first: {}\n  config: {:?}\n  re-run: OXRDMA_SIM_SEED={seed} cargo test --release -p oxrdma-sim --test sim_suite {test}",
                r.violations.len(),
                r.violations[0],
                cfg.net
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} seed(s) failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Random network misbehaviour with every rate in `0..=max`.
fn lossy(seed: u64, max: f64) -> NetConfig {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xbad_1e7);
    NetConfig {
        loss: rng.random_range(0.0..=max),
        reorder: rng.random_range(0.0..=max),
        duplicate: rng.random_range(0.0..=max),
        corrupt: rng.random_range(0.0..=max),
        jitter: rng.random_range(0..20_000),
        // Half the seeds hand a receiver its packets in rounds, so runs of them take the
        // run path.
        rx_every: [0, 0, 5_000, 30_000][rng.random_range(0..4)],
        ..NetConfig::default()
    }
}

#[test]
fn clean_network() {
    sweep("clean_network", 0, 250, ScenarioConfig::new);
}

#[test]
fn light_loss_reorder_duplicate_corrupt() {
    // Up to 5 % of each: the retry budget is never exhausted, so every WR must succeed.
    sweep(
        "light_loss_reorder_duplicate_corrupt",
        10_000,
        350,
        |seed| ScenarioConfig {
            net: lossy(seed, 0.05),
            ..ScenarioConfig::new(seed)
        },
    );
}

#[test]
fn heavy_loss_up_to_30_percent() {
    // Up to 30 %: a QP may exhaust retry_cnt; then it must fail cleanly (RETRY_EXC_ERR, then
    // flushes) and everything that succeeded must still be exact.
    sweep("heavy_loss_up_to_30_percent", 20_000, 250, |seed| {
        ScenarioConfig {
            net: lossy(seed, 0.30),
            expect: Expect::RetryErrorsAllowed,
            ..ScenarioConfig::new(seed)
        }
    });
}

#[test]
fn receiver_not_ready() {
    // Receives are posted slowly: SENDs meet RNR NAKs and retry until they fit (rnr_retry 7).
    sweep("receiver_not_ready", 30_000, 60, |seed| ScenarioConfig {
        late_recv: true,
        net: lossy(seed, 0.02),
        ..ScenarioConfig::new(seed)
    });
}

#[test]
fn many_qps_three_nodes() {
    sweep("many_qps_three_nodes", 40_000, 40, |seed| ScenarioConfig {
        nodes: 3,
        qp_pairs: 24,
        wrs_per_qp: 12,
        net: lossy(seed, 0.02),
        ..ScenarioConfig::new(seed)
    });
}

#[test]
fn multi_mib_messages_many_sges() {
    sweep("multi_mib_messages_many_sges", 50_000, 12, |seed| {
        ScenarioConfig {
            qp_pairs: 2,
            wrs_per_qp: 8,
            max_len: 4 << 20,
            max_sge: 16,
            net: lossy(seed, 0.01),
            ..ScenarioConfig::new(seed)
        }
    });
}

#[test]
fn partition_longer_than_retry_budget() {
    // timeout 10 = 4.2 ms, retry_cnt 3: the budget is ~17 ms; the partition lasts 1 s.
    sweep("partition_longer_than_retry_budget", 60_000, 20, |seed| {
        ScenarioConfig {
            timeout: 10,
            retry_cnt: 3,
            net: NetConfig {
                partitions: vec![(100_000, 1_000_000_000)],
                ..NetConfig::default()
            },
            expect: Expect::RetryErrorsRequired,
            ..ScenarioConfig::new(seed)
        }
    });
}

fn short_partition(seed: u64) -> ScenarioConfig {
    ScenarioConfig {
        timeout: 12,
        retry_cnt: 1,
        net: NetConfig {
            partitions: vec![(100_000, 5_100_000)],
            ..NetConfig::default()
        },
        ..ScenarioConfig::new(seed)
    }
}

#[test]
fn partition_shorter_than_retry_budget() {
    // A 5 ms outage against a ~34 ms budget: everything recovers.
    sweep(
        "partition_shorter_than_retry_budget",
        70_000,
        20,
        short_partition,
    );
}

#[test]
fn seeds_that_found_bugs() {
    // Found at OXRDMA_SIM_SCALE=10: a selective-repeat go-back stepped over a READ request
    // the responder held (its SACK said so) though the READ's response was lost, asked for
    // the rest of the READ instead, and spent retry_cnt 1 asking twice.
    for seed in [70_031, 70_078, 70_097] {
        let r = run(&short_partition(seed));
        assert!(r.violations.is_empty(), "seed {seed}: {:?}", r.violations);
    }
}

#[test]
fn long_lossy_path_with_windows_past_the_psn_wrap() {
    // 20 ms round trip at 1 Gbit/s behind a 20 ms queue: windows of thousands of PSNs
    // (selective repeat sizes them to the path), several MiB per WR, up to 5 % loss,
    // reordering and duplication, a third of the QPs starting just before the 2^24 wrap.
    sweep(
        "long_lossy_path_with_windows_past_the_psn_wrap",
        80_000,
        16,
        |seed| ScenarioConfig {
            qp_pairs: 2,
            wrs_per_qp: 6,
            max_len: 4 << 20,
            timeout: 14,
            net: NetConfig {
                delay: 10_000_000,
                jitter: 0,
                bandwidth_bps: 1_000_000_000,
                queue_limit: 20_000_000,
                ..lossy(seed, 0.05)
            },
            ..ScenarioConfig::new(seed)
        },
    );
}
