//! The threading policy (`oxrdma_core::driving`) on simulated cores: application models
//! that poll, sleep on completion events, spin on memory without calling the library
//! (riostream's shape) and do nothing while their peer READs, alone and mixed, on one and
//! two cores. A failure prints its seed; `OXRDMA_SIM_SEED=n` runs that one again.

use oxrdma_core::driving::RECHECK;
use oxrdma_core::Nanos;
use oxrdma_sim::threads::{run, Config, Model, Report};

/// The engine thread's sleeps may end this late (its timer slack, `nic.rs`).
const SLACK_NS: Nanos = 4_000_000;

/// How long a packet may wait in the socket while a thread waits for it: an application
/// that stops polling is noticed within `RECHECK` (and the timer slack), a thread woken
/// gets a core within a slice, and two wake-ups on the way.
fn bound(cfg: &Config) -> Nanos {
    let m = cfg.machine;
    RECHECK.as_nanos() as Nanos + SLACK_NS + m.slice_ns + 2 * m.wake_ns.1
}

fn summary(r: &Report) -> String {
    let rts: Vec<String> = (0..r.round_trips.len())
        .map(|i| {
            let (m, x) = r.median_max(i);
            format!("{}/{} us", m / 1000, x / 1000)
        })
        .collect();
    format!(
        "seed {}: finished {} in {} ms; round trips median/max {rts:?}; longest socket wait \
         {} us; late timers {}, timeouts {}; engine wake-ups {} ({} by work); waiter \
         sleeps {}; CPU per thread {:?} us",
        r.seed,
        r.finished,
        r.elapsed_ns / 1_000_000,
        r.counts.max_socket_wait / 1000,
        r.counts.late_timers,
        r.counts.timeouts,
        r.engine_wakeups,
        r.engine_woken_by_work,
        r.waiter_sleeps,
        r.cpu_ns.iter().map(|c| c / 1000).collect::<Vec<_>>()
    )
}

/// Runs `apps` on `cores` cores for each seed; checks the progress bounds every run must
/// keep, and hands each report to `check`.
fn sweep(cores: usize, apps: &[Model], base: u64, check: impl Fn(&Config, &Report)) {
    for seed in oxrdma_sim::seeds(base, 12) {
        let cfg = Config::new(cores, apps.to_vec(), seed);
        let r = run(&cfg);
        let what = format!("{cores} core(s), {apps:?}, {}", summary(&r));
        assert!(r.finished, "did not finish: {what}");
        assert_eq!(
            r.counts.late_timers, 0,
            "a QP timed out with its answer waiting: {what}"
        );
        assert_eq!(r.counts.timeouts, 0, "a QP timed out: {what}");
        assert!(
            r.counts.max_socket_wait <= bound(&cfg),
            "a packet waited past {} us: {what}",
            bound(&cfg) / 1000
        );
        check(&cfg, &r);
    }
}

/// The quickest a round can be: the wire both ways and the peer's turnaround.
fn wire_round(cfg: &Config) -> Nanos {
    2 * cfg.peer.wire_ns + cfg.peer.turnaround_ns
}

#[test]
fn a_polling_program_drives_alone_and_the_engine_thread_sleeps() {
    for cores in [1, 2] {
        sweep(cores, &[Model::Poller], 100, |cfg, r| {
            let (median, _) = r.median_max(0);
            assert!(median <= wire_round(cfg) + 2_000, "{}", summary(r));
            // It looks every `RECHECK` or so, and is not woken per message.
            assert!(r.engine_woken_by_work <= 2, "{}", summary(r));
            assert!(
                r.engine_wakeups <= r.elapsed_ns / RECHECK.as_nanos() as Nanos + 2,
                "{}",
                summary(r)
            );
        });
    }
}

