//! The calls that make and end a connection (`rdma_connect`, `rdma_accept`,
//! `rdma_reject`, `rdma_establish`, `rdma_disconnect`) and the QP attributes each step
//! gives (`rdma_init_qp_attr`).

use super::keys::{self, KeyPair};
use super::machine::{self, Call, Plan, QpStep, Wire};
use super::route;
use super::state::{einval, errno as errno_error, qp_attr, EngineId, State, ACK_TIMEOUT};
use super::steps::{self, Depths, TO_RTS};
use super::{ConnParam, PortSpace, UDP_QKEY};
use crate::error::{Error, Result};
use crate::lock::lock;
use crate::secure::{self, Agreed, SecureMode};
use oxrdma_core::cm::{AcceptParams, CmId as CommId, CmTransport, ConnectParams, SidrReplyParams};
use oxrdma_core::{Mtu, QpAttr, QpState, QpType};
use oxrdma_wire::cma::{self, CmaHeader};
use rustix::io::Errno;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

impl EngineId {
    /// `rdma_connect`: sends the REQ (UD: the SIDR_REQ) with up to 56 bytes of private
    /// data (IP port spaces; 92 on `RDMA_PS_IB`, 180 for UD).
    pub fn connect(&self, param: &ConnParam) -> Result<()> {
        let mut st = lock(&self.inner.st);
        let plan = self.plan(&st, Call::Connect)?;
        let (src, dst) = (st.src.unwrap_or(any()), st.dst.unwrap_or(any()));
        let ps = self.inner.ps;
        let shared = self.inner.engine.shared();
        let own = self.inner.local_gid(&st).0;
        let peer = route::target(ps.value(), dst, own);
        let mut data = Vec::with_capacity(92);
        if ps.has_header() {
            let mut h = [0u8; CmaHeader::LEN];
            let same_family = |a: IpAddr| match (a, dst.ip()) {
                (IpAddr::V4(v4), IpAddr::V6(_)) => IpAddr::V6(v4.to_ipv6_mapped()),
                (a, _) => a,
            };
            CmaHeader {
                src_port: src.port(),
                src: same_family(src.ip()),
                dst: dst.ip(),
            }
            .emit(&mut h)
            .map_err(|_| einval("addresses of two families"))?;
            data.extend_from_slice(&h);
        }
        data.extend_from_slice(&param.private_data);
        let offered = self.offer(&st, &mut data)?;
        let sid = cma::service_id(ps.value(), dst.port());
        let asked = Depths {
            responder_resources: param.responder_resources,
            initiator_depth: param.initiator_depth,
        };
        let depths = Depths::connect(asked, self.device_depth(), ps == PortSpace::Tcp)
            .map_err(|_| einval("read depths beyond the device's"))?;
        let mut dev = shared.lock();
        let now = dev.now();
        let id = if self.inner.qp_type == QpType::Ud {
            dev.engine.cm_mut().sidr_request(now, peer, sid, &data)?
        } else {
            let qpn = st.qp.unwrap_or(param.qp_num);
            if self.inner.qp_type != QpType::Ud {
                let agreed = Agreed {
                    suite: secure::configured_suite()?,
                    secret: None,
                    require: self.secure_mode(&st) == SecureMode::Require,
                };
                shared.agree(qpn, agreed);
                st.offered = offered.map(|pair| (pair, qpn));
            }
            let p = ConnectParams {
                dest: peer,
                source: own,
                service_id: sid,
                transport: if self.inner.qp_type == QpType::Uc {
                    CmTransport::Uc
                } else {
                    CmTransport::Rc
                },
                qpn,
                starting_psn: st.seq_num,
                responder_resources: depths.responder_resources,
                initiator_depth: depths.initiator_depth,
                flow_control: param.flow_control,
                retry_count: param.retry_count.min(7),
                rnr_retry_count: param.rnr_retry_count.min(7),
                srq: param.srq,
                path_mtu: st.mtu.unwrap_or(Mtu::Mtu1024),
                flow_label: cma::flow_label(src.port(), dst.port()),
                traffic_class: 0,
                hop_limit: 64,
                ack_timeout: ACK_TIMEOUT,
                private_data: data,
            };
            dev.engine.cm_mut().connect(now, &p)?
        };
        let ch = self.inner.channel();
        shared.cm.route_conn(id.0, &ch);
        lock(&ch.conns).insert((self.inner.dev, id.0), Arc::downgrade(&self.inner));
        shared.drive_through(&mut dev);
        drop(dev);
        shared.ring();
        st.comm = Some(id.0);
        st.peer = Some(peer);
        st.depths = depths;
        st.retry = param.retry_count.min(7);
        st.rnr_retry = param.rnr_retry_count.min(7);
        st.phase = plan.next;
        Ok(())
    }

