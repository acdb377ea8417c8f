//! UC and UD under loss, reordering, duplication and corruption: hundreds of seeded runs,
//! each checked (see `oxrdma_sim::unreliable`). A failure prints the seed.

use oxrdma_core::QpType;
use oxrdma_sim::unreliable::{run_unreliable, UnreliableConfig};
use oxrdma_sim::NetConfig;

fn suite(t: QpType, seeds: u64) {
    let scale = oxrdma_sim::scale();
    let mut delivered = [0u64; 2];
    for seed in 1..=seeds * scale {
        let mut c = UnreliableConfig::new(seed, t);
        let (loss, reorder, duplicate, corrupt) = match seed % 5 {
            0 => (0.0, 0.0, 0.0, 0.0),
            1 => (0.01, 0.01, 0.0, 0.0),
            2 => (0.05, 0.05, 0.02, 0.01),
            3 => (0.2, 0.1, 0.05, 0.02),
            _ => (0.0, 0.3, 0.05, 0.0),
        };
        c.net = NetConfig {
            loss,
            reorder,
            // UD has no duplicate detection (none is promised): keep the network from
            // duplicating datagrams there.
            duplicate: if t == QpType::Ud { 0.0 } else { duplicate },
            corrupt,
            jitter: 2_000,
            ..NetConfig::default()
        };
        c.max_len = [64, 4096, 20_000][(seed % 3) as usize];
        let r = run_unreliable(&c);
        assert!(
            r.violations.is_empty(),
            "{t:?} seed {seed} (loss {loss}, reorder {reorder}, dup {duplicate}, corrupt {corrupt}): {:#?}",
            r.violations
        );
        delivered[0] += r.delivered;
        delivered[1] += r.deliverable;
    }
    // Losses happened, and most got through.
    assert!(
        delivered[0] < delivered[1] && delivered[0] > delivered[1] / 2,
        "{delivered:?}"
    );
}

#[test]
fn uc_under_loss_delivers_whole_messages_or_nothing() {
    suite(QpType::Uc, 150);
}

#[test]
fn ud_under_loss_delivers_intact_datagrams_to_the_right_qp_only() {
    suite(QpType::Ud, 150);
}
