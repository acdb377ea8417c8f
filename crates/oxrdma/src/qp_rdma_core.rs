//! A queue pair of an rdma-core device, as the public `QueuePair` holds it.

use crate::error::Result;
use crate::rdma_core::{self, RdmaCoreContext};
use crate::Endpoint;
use oxrdma_core::{Gid, QpType, RecvWr, SendWr, VerbsError};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

#[derive(Debug)]
pub(crate) struct RdmaCoreQp {
    pub ctx: Arc<RdmaCoreContext>,
    /// Shared with an RDMA CM id it is attached to, which moves it as the connection goes.
    pub qp: Arc<rdma_core::Qp>,
    pub qp_type: QpType,
    /// The first PSN it sends (drawn at creation; `set_psn`).
    pub psn: AtomicU32,
}

impl RdmaCoreQp {
    pub fn create(
        ctx: &Arc<RdmaCoreContext>,
        pd: &Arc<rdma_core::Pd>,
        cqs: [&Arc<rdma_core::Cq>; 2],
        srq: Option<&Arc<rdma_core::Srq>>,
        init: crate::QpInit<'_>,
    ) -> Result<RdmaCoreQp> {
        let qp = Arc::new(rdma_core::Qp::create(
            pd,
            cqs,
            srq,
            init.qp_type,
            init.cap,
            init.sq_sig_all,
        )?);
        Ok(RdmaCoreQp {
            ctx: ctx.clone(),
            qp,
            qp_type: init.qp_type,
            psn: AtomicU32::new(ctx.random_psn()),
        })
    }

    /// Its endpoint at `gid`.
    pub fn endpoint(&self, gid: Gid) -> Endpoint {
        Endpoint {
            gid,
            qpn: self.qp.qpn,
            psn: self.psn.load(Ordering::Relaxed),
            key: None,
            buffers: Vec::new(),
        }
    }

    /// `ibv_post_send`; a UD WR's address handle is found by the id it names.
    pub fn post_send(&self, wr: &SendWr) -> Result<()> {
        let ah = match (self.qp_type, wr.ud) {
            (QpType::Ud, Some(ud)) => Some(
                rdma_core::Ahs::get(&self.ctx.ahs, ud.ah)
                    .ok_or(VerbsError::NotFound("address handle"))?,
            ),
            (QpType::Ud, None) => {
                return Err(VerbsError::InvalidArgument("a UD send names its destination").into())
            }
            _ => None,
        };
        self.qp.post_send(wr, ah.as_deref())
    }

    /// `ibv_post_recv`.
    pub fn post_recv(&self, wr: &RecvWr) -> Result<()> {
        self.qp.post_recv(wr)
    }
}
