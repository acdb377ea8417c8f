//! The run path (packets that arrive together, handed over together: `Engine::
//! handle_packets`) against the per-packet path it must match effect for effect. Each
//! test runs the same seeded workload both ways and compares everything observable: every
//! packet sent (the world's digest), every completion, the memory, the counters.
//!
//!     OXRDMA_SIM_SEED=<seed> cargo test --release -p oxrdma-sim --test run_path <test>

use oxrdma_core::{
    Gid, RecvWr, SendData, SendFlags, SendWr, Stats, WcStatus, WrOpcode, MAX_PACKET,
};
use oxrdma_sim::{address_bytes, run, seeds, Expect, NetConfig, Pair, PairOptions, ScenarioConfig};
use oxrdma_wire::{Headers, Opcode};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// A seeded mixed workload under random loss, reordering, duplication, corruption and
/// jitter (`more` sets the rest, drawing from the same generator), run with the run paths
/// on and packet by packet: no violation, and the same report but for the run counters.
/// Returns the report with the run paths on.
fn same_both_ways(
    seed: u64,
    test: &str,
    more: impl FnOnce(&mut ChaCha8Rng, ScenarioConfig) -> ScenarioConfig,
) -> oxrdma_sim::Report {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let max = [0.0, 0.02, 0.1][rng.random_range(0..3)];
    let base = ScenarioConfig {
        net: NetConfig {
            loss: rng.random_range(0.0..=max),
            reorder: rng.random_range(0.0..=max),
            duplicate: rng.random_range(0.0..=max),
            corrupt: rng.random_range(0.0..=max),
            jitter: rng.random_range(0..5_000),
            ..NetConfig::default()
        },
        expect: Expect::RetryErrorsAllowed,
        ..ScenarioConfig::new(seed)
    };
    let runs = more(&mut rng, base);
    let per_packet = ScenarioConfig {
        per_packet: true,
        ..runs.clone()
    };
    let (a, b) = (run(&runs), run(&per_packet));
    assert!(a.violations.is_empty(), "seed {seed}: {:?}", a.violations);
    assert_eq!((b.world.rx_run, b.world.tx_run), (0, 0), "seed {seed}");
    let a_ = oxrdma_sim::Report {
        world: oxrdma_sim::WorldStats {
            rx_run: 0,
            tx_run: 0,
            ..a.world
        },
        ..a.clone()
    };
    assert_eq!(
        a_, b,
        "seed {seed}: the run paths and the per-packet paths differ\n  re-run: \
         OXRDMA_SIM_SEED={seed} cargo test --release -p oxrdma-sim --test run_path {test}"
    );
    a
}

#[test]
fn a_scenario_has_the_same_effects_packet_by_packet() {
    let mut taken = 0;
    for seed in seeds(90_000, 60) {
        let a = same_both_ways(seed, "a_scenario_has_the_same_effects", |rng, c| {
            ScenarioConfig {
                net: NetConfig {
                    rx_every: rng.random_range(2_000..50_000),
                    ..c.net
                },
                write_only: rng.random_bool(0.3),
                ..c
            }
        });
        taken += a.world.rx_run;
    }
    assert!(taken > 0, "no packet took the run path");
    println!("{taken} packets took the run path");
}

/// The send side's run path (`Qp::next_request_run`: a message's middle packets built in
/// one call when the driver takes many at once) against the per-packet path, over the
/// same kind of seeded scenarios: the engines write as many packets per call as a
/// driver's batch holds, of random size, in both twins.
#[test]
fn a_scenario_sends_the_same_packets_in_runs() {
    let (mut sent_in_runs, mut sent) = (0, 0);
    for seed in seeds(92_000, 60) {
        let a = same_both_ways(seed, "a_scenario_sends_the_same", |rng, c| ScenarioConfig {
            write_only: rng.random_bool(0.3),
            late_recv: rng.random_bool(0.2),
            tx_slots: rng.random_range(2..=64),
            ..c
        });
        sent_in_runs += a.world.tx_run;
        sent += a.net.sent;
    }
    // Many packets of these workloads are middle packets of long messages (14 % at seeds
    // 92,000-92,059, ACKs and packets sent again counted).
    assert!(
        sent_in_runs * 10 > sent,
        "{sent_in_runs} of {sent} packets sent in runs"
    );
    println!("{sent_in_runs} of {sent} packets sent in runs");
}

/// Requests from `a` to `b` and their responses back, dropped, doubled, swapped and with
/// header bytes changed by a seeded hand (opcode, flags, P_Key, QP, PSN, rkey, address,
/// length), handed over in runs of random length: through `handle_packets` in one pair,
/// one by one in its twin.
/// The twins' packets, completions, memory and counters must stay the same throughout.
#[test]
fn mangled_packets_have_the_same_effects_either_way() {
    let (mut taken, mut succeeded, mut posted) = (0, 0, 0);
    for seed in seeds(91_000, 200) {
        let (t, s) = mangled_twins(seed);
        (taken, succeeded, posted) = (taken + t, succeeded + s, posted + WRS);
    }
    // Many WRs get through: the run path is taken, not only stepped aside for errors.
    assert!(taken > 0, "no packet took the run path");
    assert!(
        succeeded * 3 > posted,
        "{succeeded} of {posted} WRs succeeded"
    );
    println!("{taken} packets took the run path; {succeeded} of {posted} WRs succeeded");
}

