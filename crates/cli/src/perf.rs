//! `oxrdma perf write-bw|write-lat --loopback`: two devices in one process on two loopback
//! addresses, RDMA WRITEs over real UDP between them, perftest-style output.

use anyhow::{bail, Context};
use oxrdma_core::{
    Access, Mtu, QpCap, QpInitAttr, QpType, SendData, SendFlags, SendWr, Sge, SharedBuffer,
    WcStatus, WorkCompletion, WrOpcode,
};
use oxrdma_sim::pair::{connect_attrs, PairOptions};
use oxrdma_udp::Device;
use serde::Serialize;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One end of the loopback test.
struct End {
    dev: Device,
    cq: u32,
    qpn: u32,
    buf: Arc<SharedBuffer>,
    lkey: u32,
    rkey: u32,
    iova: u64,
    psn: u32,
}

fn open(ip: IpAddr, size: usize, depth: u32) -> anyhow::Result<End> {
    let mut seed = [0u8; 32];
    seed[..16].copy_from_slice(
        &(Instant::now().elapsed().as_nanos() ^ std::process::id() as u128).to_le_bytes(),
    );
    let mut dev = Device::open(ip, seed)?;
    let e = &mut dev.engine;
    let pd = e.alloc_pd()?;
    let cq = e.create_cq(depth * 2)?;
    let cap = QpCap {
        max_send_wr: depth,
        max_recv_wr: 16,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 64,
    };
    let qpn = e.create_qp(
        pd,
        &QpInitAttr {
            qp_type: QpType::Rc,
            send_cq: cq,
            recv_cq: cq,
            cap,
            sq_sig_all: false,
        },
    )?;
    let buf = Arc::new(SharedBuffer::new(size.max(8))?);
    let mr = e.reg_mr(pd, buf.clone(), None, Access::ALL)?;
    let psn = e.random_psn();
    Ok(End {
        dev,
        cq,
        qpn,
        buf,
        lkey: mr.lkey,
        rkey: mr.rkey,
        iova: mr.iova,
        psn,
    })
}

fn connect(a: &mut End, b: &mut End) -> anyhow::Result<()> {
    let o = PairOptions {
        mtu: Mtu::Mtu4096,
        timeout: 14,
        max_rd_atomic: 16,
        ..Default::default()
    };
    for attr in connect_attrs(&o, b.dev.port.gid(), b.qpn, b.psn, a.psn) {
        a.dev.engine.modify_qp(a.qpn, &attr)?;
    }
    for attr in connect_attrs(&o, a.dev.port.gid(), a.qpn, a.psn, b.psn) {
        b.dev.engine.modify_qp(b.qpn, &attr)?;
    }
    Ok(())
}

fn write_wr(from: &End, to: &End, size: usize, wr_id: u64, signaled: bool) -> SendWr {
    // `to` gives the defaults; callers set the peer's address and key.
    let sge = Sge {
        addr: from.iova,
        length: size as u32,
        lkey: from.lkey,
    };
    let data = if size <= 64 && size > 0 {
        let mut v = vec![0u8; size];
        from.buf.read(0, &mut v);
        SendData::Inline(v)
    } else {
        SendData::Sges(vec![sge])
    };
    let mut wr = SendWr::new(wr_id, WrOpcode::RdmaWrite, data);
    wr.flags = if signaled {
        SendFlags::SIGNALED
    } else {
        SendFlags::empty()
    };
    wr.remote_addr = to.iova;
    wr.rkey = to.rkey;
    wr
}

fn check(wcs: &[WorkCompletion]) -> anyhow::Result<()> {
    if let Some(w) = wcs.iter().find(|w| w.status != WcStatus::Success) {
        bail!("work request {} failed: {}", w.wr_id, w.status);
    }
    Ok(())
}

/// Runs `server` polling in its own thread until the returned guard is dropped.
struct Server {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<End>>,
}

impl Server {
    fn start(mut end: End) -> Server {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                if end.dev.poll().unwrap_or(0) == 0 {
                    let _ = end.dev.wait(Duration::from_micros(100));
                }
            }
            end
        });
        Server {
            stop,
            thread: Some(thread),
        }
    }
    fn finish(mut self) -> End {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .take()
            .expect("joined once")
            .join()
            .expect("server thread")
    }
}

#[derive(Debug, Serialize)]
pub struct BwResult {
    pub bytes: usize,
    pub iterations: u64,
    pub bw_avg_gbps: f64,
    pub bw_avg_mbps: f64,
    pub msg_rate_mpps: f64,
    pub seconds: f64,
}

/// Client and server devices on the loopback pair, connected, the client capturing to
/// `pcap` if asked.
fn loopback_pair(
    len: usize,
    depth: u32,
    pcap: Option<&std::path::Path>,
) -> anyhow::Result<(End, End)> {
    let (ca, sa) = addrs();
    let mut client = open(ca, len, depth).context("client device")?;
    let mut server = open(sa, len, depth).context("server device")?;
    if let Some(p) = pcap {
        client
            .dev
            .port
            .capture_to(p)
            .with_context(|| format!("cannot write {}", p.display()))?;
    }
    connect(&mut client, &mut server)?;
    Ok((client, server))
}

/// The two loopback addresses the test uses.
pub fn addrs() -> (IpAddr, IpAddr) {
    (
        "127.0.0.2".parse().expect("ip"),
        "127.0.0.3".parse().expect("ip"),
    )
}