    /// `rdma_accept` of a connection request: brings the attached QP to RTS and sends the
    /// REP with up to 196 bytes of private data (UD: the SIDR_REP with the QP's number
    /// and Q_Key, and the id is connected at once).
    pub fn accept(&self, param: &ConnParam) -> Result<()> {
        let mut st = lock(&self.inner.st);
        let mut plan = self.plan(&st, Call::Accept)?;
        let comm = CommId(
            st.comm
                .ok_or(einval("accept without a connection request"))?,
        );
        let qpn = st.qp.unwrap_or(param.qp_num);
        let shared = self.inner.engine.shared();
        if plan.wire == Wire::SidrRep {
            let reply = SidrReplyParams {
                status: 0,
                qpn,
                qkey: UDP_QKEY,
                private_data: param.private_data.clone(),
            };
            let mut dev = shared.lock();
            dev.engine.cm_mut().sidr_reply(comm, &reply)?;
            shared.drive_through(&mut dev);
            st.follow(&plan);
            return Ok(());
        }
        let asked = Depths {
            responder_resources: param.responder_resources,
            initiator_depth: param.initiator_depth,
        };
        st.depths = st.depths.accept(asked, self.device_depth());
        st.rnr_retry = param.rnr_retry_count.min(7);
        let mut data = param.private_data.clone();
        if self.inner.qp_type != QpType::Ud {
            self.answer(&mut st, qpn, &mut data)?;
        }
        if let Err(errno) = self.take_qp_step(&st, &plan) {
            plan = machine::qp_failed(plan, st.phase, errno);
            let _ = self.take_qp_step(&st, &plan);
            st.follow(&plan);
            return Err(errno_error(Errno::from_raw_os_error(errno)));
        }
        let p = AcceptParams {
            qpn,
            starting_psn: st.seq_num,
            responder_resources: st.depths.responder_resources,
            initiator_depth: st.depths.initiator_depth,
            flow_control: param.flow_control,
            rnr_retry_count: st.rnr_retry,
            srq: param.srq,
            private_data: data,
        };
        let mut dev = shared.lock();
        let now = dev.now();
        let sent = dev.engine.cm_mut().accept(now, comm, &p);
        shared.drive_through(&mut dev);
        drop(dev);
        shared.ring();
        if let Err(e) = sent {
            // As librdmacm: a REP that could not go leaves the QP in ERR.
            self.qp_to_err(&st);
            return Err(e.into());
        }
        st.follow(&plan);
        Ok(())
    }

    /// `rdma_reject` of a connection request (REJ 28 with up to 148 bytes of private
    /// data; UD: SIDR_REP status 2), or of a REP before `establish`.
    pub fn reject(&self, private_data: &[u8]) -> Result<()> {
        let mut st = lock(&self.inner.st);
        let plan = self.plan(&st, Call::Reject)?;
        let comm = CommId(st.comm.ok_or(einval("reject without a request or reply"))?);
        let shared = self.inner.engine.shared();
        let mut dev = shared.lock();
        if self.inner.qp_type == QpType::Ud {
            let reply = SidrReplyParams {
                status: 2,
                qpn: 0,
                qkey: 0,
                private_data: private_data.to_vec(),
            };
            dev.engine.cm_mut().sidr_reply(comm, &reply)?;
        } else {
            dev.engine.cm_mut().reject(comm, private_data)?;
        }
        shared.drive_through(&mut dev);
        st.follow(&plan);
        Ok(())
    }

    /// `rdma_establish`: after `CONNECT_RESPONSE` (no QP attached), sends the RTU.
    pub fn establish(&self) -> Result<()> {
        let mut st = lock(&self.inner.st);
        let plan = self.plan(&st, Call::Establish)?;
        let comm = CommId(st.comm.ok_or(einval("establish without a connection"))?);
        let shared = self.inner.engine.shared();
        let mut dev = shared.lock();
        dev.engine.cm_mut().establish(comm)?;
        shared.drive_through(&mut dev);
        st.follow(&plan);
        Ok(())
    }

    /// `rdma_disconnect`: the QP goes to ERR (its work flushes) and a DREQ goes out (or
    /// the DREP to the peer's); `DISCONNECTED` follows.
    pub fn disconnect(&self) -> Result<()> {
        let mut st = lock(&self.inner.st);
        let plan = self.plan(&st, Call::Disconnect)?;
        let _ = self.take_qp_step(&st, &plan);
        let comm = st.comm.filter(|_| plan.wire == Wire::Dreq);
        st.follow(&plan);
        let Some(comm) = comm else {
            return Ok(()); // UD: nothing on the wire
        };
        let shared = self.inner.engine.shared();
        let mut dev = shared.lock();
        let now = dev.now();
        let r = dev.engine.cm_mut().disconnect(now, CommId(comm));
        shared.drive_through(&mut dev);
        drop(dev);
        shared.ring();
        match r {
            // Our DREQ ended already (DREP or timeout): nothing left to send.
            Err(oxrdma_core::cm::CmError::InvalidState) => Ok(()),
            r => r.map_err(Error::from),
        }
    }

    /// The attached QP's step of `plan` (`machine::QpStep`); the errno of a move that
    /// fails.
    pub(super) fn take_qp_step(&self, st: &State, plan: &Plan) -> std::result::Result<(), i32> {
        match plan.qp {
            QpStep::Keep => Ok(()),
            QpStep::ToRts => self.move_qp(st, &TO_RTS),
            QpStep::ToErr => {
                self.qp_to_err(st);
                Ok(())
            }
        }
    }