const WRS: u64 = 60;

/// A work request of the workload, with offsets in place of addresses (each twin's
/// buffers lie elsewhere).
#[derive(Clone, Copy)]
struct Plan {
    wr_id: u64,
    opcode: WrOpcode,
    local: usize,
    remote: usize,
    len: usize,
    bad_rkey: bool,
}

fn random_wr(rng: &mut ChaCha8Rng, wr_id: u64) -> Plan {
    let (opcode, max) = match rng.random_range(0..10) {
        0..=4 => (WrOpcode::RdmaWrite, 64 << 10),
        5 | 6 => (WrOpcode::RdmaWriteWithImm, 16 << 10),
        7 | 8 => (WrOpcode::Send, 4 << 10),
        _ => (WrOpcode::RdmaRead, 32 << 10),
    };
    Plan {
        wr_id,
        opcode,
        local: rng.random_range(0..64 << 10),
        remote: rng.random_range(0..64 << 10),
        len: rng.random_range(0..=max),
        bad_rkey: rng.random_range(0..600) == 0,
    }
}

fn post(p: &mut Pair, w: &Plan) {
    if matches!(w.opcode, WrOpcode::Send | WrOpcode::RdmaWriteWithImm) {
        let recv = RecvWr {
            wr_id: w.wr_id,
            sges: vec![p.b.sge(128 << 10, 64 << 10)].into(),
        };
        p.world.nodes[1]
            .engine
            .post_recv(p.b.qpn, recv)
            .expect("post recv");
    }
    let mut wr = SendWr::new(
        w.wr_id,
        w.opcode,
        SendData::Sges(vec![p.a.sge(w.local, w.len)].into()),
    );
    wr.remote_addr = p.b.addr(w.remote);
    wr.rkey = p.b.mr.rkey ^ u32::from(w.bad_rkey);
    wr.imm = w.wr_id as u32;
    wr.flags = SendFlags::SIGNALED;
    p.world.nodes[0]
        .engine
        .post_send(p.a.qpn, wr)
        .expect("post send");
}

/// A packet with the virtual address of its RETH or AtomicETH left out (each twin's
/// buffers lie elsewhere).
fn without_address(data: &[u8]) -> Vec<u8> {
    let mut d = data.to_vec();
    d[address_bytes(data)].fill(0);
    // A long packet's ICRC field holds its transport part, which covers the address.
    let end = d.len();
    d[end - 4..].fill(0);
    d
}

/// A change made to a packet on its way.
#[derive(Clone, Copy)]
enum Change {
    /// A header byte flipped with this mask (not the address's upper bytes: each twin's
    /// differ).
    Flip(usize, u8),
    /// This many words more payload, and the RETH's length to match, if there is one.
    Stretch(usize),
}

impl Change {
    fn apply(self, d: &mut Vec<u8>) {
        match self {
            Change::Flip(at, x) => {
                if let Some(b) = d.get_mut(at) {
                    *b ^= x;
                }
            }
            Change::Stretch(words) => {
                let grow = 4 * words;
                d.splice(d.len() - 4..d.len() - 4, std::iter::repeat_n(0x77, grow));
                if Opcode(d[0])
                    .info()
                    .is_ok_and(|i| i.headers.contains(Headers::RETH))
                {
                    let len = u32::from_be_bytes(d[24..28].try_into().unwrap());
                    let len = len.wrapping_add(grow as u32);
                    d[24..28].copy_from_slice(&len.to_be_bytes());
                }
            }
        }
    }
}

/// What one mangled delivery does with the packets sent: which packets go, in which
/// order, and what is changed in them.
fn mangle(rng: &mut ChaCha8Rng, n: usize, per_mille: u32) -> Vec<(usize, Option<Change>)> {
    let mut out = Vec::new();
    for i in 0..n {
        let r = rng.random_range(0..1000);
        if r < per_mille {
            continue;
        }
        let change = (r < 2 * per_mille).then(|| {
            if rng.random_bool(0.2) {
                return Change::Stretch(rng.random_range(1..=800));
            }
            let at = [0, 1, 2, 4, 5, 6, 7, 8, 9, 10, 11, 19, 20, 23, 24, 26, 27];
            Change::Flip(
                at[rng.random_range(0..at.len())],
                rng.random_range(1..=255u8),
            )
        });
        out.push((i, change));
        if r >= 1000 - per_mille {
            out.push((i, None));
        }
    }
    for k in 1..out.len() {
        if rng.random_bool(0.05) {
            out.swap(k - 1, k);
        }
    }
    out
}

