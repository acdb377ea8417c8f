//! The resources of one perftest-compatible side: a device, one region laid out as
//! perftest lays out its buffer, one QP (RC, UC or UD, perftest's `-c`) moved through its
//! states with perftest's attributes (PERFTEST-OOB.md §4, §6).

use super::msg::Keys;
use crate::perf::{Conn, Verb};
use crate::UD_QKEY;
use anyhow::{bail, Context as _};
use oxrdma::{
    Access, AddressHandle, CompletionQueue, Context, MemoryRegion, Mtu, ProtectionDomain, QpCap,
    QpState, QueuePair, UdDest, WcStatus, WorkCompletion,
};
use oxrdma_core::grh::GRH_LEN;
use oxrdma_core::{AddressVector, QpAttr};
use std::cell::OnceCell;

/// Fields drop in order: the QP before the region and CQ, those before the PD.
pub struct Res {
    pub qp: QueuePair,
    /// UD: the address handle of the peer and its QPN, once its KEYS are known.
    peer: OnceCell<(AddressHandle, u32)>,
    pub conn: Conn,
    pub mr: MemoryRegion,
    pub cq: CompletionQueue,
    pd: ProtectionDomain,
    pub ctx: Context,
    /// perftest's BUFF_SIZE: the region is two of these; the peer aims at the second.
    pub half: usize,
    /// What we accept in flight as a responder (sent as out_reads, our max_dest_rd_atomic).
    pub out_reads: u16,
    pub psn: u32,
}

/// `x` rounded up to a multiple of `to` (a power of two): perftest's INC().
pub fn inc(x: usize, to: usize) -> usize {
    x.div_ceil(to) * to
}

/// Which incoming operations the QP allows, as perftest sets them per test.
fn access(verb: Verb) -> Access {
    match verb {
        Verb::Write => Access::REMOTE_WRITE,
        Verb::Read => Access::REMOTE_READ,
        Verb::Atomic => Access::REMOTE_ATOMIC,
        Verb::Send => Access::REMOTE_WRITE.union(Access::LOCAL_WRITE),
    }
}

/// The options a side needs to build its resources.
pub struct Shape {
    pub verb: Verb,
    pub size: usize,
    pub cycle: usize,
    pub cache: usize,
    pub tx_depth: u32,
    pub rx_depth: u32,
}

