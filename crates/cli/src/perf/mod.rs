//! `oxrdma perf`: perftest-style benchmarks (write, read, send, atomic; bandwidth and
//! latency) over the public API, between two processes or two loopback devices in one.
//!
//! The server is the side without a peer address. Both sides open a device, register one
//! region per QP, exchange endpoints with [`oxrdma::exchange`] and then follow the client
//! over a line-based control channel on the same TCP connection (see `side.rs`).

mod bw;
mod cli;
mod cpu;
mod ctl;
mod lat;
pub mod perftest;
mod report;
mod session;
mod side;

pub use cli::{PerfCli, TestName};
pub use report::{header, row, BwResult, LatResult, Report};

use anyhow::{bail, Context as _};
use std::net::{IpAddr, TcpListener};
use std::path::PathBuf;
use std::time::Duration;

/// The operation a test measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Verb {
    Write,
    Read,
    Send,
    Atomic,
}

/// Bandwidth (a stream of WRs in flight) or latency (one at a time).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Bw,
    Lat,
}

/// The transport of the test's QPs (perftest's `-c`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Conn {
    #[value(name = "RC", alias = "rc")]
    Rc,
    #[value(name = "UC", alias = "uc")]
    Uc,
    #[value(name = "UD", alias = "ud")]
    Ud,
}

impl Conn {
    pub fn qp_type(self) -> oxrdma::QpType {
        match self {
            Conn::Rc => oxrdma::QpType::Rc,
            Conn::Uc => oxrdma::QpType::Uc,
            Conn::Ud => oxrdma::QpType::Ud,
        }
    }

    /// As perftest spells it.
    pub fn label(self) -> &'static str {
        match self {
            Conn::Rc => "RC",
            Conn::Uc => "UC",
            Conn::Ud => "UD",
        }
    }
}

/// Which atomic the atomic tests post.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum AtomicOp {
    FetchAndAdd,
    CmpAndSwap,
}

/// Everything one run needs.
#[derive(Debug, Clone)]
pub struct PerfArgs {
    pub verb: Verb,
    pub kind: Kind,
    /// Message sizes to run, in order (one unless `-a`).
    pub sizes: Vec<usize>,
    pub iters: u64,
    /// Run each size for this long instead of `iters` WRs.
    pub duration: Option<Duration>,
    pub qps: u32,
    /// The QPs' transport (`-c`).
    pub conn: Conn,
    pub tx_depth: u32,
    pub rx_depth: u32,
    /// Path MTU asked for (`-m`); the port's active MTU if not given. The two sides use
    /// the smaller of what each offers.
    pub mtu: Option<oxrdma::Mtu>,
    pub atomic: AtomicOp,
    pub inline_size: u32,
    /// This side's device address.
    pub device: IpAddr,
    /// The server (client side only).
    pub server: Option<String>,
    pub port: u16,
    pub pcap: Option<PathBuf>,
    /// Show a progress bar on a terminal.
    pub progress: bool,
    /// Speak perftest's TCP 18515 exchange instead of ours (the peer is perftest).
    pub perftest: bool,
    /// Bandwidth in Gb/s in the perftest REPORT instead of MB/s (`--report_gbits`).
    pub report_gbits: bool,
    /// Report the CPU time each side spends per GB moved (bandwidth tests).
    pub cpu_util: bool,
    /// Sleep on CQ events instead of polling (`-e`, bandwidth tests).
    pub events: bool,
    /// Connect the QPs through the RDMA CM (`-R`).
    pub rdma_cm: bool,
    /// Secure QPs with this AEAD (`--secure`).
    pub secure: Option<oxrdma::Suite>,
}

impl PerfArgs {
    /// The WR opcode the test posts.
    pub fn opcode(&self) -> oxrdma::WrOpcode {
        use oxrdma::WrOpcode;
        match (self.verb, self.atomic) {
            (Verb::Write, _) => WrOpcode::RdmaWrite,
            (Verb::Read, _) => WrOpcode::RdmaRead,
            (Verb::Send, _) => WrOpcode::Send,
            (Verb::Atomic, AtomicOp::FetchAndAdd) => WrOpcode::AtomicFetchAndAdd,
            (Verb::Atomic, AtomicOp::CmpAndSwap) => WrOpcode::AtomicCmpAndSwp,
        }
    }

    /// The test's name, as perftest would call it (`write_bw`, `atomic_lat`, …).
    pub fn name(&self) -> String {
        let v = format!("{:?}", self.verb).to_lowercase();
        let k = match self.kind {
            Kind::Bw => "bw",
            Kind::Lat => "lat",
        };
        format!("{v}_{k}")
    }

    /// Bytes each QP's region needs.
    fn slot(&self) -> usize {
        let mut max = self.sizes.iter().copied().max().unwrap_or(8).max(8);
        if self.conn == Conn::Ud {
            // A UD message is one packet (at most 4 KiB), received behind a 40-byte GRH.
            max = max.min(4096) + oxrdma_core::grh::GRH_LEN;
        }
        match (self.verb, self.kind) {
            // Send from the first half; the peer's messages land in the second.
            (Verb::Write | Verb::Send, Kind::Lat) => 2 * max,
            _ => max,
        }
    }

