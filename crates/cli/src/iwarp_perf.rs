//! `oxrdma iwarp-perf`: RDMA WRITE bandwidth and latency over iWARP (TCP), two processes,
//! each an engine whose one iWARP QP its own TCP connection drives (`oxrdma_tcp`). Each
//! side's MPA private data carries its buffer's address, STag and length, so nothing else
//! is exchanged. A measure of the data path, before iWARP devices are in the API.

use anyhow::{bail, Context as _};
use oxrdma_core::iwarp::SetupConfig;
use oxrdma_core::{
    Access, DeviceAttr, Engine, EngineConfig, Gid, MemoryRegion, Mtu, QpAttr, QpCap, QpInitAttr,
    QpState, QpType, RecvWr, SendData, SendFlags, SendWr, Sge, SharedBuffer, WcStatus,
};
use oxrdma_tcp::{mpa, Request, Streams};
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What to measure.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum IwarpTest {
    /// WRITEs of `--size` bytes, `--depth` at once: goodput.
    WriteBw,
    /// 8-byte WRITEs, ping-pong: half the round trip.
    WriteLat,
}

/// `oxrdma iwarp-perf`.
#[derive(clap::Args, Debug, Clone)]
pub struct IwarpPerfArgs {
    /// The test.
    #[arg(value_enum)]
    pub test: IwarpTest,
    /// The server (none: be the server).
    pub server: Option<IpAddr>,
    /// TCP port.
    #[arg(short, long, default_value_t = 18516)]
    pub port: u16,
    /// The address the server listens on.
    #[arg(long, default_value = "0.0.0.0")]
    pub bind: IpAddr,
    /// Bytes per WRITE (write-bw).
    #[arg(short, long, default_value_t = 65536)]
    pub size: u32,
    /// WRITEs (or round trips).
    #[arg(short = 'n', long, default_value_t = 20_000)]
    pub iters: u64,
    /// WRITEs outstanding at once (write-bw).
    #[arg(long, default_value_t = 32)]
    pub depth: u32,
    /// write-bw: WRITE for this many seconds instead of `--iters` WRITEs.
    #[arg(short = 'D', long)]
    pub duration: Option<f64>,
    /// Idle iWARP connections opened beside the measured one (on both sides: give both
    /// the same number), each with its QP on the same engine: what a driver's pass over
    /// the streams must not pay for.
    #[arg(long, default_value_t = 0)]
    pub idle: u32,
    /// One JSON object instead of a line of text.
    #[arg(long)]
    pub json: bool,
}

const TIMEOUT: Duration = Duration::from_secs(10);

/// One side: an engine, its QP and buffer, the stream that drives it.
struct Side {
    e: Engine,
    pd: u32,
    streams: Streams,
    qpn: u32,
    /// Where WRs are posted, as the API's threads post them: into the QP's ring, which
    /// the stream's next pass takes.
    post: Arc<oxrdma_core::QpPost>,
    scq: u32,
    rcq: u32,
    mr: MemoryRegion,
    buf: Arc<SharedBuffer>,
    /// The peer's buffer: address, STag, length.
    peer: (u64, u32, u64),
}

