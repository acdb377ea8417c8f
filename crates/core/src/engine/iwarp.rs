//! iWARP QPs in the engine (issue 60): RC QPs whose transport is a TCP stream the driver
//! owns. They use the device's PDs, regions, windows and CQs as any QP does, and
//! application threads post through their rings (`QpPost`) as on any QP; their data path
//! is `crate::iwarp::qp`, attached when the stream's MPA exchange is done
//! ([`Engine::iwarp_established`]). The driver hands each QP what it read from its stream
//! ([`Engine::iwarp_receive`]) and writes what the QP gives it
//! ([`Engine::iwarp_transmit`]).
//!
//! Verbs moves: RESET -> INIT (access flags) by `modify_qp`; INIT -> RTS only by the
//! stream's setup (iWARP has no out-of-band QP attributes: the CM moves it); any state
//! -> ERR (everything flushes, the driver closes the stream) or RESET.

use super::Engine;
use crate::attr::{QpAttr, QpCap, QpInitAttr};
use crate::ctx::complete_on as complete;
use crate::error::{Result, VerbsError};
use crate::iwarp::memory::{Registered, SharedRq};
use crate::iwarp::qp::{Qp as DataPath, QpConfig};
use crate::iwarp::Negotiated;
use crate::qp::QpPost;
use crate::verbs::{Access, AsyncEvent, EventType, QpState, QpType, WcOpcode, WcStatus};
use crate::wr::{SendWr, WorkCompletion};
use std::sync::Arc;

/// An iWARP QP as the engine keeps it.
#[derive(Debug)]
pub(crate) struct IwQp {
    pd: u32,
    send_cq: u32,
    recv_cq: u32,
    sq_sig_all: bool,
    post: Arc<QpPost>,
    state: QpState,
    /// The remote accesses it allows (`qp_access_flags`).
    access: Access,
    /// The shared receive queue it takes its receives from, if any.
    srq: Option<u32>,
    /// The data path, once the stream is set up.
    data: Option<DataPath>,
    /// Send and receive WRs taken from the rings into the data path and not completed:
    /// their ring slots stay used until they are.
    held: (usize, usize),
    /// In the engine's `iw_touched` (once at most).
    touched: bool,
}

/// How an iWARP QP's stream was set up, for [`Engine::iwarp_established`].
#[derive(Debug, Clone)]
pub struct IwarpStream {
    /// What MPA's exchange settled.
    pub negotiated: Negotiated,
    /// This side sent the MPA request.
    pub initiator: bool,
    /// The longest FPDU to send: what one TCP segment of the path carries.
    pub max_fpdu: usize,
}

impl Engine {
    /// `ibv_create_qp` on an iWARP device: an RC QP in RESET (iWARP has no other type).
    pub fn create_iwarp_qp(&mut self, pd: u32, init: &QpInitAttr) -> Result<u32> {
        if init.qp_type != QpType::Rc {
            return Err(VerbsError::InvalidArgument("iWARP QPs are RC"));
        }
        self.check_qp_init(pd, init)?;
        let qpn = self.draw_qpn();
        let on_srq = init.srq.is_some();
        let post = QpPost::new(qpn, QpType::Rc, init.cap, on_srq, 0, self.bells.clone());
        self.iw.insert(
            qpn,
            IwQp {
                pd,
                send_cq: init.send_cq,
                recv_cq: init.recv_cq,
                sq_sig_all: init.sq_sig_all,
                post: Arc::new(post.iwarp_only()),
                state: QpState::Reset,
                access: Access::empty(),
                srq: init.srq,
                data: None,
                held: (0, 0),
                touched: false,
            },
        );
        Ok(qpn)
    }

    /// Whether `qpn` is an iWARP QP.
    pub fn is_iwarp_qp(&self, qpn: u32) -> bool {
        self.iw.contains_key(&qpn)
    }

    /// The stream of QP `qpn` (in INIT) is set up: the QP moves to RTS with MPA's outcome
    /// (CRCs, ORD and IRD, the RTR of RFC 6581) and its receives posted so far are taken.
    pub fn iwarp_established(&mut self, qpn: u32, stream: &IwarpStream) -> Result<()> {
        let qp = self
            .iw
            .get_mut(&qpn)
            .ok_or(VerbsError::NotFound("queue pair"))?;
        if qp.state != QpState::Init {
            return Err(VerbsError::BadState {
                qpn,
                state: qp.state,
                what: "a stream is attached to an iWARP QP in INIT",
            });
        }
        let n = &stream.negotiated;
        let cfg = QpConfig::negotiated(qpn, stream.max_fpdu, n, qp.sq_sig_all);
        qp.data = Some(DataPath::after_setup(cfg, n, stream.initiator)?);
        qp.post
            .set_max_rd_atomic(u8::try_from(n.ord).unwrap_or(u8::MAX));
        qp.set_state(QpState::Rts);
        self.iw_touch(qpn);
        self.iwarp_settle(qpn);
        Ok(())
    }

