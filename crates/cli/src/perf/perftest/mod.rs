//! `oxrdma perf <test> --perftest`: one side of a run whose other side is perftest
//! 4.5+0.17 (`ib_write_bw`, `ib_read_bw`, `ib_send_bw`, `ib_atomic_bw`, `ib_write_lat`),
//! speaking its TCP 18515 exchange as tests/interop/PERFTEST-OOB.md describes it: the
//! preamble, the KEYS handshakes in perftest's number and order, the QP states each role
//! reaches, the traffic, and the REPORT/DONE close.

mod bw;
mod chan;
mod lat;
pub mod msg;
mod res;

use super::report::{BwResult, Report};
use super::{Kind, PerfArgs, Verb};
use anyhow::{bail, Context as _};
use chan::{Chan, STEP};
use msg::{BwReport, Keys, KEYS_LEN};
use res::{Res, Shape};
use std::net::TcpListener;
use std::time::Duration;

/// How long the passive bw server waits in HS4 while the client runs the test.
const TEST_WAIT: Duration = Duration::from_secs(600);
/// perftest's own cycle buffer (its page size) and cache line.
const CYCLE: u32 = 4096;
const CACHE: u32 = 64;

/// Which tests and options the perftest mode supports, as one clear error.
pub fn check(args: &PerfArgs) -> anyhow::Result<()> {
    let ok = matches!(
        (args.verb, args.kind),
        (_, Kind::Bw) | (Verb::Write, Kind::Lat)
    );
    if !ok {
        bail!("--perftest supports write-bw, read-bw, send-bw, atomic-bw and write-lat");
    }
    if args.qps != 1 || args.sizes.len() != 1 || args.duration.is_some() {
        bail!("--perftest runs one QP and one size for -n iterations (no -q, -a or -D)");
    }
    Ok(())
}

/// Runs one side: the server (no peer address) accepts one perftest client.
pub fn run(args: &PerfArgs, each: &mut dyn FnMut(&Report)) -> anyhow::Result<()> {
    check(args)?;
    match &args.server {
        None => {
            let l = TcpListener::bind(("0.0.0.0", args.port))
                .with_context(|| format!("cannot listen on TCP port {}", args.port))?;
            side(Chan::accept(l)?, args, true, each)
        }
        Some(host) => side(Chan::connect(host, args.port)?, args, false, each),
    }
}

/// One KEYS handshake; only the first one's content matters.
fn hs(chan: &mut Chan, me: &[u8; KEYS_LEN], wait: Duration) -> anyhow::Result<[u8; KEYS_LEN]> {
    chan.swap::<KEYS_LEN>(me, "KEYS", wait)
}

/// perftest refuses to pair an IPv4-mapped GID with another kind; so do we, and a side
/// without a GID cannot be reached over RoCE at all.
fn check_gid(me: &Keys, peer: &Keys) -> anyhow::Result<()> {
    let v4 = |g: &[u8; 16]| g[..10].iter().all(|&b| b == 0) && g[10..12] == [0xff, 0xff];
    if peer.gid == [0; 16] {
        bail!("the perftest peer sent no GID: run it with -x <RoCE v2 GID index>");
    }
    if v4(&me.gid) != v4(&peer.gid) {
        bail!("GID types differ (one IPv4-mapped, one not): use the same IP version on both sides");
    }
    Ok(())
}