/// The same workload on twin pairs; returns how many packets the run path took and how
/// many WRs succeeded.
fn mangled_twins(seed: u64) -> (u64, u64) {
    let opts = PairOptions {
        seed,
        buf_len: 256 << 10,
        ..PairOptions::default()
    };
    let mut twins = [Pair::new(&opts), Pair::new(&opts)];
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    // Of each thousand packets: dropped, changed, doubled, swapped with the next.
    let per_mille = [0, 1, 3, 10][rng.random_range(0..4)];
    let mut slots = vec![0u8; 64 * MAX_PACKET];
    let mut now = twins[0].world.now;
    let gids = [0, 1].map(|n| Gid::from(twins[0].world.nodes[n].ip));
    let fail = |what: &str| {
        format!(
            "seed {seed}: the twins' {what} differ\n  re-run: OXRDMA_SIM_SEED={seed} \
             cargo test --release -p oxrdma-sim --test run_path mangled"
        )
    };
    let (mut posted, mut completed, mut rounds, mut succeeded) = (0, 0, 0, 0);
    while posted < WRS || completed < posted {
        rounds += 1;
        assert!(rounds < 200_000, "{}", fail("progress (neither finished)"));
        if posted < WRS && rng.random_bool(0.3) {
            let wr = random_wr(&mut rng, posted);
            twins.iter_mut().for_each(|p| post(p, &wr));
            posted += 1;
        }
        now += rng.random_range(100..5_000);
        let mut moved = false;
        for (from, to) in [(0, 1), (1, 0)] {
            let sent = twins.each_mut().map(|p| {
                let mut lens = Vec::new();
                let e = &mut p.world.nodes[from].engine;
                e.poll_transmit_many(now, &mut slots, |t| lens.push(t.len));
                let mut at = 0;
                lens.iter()
                    .map(|&n| {
                        at += n;
                        slots[at - n..at].to_vec()
                    })
                    .collect::<Vec<_>>()
            });
            let masked = sent
                .each_ref()
                .map(|s| s.iter().map(|d| without_address(d)).collect::<Vec<_>>());
            assert_eq!(masked[0], masked[1], "{}", fail("packets sent"));
            moved |= !sent[0].is_empty();
            let plan = mangle(&mut rng, sent[0].len(), per_mille);
            let mut runs = Vec::new();
            let mut left = plan.len();
            while left > 0 {
                let n = rng.random_range(1..=16).min(left);
                runs.push(n);
                left -= n;
            }
            for (twin, (p, sent)) in twins.iter_mut().zip(&sent).enumerate() {
                let delivered: Vec<Vec<u8>> = plan
                    .iter()
                    .map(|&(i, change)| {
                        let mut d = sent[i].clone();
                        if let Some(c) = change {
                            c.apply(&mut d);
                        }
                        d
                    })
                    .collect();
                let e = &mut p.world.nodes[to].engine;
                let mut rest = &delivered[..];
                for &n in &runs {
                    let (run, tail) = rest.split_at(n);
                    rest = tail;
                    if twin == 0 {
                        e.handle_packets(now, gids[from], false, run.iter().map(|d| &d[..]));
                    } else {
                        run.iter()
                            .for_each(|d| e.handle_packet_ecn(now, gids[from], d, false));
                    }
                }
            }
        }
        if !moved {
            let due = twins.each_ref().map(|p| {
                p.world
                    .nodes
                    .iter()
                    .map(|n| n.engine.poll_timeout())
                    .collect::<Vec<_>>()
            });
            assert_eq!(due[0], due[1], "{}", fail("timers"));
            if let Some(t) = due[0].iter().flatten().min() {
                now = now.max(*t);
            }
            for p in &mut twins {
                p.world
                    .nodes
                    .iter_mut()
                    .for_each(|n| n.engine.handle_timeout(now));
            }
        }
        let wcs = twins.each_mut().map(|p| {
            let (a, b) = (p.a.cq, p.b.cq);
            let mut wcs = p.world.nodes[0].engine.poll_cq(a, 64).expect("cq");
            wcs.extend(p.world.nodes[1].engine.poll_cq(b, 64).expect("cq"));
            wcs
        });
        assert_eq!(wcs[0], wcs[1], "{}", fail("completions"));
        for wc in wcs[0].iter().filter(|wc| wc.qp_num == twins[0].a.qpn) {
            completed += 1;
            succeeded += u64::from(wc.status == WcStatus::Success);
        }
    }
    let stats = twins.each_ref().map(|p| {
        p.world
            .nodes
            .iter()
            .map(|n| Stats {
                rx_run: 0,
                ..n.engine.stats()
            })
            .collect::<Vec<_>>()
    });
    assert_eq!(stats[0], stats[1], "{}", fail("counters"));
    let memory = twins
        .each_ref()
        .map(|p| [p.a.read(0, 256 << 10), p.b.read(0, 256 << 10)]);
    assert!(memory[0] == memory[1], "{}", fail("memories"));
    let taken = twins[0].world.nodes.iter().map(|n| n.engine.stats().rx_run);
    (taken.sum(), succeeded)
}
