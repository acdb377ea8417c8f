//! `oxrdma scale`: what idle QPs cost. For each QP count: two devices on loopback with that
//! many connected, idle RC QP pairs plus one pair that works. Measured on one thread driving
//! both devices (no engine threads, so nothing else competes):
//! - an idle pass of the driver loop (`Link::poll` with nothing to do: one receive
//!   system call, the transmit queue, the timers), and of the engine alone (its transmit
//!   queue and next timeout);
//! - the round trip of an 8 B RDMA WRITE on the working pair (post to completion);
//! - then one WRITE each on the first, middle and last idle pair: idle QPs still work.
//!
//! Medians, and each as a ratio to the first count measured in the same run.

use anyhow::Context as _;
use oxrdma::raw::Device;
use oxrdma_core::{
    Access, QpCap, QpInitAttr, QpType, SendData, SendWr, Sge, SharedBuffer, WcStatus, WrOpcode,
};
use oxrdma_sim::pair::{connect_attrs, PairOptions};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug, Clone)]
pub struct ScaleArgs {
    /// Idle QP counts to measure, comma-separated (the first is the baseline).
    #[arg(long, value_delimiter = ',', default_value = "1,1000,10000")]
    pub qps: Vec<usize>,
    /// Idle passes per sample.
    #[arg(long, default_value_t = 20_000)]
    pub passes: usize,
    /// WRITEs per sample.
    #[arg(long, default_value_t = 2_000)]
    pub writes: usize,
    /// Samples of each figure (the median is reported).
    #[arg(long, default_value_t = 5)]
    pub samples: usize,
    /// The two devices' addresses.
    #[arg(long, default_value = "127.0.0.2")]
    pub a: IpAddr,
    #[arg(long, default_value = "127.0.0.3")]
    pub b: IpAddr,
    /// One JSON object per QP count instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// One QP count's figures.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct ScaleRow {
    pub idle_qps: usize,
    /// Nanoseconds per idle driver pass.
    pub driver_pass_ns: f64,
    /// Nanoseconds per idle engine pass (no system call).
    pub engine_pass_ns: f64,
    /// Median 8 B WRITE round trip, microseconds.
    pub write_rtt_us: f64,
    /// Resident memory the two devices with their QPs added to the process, MiB.
    pub rss_mib: f64,
    /// Idle pairs woken by one WRITE each, all of which completed.
    pub idle_writes: usize,
}

/// One side: a device, its working QP and memory.
struct End {
    dev: Device,
    cq: u32,
    qpn: u32,
    lkey: u32,
    rkey: u32,
    iova: u64,
    _buf: Arc<SharedBuffer>,
}

fn open(ip: IpAddr, seed: u8) -> anyhow::Result<(End, u32, u32)> {
    let mut dev = Device::open(ip, false, [seed; 32])?;
    let e = &mut dev.engine;
    let pd = e.alloc_pd()?;
    let cq = e.create_cq(1024)?;
    let buf = Arc::new(SharedBuffer::new(4096)?);
    let mr = e.reg_mr(pd, buf.clone(), None, Access::ALL)?;
    let qpn = e.create_qp(pd, &rc_init(cq))?;
    let end = End {
        dev,
        cq,
        qpn,
        lkey: mr.lkey,
        rkey: mr.rkey,
        iova: mr.iova,
        _buf: buf,
    };
    Ok((end, pd, cq))
}

fn rc_init(cq: u32) -> QpInitAttr {
    QpInitAttr {
        qp_type: QpType::Rc,
        send_cq: cq,
        recv_cq: cq,
        cap: QpCap::default(),
        sq_sig_all: true,
        srq: None,
    }
}