impl Res {
    pub fn open(args: &crate::perf::PerfArgs, s: &Shape) -> anyhow::Result<Res> {
        let ctx = Context::open(args.device)
            .with_context(|| format!("cannot open the RDMA device {}", args.device))?;
        if let Some(p) = &args.pcap {
            ctx.capture_to(p)
                .with_context(|| format!("cannot write {}", p.display()))?;
        }
        let pd = ctx.alloc_pd()?;
        let half = inc(s.size.max(s.cycle), s.cache);
        // UD receives land behind a 40-byte GRH: perftest adds a cache line for it.
        let len = 2 * half + if args.conn == Conn::Ud { s.cache } else { 0 };
        let mr = pd
            .register(len, Access::ALL)
            .with_context(|| format!("cannot register {len} bytes"))?;
        let cq = ctx.create_cq(s.tx_depth + s.rx_depth + 16)?;
        let cap = QpCap {
            max_send_wr: s.tx_depth.max(1),
            max_recv_wr: s.rx_depth.max(1),
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        let qp = pd.create_qp(&cq, &cq, args.conn.qp_type(), cap)?;
        let ud = args.conn == Conn::Ud;
        qp.modify(&QpAttr {
            qp_state: Some(QpState::Init),
            pkey_index: Some(0),
            port_num: Some(1),
            qp_access_flags: (!ud).then(|| access(s.verb)),
            qkey: ud.then_some(UD_QKEY),
            ..Default::default()
        })?;
        // perftest offers the device's whole READ/atomic depth for read and atomic tests.
        let out_reads = match s.verb {
            Verb::Read | Verb::Atomic => u16::from(ctx.attr().max_qp_rd_atom),
            Verb::Write | Verb::Send => 1,
        };
        let psn = ctx.random_psn();
        Ok(Res {
            qp,
            peer: OnceCell::new(),
            conn: args.conn,
            mr,
            cq,
            pd,
            ctx,
            half,
            out_reads,
            psn,
        })
    }

    /// Our KEYS: the peer targets the second half of the region.
    pub fn keys(&self) -> Keys {
        Keys {
            lid: 0,
            out_reads: self.out_reads,
            qpn: self.qp.qpn(),
            psn: self.psn,
            rkey: self.mr.rkey(),
            vaddr: self.mr.addr() + self.half as u64,
            gid: self.ctx.gid().0,
            srqn: 0,
        }
    }

    /// Where a UD QP's sends go (None for RC and UC).
    pub fn ud(&self) -> Option<UdDest> {
        self.peer.get().map(|(ah, qpn)| UdDest {
            ah: ah.id(),
            remote_qpn: *qpn,
            remote_qkey: UD_QKEY,
        })
    }

    /// Bytes a receive of a `size`-byte message takes (UD: the GRH in front).
    pub fn recv_len(&self, size: usize) -> usize {
        size + if self.conn == Conn::Ud { GRH_LEN } else { 0 }
    }

    /// INIT → RTR towards `peer`: perftest's min_rnr_timer 12 and our own out_reads as the
    /// responder depth (RC); UD keeps no peer in the QP, only an address handle.
    pub fn to_rtr(&self, peer: &Keys, mtu: Mtu) -> anyhow::Result<()> {
        if self.conn == Conn::Ud {
            let ah = self.pd.create_ah(oxrdma::Gid(peer.gid))?;
            let _ = self.peer.set((ah, peer.qpn));
            return self
                .qp
                .modify(&QpAttr {
                    qp_state: Some(QpState::Rtr),
                    ..Default::default()
                })
                .context("moving the QP to RTR");
        }
        let rc = self.conn == Conn::Rc;
        self.qp
            .modify(&QpAttr {
                qp_state: Some(QpState::Rtr),
                // From the device GID that suits the peer's (on rxe, index 0 is RoCE v1).
                ah_attr: Some(AddressVector {
                    dgid: oxrdma::Gid(peer.gid),
                    sgid_index: self.ctx.gid_index_for(oxrdma::Gid(peer.gid)),
                }),
                path_mtu: Some(mtu),
                dest_qp_num: Some(peer.qpn),
                rq_psn: Some(peer.psn),
                max_dest_rd_atomic: rc.then(|| self.out_reads.min(255) as u8),
                min_rnr_timer: rc.then_some(12),
                ..Default::default()
            })
            .context("moving the QP to RTR")
    }

    /// RTR → RTS: timeout 14, retry 7, rnr_retry 7 (forever), and as many READs/atomics
    /// in flight as the peer accepts, capped to what our device can track.
    pub fn to_rts(&self, peer: &Keys) -> anyhow::Result<()> {
        let limit = self.ctx.attr().max_qp_rd_atom;
        let rd = u8::try_from(peer.out_reads)
            .unwrap_or(u8::MAX)
            .clamp(1, limit);
        let rc = self.conn == Conn::Rc;
        self.qp
            .modify(&QpAttr {
                qp_state: Some(QpState::Rts),
                sq_psn: Some(self.psn),
                timeout: rc.then_some(14),
                retry_cnt: rc.then_some(7),
                rnr_retry: rc.then_some(7),
                max_rd_atomic: rc.then_some(rd),
                ..Default::default()
            })
            .context("moving the QP to RTS")
    }

    /// Polls up to 64 completions into `wcs` (cleared first); any error status is fatal.
    pub fn poll(&self, wcs: &mut Vec<WorkCompletion>) -> anyhow::Result<()> {
        wcs.clear();
        self.cq.poll(wcs, 64)?;
        if let Some(w) = wcs.iter().find(|w| w.status != WcStatus::Success) {
            bail!("work request {} failed: {}", w.wr_id, w.status);
        }
        Ok(())
    }
}
