//! `oxrdma pingpong`: RC SEND/RECV ping-pong speaking `ibv_rc_pingpong`'s out-of-band
//! format, so either side can be the real `ibv_rc_pingpong`.
//!
//! The TCP exchange (port 18515): the client writes `LLLL:QQQQQQ:PPPPPP:GGGG…` (LID, QPN,
//! PSN in hex, the GID as 32 hex digits in byte order) plus a NUL, 52 bytes; the server
//! answers with its own; the client then writes `done\0`. Then both post receives, the
//! client sends first, and each side sends again once its previous send completed and a
//! message arrived.

use crate::drops::explain;
use crate::oob::{exchange, print_result};
use crate::pingloop::PingLoop;
use anyhow::Context as _;
use oxrdma::{
    Access, ConnectOptions, Context, Mtu, QpCap, QpType, RecvWr, SendData, SendFlags, SendWr,
};
use std::net::{IpAddr, ToSocketAddrs};
use std::time::Duration;

const TOOL: &str = "ibv_rc_pingpong";
const SEND_WRID: u64 = 1;
const RECV_WRID: u64 = 2;

/// What the user asked for (`oxrdma pingpong`).
#[derive(clap::Args, Debug, Clone)]
pub struct PingpongArgs {
    /// The server to connect to; without it, wait for a client.
    pub server: Option<String>,
    /// TCP port of the out-of-band exchange.
    #[arg(short = 'p', long, default_value_t = 18515)]
    pub port: u16,
    /// This side's RDMA device (its IP address).
    #[arg(short = 'd', long, default_value = "127.0.0.2")]
    pub device: IpAddr,
    /// Message size.
    #[arg(short = 's', long, default_value_t = 4096)]
    pub size: usize,
    /// Number of exchanges.
    #[arg(short = 'n', long, default_value_t = 1000)]
    pub iters: u64,
    /// Path MTU: 256, 512, 1024, 2048 or 4096.
    #[arg(short = 'm', long, default_value = "1024", value_parser = crate::args::parse_mtu)]
    pub mtu: Mtu,
    /// Receives kept posted.
    #[arg(short = 'r', long, default_value_t = 500)]
    pub rx_depth: u32,
    /// Capture this side's packets to a pcap file.
    #[arg(long)]
    pub pcap: Option<std::path::PathBuf>,
    /// Connect through the RDMA CM instead of the TCP exchange: the server listens on
    /// RDMA CM port -p (any address), the client connects to the server's address and
    /// that port (127.0.0.1 finds a server on this host whatever its device).
    #[arg(long)]
    pub cm: bool,
}

/// Runs the ping-pong; prints ibv_rc_pingpong's two result lines.
pub fn pingpong(a: &PingpongArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        a.size > 0 && a.size <= 1 << 30 && a.iters > 0 && (2..=16_384).contains(&a.rx_depth),
        "pingpong needs -s 1..=1 GiB, -n > 0 and -r 2..=16384"
    );
    let ctx = Context::open(a.device)?;
    if let Some(p) = &a.pcap {
        ctx.capture_to(p)
            .with_context(|| format!("cannot write {}", p.display()))?;
    }
    let pd = ctx.alloc_pd()?;
    let mr = pd.register(a.size.max(1), Access::LOCAL_WRITE)?;
    let cq = ctx.create_cq(a.rx_depth + 1)?;
    let cap = QpCap {
        max_send_wr: 1,
        max_recv_wr: a.rx_depth,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 64,
    };
    let qp = pd.create_qp(&cq, &cq, QpType::Rc, cap)?;
    let post_recv = || {
        qp.post_recv(RecvWr {
            wr_id: RECV_WRID,
            sges: vec![mr.sge(0, a.size)?].into(),
        })
    };
    // Kept until the end: dropping the ids disconnects.
    let _cm = if a.cm {
        Some(connect_cm(a, &ctx, &qp, &post_recv)?)
    } else {
        let me = qp.endpoint();
        let peer = exchange(a.server.as_deref(), a.port, &me, TOOL, &mut |_| Ok(()))?;
        let o = ConnectOptions {
            mtu: a.mtu,
            rnr_retry: 7,
            min_rnr_timer: 12,
            timeout: 14,
            retry_cnt: 7,
            max_rd_atomic: 1,
            ..Default::default()
        };
        qp.connect(&peer, &o)?;
        for _ in 0..a.rx_depth {
            post_recv()?;
        }
        None
    };
    let post_send = || {
        let data = if a.size <= 64 {
            let mut v = oxrdma::InlineData::from_elem(0, a.size);
            mr.read(0, &mut v)?;
            SendData::Inline(v)
        } else {
            SendData::Sges(vec![mr.sge(0, a.size)?].into())
        };
        let mut wr = SendWr::new(SEND_WRID, oxrdma::WrOpcode::Send, data);
        wr.flags = SendFlags::SIGNALED;
        qp.post_send(wr)
    };
    let ping = PingLoop {
        iters: a.iters,
        rx_depth: a.rx_depth,
        send_wrid: SEND_WRID,
        recv_wrid: RECV_WRID,
        client: a.server.is_some(),
        stall: Duration::from_secs(30),
        stall_why: "",
    };
    let secs = explain(&ctx, ping.run(&cq, &post_send, &post_recv, &|_| Ok(())))?;
    print_result(a.size, a.iters, secs);
    Ok(())
}