    /// Modifies the attached QP: through its mover (the C library's), else the engine.
    pub(super) fn modify(&self, st: &State, attr: &QpAttr) -> std::result::Result<(), i32> {
        let Some(qpn) = st.qp else {
            return Err(Errno::INVAL.raw_os_error());
        };
        if let Some(m) = &st.mover {
            return m.modify(attr);
        }
        let shared = self.inner.engine.shared();
        let agreed = shared.agreed_for(qpn);
        let mut dev = shared.lock();
        let r = dev.engine.modify_qp(qpn, attr).map_err(Error::from);
        let r = r.and_then(|()| {
            secure::key_as_moved(self.inner.ctx.gids(), &mut dev.engine, qpn, agreed)
        });
        drop(dev);
        shared.ring();
        r.map_err(|e| match e {
            Error::BadPeer(_) => Errno::PERM.raw_os_error(),
            _ => Errno::INVAL.raw_os_error(),
        })
    }

    /// How this id's connection is secured (`set_secure`, else `OXRDMA_SECURE`, which the
    /// device's open checked).
    pub(super) fn secure_mode(&self, st: &State) -> SecureMode {
        st.secure
            .unwrap_or_else(|| secure::configured_mode().unwrap_or_default())
    }

    /// Puts this side's offer of keys at the tail of the REQ's private data `data`, if the
    /// connection offers (`SecureMode::offers`) and the application's data leaves room.
    fn offer(&self, st: &State, data: &mut Vec<u8>) -> Result<Option<KeyPair>> {
        let mode = self.secure_mode(st);
        if self.inner.qp_type == QpType::Ud || !mode.offers() {
            return Ok(None);
        }
        if data.len() <= keys::IN_REQ {
            let (pair, offer) = KeyPair::new(secure::configured_suite()?)?;
            keys::place(data, keys::IN_REQ, &offer);
            return Ok(Some(pair));
        }
        if mode == SecureMode::Require && secure::configured_psk()?.is_none() {
            let (room, given) = (
                keys::IN_REQ - self.header_len(),
                data.len() - self.header_len(),
            );
            return Err(Error::Config(format!(
                "a secure connection's REQ carries {room} bytes of private data besides the \
                 key offer; {given} were given"
            )));
        }
        Ok(None)
    }

    /// Answers the peer's offer of keys (if any, and this side answers) at the tail of the
    /// REP's private data `data`, and records what is agreed for QP `qpn`. A program that
    /// moved its QP to RTR before accepting has it keyed now.
    fn answer(&self, st: &mut State, qpn: u32, data: &mut Vec<u8>) -> Result<()> {
        let mode = self.secure_mode(st);
        let mut agreed = Agreed {
            suite: secure::configured_suite()?,
            secret: None,
            require: mode == SecureMode::Require,
        };
        let shared = self.inner.engine.shared();
        let dev = shared.lock();
        let (Ok(keyed), Ok((now, _, _))) = (dev.engine.qp_secure(qpn), dev.engine.query_qp(qpn))
        else {
            return Ok(()); // no such QP: accept says so
        };
        drop(dev);
        // Keys are taken before the QP sends: not by one its program moved to RTS already.
        let keyable = keyed.is_none() && now.qp_state != Some(QpState::Rts);
        if let Some((suite, public)) = st.peer_offer.take() {
            if mode != SecureMode::Off && keyable && data.len() <= keys::IN_REP {
                let (pair, answer) = KeyPair::new(suite)?;
                agreed.secret = Some(pair.agree(&public)?);
                agreed.suite = suite;
                keys::place(data, keys::IN_REP, &answer);
            }
        }
        shared.agree(qpn, agreed.clone());
        let mut dev = shared.lock();
        secure::key_as_moved(self.inner.ctx.gids(), &mut dev.engine, qpn, Some(agreed))
    }

    /// The CMA header's length in this id's REQs.
    fn header_len(&self) -> usize {
        if self.inner.ps.has_header() {
            CmaHeader::LEN
        } else {
            0
        }
    }

    /// The attached QP through `states`, as `rdma_init_qp_attr` gives each (INIT with the
    /// connection's access, RTR, RTS); the errno of the first that fails.
    pub(super) fn move_qp(&self, st: &State, states: &[QpState]) -> std::result::Result<(), i32> {
        let (t, ps) = (self.inner.qp_type, self.inner.ps);
        let sgid = self.inner.local_gid(st).1;
        states.iter().try_for_each(|&state| {
            let attr = qp_attr(st, t, ps, state, sgid).map_err(|_| Errno::INVAL.raw_os_error())?;
            self.modify(st, &attr)
        })
    }

    pub(super) fn qp_to_err(&self, st: &State) {
        if st.qp.is_some() {
            let _ = self.modify(st, &steps::to_err());
        }
    }

    /// The most READs and atomics in flight the device takes on a QP (librdmacm's bound
    /// for [`steps::MAX_DEPTH`]).
    fn device_depth(&self) -> u8 {
        self.inner.ctx.attr().max_qp_rd_atom
    }
}
fn any() -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0)
}
