//! `oxrdma ud-pingpong`: UD SEND/RECV ping-pong speaking `ibv_ud_pingpong`'s out-of-band
//! format, so either side can be the real `ibv_ud_pingpong` (rdma-core
//! libibverbs/examples/ud_pingpong.c).
//!
//! The TCP exchange (port 18515) is the RC one: `LLLL:QQQQQQ:PPPPPP:GGGG…` plus a NUL, 52
//! bytes each way, then `done\0` from the client. Every message is one UD SEND_ONLY of
//! `size` bytes (at most the port's active MTU) with Q_Key 0x11111111; receives are
//! `size + 40` bytes because the first 40 take the GRH.

use crate::drops::explain;
use crate::oob::{exchange, print_result};
use crate::pingloop::PingLoop;
use anyhow::{bail, Context as _};
use oxrdma::{
    Access, Context, Endpoint, QpCap, QpType, RecvWr, SendData, SendFlags, SendWr, UdDest,
};
use std::net::{IpAddr, Ipv6Addr};
use std::time::Duration;

const TOOL: &str = "ibv_ud_pingpong";
/// The GRH area in front of every UD receive.
const GRH: usize = oxrdma_core::grh::GRH_LEN;
// ibv_ud_pingpong's wr_ids (the RC tool has them the other way round).
const RECV_WRID: u64 = 1;
const SEND_WRID: u64 = 2;
/// UD has no retransmission: one lost datagram stalls both sides for good (ibv_ud_pingpong
/// then waits forever); give up with an error instead.
const STALL: Duration = Duration::from_secs(20);

/// What the user asked for (`oxrdma ud-pingpong`).
#[derive(clap::Args, Debug, Clone)]
pub struct UdPingpongArgs {
    /// The server to connect to; without it, wait for a client.
    pub server: Option<String>,
    /// TCP port of the out-of-band exchange.
    #[arg(short = 'p', long, default_value_t = 18515)]
    pub port: u16,
    /// This side's RDMA device (its IP address).
    #[arg(short = 'd', long, default_value = "127.0.0.2")]
    pub device: IpAddr,
    /// Message size: at most the port's active MTU (ibv_ud_pingpong's default, 1024).
    #[arg(short = 's', long, default_value_t = 1024)]
    pub size: usize,
    /// Number of exchanges.
    #[arg(short = 'n', long, default_value_t = 1000)]
    pub iters: u64,
    /// Receives kept posted.
    #[arg(short = 'r', long, default_value_t = 500)]
    pub rx_depth: u32,
    /// Capture this side's packets to a pcap file.
    #[arg(long)]
    pub pcap: Option<std::path::PathBuf>,
}

/// ibv_ud_pingpong's "local/remote address" line (the GID as inet_ntop prints it).
fn address_line(which: &str, sep: char, e: &Endpoint) -> String {
    let gid = Ipv6Addr::from(e.gid.0);
    format!(
        "  {which} LID 0x0000, QPN 0x{:06x}, PSN 0x{:06x}{sep} GID {gid}",
        e.qpn, e.psn
    )
}

