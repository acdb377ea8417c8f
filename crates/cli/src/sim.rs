//! `oxrdma sim` and `oxrdma sim-bench`: the engine on a simulated network.

use oxrdma_sim::{run, Expect, NetConfig, Report, ScenarioConfig};
use serde::Serialize;

/// The network and workload a user asked for (`oxrdma sim`).
#[derive(clap::Args, Debug, Clone)]
pub struct SimArgs {
    /// First seed; every run replays exactly from its seed.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Number of seeds to run.
    #[arg(long, default_value_t = 1)]
    pub seeds: u64,
    #[arg(long, default_value_t = 2)]
    pub nodes: usize,
    /// QP pairs (each QP of a pair posts work).
    #[arg(long, default_value_t = 8)]
    pub qps: usize,
    /// Work requests posted by each QP.
    #[arg(long, default_value_t = 32)]
    pub wrs: usize,
    /// Largest message in bytes.
    #[arg(long, default_value_t = 1 << 20)]
    pub max_len: usize,
    /// Probability that a packet is lost.
    #[arg(long, default_value_t = 0.0)]
    pub loss: f64,
    #[arg(long, default_value_t = 0.0)]
    pub reorder: f64,
    #[arg(long, default_value_t = 0.0)]
    pub duplicate: f64,
    #[arg(long, default_value_t = 0.0)]
    pub corrupt: f64,
    /// Post receives slowly, so senders meet RNR NAKs.
    #[arg(long)]
    pub late_recv: bool,
    /// The share of QP ends that speak selective repeat (0: every pair goes back N, as
    /// with rxe).
    #[arg(long, default_value_t = 0.8)]
    pub selective_repeat: f64,
    /// JSON lines instead of text.
    #[arg(long)]
    pub json: bool,
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
        selective_repeat: a.selective_repeat,
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
        ("selective-repeat", a.selective_repeat),
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

/// `oxrdma sim`: checks the arguments, then runs every seed; Ok(false) if any run broke
/// an invariant.
pub fn run_cmd(a: &SimArgs) -> anyhow::Result<bool> {
    validate(a).map_err(anyhow::Error::msg)?;
    Ok(sim(a))
}

/// Runs the scenario for every seed; returns false if any run broke an invariant.
pub fn sim(a: &SimArgs) -> bool {
    let json = a.json;
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
#[derive(clap::Args, Debug, Clone)]
pub struct BenchArgs {
    #[arg(long, default_value_t = 0.01)]
    pub loss: f64,
    /// Message size in bytes.
    #[arg(long, default_value_t = 65536)]
    pub size: usize,
    #[arg(long, default_value_t = 5)]
    pub runs: u64,
    #[arg(long, default_value_t = 4)]
    pub qps: usize,
    /// WRITEs per QP.
    #[arg(long, default_value_t = 64)]
    pub wrs: usize,
    /// Local ACK timeout exponent (4.096 us x 2^timeout), as in ibv_modify_qp.
    #[arg(long, default_value_t = 14)]
    pub timeout: u8,
}

/// `oxrdma sim-bench`: checks the arguments, then measures; Ok(false) if a run broke an
/// invariant.
pub fn bench_cmd(b: &BenchArgs) -> anyhow::Result<bool> {
    let sane = (0.0..1.0).contains(&b.loss)
        && (1..=16 << 20).contains(&b.size)
        && b.runs > 0
        && (1..=1024).contains(&b.qps)
        && b.wrs > 0
        && (1..=31).contains(&b.timeout);
    anyhow::ensure!(
        sane,
        "sim-bench needs 0 <= --loss < 1, --size 1..=16 MiB, --qps 1..=1024, --timeout 1..=31, non-zero --runs and --wrs"
    );
    Ok(bench(b))
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
