//! One side of a perf run: the device, one region slot and one QP (RC, UC or UD) per
//! `-q`, and the endpoint exchange. `session.rs` runs the conversation around it.

use super::ctl::Ctl;
use super::{Conn, PerfArgs};
use crate::cmlink::CmLink;
use anyhow::{bail, Context as _};
use oxrdma::{
    exchange, Access, AddressHandle, CompletionChannel, CompletionQueue, ConnectOptions, Context,
    MemoryRegion, Mtu, PeerInfo, ProtectionDomain, QpCap, QueuePair, UdDest, WcStatus,
    WorkCompletion,
};
use std::collections::HashMap;
use std::time::Duration;

/// How long a side waits for a completion or a control line before it gives up.
pub const STALL: Duration = Duration::from_secs(30);

/// A connected side. Fields drop in order: QPs before the region and CQ, those before the PD.
pub struct Side {
    /// `-R`: the CM ids of the QPs (first: they disconnect before the QPs go).
    _cm: Option<CmLink>,
    pub qps: Vec<QueuePair>,
    /// UD: the address handle of each QP's peer.
    ahs: Vec<AddressHandle>,
    pub peers: Vec<PeerInfo>,
    pub mr: MemoryRegion,
    pub cq: CompletionQueue,
    _pd: ProtectionDomain,
    pub ctx: Context,
    /// Bytes of the region that belong to each QP.
    pub slot: usize,
    index: HashMap<u32, usize>,
    pub ctl: Ctl,
    /// Whether the standing receives (send tests) have been posted.
    pub recvs_posted: bool,
    /// `-e`: where the CQ reports its completions while this side sleeps.
    channel: Option<CompletionChannel>,
}

impl Side {
    pub fn open(
        args: &PerfArgs,
        ctx: Context,
        slot: usize,
        mtu: Mtu,
        mut ctl: Ctl,
        mut cm: Option<CmLink>,
    ) -> anyhow::Result<Side> {
        let pd = ctx.alloc_pd()?;
        let len = slot * args.qps as usize;
        let mr = pd
            .register(len, Access::ALL)
            .with_context(|| format!("cannot register {len} bytes"))?;
        let depth = args.qps * (args.tx_depth + args.rx_depth) + 16;
        let cq = ctx.create_cq(depth)?;
        let channel = args.events.then(|| ctx.create_comp_channel()).transpose()?;
        let cap = QpCap {
            max_send_wr: args.tx_depth.max(64),
            max_recv_wr: args.rx_depth,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: args.inline_size,
        };
        let opts = ConnectOptions {
            mtu,
            require_secure: args.secure.is_some(),
            suite: args.secure.unwrap_or_default(),
            ..Default::default()
        };
        let (mut qps, mut peers, mut index) = (Vec::new(), Vec::new(), HashMap::new());
        let mut ahs = Vec::new();
        for i in 0..args.qps as usize {
            let qp = pd.create_qp(&cq, &cq, args.conn.qp_type(), cap)?;
            let endpoint = match args.secure {
                Some(_) => qp.secure_endpoint()?,
                None => qp.endpoint(),
            };
            let me = PeerInfo {
                endpoint,
                addr: mr.addr() + (i * slot) as u64,
                rkey: mr.rkey(),
                len: slot as u64,
            };
            if args.conn == Conn::Ud {
                qp.ready_ud(crate::UD_QKEY)?;
            }
            let peer = match cm.as_mut() {
                Some(cm) => cm
                    .link(&qp, &me)
                    .context("connecting through the RDMA CM")?,
                None => exchange(&mut ctl, &me).context("endpoint exchange")?,
            };
            if peer.len < slot as u64 {
                bail!("the peer's region ({} B) is smaller than ours", peer.len);
            }
            if args.conn == Conn::Ud {
                ahs.push(pd.create_ah(peer.endpoint.gid)?);
            } else if cm.is_none() {
                qp.connect(&peer.endpoint, &opts)?;
            }
            index.insert(qp.qpn(), i);
            qps.push(qp);
            peers.push(peer);
        }
        Ok(Side {
            _cm: cm,
            qps,
            ahs,
            peers,
            mr,
            cq,
            _pd: pd,
            ctx,
            slot,
            index,
            ctl,
            recvs_posted: false,
            channel,
        })
    }

    /// Where QP `i`'s sends go when it is a UD QP (None for RC and UC).
    pub fn ud(&self, i: usize) -> Option<UdDest> {
        self.ahs.get(i).map(|ah| UdDest {
            ah: ah.id(),
            remote_qpn: self.peers[i].endpoint.qpn,
            remote_qkey: crate::UD_QKEY,
        })
    }

    /// Which of our QPs a completion belongs to.
    pub fn qp_index(&self, w: &WorkCompletion) -> anyhow::Result<usize> {
        self.index
            .get(&w.qp_num)
            .copied()
            .with_context(|| format!("completion for unknown QP {:#x}", w.qp_num))
    }

    /// [`Self::poll`], and with `-e`, if it finds nothing, sleeps until a completion comes
    /// (or `timeout` passes): the CQ is armed, then polled once more, so a completion that
    /// came in between is taken, not waited for.
    pub fn poll_or_sleep(
        &self,
        wcs: &mut Vec<WorkCompletion>,
        timeout: Duration,
    ) -> anyhow::Result<()> {
        self.poll(wcs)?;
        let Some(channel) = self.channel.as_ref().filter(|_| wcs.is_empty()) else {
            return Ok(());
        };
        self.cq.req_notify(channel)?;
        self.poll(wcs)?;
        if wcs.is_empty() {
            channel.wait(timeout)?;
            self.poll(wcs)?;
        }
        Ok(())
    }

    /// Whether this side sleeps on CQ events (`-e`).
    pub fn sleeps(&self) -> bool {
        self.channel.is_some()
    }

    /// Polls up to 64 completions into `wcs` (cleared first); any error status is fatal.
    pub fn poll(&self, wcs: &mut Vec<WorkCompletion>) -> anyhow::Result<()> {
        wcs.clear();
        self.cq.poll(wcs, 64)?;
        if let Some(w) = wcs.iter().find(|w| w.status != WcStatus::Success) {
            bail!(
                "work request {} on QP {:#x} failed: {}",
                w.wr_id,
                w.qp_num,
                w.status
            );
        }
        Ok(())
    }
}
