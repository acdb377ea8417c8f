//! The `oxrdma perf` command line (perftest's flags where they make sense).

use super::{all_sizes, header, row, AtomicOp, BwResult, Conn, Kind, PerfArgs, Report, Verb};
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

/// The eight tests, named as `ib_<name>` is in perftest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TestName {
    WriteBw,
    ReadBw,
    SendBw,
    AtomicBw,
    WriteLat,
    ReadLat,
    SendLat,
    AtomicLat,
}

impl TestName {
    fn parts(self) -> (Verb, Kind) {
        match self {
            TestName::WriteBw => (Verb::Write, Kind::Bw),
            TestName::ReadBw => (Verb::Read, Kind::Bw),
            TestName::SendBw => (Verb::Send, Kind::Bw),
            TestName::AtomicBw => (Verb::Atomic, Kind::Bw),
            TestName::WriteLat => (Verb::Write, Kind::Lat),
            TestName::ReadLat => (Verb::Read, Kind::Lat),
            TestName::SendLat => (Verb::Send, Kind::Lat),
            TestName::AtomicLat => (Verb::Atomic, Kind::Lat),
        }
    }
}

#[derive(clap::Args, Debug)]
pub struct PerfCli {
    /// The test to run.
    #[arg(value_enum)]
    test: TestName,
    /// The server to connect to (client side); without it (and without --loopback), wait
    /// for a client.
    server: Option<String>,
    /// Run both sides in this process, on 127.0.0.2 (client) and 127.0.0.3 (server).
    #[arg(long)]
    loopback: bool,
    /// Message size in bytes [default: 65536 for bandwidth, 8 for latency and atomics].
    #[arg(short = 's', long)]
    size: Option<usize>,
    /// Run every size from 2 B to 8 MiB (powers of two).
    #[arg(short = 'a', long)]
    all: bool,
    /// Iterations per size [default: 5000 for bandwidth, 10000 for latency].
    #[arg(short = 'n', long)]
    iters: Option<u64>,
    /// Run each size for this many seconds instead of -n iterations.
    #[arg(short = 'D', long)]
    duration: Option<u64>,
    /// The QPs' transport, as perftest's -c: RC, UC (write and send tests) or UD (send
    /// tests; one packet per message).
    #[arg(short = 'c', long = "connection", value_enum, default_value_t = Conn::Rc)]
    conn: Conn,
    /// Queue pairs (bandwidth tests).
    #[arg(short = 'q', long, default_value_t = 1)]
    qps: u32,
    /// WRs in flight per QP (bandwidth tests).
    #[arg(short = 't', long, default_value_t = 128)]
    tx_depth: u32,
    /// Receives kept posted per QP (send tests).
    #[arg(short = 'r', long, default_value_t = 512)]
    rx_depth: u32,
    /// Path MTU: 256, 512, 1024, 2048 or 4096 [default: the port's active MTU].
    #[arg(short = 'm', long, value_parser = crate::args::parse_mtu)]
    mtu: Option<oxrdma::Mtu>,
    /// Largest message sent inline (write and send).
    #[arg(short = 'I', long, default_value_t = 64)]
    inline_size: u32,
    /// The atomic the atomic tests post.
    #[arg(short = 'A', long, value_enum, default_value_t = AtomicOp::FetchAndAdd)]
    atomic_type: AtomicOp,
    /// This side's RDMA device (its IP address).
    #[arg(short = 'd', long, default_value = "127.0.0.2")]
    device: IpAddr,
    /// TCP port of the out-of-band exchange.
    #[arg(short = 'p', long, default_value_t = 18515)]
    port: u16,
    /// Print one JSON object per size instead of the table.
    #[arg(long)]
    json: bool,
    /// Capture this side's packets (the client's with --loopback) to a pcap file.
    #[arg(long)]
    pcap: Option<PathBuf>,
    /// No progress bar even on a terminal.
    #[arg(long)]
    no_progress: bool,
    /// The peer is perftest (ib_write_bw, ib_read_bw, ib_send_bw, ib_atomic_bw,
    /// ib_write_lat): speak its TCP exchange; defaults follow perftest's.
    #[arg(long)]
    perftest: bool,
    /// Print the CPU time each side spends per GB moved (its own thread and its device's
    /// engine thread; bandwidth tests).
    #[arg(long, alias = "cpu_util")]
    cpu_util: bool,
    /// Sleep on CQ events instead of polling (as perftest's -e; bandwidth tests): a side
    /// whose poll finds nothing arms its CQ and waits on a completion channel, and its
    /// device's engine thread moves the packets meanwhile.
    #[arg(short = 'e', long)]
    events: bool,
    /// With --perftest: send the bandwidth REPORT in Gb/s (as the peer's --report_gbits
    /// expects) instead of MB/s.
    #[arg(long, alias = "report_gbits")]
    report_gbits: bool,
    /// Connect the QPs through the RDMA CM (as perftest's -R): the server listens on the
    /// CM port -p; the control connection only paces the runs.
    #[arg(short = 'R', long = "rdma-cm", alias = "rdma_cm")]
    rdma_cm: bool,
    /// Encrypt and authenticate every packet (RC, between oxrdma peers: both sides give
    /// it): keys agreed by X25519 in the endpoint exchange, AEGIS-128X2 unless another
    /// AEAD is named.
    #[arg(long, value_enum, num_args = 0..=1, default_missing_value = "aegis-128x2")]
    secure: Option<SuiteArg>,
}

