//! `oxrdma`: the oxrdma command-line tool.

use anyhow::Context;
use clap::{Parser, Subcommand};
use oxrdma_cli::sim::{BenchArgs, SimArgs};
use oxrdma_cli::{capture, decode, sim};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(name = "oxrdma", version, about = "RDMA over RoCEv2 in user space")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Print one line per RoCEv2 packet in a pcap or pcapng capture, with ICRC checks.
    Decode {
        /// The capture file (pcap or pcapng; Ethernet, raw IP or Linux cooked frames).
        file: PathBuf,
        /// Print JSON lines instead of text.
        #[arg(long)]
        json: bool,
        /// UDP destination port that carries RoCEv2.
        #[arg(long, default_value_t = oxrdma_wire::ROCE_V2_PORT)]
        port: u16,
        /// Exit with status 1 if any packet is malformed or fails its ICRC.
        #[arg(long)]
        strict: bool,
    },
    /// Run random RDMA workloads between simulated hosts over a lossy network, on virtual
    /// time, and check every invariant (exactly-once completion, exact bytes, atomics).
    Sim {
        /// First seed; every run replays exactly from its seed.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Number of seeds to run.
        #[arg(long, default_value_t = 1)]
        seeds: u64,
        #[arg(long, default_value_t = 2)]
        nodes: usize,
        /// QP pairs (each QP of a pair posts work).
        #[arg(long, default_value_t = 8)]
        qps: usize,
        /// Work requests posted by each QP.
        #[arg(long, default_value_t = 32)]
        wrs: usize,
        /// Largest message in bytes.
        #[arg(long, default_value_t = 1 << 20)]
        max_len: usize,
        /// Probability that a packet is lost.
        #[arg(long, default_value_t = 0.0)]
        loss: f64,
        #[arg(long, default_value_t = 0.0)]
        reorder: f64,
        #[arg(long, default_value_t = 0.0)]
        duplicate: f64,
        #[arg(long, default_value_t = 0.0)]
        corrupt: f64,
        /// Post receives slowly, so senders meet RNR NAKs.
        #[arg(long)]
        late_recv: bool,
        #[arg(long)]
        json: bool,
    },
    /// RC SEND/RECV ping-pong, compatible with ibv_rc_pingpong (server without a peer name).
    Pingpong {
        /// The server to connect to; without it, wait for a client.
        server: Option<String>,
        /// TCP port of the out-of-band exchange.
        #[arg(short = 'p', long, default_value_t = 18515)]
        port: u16,
        /// This side's RDMA device (its IP address).
        #[arg(short = 'd', long, default_value = "127.0.0.2")]
        device: std::net::IpAddr,
        /// Message size.
        #[arg(short = 's', long, default_value_t = 4096)]
        size: usize,
        /// Number of exchanges.
        #[arg(short = 'n', long, default_value_t = 1000)]
        iters: u64,
        /// Path MTU: 256, 512, 1024, 2048 or 4096.
        #[arg(short = 'm', long, default_value_t = 1024)]
        mtu: usize,
        /// Receives kept posted.
        #[arg(short = 'r', long, default_value_t = 500)]
        rx_depth: u32,
        /// Capture this side's packets to a pcap file.
        #[arg(long)]
        pcap: Option<PathBuf>,
    },
    /// UD SEND/RECV ping-pong, compatible with ibv_ud_pingpong (server without a peer name).
    UdPingpong {
        /// The server to connect to; without it, wait for a client.
        server: Option<String>,
        /// TCP port of the out-of-band exchange.
        #[arg(short = 'p', long, default_value_t = 18515)]
        port: u16,
        /// This side's RDMA device (its IP address).
        #[arg(short = 'd', long, default_value = "127.0.0.2")]
        device: std::net::IpAddr,
        /// Message size: at most the port's active MTU (ibv_ud_pingpong's default, 1024).
        #[arg(short = 's', long, default_value_t = 1024)]
        size: usize,
        /// Number of exchanges.
        #[arg(short = 'n', long, default_value_t = 1000)]
        iters: u64,
        /// Receives kept posted.
        #[arg(short = 'r', long, default_value_t = 500)]
        rx_depth: u32,
        /// Capture this side's packets to a pcap file.
        #[arg(long)]
        pcap: Option<PathBuf>,
    },
    /// Describe the RDMA device on an address, like ibv_devinfo -v.
    Devinfo {
        /// The device's IP address (its GID).
        #[arg(short = 'd', long, default_value = "127.0.0.2")]
        addr: std::net::IpAddr,
    },
    /// RDMA benchmarks over UDP in the spirit of perftest.
    Perf(Box<oxrdma_cli::perf::PerfCli>),
    /// What idle QPs cost: the idle driver pass and an 8 B WRITE's round trip with 1, 1,000
    /// and 10,000 idle connected QPs (ratios to the first count, same run).
    Scale(oxrdma_cli::scale::ScaleArgs),
    /// Benchmark RDMA WRITE goodput in the simulator under packet loss, as a ratio to a
    /// lossless run with the same seed.
    SimBench {
        #[arg(long, default_value_t = 0.01)]
        loss: f64,
        /// Message size in bytes.
        #[arg(long, default_value_t = 65536)]
        size: usize,
        #[arg(long, default_value_t = 5)]
        runs: u64,
        #[arg(long, default_value_t = 4)]
        qps: usize,
        /// WRITEs per QP.
        #[arg(long, default_value_t = 64)]
        wrs: usize,
        /// Local ACK timeout exponent (4.096 us x 2^timeout), as in ibv_modify_qp.
        #[arg(long, default_value_t = 14)]
        timeout: u8,
    },
}