    /// Rejects combinations that cannot run, with one clear message.
    pub fn validate(&self) -> anyhow::Result<()> {
        match (self.conn, self.verb) {
            (Conn::Uc, Verb::Read | Verb::Atomic) => {
                bail!("UC has no READ or atomics: -c UC runs the write and send tests")
            }
            (Conn::Ud, v) if v != Verb::Send => {
                bail!("UD carries SENDs only: -c UD runs send-bw and send-lat")
            }
            _ => {}
        }
        let max = 1usize << 30;
        if self.sizes.iter().any(|&s| s == 0 || s > max) {
            bail!("message sizes must be 1 B ..= 1 GiB");
        }
        if self.verb == Verb::Atomic && self.sizes.iter().any(|&s| s != 8) {
            bail!("atomic tests move 8 bytes (-s 8)");
        }
        if self.iters == 0 {
            bail!("-n must be at least 1");
        }
        if self.rdma_cm && self.perftest {
            bail!("-R connects two oxrdma sides through the RDMA CM; with --perftest it is not supported yet");
        }
        if self.secure.is_some() && (self.conn != Conn::Rc || self.perftest || self.rdma_cm) {
            bail!(
                "--secure is for RC QPs between two oxrdma sides connected by the TCP \
                 exchange (not -c UC/UD, --perftest or -R yet)"
            );
        }
        if self.cpu_util && (self.kind != Kind::Bw || self.perftest) {
            bail!("--cpu-util measures the bandwidth tests between two oxrdma sides");
        }
        if self.events && (self.kind != Kind::Bw || self.perftest) {
            bail!("-e sleeps on CQ events in the bandwidth tests between two oxrdma sides");
        }
        if self.kind == Kind::Lat && self.qps != 1 {
            bail!("latency tests use one QP (-q 1)");
        }
        if !(1..=1024).contains(&self.qps) {
            bail!("-q must be 1..=1024");
        }
        if !(1..=16_384).contains(&self.tx_depth) || !(1..=16_384).contains(&self.rx_depth) {
            bail!("-t and -r must be 1..=16384");
        }
        if self
            .duration
            .is_some_and(|d| d.is_zero() || d > Duration::from_secs(3600))
        {
            bail!("-D must be 1..=3600 seconds");
        }
        if (self.slot() as u64) * u64::from(self.qps) > 16 << 30 {
            bail!("-q x message size needs more than 16 GiB of registered memory");
        }
        Ok(())
    }
}

/// The sizes this run keeps once the path MTU is agreed: a UD message is one packet, so
/// `-a` stops at the MTU and a larger `-s` is refused.
pub fn sizes_for_mtu(args: &PerfArgs, mtu: oxrdma::Mtu) -> anyhow::Result<Vec<usize>> {
    let max = mtu.bytes();
    if args.conn != Conn::Ud || args.sizes.iter().all(|&s| s <= max) {
        return Ok(args.sizes.clone());
    }
    if args.sizes.len() == 1 {
        bail!(
            "a UD message is one packet: at most the path MTU, {max} B (asked for {} B)",
            args.sizes[0]
        );
    }
    Ok(args.sizes.iter().copied().filter(|&s| s <= max).collect())
}

/// The sizes `-a` runs: 2 B to 8 MiB in powers of two (8 B only for atomics).
pub fn all_sizes(verb: Verb) -> Vec<usize> {
    if verb == Verb::Atomic {
        return vec![8];
    }
    (1..=23).map(|p| 1usize << p).collect()
}

/// Runs one side; the client calls `each` with the result of every size. The server
/// returns when the client says goodbye.
pub fn run(args: &PerfArgs, each: &mut dyn FnMut(&Report)) -> anyhow::Result<()> {
    args.validate()?;
    if args.perftest {
        return perftest::run(args, each);
    }
    match &args.server {
        None => {
            let l = crate::listen(args.port)
                .with_context(|| format!("cannot listen on TCP port {}", args.port))?;
            session::serve(args, l)
        }
        Some(host) => session::client(args, host, args.port, each),
    }
}

/// Runs both sides in this process on two loopback devices (the server on 127.0.0.3 in a
/// thread, the client on 127.0.0.2), the out-of-band exchange on a free TCP port.
pub fn run_loopback(args: &PerfArgs, each: &mut dyn FnMut(&Report)) -> anyhow::Result<()> {
    args.validate()?;
    if args.perftest {
        bail!("--perftest talks to a perftest peer; it does not combine with --loopback");
    }
    let (client_ip, server_ip) = loopback_addrs();
    let l = TcpListener::bind((server_ip, 0)).context("cannot listen on a loopback TCP port")?;
    let port = l.local_addr()?.port();
    let mut srv = args.clone();
    (srv.device, srv.server, srv.pcap, srv.progress) = (server_ip, None, None, false);
    let server = std::thread::Builder::new()
        .name("perf-server".into())
        .spawn(move || session::serve(&srv, l))?;
    let mut cli = args.clone();
    (cli.device, cli.server) = (client_ip, Some(server_ip.to_string()));
    let r = session::client(&cli, &server_ip.to_string(), port, each);
    let s = server
        .join()
        .map_err(|_| anyhow::anyhow!("the server thread panicked"))?;
    r.and(s.context("server side"))
}

/// The two loopback addresses `--loopback` uses (client, server).
pub fn loopback_addrs() -> (IpAddr, IpAddr) {
    (IpAddr::from([127, 0, 0, 2]), IpAddr::from([127, 0, 0, 3]))
}
