//! `oxrdma rstream`: a ping-pong over an rsocket (`oxrdma::rsocket`), in the spirit of
//! rdma-core's `rstream -T v`: the client sends a message, the server sends it back, and
//! each side checks every byte. On an engine device or, with `OXRDMA_BACKEND=rdma-core`,
//! on a NIC or rxe through the system's librdmacm: the same program either way.

use crate::oob::print_result;
use anyhow::Context as _;
use oxrdma::rsocket::{RListener, RStream};
use oxrdma::Context;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};

/// What the user asked for (`oxrdma rstream`).
#[derive(clap::Args, Debug, Clone)]
pub struct RstreamArgs {
    /// The server to connect to; without it, wait for one client.
    pub server: Option<String>,
    /// RDMA CM port the server listens on.
    #[arg(short = 'p', long, default_value_t = 7471)]
    pub port: u16,
    /// This side's RDMA device (its IP address).
    #[arg(short = 'd', long, default_value = "127.0.0.2")]
    pub device: IpAddr,
    /// Message size.
    #[arg(short = 's', long, default_value_t = 65536)]
    pub size: usize,
    /// Number of round trips.
    #[arg(short = 'n', long, default_value_t = 1000)]
    pub iters: u64,
    /// Capture this side's packets to a pcap file (an engine device's).
    #[arg(long)]
    pub pcap: Option<std::path::PathBuf>,
}

/// The byte at `i` of message `n`: every message differs, so a stale or misplaced one
/// shows.
fn pattern(n: u64, i: usize) -> u8 {
    (i as u64).wrapping_mul(31).wrapping_add(n.wrapping_mul(7)) as u8
}

/// Runs the ping-pong; prints the two result lines of `pingpong`.
pub fn run(a: &RstreamArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        a.size > 0 && a.size <= 1 << 30 && a.iters > 0,
        "rstream needs -s 1..=1 GiB and -n > 0"
    );
    let ctx = Context::open(a.device)?;
    if let Some(p) = &a.pcap {
        ctx.capture_to(p)
            .with_context(|| format!("cannot write {}", p.display()))?;
    }
    let mut stream = match &a.server {
        Some(name) => {
            let at: SocketAddr = (name.as_str(), a.port)
                .to_socket_addrs()?
                .next()
                .ok_or_else(|| anyhow::anyhow!("{name}: no address"))?;
            RStream::connect(&ctx, at)?
        }
        None => {
            let any = match a.device {
                IpAddr::V4(_) => SocketAddr::from(([0, 0, 0, 0], a.port)),
                IpAddr::V6(_) => SocketAddr::from(([0u16; 8], a.port)),
            };
            RListener::bind(&ctx, any)?.accept()?
        }
    };
    let client = a.server.is_some();
    let mut buf = vec![0u8; a.size];
    let start = std::time::Instant::now();
    for n in 0..a.iters {
        if client {
            buf.iter_mut()
                .enumerate()
                .for_each(|(i, b)| *b = pattern(n, i));
            stream.write_all(&buf)?;
        }
        stream.read_exact(&mut buf)?;
        if let Some(i) = (0..a.size).find(|&i| buf[i] != pattern(n, i)) {
            anyhow::bail!(
                "message {n}: byte {i} is {:#04x}, not {:#04x}",
                buf[i],
                pattern(n, i)
            );
        }
        if !client {
            stream.write_all(&buf)?;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    // The server's last answer is read before the client closes.
    stream.shutdown_std(std::net::Shutdown::Write)?;
    let mut end = [0u8; 1];
    anyhow::ensure!(
        stream.read(&mut end)? == 0,
        "the peer sent more than it was asked for"
    );
    print_result(a.size, a.iters, secs);
    Ok(())
}