fn side(
    mut chan: Chan,
    args: &PerfArgs,
    server: bool,
    each: &mut dyn FnMut(&Report),
) -> anyhow::Result<()> {
    let size = args.sizes[0];
    msg::parse_version(&chan.swap::<16>(&msg::version(), "version", STEP)?)?;
    let c = chan.swap::<4>(&msg::be32(CYCLE), "cycle buffer size", STEP)?;
    let cycle = msg::parse_pow2(&c, "cycle buffer size", 1 << 30)?.max(CYCLE) as usize;
    let c = chan.swap::<4>(&msg::be32(CACHE), "cache line size", STEP)?;
    let cache = msg::parse_pow2(&c, "cache line size", 4096)?.max(CACHE) as usize;
    // What this side offers: -m, never more than the port's active MTU.
    let active = oxrdma_udp::mtu::interface_mtu(args.device)
        .map_or(oxrdma::Mtu::Mtu4096, oxrdma_udp::mtu::active_mtu);
    let mine = args.mtu.map_or(active, |m| m.min(active));
    let m = chan.swap::<2>(&msg::mtu_msg(mine), "MTU", STEP)?;
    let mtu = msg::min_mtu(mine, msg::parse_mtu(&m)?);
    super::sizes_for_mtu(args, mtu)?;

    let send_server = server && args.verb == Verb::Send;
    let lat = args.kind == Kind::Lat;
    let depth = |d: u32| d.min(u32::try_from(args.iters).unwrap_or(u32::MAX)).max(1);
    let shape = Shape {
        verb: args.verb,
        size,
        cycle,
        cache,
        tx_depth: if lat { 1 } else { depth(args.tx_depth) },
        rx_depth: if send_server { depth(args.rx_depth) } else { 1 },
    };
    let res = Res::open(args, &shape)?;
    let result = (|| -> anyhow::Result<()> {
        let mine = res.keys();
        let me = mine.encode();
        let peer = Keys::parse(&hs(&mut chan, &me, STEP)?)?;
        check_gid(&mine, &peer)?;

        if lat {
            // write_lat: a second KEYS exchange, both QPs to RTS, two more handshakes.
            hs(&mut chan, &me, STEP)?;
            res.to_rtr(&peer, mtu)?;
            res.to_rts(&peer)?;
            hs(&mut chan, &me, STEP)?;
            hs(&mut chan, &me, STEP)?;
            let r = lat::run(&res, args, size, &peer, server)?;
            each(&Report::Lat(r));
            // No closing exchange: the server stays until the client leaves, so the client's
            // last WRITE is surely acknowledged.
            if server {
                chan.linger(Duration::from_secs(10));
            }
            return Ok(());
        }

        // bw: only the client moves on to RTS; the server answers from RTR.
        res.to_rtr(&peer, mtu)?;
        if !server {
            res.to_rts(&peer)?;
        }
        // The FETCH_AND_ADD counters as they are before the handshakes release the client
        // (read later, a slow server could see some of the client's adds already).
        let before = bw::fetch_add_total(&res, cycle, cache);
        hs(&mut chan, &me, STEP)?;
        hs(&mut chan, &me, STEP)?;
        let target = bw::Target {
            vaddr: peer.vaddr,
            rkey: peer.rkey,
            cycle,
            cache,
        };
        // A server that finds the client's run wrong still closes the exchange properly, so
        // perftest ends cleanly, and fails afterwards.
        let verdict = match (args.verb, server) {
            (Verb::Send, true) => {
                let posted = bw::post_receives(&res, args, size)?;
                hs(&mut chan, &me, STEP)?;
                each(&Report::Bw(bw::serve_sends(&res, args, size, posted)?));
                Ok(())
            }
            (Verb::Send, false) => {
                hs(&mut chan, &me, STEP)?;
                each(&Report::Bw(bw::client(&res, args, size, &target)?));
                Ok(())
            }
            (_, false) => {
                let r = bw::client(&res, args, size, &target)?;
                hs(&mut chan, &me, STEP)?;
                for f in to_report(&r, args.report_gbits).fields() {
                    chan.swap::<8>(&f, "REPORT field", STEP)?;
                }
                each(&Report::Bw(r));
                Ok(())
            }
            (_, true) => {
                hs(&mut chan, &me, TEST_WAIT)?;
                let mut f = [[0u8; 8]; 5];
                for field in &mut f {
                    // Our answers are ignored by perftest (its own are uninitialised memory).
                    *field = chan.swap::<8>(&[0; 8], "REPORT field", STEP)?;
                }
                let r = BwReport::from_fields(&f);
                let v = check_report(&res, args, size, &r, before, (cycle, cache));
                if v.is_ok() {
                    each(&Report::Bw(from_report(&r, args)));
                }
                v
            }
        };
        hs(&mut chan, &me, STEP)?;
        chan.done()?;
        verdict
    })();
    crate::drops::explain(&res.ctx, result)
}

/// The server's view of the client's REPORT: same size and iterations as ours, and for
/// FETCH_AND_ADD every one of them added to our counters.
fn check_report(
    res: &Res,
    args: &PerfArgs,
    size: usize,
    r: &BwReport,
    before: u64,
    (cycle, cache): (usize, usize),
) -> anyhow::Result<()> {
    if r.size != size as u64 || r.iters != args.iters {
        bail!(
            "the client ran {} x {} B, this server -n {} -s {size}",
            r.iters,
            r.size,
            args.iters
        );
    }
    if args.verb == Verb::Atomic && args.atomic == super::AtomicOp::FetchAndAdd {
        let added = bw::fetch_add_total(res, cycle, cache).wrapping_sub(before);
        if added != r.iters {
            bail!(
                "the client reports {} FETCH_AND_ADDs, our counters grew by {added}",
                r.iters
            );
        }
    }
    Ok(())
}

/// Our result as REPORT fields, in the unit the peer prints (MB/s, or Gb/s).
fn to_report(r: &BwResult, gbits: bool) -> BwReport {
    let (peak, avg) = if gbits {
        (r.bw_peak_gbps, r.bw_avg_gbps)
    } else {
        (r.bw_peak_gbps * 1e3 / 8.0, r.bw_avg_mbps)
    };
    BwReport {
        size: r.bytes as u64,
        iters: r.iterations,
        bw_peak: peak,
        bw_avg: avg,
        msg_rate: r.msg_rate_mpps,
    }
}

/// The client's REPORT as a result row (the server measures nothing itself).
fn from_report(r: &BwReport, args: &PerfArgs) -> BwResult {
    let to_gbps = |v: f64| if args.report_gbits { v } else { v * 8.0 / 1e3 };
    let avg_gbps = to_gbps(r.bw_avg);
    let total = (r.size * r.iters) as f64;
    BwResult {
        test: args.name(),
        bytes: r.size as usize,
        iterations: r.iters,
        bw_peak_gbps: to_gbps(r.bw_peak),
        bw_avg_gbps: avg_gbps,
        bw_avg_mbps: avg_gbps * 1e3 / 8.0,
        msg_rate_mpps: r.msg_rate,
        seconds: if avg_gbps > 0.0 {
            total * 8.0 / (avg_gbps * 1e9)
        } else {
            0.0
        },
        cpu_client_ms_per_gb: None,
        cpu_server_ms_per_gb: None,
        transport: None,
    }
}
