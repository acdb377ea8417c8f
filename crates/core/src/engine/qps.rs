//! Queue-pair verbs: create, modify (the transition rules are in `attr.rs`), destroy, and
//! posting, with every argument checked before anything is queued.

use super::{touched, Engine};
use crate::attr::{validate, AttrLimits, QpAttr, QpCap, QpInitAttr};
use crate::error::{Result, VerbsError};
use crate::qp::{Ctx, Qp, QpPost, QpTransport};
use crate::secure::{DirectionKey, QpKeys, Secured, Suite};
use crate::verbs::{Mtu, MwType, QpState, QpType, WrOpcode};
use crate::wr::{MwBind, RecvWr, SendData, SendWr};
use rand_core::RngCore;
use std::sync::Arc;

impl Engine {
    /// `ibv_create_qp` in `pd`, within the device limits; returns the new QP's number (24
    /// bits, random, never 0 or 1). The QP starts in RESET.
    pub fn create_qp(&mut self, pd: u32, init: &QpInitAttr) -> Result<u32> {
        self.check_qp_init(pd, init)?;
        let qpn = self.draw_qpn();
        let max_ud = self.config.max_mtu.bytes() as u64;
        let post = QpPost::new(
            qpn,
            init.qp_type,
            init.cap,
            init.srq.is_some(),
            max_ud,
            self.bells.clone(),
        );
        // No path MTU for datagrams: a message is one packet of up to the port's MTU.
        let mtu = if init.qp_type == QpType::Ud {
            self.config.max_mtu
        } else {
            Mtu::Mtu1024
        };
        let qp = Qp::new(
            qpn,
            pd,
            init,
            Arc::new(post),
            (self.config.selective_repeat, self.reorder_pool.clone()),
            mtu,
        );
        self.qps.insert(qpn, qp);
        Ok(qpn)
    }

    /// The checks of `ibv_create_qp` every QP type takes: PD, CQs, SRQ, the device's
    /// limits.
    pub(super) fn check_qp_init(&self, pd: u32, init: &QpInitAttr) -> Result<()> {
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
        if self.qps.len() + self.iw.len() >= lim.max_qp as usize {
            return Err(VerbsError::Exhausted("queue pairs"));
        }
        Ok(())
    }

    /// A new QP's number: 24-bit and random, never 0 or 1 (QP0/QP1 are the management
    /// QPs), of the device's slot where it shares its address.
    pub(super) fn draw_qpn(&mut self) -> u32 {
        loop {
            let r = self.rng.next_u32();
            let q = self.config.slot.map_or(r & 0xff_ffff, |s| s.qpn(r));
            if q > 1 && !self.qps.contains_key(&q) && !self.iw.contains_key(&q) {
                break q;
            }
        }
    }

    /// Sends a QP's held ACK (a ping-pong's, waiting for the answer) at the next transmit:
    /// a driver calls it, and transmits, before it destroys the QP, so that a program that
    /// exits after its last completion does not leave the peer retrying.
    pub fn release_ack(&mut self, qpn: u32) {
        if let Some(qp) = self.qps.get_mut(&qpn) {
            qp.release_ack();
            touched(&mut self.active, &mut self.timers, &mut self.sharing, qp);
        }
    }

    /// Sends every held ACK at the next transmit: the application has turned to other
    /// work (the connection manager) and will not answer soon.
    pub fn release_acks(&mut self) {
        for qp in self.qps.values_mut().filter(|q| q.ack_held()) {
            qp.release_ack();
            touched(&mut self.active, &mut self.timers, &mut self.sharing, qp);
        }
    }

    /// `ibv_destroy_qp`: removes the QP and its timers.
    pub fn destroy_qp(&mut self, qpn: u32) -> Result<()> {
        if self.iwarp_destroy(qpn).is_some() {
            return Ok(());
        }
        let qp = self
            .qps
            .remove(&qpn)
            .ok_or(VerbsError::NotFound("queue pair"))?;
        self.timers.requeue(qpn, qp.queued_deadline, None);
        self.sharing.forget(&qp);
        Ok(())
    }

    /// The QP's current state.
    pub fn qp_state(&self, qpn: u32) -> Result<QpState> {
        if let Some(s) = self.iwarp_state(qpn) {
            return Ok(s);
        }
        self.qps
            .get(&qpn)
            .map(|q| q.state)
            .ok_or(VerbsError::NotFound("queue pair"))
    }

    /// `ibv_query_qp`: the attributes, the capacities and whether every send is signaled.
    pub fn query_qp(&self, qpn: u32) -> Result<(QpAttr, QpCap, bool)> {
        if let Some(q) = self.iwarp_query(qpn) {
            return Ok(q);
        }
        let qp = self
            .qps
            .get(&qpn)
            .ok_or(VerbsError::NotFound("queue pair"))?;
        Ok((qp.query(), qp.post().cap(), qp.sq_sig_all()))
    }

    /// What a QP's transport has been through: packets sent again, its window, its RTT.
    pub fn qp_transport(&self, qpn: u32) -> Result<QpTransport> {
        let qp = self
            .qps
            .get(&qpn)
            .ok_or(VerbsError::NotFound("queue pair"))?;
        Ok(qp.transport())
    }