/// Runs the ping-pong; prints ibv_ud_pingpong's address and result lines.
pub fn ud_pingpong(a: &UdPingpongArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        a.iters > 0 && (1..=16_384).contains(&a.rx_depth),
        "ud-pingpong needs -n > 0 and -r 1..=16384"
    );
    let ctx = Context::open(a.device)?;
    let mtu = ctx.active_mtu().bytes();
    if a.size > mtu {
        // Checked before anything is exchanged, as ibv_ud_pingpong does.
        bail!(
            "requested size {} larger than the port's active MTU ({mtu})",
            a.size
        );
    }
    if let Some(p) = &a.pcap {
        ctx.capture_to(p)
            .with_context(|| format!("cannot write {}", p.display()))?;
    }
    let pd = ctx.alloc_pd()?;
    // Bytes 0..40 take the GRH of every receive; sends go from offset 40.
    let mr = pd.register(a.size + GRH, Access::LOCAL_WRITE)?;
    let cq = ctx.create_cq(a.rx_depth + 1)?;
    let cap = QpCap {
        max_send_wr: 1,
        max_recv_wr: a.rx_depth,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 64,
    };
    let qp = pd.create_qp(&cq, &cq, QpType::Ud, cap)?;
    qp.ready_ud(crate::UD_QKEY)?;
    // Receives go up before the exchange: the client sends as soon as it has our QPN.
    let post_recv = || {
        qp.post_recv(RecvWr {
            wr_id: RECV_WRID,
            sges: vec![mr.sge(0, a.size + GRH)?].into(),
        })
    };
    for _ in 0..a.rx_depth {
        post_recv()?;
    }
    let me = qp.endpoint();
    println!("{}", address_line("local address: ", ':', &me));
    // The server makes its AH before answering: the client's first send may follow at once.
    let mut ah = None;
    let peer = exchange(a.server.as_deref(), a.port, &me, TOOL, &mut |peer| {
        ah = Some(pd.create_ah(peer.gid)?);
        Ok(())
    })?;
    let ah = match ah {
        Some(ah) => ah,
        None => pd.create_ah(peer.gid)?,
    };
    println!("{}", address_line("remote address:", ',', &peer));
    let post_send = || {
        let data = if a.size <= 64 {
            let mut v = oxrdma::InlineData::from_elem(0, a.size);
            mr.read(GRH, &mut v)?;
            SendData::Inline(v)
        } else {
            SendData::Sges(vec![mr.sge(GRH, a.size)?].into())
        };
        let mut wr = SendWr::new(SEND_WRID, oxrdma::WrOpcode::Send, data);
        wr.flags = SendFlags::SIGNALED;
        wr.ud = Some(UdDest {
            ah: ah.id(),
            remote_qpn: peer.qpn,
            remote_qkey: crate::UD_QKEY,
        });
        qp.post_send(wr)
    };
    // Stricter than ibv_ud_pingpong: a datagram from anyone else, or of another size,
    // means the two sides disagree.
    let check_recv = |wc: &oxrdma::WorkCompletion| {
        if wc.src_qp != peer.qpn || wc.byte_len as usize != a.size + GRH {
            bail!(
                "unexpected datagram: {} bytes (GRH included) from QPN {:#x}, expected {} from {:#x}",
                wc.byte_len,
                wc.src_qp,
                a.size + GRH,
                peer.qpn
            );
        }
        Ok(())
    };
    let ping = PingLoop {
        iters: a.iters,
        rx_depth: a.rx_depth,
        send_wrid: SEND_WRID,
        recv_wrid: RECV_WRID,
        client: a.server.is_some(),
        stall: STALL,
        stall_why: ": UD does not retransmit, so a datagram was lost",
    };
    let secs = explain(&ctx, ping.run(&cq, &post_send, &post_recv, &check_recv))?;
    print_result(a.size, a.iters, secs);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oob::{parse, wire};
    use oxrdma::Gid;

    #[test]
    fn wire_format_and_address_lines_match_ibv_ud_pingpong() {
        // Values from tests/vectors/rxe/logs/ud_pingpong.*.
        let e = Endpoint {
            gid: Gid::from(std::net::Ipv4Addr::new(10, 77, 0, 2)),
            qpn: 0x14,
            psn: 0x533809,
            key: None,
            buffers: Vec::new(),
        };
        let m = wire(&e);
        let text = std::str::from_utf8(&m[..51]).unwrap();
        assert_eq!(text, "0000:000014:533809:00000000000000000000ffff0a4d0002");
        assert_eq!(m[51], 0);
        assert_eq!(parse(&m, TOOL).unwrap(), e);
        assert_eq!(
            address_line("local address: ", ':', &e),
            "  local address:  LID 0x0000, QPN 0x000014, PSN 0x533809: GID ::ffff:10.77.0.2"
        );
        assert_eq!(
            address_line("remote address:", ',', &e),
            "  remote address: LID 0x0000, QPN 0x000014, PSN 0x533809, GID ::ffff:10.77.0.2"
        );
        // A GID whose interface ID is zero gets no global AH in ibv_ud_pingpong either.
        assert!(parse(
            b"0000:000011:8f5a82:fe800000000000000000000000000000\0",
            TOOL
        )
        .unwrap_err()
        .to_string()
        .contains("no GID"));
        assert!(parse(b"garbage", TOOL).is_err());
    }
}