#[test]
fn a_program_sleeping_on_events_pays_one_wake_up_per_message_not_two() {
    for cores in [1, 2] {
        sweep(cores, &[Model::EventSleeper], 200, |cfg, r| {
            // The waiter takes its own packets: the engine thread is not woken for them.
            assert!(
                r.engine_woken_by_work * 20 <= cfg.rounds as u64,
                "{}",
                summary(r)
            );
            let (median, _) = r.median_max(0);
            assert!(median <= wire_round(cfg) + 25_000, "{}", summary(r));
        });
    }
}

#[test]
fn a_program_sleeping_on_events_spins_for_a_peer_that_answers_after_its_own_wake_up() {
    // The peer sleeps too, on a host where a cross-core wake-up costs 33 us: its answer
    // comes 60 us after the request. Spinning only for waits that were already short, both
    // sides of such a ping-pong slept for ever (`ib_send_lat -e` 7.7x its polling typical);
    // a probe catches the answer and keeps the waiter spinning.
    for cores in [1, 2] {
        for seed in oxrdma_sim::seeds(700, 12) {
            let mut cfg = Config::new(cores, vec![Model::EventSleeper], seed);
            cfg.peer.turnaround_ns = 50_000;
            let r = run(&cfg);
            assert!(r.finished, "{}", summary(&r));
            assert!(
                r.waiter_sleeps * 10 <= cfg.rounds as u64,
                "{cores} core(s): {}",
                summary(&r)
            );
            let (median, _) = r.median_max(0);
            assert!(median <= wire_round(&cfg) + 5_000, "{}", summary(&r));
        }
    }
}

#[test]
fn a_program_spinning_on_memory_is_served_by_the_engine_thread() {
    // riostream: on two cores the engine thread has one and takes the WRITE at once; on
    // one it must take the core from the spinner (wake-up preemption).
    sweep(2, &[Model::MemorySpinner], 300, |cfg, r| {
        let (median, _) = r.median_max(0);
        assert!(
            median <= wire_round(cfg) + cfg.machine.wake_ns.1 + 5_000,
            "{}",
            summary(r)
        );
    });
    sweep(1, &[Model::MemorySpinner], 310, |cfg, r| {
        let (median, _) = r.median_max(0);
        assert!(median <= cfg.machine.preempt_ns + 30_000, "{}", summary(r));
    });
}

#[test]
fn a_passive_target_is_answered_without_its_application() {
    for cores in [1, 2] {
        sweep(cores, &[Model::Passive], 400, |cfg, r| {
            // The engine thread polls on between READs where a core is free: no wake-up.
            let (median, _) = r.median_max(0);
            assert!(median <= 2 * cfg.peer.wire_ns + 2_000, "{}", summary(r));
        });
    }
}

#[test]
fn mixed_programs_keep_the_bounds() {
    use Model::*;
    for (i, apps) in [
        vec![Poller, EventSleeper],
        vec![MemorySpinner, Poller],
        vec![EventSleeper, Passive],
        vec![MemorySpinner, EventSleeper],
        vec![Poller, Passive],
        vec![EventSleeper, MemorySpinner, Passive],
    ]
    .iter()
    .enumerate()
    {
        for cores in [1, 2] {
            sweep(cores, apps, 500 + 100 * i as u64, |_, _| {});
        }
    }
}

#[test]
fn a_thread_sleeping_on_an_idle_cq_costs_next_to_no_cpu() {
    for cores in [1, 2] {
        sweep(cores, &[Model::IdleWaiter], 600, |cfg, r| {
            let secs = cfg.limit_ns / 1_000_000_000;
            // Both threads wake about every 50 ms (their longest sleeps), a microsecond each.
            let cpu: Nanos = r.cpu_ns.iter().sum();
            assert!(cpu <= secs * 100_000, "{}", summary(r));
            assert!(r.engine_wakeups <= secs * 25, "{}", summary(r));
            assert!(r.waiter_sleeps <= secs * 21, "{}", summary(r));
        });
    }
}