/// RDMA WRITE bandwidth: `iters` WRITEs of `size` bytes, `depth` in flight.
pub fn write_bw(
    size: usize,
    iters: u64,
    depth: u32,
    pcap: Option<&std::path::Path>,
) -> anyhow::Result<BwResult> {
    let (mut client, server) = loopback_pair(size, depth, pcap)?;
    let srv_iova = server.iova;
    let srv_rkey = server.rkey;
    let server = Server::start(server);
    let signal_every = (depth / 2).max(1) as u64;
    let (mut posted, mut done) = (0u64, 0u64);
    let start = Instant::now();
    while done < iters {
        while posted < iters && posted - done < u64::from(depth) {
            let signaled = (posted + 1) % signal_every == 0 || posted + 1 == iters;
            let sge = Sge {
                addr: client.iova,
                length: size as u32,
                lkey: client.lkey,
            };
            let mut wr = SendWr::new(posted, WrOpcode::RdmaWrite, SendData::Sges(vec![sge]));
            wr.flags = if signaled {
                SendFlags::SIGNALED
            } else {
                SendFlags::empty()
            };
            wr.remote_addr = srv_iova;
            wr.rkey = srv_rkey;
            client.dev.engine.post_send(client.qpn, wr)?;
            posted += 1;
        }
        let moved = client.dev.poll()?;
        let wcs = client.dev.engine.poll_cq(client.cq, 64)?;
        check(&wcs)?;
        if let Some(last) = wcs.last() {
            done = last.wr_id + 1;
        }
        if moved == 0 && wcs.is_empty() {
            client.dev.wait(Duration::from_micros(50))?;
        }
        if start.elapsed() > Duration::from_secs(120) {
            bail!("no progress: {done} of {iters} WRITEs completed after 120 s");
        }
    }
    let secs = start.elapsed().as_secs_f64();
    server.finish();
    let total = size as f64 * iters as f64;
    Ok(BwResult {
        bytes: size,
        iterations: iters,
        bw_avg_gbps: total * 8.0 / secs / 1e9,
        bw_avg_mbps: total / secs / 1e6,
        msg_rate_mpps: iters as f64 / secs / 1e6,
        seconds: secs,
    })
}

#[derive(Debug, Serialize)]
pub struct LatResult {
    pub bytes: usize,
    pub iterations: u64,
    /// One-way latency (half the round trip), in microseconds.
    pub min_us: f64,
    pub median_us: f64,
    pub avg_us: f64,
    pub p99_us: f64,
    pub p99_9_us: f64,
}

/// Spins until the last byte of the landing area (the second `size` bytes of `end`'s buffer)
/// equals `want`, driving the device.
fn wait_byte(end: &mut End, size: usize, want: u8, deadline: Instant) -> anyhow::Result<()> {
    let mut b = [0u8];
    loop {
        end.buf.read(2 * size - 1, &mut b);
        if b[0] == want {
            return Ok(());
        }
        end.dev.poll()?;
        check(&end.dev.engine.poll_cq(end.cq, 64)?)?;
        if Instant::now() > deadline {
            bail!("no answer from the peer");
        }
    }
}

/// Sets the last source byte to `v` and WRITEs the source area into the peer's landing area.
fn ping(
    end: &mut End,
    size: usize,
    v: u8,
    i: u64,
    peer_iova: u64,
    peer_rkey: u32,
) -> anyhow::Result<()> {
    end.buf.write(size - 1, &[v]);
    let wr = write_wr(end, end, size, i, i % 16 == 0);
    let wr = SendWr {
        remote_addr: peer_iova + size as u64,
        rkey: peer_rkey,
        ..wr
    };
    end.dev.engine.post_send(end.qpn, wr)?;
    end.dev.poll()?;
    Ok(())
}

/// RDMA WRITE ping-pong latency: each side writes `size` bytes into the other's memory when
/// it sees the other's write land in its own (like ib_write_lat). Both sides spin.
pub fn write_lat(
    size: usize,
    iters: u64,
    pcap: Option<&std::path::Path>,
) -> anyhow::Result<LatResult> {
    let size = size.max(1);
    // Each buffer: `size` bytes to send from, then `size` bytes the peer writes into.
    let (mut client, mut server) = loopback_pair(2 * size, 64, pcap)?;
    let (c_iova, c_rkey) = (client.iova, client.rkey);
    let (s_iova, s_rkey) = (server.iova, server.rkey);
    let deadline = Instant::now() + Duration::from_secs(120);
    let echo = std::thread::spawn(move || -> anyhow::Result<()> {
        for i in 1..=iters {
            wait_byte(&mut server, size, i as u8, deadline)?;
            ping(&mut server, size, i as u8, i, c_iova, c_rkey)?;
        }
        // Keep answering until our last WRITEs are acknowledged.
        let until = Instant::now() + Duration::from_millis(50);
        while Instant::now() < until {
            server.dev.poll()?;
        }
        Ok(())
    });
    let mut samples = Vec::with_capacity(iters as usize);
    for i in 1..=iters {
        let t = Instant::now();
        ping(&mut client, size, i as u8, i, s_iova, s_rkey)?;
        wait_byte(&mut client, size, i as u8, deadline)?;
        samples.push(t.elapsed().as_nanos() as f64 / 2000.0);
    }
    echo.join()
        .map_err(|_| anyhow::anyhow!("echo thread panicked"))??;
    Ok(LatResult::from_samples(size, iters, samples))
}

impl LatResult {
    /// Summarises one-way latency samples (microseconds).
    pub fn from_samples(bytes: usize, iterations: u64, mut samples: Vec<f64>) -> LatResult {
        samples.sort_by(f64::total_cmp);
        let pct = |p: f64| samples[((samples.len() as f64 * p) as usize).min(samples.len() - 1)];
        LatResult {
            bytes,
            iterations,
            min_us: samples[0],
            median_us: pct(0.5),
            avg_us: samples.iter().sum::<f64>() / samples.len() as f64,
            p99_us: pct(0.99),
            p99_9_us: pct(0.999),
        }
    }
}