    /// `ibv_modify_qp`: validates the attributes for the transition, then applies them.
    pub fn modify_qp(&mut self, qpn: u32, attr: &QpAttr) -> Result<()> {
        if self.iw.contains_key(&qpn) {
            return self.iwarp_modify(qpn, attr);
        }
        let lim = AttrLimits {
            max_rd_atomic: self.config.attr.max_qp_rd_atom,
            max_mtu: self.config.max_mtu,
        };
        let qp = self
            .qps
            .get_mut(&qpn)
            .ok_or(VerbsError::NotFound("queue pair"))?;
        let to = validate(qp.qp_type, qp.state, attr, lim)?;
        if let Some(av) = attr.ah_attr {
            self.check_sgid(av)?;
        }
        // Work posted before the modify is taken in the state it was posted in.
        self.answer_doorbells();
        let qp = self.qps.get_mut(&qpn).expect("looked up above");
        let mut ctx = ctx!(self, 0);
        qp.modify(&mut ctx, attr, to);
        touched(&mut self.active, &mut self.timers, &mut self.sharing, qp);
        Ok(())
    }

    /// Makes an RC or UC QP secure with `keys` (`crate::secure`): from now on it seals every
    /// packet it sends and opens every packet it takes. Before it sends (RESET, INIT or
    /// RTR); a reset forgets the keys.
    pub fn secure_qp(&mut self, qpn: u32, keys: &QpKeys) -> Result<()> {
        self.secure_qp_with(qpn, Secured::new(keys))
    }

    fn secure_qp_with(&mut self, qpn: u32, secured: Secured) -> Result<()> {
        let qp = self
            .qps
            .get_mut(&qpn)
            .ok_or(VerbsError::NotFound("queue pair"))?;
        if !matches!(qp.qp_type, QpType::Rc | QpType::Uc) {
            return Err(VerbsError::InvalidArgument(
                "only connected (RC and UC) QPs are secure",
            ));
        }
        if !matches!(qp.state, QpState::Reset | QpState::Init | QpState::Rtr) {
            return Err(VerbsError::BadState {
                qpn,
                state: qp.state,
                what: "keys are set before the QP sends (RESET, INIT or RTR)",
            });
        }
        qp.secure = Some(Box::new(secured));
        qp.refresh_views();
        Ok(())
    }

    /// An RC QP's receive key and reply key (`crate::secure`), as a QP keyed from a
    /// pre-shared key takes them on its way to RTR: it opens every packet it takes from now
    /// on, and seals its replies (ACKs, READ and atomic responses) under the reply key
    /// until [`Self::secure_qp_send`]: a QP left in RTR still answers.
    pub fn secure_qp_recv(
        &mut self,
        qpn: u32,
        suite: Suite,
        recv: &DirectionKey,
        reply: &DirectionKey,
    ) -> Result<()> {
        self.secure_qp_with(qpn, Secured::receiving(suite, recv, reply))
    }

    /// The send key of a QP that has its receive key (`secure_qp_recv`), and the key of
    /// the peer's replies from before the peer had its own.
    pub fn secure_qp_send(
        &mut self,
        qpn: u32,
        send: &DirectionKey,
        peer_reply: &DirectionKey,
    ) -> Result<()> {
        let qp = self
            .qps
            .get_mut(&qpn)
            .ok_or(VerbsError::NotFound("queue pair"))?;
        let Some(s) = qp.secure.as_mut().filter(|s| !s.can_send()) else {
            return Err(VerbsError::InvalidArgument(
                "a send key goes to a QP that has its receive key alone",
            ));
        };
        s.add_send(send, peer_reply);
        touched(&mut self.active, &mut self.timers, &mut self.sharing, qp);
        Ok(())
    }

    /// Whether a QP is secure (None: plain) and, if so, whether it has its send key.
    pub fn qp_secure(&self, qpn: u32) -> Result<Option<bool>> {
        let qp = self
            .qps
            .get(&qpn)
            .ok_or(VerbsError::NotFound("queue pair"))?;
        Ok(qp.secure.as_ref().map(|s| s.can_send()))
    }

    /// The posting side of `qpn`: application threads post through it without the engine
    /// (see `QpPost`), and `answer_doorbells` takes their work.
    pub fn qp_post(&self, qpn: u32) -> Result<Arc<QpPost>> {
        if let Some(p) = self.iwarp_post(qpn) {
            return Ok(p);
        }
        self.qps
            .get(&qpn)
            .map(|q| q.post().clone())
            .ok_or(VerbsError::NotFound("queue pair"))
    }

    /// `ibv_post_send` of one WR, taken at once. Errors are synchronous and queue nothing.
    pub fn post_send(&mut self, qpn: u32, wr: SendWr) -> Result<()> {
        self.qp_post(qpn)?.post_send(wr)?;
        self.answer_doorbells();
        Ok(())
    }

    /// `ibv_post_recv` of one WR.
    pub fn post_recv(&mut self, qpn: u32, wr: RecvWr) -> Result<()> {
        self.qp_post(qpn)?.post_recv(wr)?;
        self.answer_doorbells();
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
        let mut wr = SendWr::new(wr_id, WrOpcode::BindMw, SendData::Sges(Default::default()));
        wr.flags = if signaled {
            crate::SendFlags::SIGNALED
        } else {
            crate::SendFlags::empty()
        };
        wr.bind = Some(bind);
        self.post_send(qpn, wr)
    }
}