    /// Appends the iWARP QPs that took posted work (the doorbells answered first), moved,
    /// or had their stream set up since the last call: with those whose sockets are ready,
    /// all a driver's pass must visit (an idle stream costs it nothing).
    pub fn take_iwarp_touched(&mut self, out: &mut Vec<u32>) {
        self.answer_doorbells();
        for qpn in self.iw_touched.drain(..) {
            if let Some(q) = self.iw.get_mut(&qpn) {
                q.touched = false;
                out.push(qpn);
            }
        }
    }

    fn iw_touch(&mut self, qpn: u32) {
        if let Some(q) = self.iw.get_mut(&qpn).filter(|q| !q.touched) {
            q.touched = true;
            self.iw_touched.push(qpn);
        }
    }

    /// Bytes read from QP `qpn`'s stream: acted on (placed, completed, answered, or a
    /// TERMINATE sent). Returns how many it took; the driver keeps the rest for the next
    /// call (the QP reads FPDUs whole, up to one at a time beyond what it has acted on).
    pub fn iwarp_receive(&mut self, qpn: u32, bytes: &[u8]) -> Result<usize> {
        self.iwarp_take_posted(qpn)?;
        let qp = self.iw.get_mut(&qpn).expect("looked up by take_posted");
        let Some(data) = qp.data.as_mut() else {
            return Err(VerbsError::BadState {
                qpn,
                state: qp.state,
                what: "an iWARP QP receives once its stream is set up",
            });
        };
        let mut mem = Registered {
            mrs: &mut self.mrs,
            pd: qp.pd,
            qpn,
            qp_access: qp.access,
            srq: qp.srq.map(|id| SharedRq {
                id,
                srqs: &mut self.srqs,
                events: &mut self.events,
            }),
        };
        let mut took = 0;
        // The reader holds one FPDU at most: feed it what it has room for, in turns.
        while took < bytes.len() {
            let n = data.receive(&bytes[took..], &mut mem);
            if n == 0 {
                break;
            }
            took += n;
        }
        self.iwarp_settle(qpn);
        Ok(took)
    }

    /// Writes what QP `qpn` sends next to `out` (whole FPDUs, until `out` holds `max`
    /// bytes or nothing is left): its work requests, READ responses, the RTR, a TERMINATE.
    pub fn iwarp_transmit(&mut self, qpn: u32, out: &mut Vec<u8>, max: usize) -> Result<()> {
        self.iwarp_take_posted(qpn)?;
        let qp = self.iw.get_mut(&qpn).expect("looked up by take_posted");
        if let Some(data) = qp.data.as_mut().filter(|d| d.wants_to_send()) {
            let mem = Registered {
                mrs: &mut self.mrs,
                pd: qp.pd,
                qpn,
                qp_access: qp.access,
                srq: None,
            };
            data.transmit(&mem, out, max);
            self.iwarp_settle(qpn);
        }
        Ok(())
    }

    /// QP `qpn`, an initiator that has heard nothing from its responder since its RTR,
    /// sends the RTR again (see `iwarp::qp::Qp::nudge`); whether it will.
    pub fn iwarp_nudge(&mut self, qpn: u32) -> bool {
        self.iw
            .get_mut(&qpn)
            .and_then(|q| q.data.as_mut())
            .is_some_and(DataPath::nudge)
    }

    /// Whether QP `qpn` has something to send (after taking what was posted).
    pub fn iwarp_wants_to_send(&mut self, qpn: u32) -> bool {
        self.iwarp_take_posted(qpn).is_ok()
            && self.iw[&qpn]
                .data
                .as_ref()
                .is_some_and(DataPath::wants_to_send)
    }

    /// The driver saw QP `qpn`'s stream end (closed by the peer, or failed): a QP still
    /// running goes to ERR with everything flushed (and a fatal event).
    pub fn iwarp_stream_closed(&mut self, qpn: u32) -> Result<()> {
        let qp = self
            .iw
            .get_mut(&qpn)
            .ok_or(VerbsError::NotFound("queue pair"))?;
        if let Some(d) = qp.data.as_mut() {
            d.stream_closed();
        }
        self.iwarp_settle(qpn);
        Ok(())
    }

