//! What the CM does with each MAD it receives.

use super::conn::{iba_time, State};
use super::{Cm, CmDrop, CmEventKind, LISTEN_RETRY, MRA_SERVICE_TIMEOUT};
use crate::gid::Gid;
use crate::Nanos;
use oxrdma_wire::cm::{attr, CmMessage, CommIds, Rej, Rep, Req, SidrRep, SidrReq};
use oxrdma_wire::mad::{
    MadHeader, CLASS_CM, CM_CLASS_VERSION, MAD_HEADER_LEN, MAD_LEN, METHOD_SEND,
};

type Handled = Result<(), CmDrop>;

impl Cm {
    /// A MAD that came to QP1 from `src`. Whatever is wrong with it is counted and
    /// otherwise ignored.
    pub fn handle_mad(&mut self, now: Nanos, src: Gid, mad: &[u8]) -> Handled {
        self.stats.received += 1;
        let result = self.dispatch(now, src, mad);
        if let Err(why) = result {
            self.stats.ignored += 1;
            self.stats.backlog_full += u64::from(why == CmDrop::Backlog);
            self.stats.peer_limited +=
                u64::from(matches!(why, CmDrop::PeerPending | CmDrop::PeerConnections));
        }
        result
    }

    fn dispatch(&mut self, now: Nanos, src: Gid, mad: &[u8]) -> Handled {
        let hdr = MadHeader::parse(mad).map_err(|_| CmDrop::Malformed)?;
        if mad.len() < MAD_LEN
            || hdr.base_version != 1
            || hdr.mgmt_class != CLASS_CM
            || hdr.class_version != CM_CLASS_VERSION
            || hdr.method != METHOD_SEND
        {
            return Err(CmDrop::Malformed);
        }
        let data = &mad[MAD_HEADER_LEN..MAD_LEN];
        let msg = CmMessage::parse(hdr.attr_id, data).map_err(|_| CmDrop::Malformed)?;
        let tid = hdr.transaction_id;
        match msg {
            CmMessage::Req(req) => self.on_req(src, tid, req),
            CmMessage::Rep(rep) => self.on_rep(src, rep),
            CmMessage::Rej(rej) => self.on_rej(now, src, rej),
            CmMessage::CommIds(attr::RTU, m) => self.on_rtu(src, &m),
            CmMessage::CommIds(attr::MRA, m) => self.on_mra(now, src, &m),
            CmMessage::CommIds(attr::DREQ, m) => self.on_dreq(src, tid, &m),
            CmMessage::CommIds(_, m) => self.on_drep(now, src, &m),
            CmMessage::SidrReq(req) => self.on_sidr_req(src, tid, req),
            CmMessage::SidrRep(rep) => self.on_sidr_rep(src, rep),
            CmMessage::Other(_) => Err(CmDrop::Unsupported),
        }
    }

    /// Our connection that a message from `src` names by `our_id`.
    fn ours(&self, src: Gid, our_id: u32) -> Result<State, CmDrop> {
        match self.conns.get(&our_id) {
            Some(c) if c.peer == src => Ok(c.state),
            _ => Err(CmDrop::UnknownId),
        }
    }

    fn on_req(&mut self, src: Gid, tid: u64, req: Req) -> Handled {
        if let Some(&id) = self.by_remote.get(&(src, req.local_comm_id)) {
            // A repeated REQ: Linux answers an unanswered one with an MRA and one in
            // timewait with REJ "stale connection"; otherwise the REP's timer is at work.
            return match self.conns.get(&id).map(|c| c.state) {
                Some(State::ReqRcvd) => {
                    self.send_mra(id, 0);
                    Ok(())
                }
                Some(State::TimeWait) => {
                    self.send_rej(id, Rej::STALE_CONNECTION, 0, &[], &[]);
                    Ok(())
                }
                _ => Err(CmDrop::State),
            };
        }
        let Some(l) = self.listeners.get(&req.service_id) else {
            self.reject_request(src, tid, req.local_comm_id, Rej::INVALID_SERVICE_ID);
            return Ok(());
        };
        if l.pending >= l.backlog {
            return Err(CmDrop::Backlog);
        }
        if let Err(why) = self.peer_admits(src) {
            if why == CmDrop::PeerConnections {
                self.reject_request(src, tid, req.local_comm_id, Rej::NO_RESOURCES);
            }
            return Err(why);
        }
        let Some(l) = self.listeners.get_mut(&req.service_id) else {
            return Err(CmDrop::State);
        };
        l.pending += 1;
        let id = self.new_id();
        let timeout = iba_time(req.local_cm_response_timeout);
        let retries = req.max_cm_retries;
        let mut c = self.conn(State::ReqRcvd, src, tid, timeout, retries);
        (c.remote_id, c.remote_qpn) = (req.local_comm_id, req.local_qpn);
        c.ack_timeout = req.primary.local_ack_timeout;
        c.pending_on = Some(req.service_id);
        self.conns.insert(id, c);
        self.by_remote.insert((src, req.local_comm_id), id);
        self.peer_counts(id);
        let req = Box::new(req);
        self.event(id, CmEventKind::ConnectRequest { peer: src, req });
        Ok(())
    }

