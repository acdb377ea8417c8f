//! Queue-pair verbs: create, modify (the transition rules are in `attr.rs`), destroy, and
//! posting, with every argument checked before anything is queued.

use super::{touched, Engine};
use crate::attr::{validate, AttrLimits, QpAttr, QpInitAttr};
use crate::error::{Result, VerbsError};
use crate::limits::MAX_MESSAGE;
use crate::qp::{Ctx, Qp, SendWqe};
use crate::verbs::{MwType, QpState, QpType, WrOpcode};
use crate::wr::{MwBind, RecvWr, SendData, SendWr};
use oxrdma_wire::Psn;
use rand_core::RngCore;

impl Engine {
    pub fn create_qp(&mut self, pd: u32, init: &QpInitAttr) -> Result<u32> {
        let lim = self.config.attr;
        if !self.pds.contains(&pd) {
            return Err(VerbsError::NotFound("protection domain"));
        }
        if !self.cqs.contains_key(&init.send_cq) || !self.cqs.contains_key(&init.recv_cq) {
            return Err(VerbsError::NotFound("completion queue"));
        }
        let c = &init.cap;
        if c.max_send_wr > lim.max_qp_wr || c.max_recv_wr > lim.max_qp_wr {
            return Err(VerbsError::InvalidArgument(
                "max_send_wr/max_recv_wr above max_qp_wr",
            ));
        }
        if c.max_send_sge > lim.max_sge || c.max_recv_sge > lim.max_sge {
            return Err(VerbsError::InvalidArgument(
                "max_send_sge/max_recv_sge above max_sge",
            ));
        }
        if c.max_inline_data > lim.max_inline_data {
            return Err(VerbsError::InvalidArgument(
                "max_inline_data above the device limit",
            ));
        }
        if let Some(srq) = init.srq {
            let q = self
                .srqs
                .get(&srq)
                .ok_or(VerbsError::NotFound("shared receive queue"))?;
            if q.pd != pd {
                return Err(VerbsError::InvalidArgument(
                    "SRQ of another protection domain",
                ));
            }
            if init.qp_type == QpType::Uc {
                // As in rxe: SRQs serve RC and UD QPs.
                return Err(VerbsError::InvalidArgument("UC QPs cannot use an SRQ"));
            }
        }
        if self.qps.len() >= lim.max_qp as usize {
            return Err(VerbsError::Exhausted("queue pairs"));
        }
        let qpn = loop {
            // 24-bit, never 0 or 1 (QP0/QP1 are the management QPs).
            let q = self.rng.next_u32() & 0xff_ffff;
            if q > 1 && !self.qps.contains_key(&q) {
                break q;
            }
        };
        let mut qp = Qp::new(qpn, pd, init);
        if init.qp_type == QpType::Ud {
            // No path MTU for datagrams: a message is one packet of up to the port's MTU.
            qp.mtu = self.config.max_mtu;
        }
        self.qps.insert(qpn, qp);
        Ok(qpn)
    }

    pub fn destroy_qp(&mut self, qpn: u32) -> Result<()> {
        let qp = self
            .qps
            .remove(&qpn)
            .ok_or(VerbsError::NotFound("queue pair"))?;
        self.timers.requeue(qpn, qp.queued_deadline, None);
        Ok(())
    }

    pub fn qp_state(&self, qpn: u32) -> Result<QpState> {
        self.qps
            .get(&qpn)
            .map(|q| q.state)
            .ok_or(VerbsError::NotFound("queue pair"))
    }

    /// `ibv_modify_qp`: validates the attributes for the transition, then applies them.
    pub fn modify_qp(&mut self, qpn: u32, attr: &QpAttr) -> Result<()> {
        let lim = AttrLimits {
            max_rd_atomic: self.config.attr.max_qp_rd_atom,
            max_mtu: self.config.max_mtu,
        };
        let qp = self
            .qps
            .get_mut(&qpn)
            .ok_or(VerbsError::NotFound("queue pair"))?;
        let to = validate(qp.qp_type, qp.state, attr, lim)?;
        let mut ctx = ctx!(self, 0);
        qp.modify(&mut ctx, attr, to);
        touched(&mut self.active, &mut self.timers, qp);
        Ok(())
    }

