//! Queue pairs on an rdma-core device.

use super::convert::{recv_wr, send_wr, Sges};
use super::cq::Cq;
use super::mw::Mw;
use super::objects::{Ah, Pd};
use super::srq::Srq;
use super::verbs::{check, last_error, verbs};
use crate::error::{Error, Result};
use oxrdma_core::{MwBind, QpAttr, QpCap, QpState, QpType, RecvWr, SendWr, VerbsError, WrOpcode};
use oxrdma_verbs_abi::*;
use std::collections::HashMap;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

/// `ibv_create_qp` (no SRQ).
#[derive(Debug)]
pub(crate) struct Qp {
    pub pd: Arc<Pd>,
    _cqs: [Arc<Cq>; 2],
    _srq: Option<Arc<Srq>>,
    qp: NonNull<ibv_qp>,
    pub qpn: u32,
    /// The capacities the provider gave (at least those asked for).
    pub cap: QpCap,
}

// SAFETY: rdma-core's QP verbs (post, modify, query) may be called from any thread.
unsafe impl Send for Qp {}
// SAFETY: as above.
unsafe impl Sync for Qp {}

impl Qp {
    pub fn create(
        pd: &Arc<Pd>,
        [send_cq, recv_cq]: [&Arc<Cq>; 2],
        srq: Option<&Arc<Srq>>,
        qp_type: QpType,
        cap: QpCap,
        sq_sig_all: bool,
    ) -> Result<Qp> {
        let v = verbs()?;
        let mut init = ibv_qp_init_attr {
            qp_context: std::ptr::null_mut(),
            send_cq: send_cq.ptr(),
            recv_cq: recv_cq.ptr(),
            srq: srq.map_or(std::ptr::null_mut(), |s| s.ptr()),
            cap: ibv_qp_cap {
                max_send_wr: cap.max_send_wr,
                max_recv_wr: cap.max_recv_wr,
                max_send_sge: cap.max_send_sge,
                max_recv_sge: cap.max_recv_sge,
                max_inline_data: cap.max_inline_data,
            },
            qp_type: qp_type as u32,
            sq_sig_all: i32::from(sq_sig_all),
        };
        // SAFETY: a PD and CQs of one open device; `init` is readable and writable (the
        // provider writes the capacities it gave back into it).
        let qp = unsafe { (v.ibv_create_qp)(pd.ptr(), &mut init) };
        let qp = NonNull::new(qp).ok_or_else(|| last_error("ibv_create_qp"))?;
        // SAFETY: the QP the library just returned.
        let qpn = unsafe { qp.as_ref().qp_num };
        let c = init.cap;
        Ok(Qp {
            pd: pd.clone(),
            _cqs: [send_cq.clone(), recv_cq.clone()],
            _srq: srq.cloned(),
            qp,
            qpn,
            cap: QpCap {
                max_send_wr: c.max_send_wr,
                max_recv_wr: c.max_recv_wr,
                max_send_sge: c.max_send_sge,
                max_recv_sge: c.max_recv_sge,
                max_inline_data: c.max_inline_data,
            },
        })
    }

    fn ops(&self) -> &ibv_context_ops {
        // SAFETY: the device is open while this QP holds its PD; the op table is not
        // written after the context is made.
        unsafe { &(*self.pd.dev.ctx()).ops }
    }

    /// `ibv_modify_qp`.
    pub fn modify(&self, a: &QpAttr) -> Result<()> {
        if let Some(av) = a.ah_attr {
            self.pd.dev.check_sgid(av.sgid_index)?;
        }
        let v = verbs()?;
        let (mut c, mask) = oxrdma_verbs_abi::qp_attr::to_c(a);
        // SAFETY: a live QP and a readable attribute.
        check("ibv_modify_qp", unsafe {
            (v.ibv_modify_qp)(self.qp.as_ptr(), &mut c, mask as i32)
        })
    }

    /// `ibv_modify_qp` with attributes already in C form (the RDMA CM's).
    pub fn modify_raw(&self, a: &mut ibv_qp_attr, mask: i32) -> Result<()> {
        let v = verbs()?;
        // SAFETY: a live QP and a readable attribute.
        check("ibv_modify_qp", unsafe {
            (v.ibv_modify_qp)(self.qp.as_ptr(), a, mask)
        })
    }

    /// The state the provider reports (`ibv_query_qp` of the state alone).
    pub fn state(&self) -> Result<QpState> {
        let v = verbs()?;
        let mut a = ibv_qp_attr::default();
        // SAFETY: all-zero bytes are a valid `ibv_qp_init_attr` (NULL pointers, zeros).
        let mut init: ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        let mask = oxrdma_core::mask::STATE as i32;
        // SAFETY: a live QP and writable structs.
        check("ibv_query_qp", unsafe {
            (v.ibv_query_qp)(self.qp.as_ptr(), &mut a, mask, &mut init)
        })?;
        QpState::from_ibv(a.qp_state).ok_or(Error::RdmaCore {
            verb: "ibv_query_qp: unknown state",
            errno: rustix::io::Errno::PROTO.raw_os_error(),
        })
    }

