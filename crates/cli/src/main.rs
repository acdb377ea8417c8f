//! `oxrdma`: the oxrdma command-line tool.

use clap::{Parser, Subcommand};
use oxrdma_cli::{
    decode, devinfo, devnodes, exec, iwarp_perf, pathemu, pingpong, rstream, scale, sim, stats,
    threads, udpingpong,
};
use std::io;
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
    Decode(decode::DecodeArgs),
    /// Run random RDMA workloads between simulated hosts over a lossy network, on virtual
    /// time, and check every invariant (exactly-once completion, exact bytes, atomics).
    Sim(sim::SimArgs),
    /// RC SEND/RECV ping-pong, compatible with ibv_rc_pingpong (server without a peer name).
    Pingpong(pingpong::PingpongArgs),
    /// A ping-pong over an rsocket (byte streams over RDMA, as rdma-core's rstream), every
    /// byte checked (server without a peer name).
    Rstream(rstream::RstreamArgs),
    /// UD SEND/RECV ping-pong, compatible with ibv_ud_pingpong (server without a peer name).
    UdPingpong(udpingpong::UdPingpongArgs),
    /// List the devices (interface, MTU, GIDs by index), or describe the one on an
    /// address (-d), like ibv_devinfo -v.
    Devinfo(devinfo::DevinfoArgs),
    /// Run an unmodified RDMA program on oxrdma's libibverbs.so.1 and librdmacm.so.1:
    /// `oxrdma exec -- rping -s` (their directory first on LD_LIBRARY_PATH).
    Exec(exec::ExecArgs),
    /// Make `/dev/infiniband/uverbs<N>` for each configured device, which UCX (Open MPI,
    /// MPICH) looks for before it opens one; as root, once per boot. --remove undoes it.
    DevNodes(devnodes::DevNodesArgs),
    /// The counters of every live oxrdma device on this host (every process and user):
    /// traffic, drops by reason, NAKs, retransmissions, timeouts, congestion; rxe's and
    /// mlx5's names where they mean the same. --json, --prometheus, --watch.
    Stats(stats::StatsArgs),
    /// RDMA benchmarks over UDP in the spirit of perftest.
    Perf(Box<oxrdma_cli::perf::PerfCli>),
    /// RDMA WRITE bandwidth or latency over iWARP (TCP) between two processes (server
    /// without a peer name).
    IwarpPerf(iwarp_perf::IwarpPerfArgs),
    /// What idle QPs cost: the idle driver pass and an 8 B WRITE's round trip with 1, 1,000
    /// and 10,000 idle connected QPs (ratios to the first count, same run).
    Scale(scale::ScaleArgs),
    /// What posting from many threads costs: WRITE rates and post_send time with 1 and 4
    /// threads, each posting on its own QP (ratios to the first count, same run).
    Threads(threads::ThreadsArgs),
    /// Benchmark RDMA WRITE goodput in the simulator under packet loss, as a ratio to a
    /// lossless run with the same seed.
    SimBench(sim::BenchArgs),
    /// A long, lossy path between two network namespaces (TUN devices joined by a delay
    /// line with a rate, a tail-drop queue, loss and jitter); as root.
    PathEmu(pathemu::PathEmuArgs),
}

/// A reader that goes away (`oxrdma decode x.pcap | head`) ends the process quietly, as
/// it ends any Unix filter, instead of a panic in `println!`. Rust ignores SIGPIPE; its
/// sockets send with MSG_NOSIGNAL, so only pipes and terminals are affected.
fn quiet_on_closed_pipe() {
    // SAFETY: sets SIGPIPE back to its default action, before any thread starts; no handler
    // runs our code.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

fn main() -> ExitCode {
    quiet_on_closed_pipe();
    let cli = Cli::parse();
    let done = |r: anyhow::Result<()>| r.map(|()| true);
    let result = match &cli.command {
        Command::Decode(a) => decode::run(a),
        Command::Sim(a) => sim::run_cmd(a),
        Command::Pingpong(a) => done(pingpong::pingpong(a)),
        Command::Rstream(a) => done(rstream::run(a)),
        Command::UdPingpong(a) => done(udpingpong::ud_pingpong(a)),
        Command::Devinfo(a) => done(devinfo::run(a)),
        Command::DevNodes(a) => done(devnodes::run(a)),
        Command::Exec(a) => done(exec::run(a)),
        Command::Perf(p) => done(p.run()),
        Command::IwarpPerf(a) => done(iwarp_perf::run(a)),
        Command::Stats(a) => done(stats::run(a)),
        Command::Scale(a) => scale::run(a).map(|_| true),
        Command::Threads(a) => threads::run(a).map(|_| true),
        Command::SimBench(b) => sim::bench_cmd(b),
        Command::PathEmu(a) => pathemu::run(a),
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