fn run_decode(file: &Path, json: bool, port: u16, strict: bool) -> anyhow::Result<bool> {
    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let mut bad = 0usize;
    let counts = capture::for_each_roce(file, port, |frame| {
        let d = decode::decode(frame);
        if d.icrc != "ok" {
            bad += 1;
        }
        if json {
            serde_json::to_writer(&mut out, &d)?;
            out.write_all(b"\n")?;
        } else {
            writeln!(out, "{}", decode::format_line(&d))?;
        }
        Ok(())
    })?;
    out.flush().context("cannot write to standard output")?;
    eprintln!(
        "{}: {} frames, {} RoCEv2 packets, {} malformed or bad ICRC{}",
        file.display(),
        counts.frames,
        counts.roce,
        bad,
        if counts.unreadable > 0 {
            format!(", {} frames unreadable (cut short?)", counts.unreadable)
        } else {
            String::new()
        }
    );
    // Strict: a frame that cannot be read may have been a RoCE packet; it is not checked.
    Ok(!(strict && (bad > 0 || counts.unreadable > 0)))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Decode {
            file,
            json,
            port,
            strict,
        } => run_decode(file, *json, *port, *strict),
        Command::Sim {
            seed,
            seeds,
            nodes,
            qps,
            wrs,
            max_len,
            loss,
            reorder,
            duplicate,
            corrupt,
            late_recv,
            json,
        } => {
            let a = SimArgs {
                seed: *seed,
                seeds: *seeds,
                nodes: *nodes,
                qps: *qps,
                wrs: *wrs,
                max_len: *max_len,
                loss: *loss,
                reorder: *reorder,
                duplicate: *duplicate,
                corrupt: *corrupt,
                late_recv: *late_recv,
            };
            sim::validate(&a)
                .map(|()| sim::sim(&a, *json))
                .map_err(anyhow::Error::msg)
        }
        Command::Perf(p) => p.run().map(|()| true),
        Command::Pingpong {
            server,
            port,
            device,
            size,
            iters,
            mtu,
            rx_depth,
            pcap,
        } => {
            let mtu = match mtu {
                256 => Some(oxrdma::Mtu::Mtu256),
                512 => Some(oxrdma::Mtu::Mtu512),
                1024 => Some(oxrdma::Mtu::Mtu1024),
                2048 => Some(oxrdma::Mtu::Mtu2048),
                4096 => Some(oxrdma::Mtu::Mtu4096),
                _ => None,
            };
            match mtu {
                None => Err(anyhow::anyhow!("-m must be 256, 512, 1024, 2048 or 4096")),
                Some(_)
                    if *size == 0
                        || *size > 1 << 30
                        || *iters == 0
                        || !(2..=16_384).contains(rx_depth) =>
                {
                    Err(anyhow::anyhow!(
                        "pingpong needs -s 1..=1 GiB, -n > 0 and -r 2..=16384"
                    ))
                }
                Some(mtu) => {
                    let a = oxrdma_cli::pingpong::PingpongArgs {
                        server: server.clone(),
                        port: *port,
                        device: *device,
                        size: *size,
                        iters: *iters,
                        mtu,
                        rx_depth: *rx_depth,
                        pcap: pcap.clone(),
                    };
                    oxrdma_cli::pingpong::pingpong(&a).map(|()| true)
                }
            }
        }
        Command::UdPingpong {
            server,
            port,
            device,
            size,
            iters,
            rx_depth,
            pcap,
        } => {
            if *iters == 0 || !(1..=16_384).contains(rx_depth) {
                Err(anyhow::anyhow!("ud-pingpong needs -n > 0 and -r 1..=16384"))
            } else {
                let a = oxrdma_cli::udpingpong::UdPingpongArgs {
                    server: server.clone(),
                    port: *port,
                    device: *device,
                    size: *size,
                    iters: *iters,
                    rx_depth: *rx_depth,
                    pcap: pcap.clone(),
                };
                oxrdma_cli::udpingpong::ud_pingpong(&a).map(|()| true)
            }
        }
        Command::Devinfo { addr } => oxrdma_cli::devinfo::devinfo(*addr).map(|()| true),
        Command::Scale(a) => oxrdma_cli::scale::run(a).map(|_| true),
        Command::SimBench {
            loss,
            size,
            runs,
            qps,
            wrs,
            timeout,
        } => {
            let sane = (0.0..1.0).contains(loss)
                && (1..=16 << 20).contains(size)
                && *runs > 0
                && (1..=1024).contains(qps)
                && *wrs > 0
                && (1..=31).contains(timeout);
            if sane {
                let b = BenchArgs {
                    loss: *loss,
                    size: *size,
                    runs: *runs,
                    qps: *qps,
                    wrs: *wrs,
                    timeout: *timeout,
                };
                Ok(sim::bench(&b))
            } else {
                Err(anyhow::anyhow!(
                    "sim-bench needs 0 <= --loss < 1, --size 1..=16 MiB, --qps 1..=1024, --timeout 1..=31, non-zero --runs and --wrs"
                ))
            }
        }
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            // A closed pipe (e.g. `| head`) is not an error worth reporting.
            if e.downcast_ref::<io::Error>()
                .is_some_and(|io| io.kind() == io::ErrorKind::BrokenPipe)
            {
                return ExitCode::SUCCESS;
            }
            eprintln!("oxrdma: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