    /// REJ of a REQ that made no connection here (nobody listens for it, or its peer has
    /// too many): local comm ID 0, the request's TID, as Linux sends "invalid service ID".
    fn reject_request(&mut self, src: Gid, tid: u64, remote_id: u32, reason: u16) {
        let rej = Rej {
            local_comm_id: 0,
            remote_comm_id: remote_id,
            message_rejected: 0,
            ari_length: 0,
            reason,
            ari: [0; 72],
            private_data: [0; Rej::PRIVATE_DATA],
        };
        let mad = self.build(attr::REJ, tid, |d| rej.emit(d));
        self.push(src, mad);
    }

    fn on_rep(&mut self, src: Gid, rep: Rep) -> Handled {
        let id = rep.remote_comm_id;
        match self.ours(src, id)? {
            State::ReqSent => {
                self.stop_timer(id);
                if let Some(c) = self.conns.get_mut(&id) {
                    (c.remote_id, c.remote_qpn) = (rep.local_comm_id, rep.local_qpn);
                    c.state = State::RepRcvd;
                }
                self.event(id, CmEventKind::Reply { rep: Box::new(rep) });
                Ok(())
            }
            State::RepRcvd => {
                self.send_mra(id, 1);
                Ok(())
            }
            State::Established => {
                // Our RTU was lost: send it again.
                if let Some(c) = self.conns.get(&id) {
                    let (peer, mad) = (c.peer, c.last.clone());
                    self.push(peer, mad);
                }
                Ok(())
            }
            _ => Err(CmDrop::State),
        }
    }

    fn on_rtu(&mut self, src: Gid, m: &CommIds) -> Handled {
        let id = m.remote_comm_id;
        if self.ours(src, id)? != State::RepSent {
            return Err(CmDrop::State);
        }
        self.stop_timer(id);
        self.set_state(id, State::Established);
        self.event(id, CmEventKind::Established);
        Ok(())
    }

    fn on_rej(&mut self, now: Nanos, src: Gid, rej: Rej) -> Handled {
        // A REJ "timeout" comes from an active side that gave up before it heard our comm
        // ID: it names its own.
        let id = match self.by_remote.get(&(src, rej.local_comm_id)) {
            Some(&id) if rej.reason == Rej::TIMEOUT || rej.remote_comm_id == 0 => id,
            _ => rej.remote_comm_id,
        };
        let state = self.ours(src, id)?;
        let first = self.conns.get(&id).map_or(0, |c| c.first_sent);
        if state == State::ReqSent
            && rej.reason == Rej::INVALID_SERVICE_ID
            && now < first + self.config.listen_grace
        {
            // Not listening yet, perhaps: the REQ goes again shortly (its timer's resend,
            // which this one does not count against the REQ's retries).
            if let Some(c) = self.conns.get_mut(&id) {
                c.retries = (c.retries + 1).min(c.max_retries);
            }
            self.set_timer(id, now + LISTEN_RETRY);
            return Ok(());
        }
        match state {
            State::ReqSent
            | State::ReqRcvd
            | State::RepSent
            | State::RepRcvd
            | State::Established => {
                let private_data = rej.private_data.to_vec();
                let reason = rej.reason;
                self.event(
                    id,
                    CmEventKind::Rejected {
                        reason,
                        private_data,
                    },
                );
                if self
                    .conns
                    .get(&id)
                    .is_some_and(|c| c.state == State::Established)
                {
                    self.enter_timewait(now, id);
                } else {
                    self.remove(id);
                }
                Ok(())
            }
            _ => Err(CmDrop::State),
        }
    }