/// Connects `qp` through the RDMA CM (`oxrdma::cm`'s calls, so on an engine device and on
/// an rdma-core one alike), its receives posted before the peer can send.
fn connect_cm(
    a: &PingpongArgs,
    ctx: &Context,
    qp: &oxrdma::QueuePair,
    post_recv: &dyn Fn() -> oxrdma::Result<()>,
) -> anyhow::Result<oxrdma::cm::Connection> {
    // INIT first, so the receives are in place when the connection is up.
    qp.modify(&oxrdma::QpAttr {
        qp_state: Some(oxrdma::QpState::Init),
        pkey_index: Some(0),
        port_num: Some(1),
        qp_access_flags: Some(Access::empty()),
        ..Default::default()
    })?;
    for _ in 0..a.rx_depth {
        post_recv()?;
    }
    let hello = format!("oxrdma pingpong -s {} -n {}", a.size, a.iters);
    let conn = match &a.server {
        Some(host) => {
            let ip = (host.as_str(), a.port)
                .to_socket_addrs()
                .with_context(|| format!("cannot resolve {host}"))?
                .next()
                .with_context(|| format!("{host} has no address"))?;
            oxrdma::cm::connect(ctx, ip, qp, hello.as_bytes())?
        }
        None => {
            let any = std::net::SocketAddr::from((std::net::Ipv4Addr::UNSPECIFIED, a.port));
            oxrdma::cm::Listener::bind(ctx, any)?.accept(qp, hello.as_bytes())?
        }
    };
    // Both sides must run the same test.
    anyhow::ensure!(
        conn.private_data() == hello.as_bytes(),
        "the peer runs another test: {:?}",
        String::from_utf8_lossy(conn.private_data())
    );
    Ok(conn)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oob::{parse, wire};
    use oxrdma::{Endpoint, Gid};

    #[test]
    fn wire_format_matches_ibv_rc_pingpong() {
        let e = Endpoint {
            gid: Gid::from(std::net::Ipv4Addr::new(10, 77, 0, 1)),
            qpn: 0x11,
            psn: 0x8f5a82,
            key: None,
            buffers: Vec::new(),
        };
        let m = wire(&e);
        let text = std::str::from_utf8(&m[..51]).unwrap();
        assert_eq!(text, "0000:000011:8f5a82:00000000000000000000ffff0a4d0001");
        assert_eq!(m[51], 0);
        assert_eq!(parse(&m, TOOL).unwrap(), e);
        assert!(parse(
            b"0000:000011:8f5a82:00000000000000000000000000000000\0",
            TOOL
        )
        .unwrap_err()
        .to_string()
        .contains("no GID"));
        assert!(parse(b"garbage", TOOL).is_err());
    }
}
