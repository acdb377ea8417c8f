//! `oxrdma threads`: what posting from many threads costs. For each thread count T: two
//! devices on loopback with T connected RC QP pairs, each QP with its own CQ and its own
//! application thread, which keeps `--depth` signaled RDMA WRITEs in flight for `--seconds` and polls
//! its CQ. Reported per thread count: WRITEs per second per QP and in all, and the median
//! time a `post_send` call takes, each as a ratio to the first count in the same run. If
//! posting threads serialized behind one lock, the post time would grow with T.

use anyhow::Context as _;
use oxrdma::{
    Access, CompletionQueue, ConnectOptions, Context, MemoryRegion, QpCap, QpType, QueuePair,
    SendData, SendWr, WcStatus, WrOpcode,
};
use std::net::IpAddr;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug, Clone)]
pub struct ThreadsArgs {
    /// Posting thread counts to measure, comma-separated (the first is the baseline).
    #[arg(long, value_delimiter = ',', default_value = "1,4")]
    pub threads: Vec<usize>,
    /// Bytes per WRITE.
    #[arg(short, long, default_value_t = 8)]
    pub size: usize,
    /// WRITEs each thread keeps in flight.
    #[arg(long, default_value_t = 16)]
    pub depth: u64,
    /// Seconds each thread count runs.
    #[arg(long, default_value_t = 2.0)]
    pub seconds: f64,
    /// The two devices' addresses.
    #[arg(long, default_value = "127.0.0.2")]
    pub a: IpAddr,
    #[arg(long, default_value = "127.0.0.3")]
    pub b: IpAddr,
    /// One JSON object per thread count instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// One thread count's figures.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct ThreadsRow {
    pub threads: usize,
    /// WRITEs completed per second, per QP (the median QP) and in all.
    pub writes_per_qp: f64,
    pub writes_total: f64,
    /// Median and 99th-percentile nanoseconds spent in one `post_send` call.
    pub post_ns: f64,
    pub post_p99_ns: f64,
}

/// One working pair: the client's QP, its CQ and memory, and the server's target region.
struct Lane {
    qp: QueuePair,
    cq: CompletionQueue,
    mr: MemoryRegion,
    remote: (u64, u32),
    _server: (QueuePair, CompletionQueue, MemoryRegion),
}

fn lanes(a: &Context, b: &Context, n: usize, size: usize) -> anyhow::Result<Vec<Lane>> {
    let (pa, pb) = (a.alloc_pd()?, b.alloc_pd()?);
    let mut out = Vec::new();
    for _ in 0..n {
        let (ca, cb) = (a.create_cq(1024)?, b.create_cq(16)?);
        let (ma, mb) = (
            pa.register(size.max(8), Access::ALL)?,
            pb.register(size.max(8), Access::ALL)?,
        );
        let qa = pa.create_qp(&ca, &ca, QpType::Rc, QpCap::default())?;
        let qb = pb.create_qp(&cb, &cb, QpType::Rc, QpCap::default())?;
        let o = ConnectOptions::default();
        qa.connect(&qb.endpoint(), &o)?;
        qb.connect(&qa.endpoint(), &o)?;
        out.push(Lane {
            remote: (mb.addr(), mb.rkey()),
            qp: qa,
            cq: ca,
            mr: ma,
            _server: (qb, cb, mb),
        });
    }
    Ok(out)
}

