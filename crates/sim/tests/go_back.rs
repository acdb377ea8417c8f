//! Go-back-N (pairs without selective repeat, as with rxe) through heavy loss: the
//! simulator's mixed workload (4 QP pairs, 32 WRs each, messages up to 1 MiB) at 5 %
//! loss against the same seed without loss. With a fixed 512-PSN window, each go-back
//! sent most of a window again (5.3x the packets of a lossless run, median of 40 seeds),
//! and the median run took 9.7 times as long, the worst 52 times: stalls of one ACK
//! timeout after lost READ requests, and crawls of one packet per two probe timeouts.

use oxrdma_sim::{run, NetConfig, Report, ScenarioConfig};

fn scenario(seed: u64, loss: f64) -> Report {
    let r = run(&ScenarioConfig {
        qp_pairs: 4,
        wrs_per_qp: 32,
        max_len: 1 << 20,
        selective_repeat: 0.0,
        net: NetConfig {
            loss,
            ..NetConfig::default()
        },
        ..ScenarioConfig::new(seed)
    });
    assert!(
        r.violations.is_empty(),
        "seed {seed} loss {loss}: {:?}",
        r.violations
    );
    assert_eq!(r.failed, 0, "seed {seed} loss {loss}: a WR failed");
    r
}

#[test]
fn at_five_percent_loss_go_back_n_wastes_little_and_never_stalls() {
    let (mut clean_ns, mut lossy_ns) = (0, 0);
    for seed in oxrdma_sim::seeds(1000, 12) {
        let (clean, lossy) = (scenario(seed, 0.0), scenario(seed, 0.05));
        let sent = lossy.net.sent as f64 / clean.net.sent as f64;
        let took = lossy.elapsed as f64 / clean.elapsed as f64;
        assert!(
            sent < 4.5,
            "seed {seed}: {sent:.2}x the packets of a lossless run"
        );
        assert!(
            took < 20.0,
            "seed {seed}: {took:.1}x the time of a lossless run"
        );
        (clean_ns, lossy_ns) = (clean_ns + clean.elapsed, lossy_ns + lossy.elapsed);
    }
    let took = lossy_ns as f64 / clean_ns as f64;
    assert!(took < 6.0, "{took:.1}x the time of lossless runs, in all");
}
