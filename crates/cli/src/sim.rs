//! `oxrdma sim` and `oxrdma sim-bench`: the engine on a simulated network.

use oxrdma_sim::{run, Expect, NetConfig, Report, ScenarioConfig};
use serde::Serialize;

/// The network and workload a user asked for.
#[derive(Debug, Clone)]
pub struct SimArgs {
    pub seed: u64,
    pub seeds: u64,
    pub nodes: usize,
    pub qps: usize,
    pub wrs: usize,
    pub max_len: usize,
    pub loss: f64,
    pub reorder: f64,
    pub duplicate: f64,
    pub corrupt: f64,
    pub late_recv: bool,
}

#[derive(Debug, Serialize)]
struct RunLine {
    seed: u64,
    wrs: usize,
    succeeded: usize,
    failed: usize,
    bytes: u64,
    virtual_us: f64,
    gbps: f64,
    packets: u64,
    lost: u64,
    violations: Vec<String>,
}

fn config(a: &SimArgs, seed: u64) -> ScenarioConfig {
    let heavy = a.loss + a.corrupt > 0.05;
    ScenarioConfig {
        nodes: a.nodes,
        qp_pairs: a.qps,
        wrs_per_qp: a.wrs,
        max_len: a.max_len,
        late_recv: a.late_recv,
        net: NetConfig {
            loss: a.loss,
            reorder: a.reorder,
            duplicate: a.duplicate,
            corrupt: a.corrupt,
            ..NetConfig::default()
        },
        expect: if heavy {
            Expect::RetryErrorsAllowed
        } else {
            Expect::Clean
        },
        ..ScenarioConfig::new(seed)
    }
}

/// Checks the arguments; returns a one-line reason when they make no sense.
pub fn validate(a: &SimArgs) -> Result<(), String> {
    for (name, v) in [
        ("loss", a.loss),
        ("reorder", a.reorder),
        ("duplicate", a.duplicate),
        ("corrupt", a.corrupt),
    ] {
        if !(0.0..=1.0).contains(&v) {
            return Err(format!(
                "--{name} must be a probability between 0 and 1, not {v}"
            ));
        }
    }
    if !(2..=250).contains(&a.nodes) {
        return Err(format!("--nodes must be 2..=250, not {}", a.nodes));
    }
    if a.qps == 0 || a.qps > 4096 || a.wrs == 0 || a.wrs > 100_000 {
        return Err("--qps must be 1..=4096 and --wrs 1..=100000".into());
    }
    if a.max_len > 64 << 20 {
        return Err("--max-len is at most 64 MiB".into());
    }
    Ok(())
}

/// Runs the scenario for every seed; returns false if any run broke an invariant.
pub fn sim(a: &SimArgs, json: bool) -> bool {
    let mut ok = true;
    for seed in a.seed..a.seed + a.seeds {
        let r = run(&config(a, seed));
        ok &= r.violations.is_empty();
        let line = RunLine {
            seed,
            wrs: r.send_wrs,
            succeeded: r.succeeded,
            failed: r.failed,
            bytes: r.bytes,
            virtual_us: r.elapsed as f64 / 1e3,
            gbps: r.gbps(),
            packets: r.net.sent,
            lost: r.net.lost + r.net.corrupted,
            violations: r.violations,
        };
        if json {
            println!("{}", serde_json::to_string(&line).expect("serialisable"));
        } else {
            println!(
                "seed {:>6}: {}/{} WRs ok, {} failed, {} bytes in {:.1} us virtual ({:.2} Gb/s), {} packets, {} lost/corrupted{}",
                line.seed,
                line.succeeded,
                line.wrs,
                line.failed,
                line.bytes,
                line.virtual_us,
                line.gbps,
                line.packets,
                line.lost,
                if line.violations.is_empty() { String::new() } else { format!(", VIOLATIONS: {}", line.violations.join("; ")) }
            );
        }
    }
    ok
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn bench_run(seed: u64, b: &BenchArgs, loss: f64) -> Report {
    run(&ScenarioConfig {
        qp_pairs: b.qps,
        wrs_per_qp: b.wrs,
        max_len: b.size,
        timeout: b.timeout,
        write_only: true,
        net: NetConfig {
            loss,
            ..NetConfig::default()
        },
        expect: Expect::Clean,
        ..ScenarioConfig::new(seed)
    })
}

/// What `sim-bench` measures.
#[derive(Debug, Clone)]
pub struct BenchArgs {
    pub loss: f64,
    pub size: usize,
    pub runs: u64,
    pub qps: usize,
    pub wrs: usize,
    /// Local ACK timeout exponent (4.096 us x 2^timeout).
    pub timeout: u8,
}

/// RDMA WRITE goodput at `loss` relative to a lossless network, over `runs` seeds, on a
/// 10 Gb/s, 5 us simulated link. Returns false if a run broke an invariant.
pub fn bench(b: &BenchArgs) -> bool {
    let (runs, loss) = (b.runs, b.loss);
    println!(
        "# simulated 10 Gb/s link, 5 us one-way; {} QP pairs (both directions) x {} RDMA WRITEs of {} B per QP; ACK timeout {}",
        b.qps, b.wrs, b.size, b.timeout
    );
    println!(
        "{:>6} {:>14} {:>14} {:>8}",
        "seed",
        "0% Gb/s",
        format!("{}% Gb/s", loss * 100.0),
        "ratio"
    );
    let (mut base, mut lossy, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    let mut ok = true;
    for seed in 0..runs {
        let (a, b) = (bench_run(seed, b, 0.0), bench_run(seed, b, loss));
        ok &= a.violations.is_empty() && b.violations.is_empty();
        let ratio = b.gbps() / a.gbps();
        println!(
            "{seed:>6} {:>14.3} {:>14.3} {ratio:>8.3}",
            a.gbps(),
            b.gbps()
        );
        base.push(a.gbps());
        lossy.push(b.gbps());
        ratios.push(ratio);
    }
    println!(
        "median {:>13.3} {:>14.3} {:>8.3}",
        median(base),
        median(lossy),
        median(ratios)
    );
    ok
}