/// Runs one lane until `until`: returns WRITEs completed and the post_send times (ns).
fn drive(lane: &Lane, size: usize, depth: u64, until: Instant) -> anyhow::Result<(u64, Vec<u32>)> {
    let (mut posted, mut done) = (0u64, 0u64);
    let mut post_ns = Vec::new();
    let mut wcs = Vec::new();
    let mut stall = Instant::now();
    while Instant::now() < until || done < posted {
        while posted - done < depth && Instant::now() < until {
            let mut wr = SendWr::new(
                posted,
                WrOpcode::RdmaWrite,
                SendData::Sges(vec![lane.mr.sge(0, size)?].into()),
            );
            (wr.remote_addr, wr.rkey) = lane.remote;
            posted += 1;
            let t = Instant::now();
            lane.qp.post_send(wr)?;
            post_ns.push(t.elapsed().as_nanos().min(u128::from(u32::MAX)) as u32);
        }
        wcs.clear();
        lane.cq.poll(&mut wcs, 32)?;
        for wc in &wcs {
            anyhow::ensure!(wc.status == WcStatus::Success, "WRITE failed: {wc:?}");
            done = wc.wr_id + 1;
            stall = Instant::now();
        }
        anyhow::ensure!(
            stall.elapsed() < Duration::from_secs(10),
            "no progress for 10 s"
        );
    }
    Ok((done, post_ns))
}

/// The `p` quantile (0..1) of `v`.
fn quantile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    let i = ((v.len() as f64 * p) as usize).min(v.len().saturating_sub(1));
    v.get(i).copied().unwrap_or(0.0)
}

fn measure(args: &ThreadsArgs, a: &Context, b: &Context, n: usize) -> anyhow::Result<ThreadsRow> {
    let lanes = Arc::new(lanes(a, b, n, args.size).context("setting up the QPs")?);
    let start = Arc::new(Barrier::new(n));
    let secs = Duration::from_secs_f64(args.seconds);
    let workers: Vec<_> = (0..n)
        .map(|i| {
            let (lanes, start, args) = (lanes.clone(), start.clone(), args.clone());
            std::thread::spawn(move || {
                start.wait();
                drive(&lanes[i], args.size, args.depth, Instant::now() + secs)
            })
        })
        .collect();
    let mut per_qp = Vec::new();
    let mut posts = Vec::new();
    for w in workers {
        let (done, ns) = w
            .join()
            .map_err(|_| anyhow::anyhow!("a thread panicked"))??;
        per_qp.push(done as f64 / args.seconds);
        posts.extend(ns.into_iter().map(f64::from));
    }
    let total = per_qp.iter().sum();
    Ok(ThreadsRow {
        threads: n,
        writes_per_qp: quantile(&mut per_qp, 0.5),
        writes_total: total,
        post_ns: quantile(&mut posts, 0.5),
        post_p99_ns: quantile(&mut posts, 0.99),
    })
}

pub fn run(args: &ThreadsArgs) -> anyhow::Result<Vec<ThreadsRow>> {
    anyhow::ensure!(
        !args.threads.is_empty() && args.threads.iter().all(|&t| t > 0),
        "--threads needs one or more counts above 0"
    );
    anyhow::ensure!(args.depth > 0, "--depth must be above 0");
    anyhow::ensure!(args.seconds > 0.0, "--seconds must be above 0");
    let a = Context::open(args.a).with_context(|| format!("opening {}", args.a))?;
    let b = Context::open(args.b).with_context(|| format!("opening {}", args.b))?;
    let mut rows = Vec::new();
    if !args.json {
        println!(
            "{:>8} {:>14} {:>6} {:>14} {:>6} {:>8} {:>6} {:>12} {:>6}",
            "threads",
            "WRITE/s per QP",
            "ratio",
            "WRITE/s total",
            "ratio",
            "post ns",
            "ratio",
            "post p99 ns",
            "ratio"
        );
    }
    for &n in &args.threads {
        let r = measure(args, &a, &b, n)?;
        let base: &ThreadsRow = rows.first().unwrap_or(&r);
        if args.json {
            println!("{}", serde_json::to_string(&r)?);
        } else {
            println!(
                "{:>8} {:>14.0} {:>6.2} {:>14.0} {:>6.2} {:>8.0} {:>6.2} {:>12.0} {:>6.2}",
                n,
                r.writes_per_qp,
                r.writes_per_qp / base.writes_per_qp,
                r.writes_total,
                r.writes_total / base.writes_total,
                r.post_ns,
                r.post_ns / base.post_ns,
                r.post_p99_ns,
                r.post_p99_ns / base.post_p99_ns
            );
        }
        rows.push(r);
    }
    Ok(rows)
}
