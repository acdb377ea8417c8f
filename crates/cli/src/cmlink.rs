//! QPs connected through the RDMA CM, for `oxrdma perf -R` (as perftest's `-R`) and
//! `oxrdma pingpong --cm`, instead of an endpoint exchange over TCP. The server listens on
//! the CM port (port space TCP, or UDP for UD QPs); the client connects one id per QP.
//! Each side's private data says where its region is: QPN, address, rkey and length (24
//! bytes, big-endian).

use anyhow::{bail, Context as _};
use oxrdma::cm::{CmEvent, CmEventType, CmId, ConnParam, EventChannel, PortSpace};
use oxrdma::{Context, Endpoint, PeerInfo, QueuePair};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

/// Reads the RDMA engine may have outstanding on each side (RC read and atomic tests).
const RD_ATOMIC: u8 = 16;
/// How long a step of the connection may take.
const STALL: Duration = Duration::from_secs(30);

/// The CM side of a run: its channel, the server's listener, and one id per QP (kept
/// until the run ends; dropping them disconnects).
#[derive(Debug)]
pub struct CmLink {
    ch: EventChannel,
    ctx: Context,
    ps: PortSpace,
    listener: Option<CmId>,
    server: Option<SocketAddr>,
    ids: Vec<CmId>,
}

fn encode(p: &PeerInfo) -> Vec<u8> {
    let mut b = Vec::with_capacity(24);
    b.extend_from_slice(&p.endpoint.qpn.to_be_bytes());
    b.extend_from_slice(&p.addr.to_be_bytes());
    b.extend_from_slice(&p.rkey.to_be_bytes());
    b.extend_from_slice(&p.len.to_be_bytes());
    b
}

fn decode(b: &[u8], gid: oxrdma::Gid) -> anyhow::Result<PeerInfo> {
    if b.len() < 24 {
        bail!("the peer's private data holds {} bytes, not 24", b.len());
    }
    let u32_at = |i: usize| u32::from_be_bytes(b[i..i + 4].try_into().unwrap_or_default());
    let u64_at = |i: usize| u64::from_be_bytes(b[i..i + 8].try_into().unwrap_or_default());
    Ok(PeerInfo {
        endpoint: Endpoint {
            gid,
            qpn: u32_at(0),
            psn: 0,
            key: None,
            buffers: Vec::new(),
        },
        addr: u64_at(4),
        rkey: u32_at(12),
        len: u64_at(16),
    })
}

impl CmLink {
    fn new(ctx: &Context, ud: bool) -> anyhow::Result<CmLink> {
        Ok(CmLink {
            ch: EventChannel::for_context(ctx)?,
            ctx: ctx.clone(),
            ps: if ud { PortSpace::Udp } else { PortSpace::Tcp },
            listener: None,
            server: None,
            ids: Vec::new(),
        })
    }

    /// The server's side: listening on `port` of every address.
    pub fn listen(ctx: &Context, port: u16, ud: bool) -> anyhow::Result<CmLink> {
        let mut l = CmLink::new(ctx, ud)?;
        let id = CmId::new(&l.ch, ctx, l.ps)?;
        id.bind_addr(SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port))
            .with_context(|| format!("cannot listen on RDMA CM port {port}"))?;
        id.listen(1024)?;
        l.listener = Some(id);
        Ok(l)
    }

    /// The client's side, connecting to `server`.
    pub fn client(ctx: &Context, server: SocketAddr, ud: bool) -> anyhow::Result<CmLink> {
        let mut l = CmLink::new(ctx, ud)?;
        l.server = Some(server);
        Ok(l)
    }

    /// The next event, or an error after `STALL`.
    fn next(&self) -> anyhow::Result<CmEvent> {
        let deadline = Instant::now() + STALL;
        loop {
            if let Some(e) = self.ch.try_event() {
                return Ok(e);
            }
            if Instant::now() > deadline {
                bail!("no RDMA CM event in {} s", STALL.as_secs());
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    fn expect(&self, want: CmEventType) -> anyhow::Result<CmEvent> {
        let e = self.next()?;
        if e.event != want {
            bail!(
                "RDMA CM: {} (status {}) where {} was due",
                e.event.name(),
                e.status,
                want.name()
            );
        }
        Ok(e)
    }

    /// Connects `qp` (RC, UC: through the CM; UD: its QPN found by SIDR, the QP already
    /// at RTS) and returns what the peer said of itself.
    pub fn link(&mut self, qp: &QueuePair, me: &PeerInfo) -> anyhow::Result<PeerInfo> {
        let ud = self.ps == PortSpace::Udp;
        let param = ConnParam {
            private_data: encode(me),
            responder_resources: RD_ATOMIC,
            initiator_depth: RD_ATOMIC,
            qp_num: qp.qpn(),
            ..ConnParam::default()
        };
        if let Some(server) = self.server {
            let id = CmId::with_type(&self.ch, &self.ctx, self.ps, qp.qp_type())?;
            id.resolve_addr(None, server)?;
            self.expect(CmEventType::AddrResolved)?;
            id.resolve_route()?;
            self.expect(CmEventType::RouteResolved)?;
            if !ud {
                id.attach_qp(qp)?;
            }
            id.connect(&param)?;
            let e = self.expect(CmEventType::Established)?;
            let gid = id.peer_gid().context("no peer after ESTABLISHED")?;
            let data =
                e.ud.as_ref()
                    .map_or(&e.conn.private_data, |u| &u.private_data);
            self.ids.push(id);
            return decode(data, gid);
        }
        let e = self.expect(CmEventType::ConnectRequest)?;
        let id = e.new_id.context("a connection request without its id")?;
        let data =
            e.ud.as_ref()
                .map_or(&e.conn.private_data, |u| &u.private_data);
        let peer = decode(data, id.peer_gid().context("a request without its peer")?)?;
        if !ud {
            id.attach_qp(qp)?;
        }
        id.accept(&param)?;
        if !ud {
            self.expect(CmEventType::Established)?;
        }
        self.ids.push(id);
        Ok(peer)
    }
}