/// The AEAD `--secure` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SuiteArg {
    #[value(name = "aes-256-gcm")]
    Aes256Gcm,
    #[value(name = "chacha20-poly1305")]
    ChaCha20Poly1305,
    #[value(name = "aegis-128x2")]
    Aegis128X2,
}

impl From<SuiteArg> for oxrdma::Suite {
    fn from(s: SuiteArg) -> oxrdma::Suite {
        match s {
            SuiteArg::Aes256Gcm => oxrdma::Suite::Aes256Gcm,
            SuiteArg::ChaCha20Poly1305 => oxrdma::Suite::ChaCha20Poly1305,
            SuiteArg::Aegis128X2 => oxrdma::Suite::Aegis128X2,
        }
    }
}

impl PerfCli {
    pub fn args(&self) -> anyhow::Result<PerfArgs> {
        let (verb, kind) = self.test.parts();
        let default_size = match (verb, kind) {
            (Verb::Atomic, _) => 8,
            // perftest's latency tests default to 2 B.
            (_, Kind::Lat) if self.perftest => 2,
            (_, Kind::Lat) => 8,
            _ => 65536,
        };
        // perftest runs 5000 iterations of write_bw and 1000 of everything else.
        let default_iters = match (self.perftest, verb, kind) {
            (true, Verb::Write, Kind::Bw) | (false, _, Kind::Bw) => 5000,
            (true, _, _) => 1000,
            (false, _, Kind::Lat) => 10000,
        };
        if self.perftest && self.loopback {
            anyhow::bail!(
                "--perftest talks to a perftest peer; it does not combine with --loopback"
            );
        }
        if self.all && self.size.is_some() {
            anyhow::bail!("-a and -s exclude each other");
        }
        if self.loopback && self.server.is_some() {
            anyhow::bail!("--loopback runs both sides; give no server address with it");
        }
        let sizes = if self.all {
            all_sizes(verb)
        } else {
            vec![self.size.unwrap_or(default_size)]
        };
        let a = PerfArgs {
            verb,
            kind,
            sizes,
            iters: self.iters.unwrap_or(default_iters),
            duration: self.duration.map(Duration::from_secs),
            qps: self.qps,
            conn: self.conn,
            tx_depth: self.tx_depth,
            rx_depth: self.rx_depth,
            mtu: self.mtu,
            atomic: self.atomic_type,
            inline_size: self.inline_size,
            device: self.device,
            server: self.server.clone(),
            port: self.port,
            pcap: self.pcap.clone(),
            progress: !self.no_progress && !self.json,
            perftest: self.perftest,
            rdma_cm: self.rdma_cm,
            report_gbits: self.report_gbits,
            cpu_util: self.cpu_util,
            events: self.events,
            secure: self.secure.map(Into::into),
        };
        if a.perftest {
            super::perftest::check(&a)?;
        }
        a.validate()?;
        Ok(a)
    }

    /// Runs the test, printing each size's result as it comes.
    pub fn run(&self) -> anyhow::Result<()> {
        let args = self.args()?;
        let json = self.json;
        let mut first = true;
        let mut print = |r: &Report| {
            if json {
                let v = match r {
                    Report::Bw(b) => serde_json::to_string(b),
                    Report::Lat(l) => serde_json::to_string(l),
                };
                println!("{}", v.unwrap_or_default());
            } else {
                if first {
                    println!("{}", header(r));
                    first = false;
                }
                println!("{}", row(r));
                if let Report::Bw(BwResult {
                    cpu_client_ms_per_gb: Some(c),
                    cpu_server_ms_per_gb: Some(s),
                    ..
                }) = r
                {
                    println!(" CPU per GB moved: client {c:.1} ms, server {s:.1} ms");
                }
                if let Report::Bw(BwResult {
                    transport: Some(t), ..
                }) = r
                {
                    if t.packets_resent > 0 {
                        println!("{}", t.line());
                    }
                }
            }
        };
        if self.loopback {
            super::run_loopback(&args, &mut print)
        } else {
            super::run(&args, &mut print)
        }
    }
}