    fn on_mra(&mut self, now: Nanos, src: Gid, m: &CommIds) -> Handled {
        let id = m.remote_comm_id;
        let (mraed, service_timeout) = ((m.extra >> 8) as u8, m.extra as u8 & 0x1f);
        let state = self.ours(src, id)?;
        if !matches!((state, mraed), (State::ReqSent, 0) | (State::RepSent, 1)) {
            return Err(CmDrop::State);
        }
        // The peer needs longer: wait its service timeout (plus a packet's way) before the
        // next resend.
        let ack = self.conns.get(&id).map_or(0, |c| c.ack_timeout);
        self.set_timer(id, now + iba_time(service_timeout) + iba_time(ack));
        Ok(())
    }

    fn on_dreq(&mut self, src: Gid, tid: u64, m: &CommIds) -> Handled {
        let id = m.remote_comm_id;
        let Ok(state) = self.ours(src, id) else {
            // Nothing of it is left here: say it is gone anyway, as Linux does.
            let drep = CommIds {
                local_comm_id: m.remote_comm_id,
                remote_comm_id: m.local_comm_id,
                extra: 0,
                private_data: [0; CommIds::PRIVATE_DATA],
            };
            let mad = self.build(attr::DREP, tid, |d| drep.emit(attr::DREP, d));
            self.push(src, mad);
            return Ok(());
        };
        match state {
            State::Established | State::RepSent | State::DreqSent => {
                self.stop_timer(id);
                if let Some(c) = self.conns.get_mut(&id) {
                    c.state = State::DreqRcvd;
                    c.tid = tid;
                }
                self.disconnected(id, false);
                // A destroyed connection has nobody to answer: answer now.
                if self.conns.get(&id).is_some_and(|c| c.detached) {
                    self.send_drep(id);
                }
                Ok(())
            }
            State::TimeWait => {
                if let Some(c) = self.conns.get_mut(&id) {
                    c.tid = tid;
                }
                self.send_drep(id);
                Ok(())
            }
            _ => Err(CmDrop::State),
        }
    }

    fn on_drep(&mut self, now: Nanos, src: Gid, m: &CommIds) -> Handled {
        let id = m.remote_comm_id;
        if self.ours(src, id)? != State::DreqSent {
            return Err(CmDrop::State);
        }
        self.disconnected(id, false);
        self.enter_timewait(now, id);
        Ok(())
    }

    fn on_sidr_req(&mut self, src: Gid, tid: u64, req: SidrReq) -> Handled {
        if self.by_remote.contains_key(&(src, req.request_id)) {
            return Err(CmDrop::State); // still unanswered: the answer will come
        }
        let Some(l) = self.listeners.get_mut(&req.service_id) else {
            let rep = SidrRep {
                request_id: req.request_id,
                status: 1,
                info_length: 0,
                qpn: 0,
                service_id: req.service_id,
                qkey: 0,
                info: [0; 72],
                private_data: [0; SidrRep::PRIVATE_DATA],
            };
            let mad = self.build(attr::SIDR_REP, tid, |d| rep.emit(d));
            self.push(src, mad);
            return Ok(());
        };
        if l.pending >= l.backlog {
            return Err(CmDrop::Backlog);
        }
        self.peer_admits(src)?;
        let Some(l) = self.listeners.get_mut(&req.service_id) else {
            return Err(CmDrop::State);
        };
        l.pending += 1;
        let id = self.new_id();
        let mut c = self.conn(State::SidrReqRcvd, src, tid, 0, 0);
        c.remote_id = req.request_id;
        c.pending_on = Some(req.service_id);
        self.conns.insert(id, c);
        self.by_remote.insert((src, req.request_id), id);
        self.peer_counts(id);
        let req = Box::new(req);
        self.event(id, CmEventKind::SidrRequest { peer: src, req });
        Ok(())
    }

    fn on_sidr_rep(&mut self, src: Gid, rep: SidrRep) -> Handled {
        let id = rep.request_id;
        if self.ours(src, id)? != State::SidrReqSent {
            return Err(CmDrop::State);
        }
        self.event(id, CmEventKind::SidrReply { rep: Box::new(rep) });
        self.remove(id);
        Ok(())
    }

    /// An MRA for the REQ (`mraed` 0) or REP (1) the peer sent again: we are still at it.
    fn send_mra(&mut self, id: u32, mraed: u8) {
        let Some(c) = self.conns.get(&id) else {
            return;
        };
        let mra = CommIds {
            local_comm_id: id,
            remote_comm_id: c.remote_id,
            extra: u32::from(mraed) << 8 | u32::from(MRA_SERVICE_TIMEOUT),
            private_data: [0; CommIds::PRIVATE_DATA],
        };
        let (peer, tid) = (c.peer, c.tid);
        let mad = self.build(attr::MRA, tid, |d| mra.emit(attr::MRA, d));
        self.push(peer, mad);
    }
}