/// Takes QP `qa` on `a` and `qb` on `b` to RTS, each aimed at the other.
fn connect(a: &mut Device, qa: u32, b: &mut Device, qb: u32) -> anyhow::Result<()> {
    let o = PairOptions::default();
    let (ga, gb) = (a.link.port().gid(), b.link.port().gid());
    for attr in connect_attrs(&o, gb, qb, 1, 1) {
        a.engine.modify_qp(qa, &attr)?;
    }
    for attr in connect_attrs(&o, ga, qa, 1, 1) {
        b.engine.modify_qp(qb, &attr)?;
    }
    Ok(())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

/// Measures one QP count.
pub fn measure(args: &ScaleArgs, idle: usize) -> anyhow::Result<ScaleRow> {
    let rss_before = rss_mib();
    let (mut a, pd_a, cq_a) = open(args.a, 1).context("device a")?;
    let (mut b, pd_b, cq_b) = open(args.b, 2).context("device b")?;
    let mut pairs = Vec::with_capacity(idle);
    for _ in 0..idle {
        let qa = a.dev.engine.create_qp(pd_a, &rc_init(cq_a))?;
        let qb = b.dev.engine.create_qp(pd_b, &rc_init(cq_b))?;
        connect(&mut a.dev, qa, &mut b.dev, qb)?;
        pairs.push((qa, qb));
    }
    connect(&mut a.dev, a.qpn, &mut b.dev, b.qpn)?;
    let rss = rss_mib() - rss_before;

    let mut driver = Vec::new();
    let mut engine = Vec::new();
    let mut rtts = Vec::new();
    for _ in 0..args.samples {
        let t = Instant::now();
        for _ in 0..args.passes {
            a.dev.poll()?;
        }
        driver.push(t.elapsed().as_nanos() as f64 / args.passes as f64);

        let mut buf = vec![0u8; oxrdma_core::MAX_PACKET];
        let t = Instant::now();
        for _ in 0..args.passes {
            let now = a.dev.now();
            anyhow::ensure!(a.dev.engine.poll_transmit(now, &mut buf).is_none());
            std::hint::black_box(a.dev.engine.poll_timeout());
        }
        engine.push(t.elapsed().as_nanos() as f64 / args.passes as f64);

        for i in 0..args.writes {
            rtts.push(write_rtt(&mut a, &mut b, i as u64)?.as_nanos() as f64 / 1000.0);
        }
    }
    let working = (a.qpn, b.qpn);
    let mut woken: Vec<usize> = [0, idle / 2, idle.saturating_sub(1)].into();
    woken.dedup();
    woken.retain(|&i| i < idle);
    for &i in &woken {
        (a.qpn, b.qpn) = pairs[i];
        write_rtt(&mut a, &mut b, u64::MAX - i as u64)
            .with_context(|| format!("a WRITE on idle pair {i} of {idle}"))?;
    }
    (a.qpn, b.qpn) = working;
    Ok(ScaleRow {
        idle_qps: idle,
        idle_writes: woken.len(),
        driver_pass_ns: median(driver),
        engine_pass_ns: median(engine),
        write_rtt_us: median(rtts),
        rss_mib: rss,
    })
}

/// One signalled 8 B WRITE from `a` to `b`, driven to its completion.
fn write_rtt(a: &mut End, b: &mut End, wr_id: u64) -> anyhow::Result<Duration> {
    let sge = Sge {
        addr: a.iova,
        length: 8,
        lkey: a.lkey,
    };
    let mut wr = SendWr::new(wr_id, WrOpcode::RdmaWrite, SendData::Sges(vec![sge].into()));
    wr.remote_addr = b.iova + 8;
    wr.rkey = b.rkey;
    let start = Instant::now();
    a.dev.engine.post_send(a.qpn, wr)?;
    loop {
        a.dev.poll()?;
        b.dev.poll()?;
        if let Some(wc) = a.dev.engine.poll_cq(a.cq, 1)?.pop() {
            anyhow::ensure!(
                wc.status == WcStatus::Success,
                "WRITE failed: {}",
                wc.status
            );
            let _ = b.dev.engine.poll_cq(b.cq, 16)?;
            return Ok(start.elapsed());
        }
        anyhow::ensure!(
            start.elapsed() < Duration::from_secs(5),
            "an 8 B WRITE did not complete in 5 s"
        );
    }
}

/// Runs every count and prints the table (or JSON lines).
pub fn run(args: &ScaleArgs) -> anyhow::Result<Vec<ScaleRow>> {
    anyhow::ensure!(
        !args.qps.is_empty() && args.samples > 0 && args.passes > 0 && args.writes > 0,
        "--qps, --samples, --passes and --writes must not be empty or zero"
    );
    let mut rows = Vec::new();
    if !args.json {
        println!(
            "{:>10} {:>16} {:>7} {:>16} {:>7} {:>14} {:>7} {:>9} {:>12}",
            "idle QPs",
            "driver pass ns",
            "ratio",
            "engine pass ns",
            "ratio",
            "WRITE 8B us",
            "ratio",
            "RSS MiB",
            "idle WRITEs"
        );
    }
    for &n in &args.qps {
        let r = measure(args, n)?;
        let base = *rows.first().unwrap_or(&r);
        if args.json {
            println!("{}", serde_json::to_string(&r)?);
        } else {
            println!(
                "{:>10} {:>16.1} {:>7.2} {:>16.1} {:>7.2} {:>14.2} {:>7.2} {:>9.1} {:>12}",
                n,
                r.driver_pass_ns,
                r.driver_pass_ns / base.driver_pass_ns,
                r.engine_pass_ns,
                r.engine_pass_ns / base.engine_pass_ns,
                r.write_rtt_us,
                r.write_rtt_us / base.write_rtt_us,
                r.rss_mib,
                r.idle_writes
            );
        }
        rows.push(r);
    }
    Ok(rows)
}