    /// `modify_qp` of an iWARP QP (see the module's moves).
    pub(super) fn iwarp_modify(&mut self, qpn: u32, attr: &QpAttr) -> Result<()> {
        // Work posted before the modify is taken in the state it was posted in.
        self.iwarp_take_posted(qpn)?;
        let qp = self.iw.get_mut(&qpn).expect("looked up by take_posted");
        let from = qp.state;
        let to = attr.qp_state.unwrap_or(from);
        let bad = |what| VerbsError::BadState {
            qpn,
            state: from,
            what,
        };
        match (from, to) {
            (QpState::Reset | QpState::Init, QpState::Init) | (QpState::Rts, QpState::Rts) => {
                if let Some(a) = attr.qp_access_flags {
                    qp.access = a;
                }
                qp.set_state(to);
            }
            (_, QpState::Err) => {
                if let Some(d) = qp.data.as_mut() {
                    d.stream_closed();
                }
                qp.set_state(QpState::Err);
                // What waits in the rings, and what the data path held, flushes now, not
                // at the next post.
                self.iwarp_take_posted(qpn)?;
                self.iwarp_settle(qpn);
            }
            (_, QpState::Reset) => {
                // As on any QP: what was posted and not completed is discarded.
                qp.post.sq.discard();
                qp.post.rq.discard();
                qp.post.sq.retire(qp.held.0);
                qp.post.rq.retire(qp.held.1);
                qp.held = (0, 0);
                if let Some(d) = qp.data.take() {
                    self.retired.add(d.counters(), crate::Counter::per_qp);
                }
                qp.access = Access::empty();
                qp.set_state(QpState::Reset);
            }
            (QpState::Init, QpState::Rtr | QpState::Rts) => {
                return Err(bad(
                    "an iWARP QP goes to RTS when its connection is set up (the RDMA CM's \
                     connect or accept), not by modify_qp",
                ))
            }
            _ => return Err(bad("not a move an iWARP QP makes")),
        }
        self.iw_touch(qpn);
        Ok(())
    }

    /// Whether an iWARP QP is in PD `pd` (which then cannot be freed).
    pub(super) fn iwarp_in_pd(&self, pd: u32) -> bool {
        self.iw.values().any(|q| q.pd == pd)
    }

    /// Whether an iWARP QP receives from SRQ `srq` (which then cannot be destroyed).
    pub(super) fn iwarp_uses_srq(&self, srq: u32) -> bool {
        self.iw.values().any(|q| q.srq == Some(srq))
    }

    /// Whether an iWARP QP completes on CQ `cq` (which then cannot be destroyed).
    pub(super) fn iwarp_uses_cq(&self, cq: u32) -> bool {
        self.iw.values().any(|q| q.send_cq == cq || q.recv_cq == cq)
    }

    /// Removes an iWARP QP (the driver closes its stream); the device keeps its counts.
    pub(super) fn iwarp_destroy(&mut self, qpn: u32) -> Option<()> {
        let qp = self.iw.remove(&qpn)?;
        if let Some(d) = &qp.data {
            self.retired.add(d.counters(), crate::Counter::per_qp);
        }
        Some(())
    }

    /// Adds the live iWARP QPs' counts to a device's.
    pub(super) fn iwarp_counters(&self, c: &mut crate::Counters) {
        for d in self.iw.values().filter_map(|q| q.data.as_ref()) {
            c.add(d.counters(), crate::Counter::per_qp);
        }
    }

    /// An iWARP QP's counts (zero before its stream is set up).
    pub(super) fn iwarp_qp_counters(&self, qpn: u32) -> Option<crate::Counters> {
        let q = self.iw.get(&qpn)?;
        Some(q.data.as_ref().map(|d| *d.counters()).unwrap_or_default())
    }

    pub(super) fn iwarp_state(&self, qpn: u32) -> Option<QpState> {
        self.iw.get(&qpn).map(|q| q.state)
    }

    pub(super) fn iwarp_post(&self, qpn: u32) -> Option<Arc<QpPost>> {
        self.iw.get(&qpn).map(|q| q.post.clone())
    }

    pub(super) fn iwarp_query(&self, qpn: u32) -> Option<(QpAttr, QpCap, bool)> {
        let q = self.iw.get(&qpn)?;
        let attr = QpAttr {
            qp_state: Some(q.state),
            cur_qp_state: Some(q.state),
            qp_access_flags: Some(q.access),
            ..Default::default()
        };
        Some((attr, q.post.cap(), q.sq_sig_all))
    }