    /// `ibv_post_send` of one WR. Errors are synchronous and leave the queue unchanged.
    pub fn post_send(&mut self, qpn: u32, wr: SendWr) -> Result<()> {
        let qp = self
            .qps
            .get_mut(&qpn)
            .ok_or(VerbsError::NotFound("queue pair"))?;
        if matches!(qp.state, QpState::Reset | QpState::Init | QpState::Rtr) {
            return Err(VerbsError::BadState {
                qpn,
                state: qp.state,
                what: "post_send needs RTS",
            });
        }
        if qp.sq.len() >= qp.cap.max_send_wr as usize {
            return Err(VerbsError::Exhausted("send queue is full"));
        }
        let op = wr.opcode;
        match &wr.data {
            SendData::Sges(s) if s.len() > qp.cap.max_send_sge as usize => {
                return Err(VerbsError::InvalidArgument("more SGEs than max_send_sge"));
            }
            SendData::Inline(d) if d.len() > qp.cap.max_inline_data as usize => {
                return Err(VerbsError::InvalidArgument(
                    "inline data longer than max_inline_data",
                ));
            }
            SendData::Inline(_) if op.is_read_or_atomic() => {
                return Err(VerbsError::InvalidArgument(
                    "READ and atomics cannot be inline",
                ));
            }
            _ => {}
        }
        let len = wr.length();
        if op.is_atomic() && len != 8 {
            return Err(VerbsError::InvalidArgument(
                "atomics need 8 bytes of local memory",
            ));
        }
        if op.is_read_or_atomic() && qp.max_rd_atomic == 0 {
            return Err(VerbsError::InvalidArgument(
                "READ/atomic on a QP with max_rd_atomic 0",
            ));
        }
        if len > MAX_MESSAGE {
            return Err(VerbsError::InvalidArgument(
                "message longer than 2^31 bytes",
            ));
        }
        let allowed = match qp.qp_type {
            QpType::Rc => true,
            QpType::Uc => !op.is_read_or_atomic() && op != WrOpcode::SendWithInv,
            QpType::Ud => matches!(op, WrOpcode::Send | WrOpcode::SendWithImm),
        };
        if op == WrOpcode::BindMw && wr.bind.is_none() {
            return Err(VerbsError::InvalidArgument("BIND_MW without a binding"));
        }
        if !allowed {
            return Err(VerbsError::InvalidArgument(
                "opcode not supported on this QP type",
            ));
        }
        let mut ud_dest = None;
        if qp.qp_type == QpType::Ud {
            let ud = wr.ud.ok_or(VerbsError::InvalidArgument(
                "a UD send needs a destination (address handle, QPN, Q_Key)",
            ))?;
            let &(ah_pd, av) = self
                .ahs
                .get(&ud.ah)
                .ok_or(VerbsError::NotFound("address handle"))?;
            if ah_pd != qp.pd {
                return Err(VerbsError::InvalidArgument(
                    "address handle of another protection domain",
                ));
            }
            if ud.remote_qpn >= 1 << 24 {
                return Err(VerbsError::InvalidArgument("remote QPN is 24-bit"));
            }
            if len > self.config.max_mtu.bytes() as u64 {
                return Err(VerbsError::InvalidArgument(
                    "UD messages fit in one packet: at most the port's MTU",
                ));
            }
            ud_dest = Some(av.dgid);
        }
        qp.sq.push_back(SendWqe {
            wr,
            ud_dest,
            len,
            segs: Vec::new(),
            started: false,
            first_psn: Psn::new(0),
            npkts: 0,
            local_error: None,
            local_done: None,
        });
        if qp.state == QpState::Err {
            let mut ctx = ctx!(self, 0);
            qp.flush(&mut ctx);
        }
        touched(&mut self.active, &mut self.timers, qp);
        Ok(())
    }

    /// `ibv_post_recv` of one WR.
    pub fn post_recv(&mut self, qpn: u32, wr: RecvWr) -> Result<()> {
        let qp = self
            .qps
            .get_mut(&qpn)
            .ok_or(VerbsError::NotFound("queue pair"))?;
        if qp.state == QpState::Reset {
            return Err(VerbsError::BadState {
                qpn,
                state: qp.state,
                what: "post_recv needs INIT or later",
            });
        }
        if qp.srq.is_some() {
            return Err(VerbsError::InvalidArgument(
                "this QP receives from an SRQ: post there",
            ));
        }
        if qp.resp.rq_len() >= qp.cap.max_recv_wr as usize {
            return Err(VerbsError::Exhausted("receive queue is full"));
        }
        if wr.sges.len() > qp.cap.max_recv_sge as usize {
            return Err(VerbsError::InvalidArgument("more SGEs than max_recv_sge"));
        }
        qp.resp.post_recv(wr);
        if qp.state == QpState::Err {
            let mut ctx = ctx!(self, 0);
            qp.flush(&mut ctx);
        }
        Ok(())
    }

    /// `ibv_bind_mw` for a type 1 window: posts the bind on `qpn`'s send queue (it completes
    /// there, in order, with IBV_WC_BIND_MW when signaled).
    pub fn bind_mw(&mut self, qpn: u32, wr_id: u64, signaled: bool, bind: MwBind) -> Result<()> {
        match self.mrs.mw(bind.mw) {
            Some(w) if w.mw_type == MwType::Type1 => {}
            Some(_) => {
                return Err(VerbsError::InvalidArgument(
                    "type 2 windows are bound with a BIND_MW work request",
                ))
            }
            None => return Err(VerbsError::NotFound("memory window")),
        }
        let mut wr = SendWr::new(wr_id, WrOpcode::BindMw, SendData::Sges(Vec::new()));
        wr.flags = if signaled {
            crate::SendFlags::SIGNALED
        } else {
            crate::SendFlags::empty()
        };
        wr.bind = Some(bind);
        self.post_send(qpn, wr)
    }
}
