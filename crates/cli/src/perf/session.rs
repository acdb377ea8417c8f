//! The conversation around each message size of a perf run, on top of a connected
//! [`Side`]: the server serves one client, the client runs every size.
//!
//! Control lines (client → server unless noted): `hello <test> <qps> <slot> <mtu> <conn>`, answered
//! `ok 0` or `err <why>`; after the exchange, per size `run <size> <iters>` (server:
//! `go 0` once it is ready), then `done <wrs>` (server: `ok <wrs it saw>`); at last `bye`.

use super::ctl::{parse_word, Ctl};
use super::report::Report;
use super::side::Side;
use super::{bw, lat, Kind, PerfArgs};
use crate::cmlink::CmLink;
use anyhow::{bail, Context as _};
use oxrdma::{Context, Mtu};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::Duration;

/// Opens this side's device (and its capture).
fn device(args: &PerfArgs) -> anyhow::Result<Context> {
    let ctx = Context::open(args.device)
        .with_context(|| format!("cannot open the RDMA device {}", args.device))?;
    if let Some(p) = &args.pcap {
        ctx.capture_to(p)
            .with_context(|| format!("cannot write {}", p.display()))?;
    }
    Ok(ctx)
}

/// The path MTU this side offers: `-m`, or the port's active MTU (never more than it).
fn offered_mtu(args: &PerfArgs, ctx: &Context) -> Mtu {
    args.mtu
        .map_or(ctx.active_mtu(), |m| m.min(ctx.active_mtu()))
}

/// Serves one client, then returns.
pub fn serve(args: &PerfArgs, l: TcpListener) -> anyhow::Result<()> {
    let ctx = device(args)?;
    let (tcp, _) = l.accept().context("waiting for the client")?;
    tcp.set_nodelay(true)?;
    let mut ctl = Ctl::new(tcp);
    let h = ctl.recv()?;
    let f: Vec<&str> = h.split_whitespace().collect();
    let hello = match f[..] {
        ["hello", test, qps, slot, mtu, conn]
            if test == args.name() && qps == args.qps.to_string() && conn == args.conn.label() =>
        {
            let slot = slot.parse::<usize>().ok().filter(|&s| s > 0);
            let mtu = mtu.parse::<u32>().ok().and_then(Mtu::from_ibv);
            slot.zip(mtu)
        }
        _ => None,
    };
    let Some((slot, their_mtu)) = hello else {
        let why = format!(
            "server runs {} -c {} with -q {}",
            args.name(),
            args.conn.label(),
            args.qps
        );
        let _ = ctl.send(&format!("err {why}"));
        bail!("the client asked for {h:?}, but this {why}");
    };
    let mut a = args.clone();
    a.sizes = vec![slot];
    a.validate()?;
    let mtu = offered_mtu(args, &ctx).min(their_mtu);
    let ud = args.conn == super::Conn::Ud;
    let cm = if args.rdma_cm {
        Some(CmLink::listen(&ctx, args.port, ud)?)
    } else {
        None
    };
    ctl.send(&format!("ok {}", mtu as u32))?;
    let mut side = Side::open(args, ctx, slot, mtu, ctl, cm)?;
    let result = serve_runs(&mut side, args, slot);
    crate::drops::explain(&side.ctx, result)
}

/// The server's part of each run the client asks for, until it says bye.
fn serve_runs(side: &mut Side, args: &PerfArgs, slot: usize) -> anyhow::Result<()> {
    loop {
        let l = side.ctl.recv()?;
        if l == "bye" {
            return Ok(());
        }
        let f: Vec<u64> = l
            .strip_prefix("run ")
            .map(|r| {
                r.split_whitespace()
                    .filter_map(|n| n.parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        let [size, iters] = f[..] else {
            bail!("unexpected control line from the client: {l:?}");
        };
        let size = size as usize;
        if size == 0 || size > slot {
            bail!("the client asked for {size} B messages in {slot} B slots");
        }
        match args.kind {
            Kind::Bw => bw::server(side, args, size)?,
            Kind::Lat => lat::server(side, args, size, iters)?,
        }
    }
}

/// Connects to the server and runs every size, handing each result to `each`.
pub fn client(
    args: &PerfArgs,
    host: &str,
    port: u16,
    each: &mut dyn FnMut(&Report),
) -> anyhow::Result<()> {
    let addrs: Vec<_> = (host, port)
        .to_socket_addrs()
        .with_context(|| format!("cannot resolve {host}"))?
        .collect();
    let mut tcp = None;
    let mut last = None;
    for a in &addrs {
        match TcpStream::connect_timeout(a, Duration::from_secs(10)) {
            Ok(t) => {
                tcp = Some(t);
                break;
            }
            Err(e) => last = Some(e),
        }
    }
    let Some(tcp) = tcp else {
        let e = last.map_or("no address".to_string(), |e| e.to_string());
        bail!("cannot reach the perf server at {host}:{port}: {e}");
    };
    tcp.set_nodelay(true)?;
    let server = tcp.peer_addr()?.ip();
    let ctx = device(args)?;
    let mut ctl = Ctl::new(tcp);
    let mtu = offered_mtu(args, &ctx);
    ctl.send(&format!(
        "hello {} {} {} {} {}",
        args.name(),
        args.qps,
        args.slot(),
        mtu as u32,
        args.conn.label()
    ))?;
    let agreed = u32::try_from(parse_word(&ctl.recv()?, "ok")?)
        .ok()
        .and_then(Mtu::from_ibv)
        .filter(|&m| m <= mtu)
        .context("the server answered with an MTU this side did not offer")?;
    let mut run = args.clone();
    run.sizes = super::sizes_for_mtu(args, agreed)?;
    let cm = if args.rdma_cm {
        let ud = args.conn == super::Conn::Ud;
        Some(CmLink::client(
            &ctx,
            SocketAddr::new(server, args.port),
            ud,
        )?)
    } else {
        None
    };
    let mut side = Side::open(args, ctx, args.slot(), agreed, ctl, cm)?;
    let result = client_runs(&mut side, &run, each);
    crate::drops::explain(&side.ctx, result)
}

/// Every size in turn, then bye.
fn client_runs(
    side: &mut Side,
    args: &PerfArgs,
    each: &mut dyn FnMut(&Report),
) -> anyhow::Result<()> {
    for &size in &args.sizes {
        if args.kind == Kind::Lat {
            lat::prepare_client(side, args)?;
        }
        let iters = if args.duration.is_some() {
            0
        } else {
            args.iters
        };
        side.ctl.send(&format!("run {size} {iters}"))?;
        side.ctl.expect("go")?;
        let r = match args.kind {
            Kind::Bw => Report::Bw(bw::client(side, args, size)?),
            Kind::Lat => Report::Lat(lat::client(side, args, size)?),
        };
        each(&r);
    }
    side.ctl.send("bye")
}
