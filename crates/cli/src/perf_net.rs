//! `oxrdma perf write-bw|write-lat` between two processes (or hosts): server without a peer
//! address, client with one. The out-of-band exchange is oxrdma's own line format
//! (`oxrdma::exchange`) on TCP; perftest's format is the interop issue's.

use anyhow::{bail, Context as _};
use oxrdma::{
    exchange, Access, CompletionQueue, ConnectOptions, Context, MemoryRegion, PeerInfo, QpCap,
    QpType, QueuePair, SendData, SendFlags, SendWr, WcStatus, WrOpcode,
};
use std::io::{Read, Write};
use std::net::{IpAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// One side, connected.
struct Side {
    _ctx: Context,
    mr: MemoryRegion,
    cq: CompletionQueue,
    qp: QueuePair,
    peer: PeerInfo,
    tcp: TcpStream,
}

fn setup(
    device: IpAddr,
    server: Option<&str>,
    port: u16,
    len: usize,
    depth: u32,
) -> anyhow::Result<Side> {
    let ctx = Context::open(device)?;
    let pd = ctx.alloc_pd()?;
    let mr = pd.register(len, Access::ALL)?;
    let cq = ctx.create_cq(depth * 2)?;
    let cap = QpCap {
        max_send_wr: depth,
        max_recv_wr: 16,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 64,
    };
    let qp = pd.create_qp(&cq, &cq, QpType::Rc, cap)?;
    let mut tcp = match server {
        Some(host) => TcpStream::connect((host, port))
            .with_context(|| format!("cannot reach {host}:{port}"))?,
        None => {
            let l = TcpListener::bind(("0.0.0.0", port))
                .with_context(|| format!("cannot listen on TCP port {port}"))?;
            l.accept()?.0
        }
    };
    let psn = ctx.random_psn();
    let me = PeerInfo {
        endpoint: qp.endpoint(psn),
        addr: mr.addr,
        rkey: mr.rkey,
        len: len as u64,
    };
    let peer = exchange(&mut tcp, &me)?;
    qp.connect(psn, &peer.endpoint, &ConnectOptions::default())?;
    // Both sides connected before anyone sends.
    tcp.write_all(b"R")?;
    tcp.read_exact(&mut [0u8; 1])
        .context("peer went away during setup")?;
    // pd is kept alive by the context's objects; dropping the handle only deallocates once
    // nothing uses it.
    std::mem::forget(pd);
    Ok(Side {
        _ctx: ctx,
        mr,
        cq,
        qp,
        peer,
        tcp,
    })
}

/// The server side: serves until the client says it is done.
fn serve(s: &mut Side) -> anyhow::Result<()> {
    let mut b = [0u8; 1];
    let _ = s.tcp.read(&mut b);
    Ok(())
}

/// Client or server of write-bw; the client returns the measurement.
pub fn write_bw(
    device: IpAddr,
    server: Option<&str>,
    port: u16,
    size: usize,
    iters: u64,
    depth: u32,
) -> anyhow::Result<Option<crate::perf::BwResult>> {
    let mut s = setup(device, server, port, size.max(8), depth)?;
    if server.is_none() {
        serve(&mut s)?;
        return Ok(None);
    }
    let signal_every = u64::from((depth / 2).max(1));
    let (mut posted, mut done) = (0u64, 0u64);
    let mut wcs = Vec::new();
    let start = Instant::now();
    let mut last = Instant::now();
    while done < iters {
        while posted < iters && posted - done < u64::from(depth) {
            let mut wr = SendWr::new(
                posted,
                WrOpcode::RdmaWrite,
                SendData::Sges(vec![s.mr.sge(0, size)]),
            );
            let signaled = (posted + 1) % signal_every == 0 || posted + 1 == iters;
            wr.flags = if signaled {
                SendFlags::SIGNALED
            } else {
                SendFlags::empty()
            };
            (wr.remote_addr, wr.rkey) = (s.peer.addr, s.peer.rkey);
            s.qp.post_send(wr)?;
            posted += 1;
        }
        wcs.clear();
        s.cq.poll(&mut wcs, 64)?;
        if let Some(w) = wcs.iter().find(|w| w.status != WcStatus::Success) {
            bail!("WRITE {} failed: {}", w.wr_id, w.status);
        }
        if let Some(w) = wcs.last() {
            done = w.wr_id + 1;
            last = Instant::now();
        } else if last.elapsed() > Duration::from_secs(30) {
            bail!("no progress for 30 s ({done} of {iters} WRITEs done)");
        }
    }
    let secs = start.elapsed().as_secs_f64();
    s.tcp.write_all(b"D")?;
    let total = size as f64 * iters as f64;
    Ok(Some(crate::perf::BwResult {
        bytes: size,
        iterations: iters,
        bw_avg_gbps: total * 8.0 / secs / 1e9,
        bw_avg_mbps: total / secs / 1e6,
        msg_rate_mpps: iters as f64 / secs / 1e6,
        seconds: secs,
    }))
}

/// Waits until the last byte of the landing area (second `size` bytes) equals `v`.
fn wait_byte(s: &Side, size: usize, v: u8, deadline: Instant) -> anyhow::Result<()> {
    let mut b = [0u8];
    let mut wcs = Vec::new();
    loop {
        s.mr.read(2 * size - 1, &mut b);
        if b[0] == v {
            return Ok(());
        }
        wcs.clear();
        s.cq.poll(&mut wcs, 16)?;
        if let Some(w) = wcs.iter().find(|w| w.status != WcStatus::Success) {
            bail!("WRITE {} failed: {}", w.wr_id, w.status);
        }
        if Instant::now() > deadline {
            bail!("no answer from the peer");
        }
    }
}

fn ping(s: &Side, size: usize, v: u8, i: u64) -> anyhow::Result<()> {
    s.mr.write(size - 1, &[v]);
    let data = if size <= 64 {
        let mut d = vec![0u8; size];
        s.mr.read(0, &mut d);
        SendData::Inline(d)
    } else {
        SendData::Sges(vec![s.mr.sge(0, size)])
    };
    let mut wr = SendWr::new(i, WrOpcode::RdmaWrite, data);
    wr.flags = if i % 16 == 0 {
        SendFlags::SIGNALED
    } else {
        SendFlags::empty()
    };
    (wr.remote_addr, wr.rkey) = (s.peer.addr + size as u64, s.peer.rkey);
    s.qp.post_send(wr)?;
    Ok(())
}

/// Client or server of write-lat (both ping); the client returns the measurement.
pub fn write_lat(
    device: IpAddr,
    server: Option<&str>,
    port: u16,
    size: usize,
    iters: u64,
) -> anyhow::Result<Option<crate::perf::LatResult>> {
    let size = size.max(1);
    let mut s = setup(device, server, port, 2 * size, 64)?;
    let deadline = Instant::now() + Duration::from_secs(120);
    if server.is_none() {
        for i in 1..=iters {
            wait_byte(&s, size, i as u8, deadline)?;
            ping(&s, size, i as u8, i)?;
        }
        serve(&mut s)?;
        return Ok(None);
    }
    let mut samples = Vec::with_capacity(iters as usize);
    for i in 1..=iters {
        let t = Instant::now();
        ping(&s, size, i as u8, i)?;
        wait_byte(&s, size, i as u8, deadline)?;
        samples.push(t.elapsed().as_nanos() as f64 / 2000.0);
    }
    s.tcp.write_all(b"D")?;
    Ok(Some(crate::perf::LatResult::from_samples(
        size, iters, samples,
    )))
}