impl Side {
    fn new(ip: IpAddr, len: usize, depth: u32) -> anyhow::Result<Side> {
        let config = EngineConfig {
            gids: vec![Gid::from(ip)],
            max_mtu: Mtu::Mtu4096,
            attr: DeviceAttr::default(),
            selective_repeat: false,
            slot: None,
            peer_limits: Default::default(),
        };
        let mut seed = [0u8; 32];
        std::io::Read::read_exact(&mut std::fs::File::open("/dev/urandom")?, &mut seed)?;
        let mut e = Engine::new(config, seed);
        let pd = e.alloc_pd()?;
        let (scq, rcq) = (e.create_cq(4 * depth + 16)?, e.create_cq(16)?);
        let buf = Arc::new(SharedBuffer::new(len)?);
        let mr = e.reg_mr(pd, buf.clone(), None, Access::ALL)?;
        let cap = QpCap {
            max_send_wr: 2 * depth + 8,
            max_recv_wr: 8,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        let qpn = qp_in_init(&mut e, pd, scq, rcq, cap)?;
        let post = e.qp_post(qpn)?;
        Ok(Side {
            e,
            pd,
            streams: Streams::new()?,
            qpn,
            post,
            scq,
            rcq,
            mr,
            buf,
            peer: (0, 0, 0),
        })
    }

    /// The buffer as the peer names it: address, STag, length (MPA private data).
    fn offer(&self) -> Vec<u8> {
        let mut v = self.mr.iova.to_be_bytes().to_vec();
        v.extend(self.mr.rkey.to_be_bytes());
        v.extend((self.buf.len() as u64).to_be_bytes());
        v
    }

    fn attach(&mut self, est: mpa::Established) -> anyhow::Result<()> {
        let p = &est.negotiated.peer_private_data;
        if p.len() < 20 {
            bail!("the peer's MPA private data does not name its buffer");
        }
        let u64_at = |i: usize| u64::from_be_bytes(p[i..i + 8].try_into().expect("8 bytes"));
        let rkey = u32::from_be_bytes(p[8..12].try_into().expect("4 bytes"));
        self.peer = (u64_at(0), rkey, u64_at(12));
        self.take_stream(self.qpn, est)
    }

    /// A QP of its own on this engine for an idle connection, in INIT.
    fn idle_qp(&mut self) -> anyhow::Result<u32> {
        let cap = QpCap {
            max_send_wr: 4,
            max_recv_wr: 4,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        qp_in_init(&mut self.e, self.pd, self.scq, self.rcq, cap)
    }

    /// QP `qpn`'s stream, set up, driven from now on.
    fn take_stream(&mut self, qpn: u32, est: mpa::Established) -> anyhow::Result<()> {
        self.e.iwarp_established(qpn, &est.stream())?;
        self.streams.attach(qpn, est.sock, &est.early)?;
        Ok(())
    }

    fn write(
        &mut self,
        id: u64,
        from: u64,
        len: u32,
        to: u64,
        signaled: bool,
    ) -> anyhow::Result<()> {
        let sge = Sge {
            addr: self.mr.iova + from,
            length: len,
            lkey: self.mr.lkey,
        };
        let mut w = SendWr::new(
            id,
            oxrdma_core::WrOpcode::RdmaWrite,
            SendData::Sges(oxrdma_core::SgeList::from_slice(&[sge])),
        );
        (w.remote_addr, w.rkey) = (self.peer.0 + to, self.peer.1);
        if signaled {
            w.flags = SendFlags::SIGNALED;
        }
        self.post.post_send(w)?;
        Ok(())
    }

    /// Completions on the send CQ, each checked.
    fn reap(&mut self) -> anyhow::Result<usize> {
        let mut bad = None;
        let n = self.e.poll_cq_each(self.scq, 64, |w| {
            if w.status != WcStatus::Success {
                bad.get_or_insert((w.wr_id, w.status));
            }
        })?;
        if let Some((id, status)) = bad {
            bail!("WR {id} completed with {status:?}");
        }
        Ok(n)
    }

    fn value(&self, at: usize) -> u64 {
        let mut b = [0u8; 8];
        self.buf.read(at, &mut b);
        u64::from_le_bytes(b)
    }

    fn alive(&self) -> anyhow::Result<()> {
        match self.e.qp_state(self.qpn)? {
            QpState::Rts => Ok(()),
            s => bail!("the QP went to {s:?} (the peer went away or TERMINATEd)"),
        }
    }
}

/// Runs the test on either side.
pub fn run(a: &IwarpPerfArgs) -> anyhow::Result<()> {
    let len = (a.size as usize).max(8) * 2;
    let (mut side, role) = match a.server {
        None => {
            let l = TcpListener::bind((a.bind, a.port))
                .with_context(|| format!("cannot listen on {}:{}", a.bind, a.port))?;
            let (sock, _) = l.accept()?;
            let mut side = Side::new(sock.local_addr()?.ip(), len, a.depth)?;
            let cfg = SetupConfig {
                private_data: side.offer(),
                ..Default::default()
            };
            let est = Request::read(sock, cfg, TIMEOUT)?.accept()?;
            side.attach(est)?;
            for _ in 0..a.idle {
                let (sock, _) = l.accept()?;
                let qpn = side.idle_qp()?;
                let est = Request::read(sock, SetupConfig::default(), TIMEOUT)?.accept()?;
                side.take_stream(qpn, est)?;
            }
            (side, "server")
        }
        Some(ip) => {
            let addr = SocketAddr::new(ip, a.port);
            let local = oxrdma_udp::link::route_source(ip).unwrap_or(ip);
            let mut side = Side::new(local, len, a.depth)?;
            let cfg = SetupConfig {
                private_data: side.offer(),
                ..Default::default()
            };
            let est = mpa::connect(addr, cfg, TIMEOUT)
                .with_context(|| format!("cannot reach the iwarp-perf server at {addr}"))?;
            side.attach(est)?;
            for _ in 0..a.idle {
                let qpn = side.idle_qp()?;
                side.take_stream(qpn, mpa::connect(addr, SetupConfig::default(), TIMEOUT)?)?;
            }
            (side, "client")
        }
    };
    let started = Instant::now();
    let client = role == "client";
    let mut iters = a.iters;
    match (a.test, client) {
        (IwarpTest::WriteBw, true) => iters = write_bw(&mut side, a)?,
        (IwarpTest::WriteBw, false) => await_done(&mut side)?,
        (IwarpTest::WriteLat, _) => ping_pong(&mut side, a.iters, client)?,
    }
    let secs = started.elapsed().as_secs_f64();
    let bytes = u64::from(a.size) * iters;
    let (gbps, usec) = match a.test {
        IwarpTest::WriteBw => (bytes as f64 * 8.0 / secs / 1e9, None),
        IwarpTest::WriteLat => (0.0, Some(secs * 1e6 / (2.0 * a.iters as f64))),
    };
    if a.json {
        let v = serde_json::json!({
            "test": format!("{:?}", a.test),
            "role": role,
            "size": a.size,
            "iterations": iters,
            "seconds": secs,
            "gbps": gbps,
            "half_rtt_us": usec,
        });
        println!("{v}");
    } else {
        match usec {
            Some(us) => println!(
                "iwarp write-lat ({role}): 8 B half round trip {us:.2} us, {} round trips",
                a.iters
            ),
            None => println!(
                "iwarp write-bw ({role}): {} B WRITEs: {gbps:.2} Gb/s, {} WRITEs in {secs:.3} s",
                a.size, a.iters
            ),
        }
    }
    Ok(())
}

/// An RC iWARP QP on `e` with `cap`, in INIT with remote access.
fn qp_in_init(e: &mut Engine, pd: u32, scq: u32, rcq: u32, cap: QpCap) -> anyhow::Result<u32> {
    let init = QpInitAttr {
        qp_type: QpType::Rc,
        send_cq: scq,
        recv_cq: rcq,
        cap,
        sq_sig_all: false,
        srq: None,
    };
    let qpn = e.create_iwarp_qp(pd, &init)?;
    let attr = QpAttr {
        qp_state: Some(QpState::Init),
        qp_access_flags: Some(Access::REMOTE),
        ..Default::default()
    };
    e.modify_qp(qpn, &attr)?;
    Ok(qpn)
}

/// The client: `iters` WRITEs, `depth` outstanding, then a SEND that tells the server.
fn write_bw(s: &mut Side, a: &IwarpPerfArgs) -> anyhow::Result<u64> {
    let (size, depth) = (u64::from(a.size), u64::from(a.depth));
    let (mut posted, mut done) = (0u64, 0u64);
    let end = Instant::now() + Duration::from_secs(600);
    let stop = a
        .duration
        .map(|d| Instant::now() + Duration::from_secs_f64(d));
    let mut target = if stop.is_some() { u64::MAX } else { a.iters };
    while done < target {
        if stop.is_some_and(|t| Instant::now() >= t) {
            target = posted; // time is up: what was posted completes
        }
        while posted < target && posted - done < depth {
            let at = (posted % 2) * size;
            s.write(posted, at, a.size, at, true)?;
            posted += 1;
        }
        let moved = s.streams.poll(&mut s.e);
        done += s.reap()? as u64;
        if moved == 0 {
            s.alive()?;
            if Instant::now() > end {
                bail!("stalled after {done} WRITEs");
            }
            // The socket is full: sleep until it has room (the kernel's TCP needs the CPU
            // more than a spinning sender does, on two cores above all).
            s.streams.wait(Duration::from_millis(1))?;
        }
    }
    // A WRITE completes once TCP has it: the server's answer to this SEND says every
    // byte arrived (the time measured is delivery's).
    s.e.post_recv(
        s.qpn,
        RecvWr {
            wr_id: 1,
            sges: Default::default(),
        },
    )?;
    let mut send = SendWr::new(
        u64::MAX,
        oxrdma_core::WrOpcode::Send,
        SendData::Sges(Default::default()),
    );
    send.flags = SendFlags::SIGNALED;
    s.e.post_send(s.qpn, send)?;
    wait_for(s, true, |s| {
        s.reap()?;
        Ok(!s.e.poll_cq(s.rcq, 1)?.is_empty())
    })?;
    Ok(done)
}

/// The server of write-bw: serves until the client's SEND.
fn await_done(s: &mut Side) -> anyhow::Result<()> {
    let r = RecvWr {
        wr_id: 1,
        sges: Default::default(),
    };
    s.e.post_recv(s.qpn, r)?;
    wait_for(s, true, |s| {
        let wcs = s.e.poll_cq(s.rcq, 1)?;
        Ok(!wcs.is_empty())
    })?;
    // The answer, and the time for it to leave before the stream closes.
    let mut send = SendWr::new(
        1,
        oxrdma_core::WrOpcode::Send,
        SendData::Sges(Default::default()),
    );
    send.flags = SendFlags::SIGNALED;
    s.e.post_send(s.qpn, send)?;
    wait_for(s, true, |s| Ok(s.reap()? > 0))?;
    for _ in 0..100 {
        s.streams.poll(&mut s.e);
    }
    Ok(())
}

/// 8-byte WRITEs in turn: the client writes `i` into the server's first word, the server
/// answers with `i` into the client's, each spinning on its own memory.
fn ping_pong(s: &mut Side, iters: u64, client: bool) -> anyhow::Result<()> {
    for i in 1..=iters {
        if client {
            s.buf.write(8, &i.to_le_bytes());
            s.write(i, 8, 8, 0, i % 64 == 0)?;
        }
        wait_for(s, false, |s| Ok(s.value(0) == i))?;
        if !client {
            s.buf.write(8, &i.to_le_bytes());
            s.write(i, 8, 8, 0, i % 64 == 0)?;
        }
        s.reap()?;
    }
    // The last WRITE out before the stream closes.
    wait_for(s, false, |s| {
        s.reap()?;
        Ok(!s.e.iwarp_wants_to_send(s.qpn))
    })?;
    for _ in 0..100 {
        s.streams.poll(&mut s.e);
    }
    Ok(())
}

/// Drives the stream until `done`: spinning (the latency test measures the data path, not
/// waking up), or with `sleep` sleeping on the stream when nothing moves (the bandwidth
/// test's receiver leaves the CPU to the kernel's TCP).
fn wait_for(
    s: &mut Side,
    sleep: bool,
    mut done: impl FnMut(&mut Side) -> anyhow::Result<bool>,
) -> anyhow::Result<()> {
    let end = Instant::now() + TIMEOUT;
    loop {
        if done(s)? {
            return Ok(());
        }
        if s.streams.poll(&mut s.e) == 0 {
            s.alive()?;
            if Instant::now() > end {
                bail!("nothing moved for {TIMEOUT:?}");
            }
            if sleep {
                s.streams.wait(Duration::from_millis(1))?;
            }
        }
    }
}