    /// `ibv_query_qp` of every attribute oxrdma carries (the path only where one is set),
    /// the capacities and whether every send is signaled.
    pub fn query(&self) -> Result<(QpAttr, QpCap, bool)> {
        use oxrdma_core::mask::{AV, CARRIED};
        let v = verbs()?;
        let mut a = ibv_qp_attr::default();
        // SAFETY: all-zero bytes are a valid `ibv_qp_init_attr` (NULL pointers, zeros).
        let mut init: ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        // SAFETY: a live QP and writable structs.
        check("ibv_query_qp", unsafe {
            (v.ibv_query_qp)(self.qp.as_ptr(), &mut a, CARRIED as i32, &mut init)
        })?;
        // Before RTR there is no path (no GRH): it is left out, as unset.
        let mask = if a.ah_attr.is_global == 0 {
            CARRIED & !AV
        } else {
            CARRIED
        };
        let attr = oxrdma_verbs_abi::qp_attr::from_c(&a, mask)
            .map_err(|e| Error::BadPeer(format!("the provider's QP attributes: {e}")))?;
        let c = init.cap;
        let cap = QpCap {
            max_send_wr: c.max_send_wr,
            max_recv_wr: c.max_recv_wr,
            max_send_sge: c.max_send_sge,
            max_recv_sge: c.max_recv_sge,
            max_inline_data: c.max_inline_data,
        };
        Ok((attr, cap, init.sq_sig_all != 0))
    }

    /// `ibv_post_send` of one WR; `ah` is the address handle a UD WR names.
    pub fn post_send(&self, w: &SendWr, ah: Option<&Ah>) -> Result<()> {
        let post = self
            .ops()
            .post_send
            .ok_or(Error::Unsupported("post_send"))?;
        let mut store = Sges::new();
        let ah = ah.map_or(std::ptr::null_mut(), Ah::ptr);
        // A type 2 bind names its window and region: their table stays locked (so
        // neither goes) until the post returns.
        let window = match (w.opcode, w.bind) {
            (WrOpcode::BindMw, Some(bind)) => Some((Mw::for_wr(&self.pd, &bind)?, bind.rkey)),
            (WrOpcode::BindMw, None) => {
                return Err(VerbsError::InvalidArgument("a BIND_MW without its bind").into())
            }
            _ => None,
        };
        let mut c = send_wr(w, &mut store, ah, window.as_ref().map(|((c, ..), _)| *c))?;
        let mut bad = std::ptr::null_mut();
        // SAFETY: a live QP; the WR, its SGE list and any inline bytes are readable until
        // the call returns (the provider copies what it keeps).
        let rc = unsafe { post(self.qp.as_ptr(), &mut c, &mut bad) };
        check("ibv_post_send", rc)?;
        if let Some(((_, mw, _keys), rkey)) = window {
            mw.bound(rkey);
        }
        Ok(())
    }

    /// `ibv_bind_mw` of a type 1 window.
    pub fn bind_mw(&self, wr_id: u64, signaled: bool, bind: &MwBind) -> Result<()> {
        super::mw::bind_type1(&self.pd, self.qp.as_ptr(), wr_id, signaled, bind)
    }

    /// `ibv_post_recv` of one WR.
    pub fn post_recv(&self, w: &RecvWr) -> Result<()> {
        let post = self
            .ops()
            .post_recv
            .ok_or(Error::Unsupported("post_recv"))?;
        let mut store = Sges::new();
        let mut c = recv_wr(w, &mut store);
        let mut bad = std::ptr::null_mut();
        // SAFETY: as in `post_send`.
        let rc = unsafe { post(self.qp.as_ptr(), &mut c, &mut bad) };
        check("ibv_post_recv", rc)
    }
}

impl Drop for Qp {
    fn drop(&mut self) {
        if let Ok(v) = verbs() {
            // SAFETY: created by `create`, destroyed once, before its CQs and PD (it
            // holds them).
            unsafe { (v.ibv_destroy_qp)(self.qp.as_ptr()) };
        }
    }
}

/// A device's address handles by the id `UdDest` names them with.
#[derive(Debug, Default)]
pub(crate) struct Ahs {
    next: u32,
    by_id: HashMap<u32, Arc<Ah>>,
}

impl Ahs {
    pub fn add(table: &Mutex<Ahs>, ah: Arc<Ah>) -> u32 {
        let mut t = table.lock().unwrap_or_else(|e| e.into_inner());
        t.next = t.next.wrapping_add(1);
        let id = t.next;
        t.by_id.insert(id, ah);
        id
    }

    pub fn get(table: &Mutex<Ahs>, id: u32) -> Option<Arc<Ah>> {
        let t = table.lock().unwrap_or_else(|e| e.into_inner());
        t.by_id.get(&id).cloned()
    }

    pub fn remove(table: &Mutex<Ahs>, id: u32) {
        let mut t = table.lock().unwrap_or_else(|e| e.into_inner());
        t.by_id.remove(&id);
    }
}