    /// Takes what application threads posted on `qpn` into its data path (in ERR, flushes
    /// it); before the stream is set up receives wait in their ring.
    pub(super) fn iwarp_take_posted(&mut self, qpn: u32) -> Result<()> {
        let qp = self
            .iw
            .get_mut(&qpn)
            .ok_or(VerbsError::NotFound("queue pair"))?;
        qp.post.answer();
        let (cqs, events) = (&mut self.cqs, &mut self.events);
        let mut took = false;
        match qp.data.as_mut() {
            Some(d) => {
                while let Some(wr) = qp.post.rq.take() {
                    d.post_recv(wr);
                    qp.held.1 += 1;
                    took = true;
                }
                while let Some(wr) = qp.post.sq.take() {
                    let refused = (wr.wr_id, wr.opcode);
                    took = true;
                    if d.post_send(wr).is_ok() {
                        qp.held.0 += 1;
                    } else {
                        // The ring's checks are the data path's: never expected, but a WR
                        // completes whatever happens.
                        let wc = failed(qpn, refused.0, refused.1.wc_opcode());
                        qp.post.sq.retire(1);
                        complete(cqs, events, qp.send_cq, wc);
                    }
                }
            }
            None if qp.state == QpState::Err => {
                while let Some(wr) = qp.post.sq.take() {
                    let wc = flushed(qpn, &wr);
                    qp.post.sq.retire(1);
                    complete(cqs, events, qp.send_cq, wc);
                }
                while let Some(wr) = qp.post.rq.take() {
                    let mut wc = failed(qpn, wr.wr_id, WcOpcode::Recv);
                    wc.status = WcStatus::WrFlushErr;
                    qp.post.rq.retire(1);
                    complete(cqs, events, qp.recv_cq, wc);
                }
            }
            None => {}
        }
        // A QP that took nothing has nothing new to settle (the common case of a driver's
        // pass over an idle stream).
        if took {
            self.iw_touch(qpn);
            self.iwarp_settle(qpn);
        }
        Ok(())
    }

    /// Moves the data path's completions to the CQs, frees the ring slots of the WRs that
    /// completed, and puts a QP whose stream ended in ERR (a fatal event if it was running).
    fn iwarp_settle(&mut self, qpn: u32) {
        let Some(qp) = self.iw.get_mut(&qpn) else {
            return;
        };
        let Some(d) = qp.data.as_mut() else {
            return;
        };
        // The slots first: a program that sees a completion may post into its slot at once
        // (perftest keeps exactly its depth posted), as the RoCE path frees it.
        let (s, r) = d.outstanding();
        // On an SRQ its receives come from there, not from its ring (which takes none).
        let r = if qp.srq.is_some() { 0 } else { r };
        qp.post.sq.retire(qp.held.0 - s);
        qp.post.rq.retire(qp.held.1 - r);
        qp.held = (s, r);
        while let Some(wc) = d.poll_cq() {
            let cq = if wc.opcode == WcOpcode::Recv {
                qp.recv_cq
            } else {
                qp.send_cq
            };
            complete(&mut self.cqs, &mut self.events, cq, wc);
        }
        if d.terminated() && qp.state != QpState::Err {
            if qp.state == QpState::Rts {
                self.events.push_back(AsyncEvent::Qp {
                    qpn,
                    event: EventType::QpFatal,
                });
            }
            qp.set_state(QpState::Err);
            // What waits in the rings flushes now: a receive posted while the QP ran
            // rang no doorbell (`QpPost::post_recv`), and nothing else would take it.
            let _ = self.iwarp_take_posted(qpn);
        }
    }
}

impl IwQp {
    fn set_state(&mut self, s: QpState) {
        self.state = s;
        self.post.set_state(s);
    }
}

fn failed(qpn: u32, wr_id: u64, opcode: WcOpcode) -> WorkCompletion {
    WorkCompletion {
        wr_id,
        status: WcStatus::LocQpOpErr,
        opcode,
        byte_len: 0,
        imm: None,
        qp_num: qpn,
        src_qp: 0,
        src_gid: None,
        invalidated_rkey: None,
    }
}

fn flushed(qpn: u32, wr: &SendWr) -> WorkCompletion {
    WorkCompletion {
        status: WcStatus::WrFlushErr,
        ..failed(qpn, wr.wr_id, wr.opcode.wc_opcode())
    }
}
