//! The receiving half: segments read back from the stream, placed, completed or
//! answered; a TERMINATE for what the RFCs refuse.

use super::{term, AccessError, Memory, Qp, Receiving, State};
use crate::iwarp::stream::FpduReader;
use crate::verbs::{WcOpcode, WcStatus};
use oxrdma_wire::iwarp::ddp::{
    DdpRepr, Placement, Queue, RdmapOpcode, ReadRequestRepr, TerminateRepr,
};
use oxrdma_wire::WireError;

impl Qp {
    /// How many bytes [`Self::receive`] takes now (any number once terminated).
    pub fn room(&self) -> usize {
        if self.terminated() {
            usize::MAX
        } else {
            self.reader.room()
        }
    }

    /// Takes bytes read from the stream and acts on every whole segment among them:
    /// placements, completions, READ requests to answer, a TERMINATE. Returns how many
    /// bytes it took (at most [`Self::room`]).
    pub fn receive(&mut self, bytes: &[u8], mem: &mut impl Memory) -> usize {
        if self.terminated() {
            return bytes.len(); // the stream is over: what still comes is dropped
        }
        let took = self.reader.push(bytes);
        // The reader is set aside while its segments are acted on, so that each payload
        // is read where it lies (no copy) while the QP changes.
        let mut reader = std::mem::replace(&mut self.reader, FpduReader::new(self.cfg.crc));
        while !self.terminated() {
            let (header, payload) = match reader.next_segment() {
                Ok(Some(got)) => got,
                Ok(None) => break,
                Err(e) => {
                    let code = match e {
                        WireError::MpaCrcMismatch { .. } => term::MPA_CRC,
                        _ => term::MPA_LENGTH,
                    };
                    self.terminate(term::LLP, 0, code, None);
                    break;
                }
            };
            self.counts.bump(crate::Counter::IwarpFpdusRcvd);
            // The initiator has spoken: a responder holding for its RTR may send. The
            // responder has spoken: an initiator's RTR came.
            self.hold = false;
            self.rtr_again = None;
            if let Err((layer, etype, ecode)) = self.on_segment(&header, payload, mem) {
                let seg_len = header.header_len() + payload.len();
                self.terminate(layer, etype, ecode, Some((header, seg_len)));
            }
        }
        self.reader = reader;
        took
    }

    /// Acts on one segment; Err names the TERMINATE it calls for.
    fn on_segment(
        &mut self,
        h: &DdpRepr,
        payload: &[u8],
        mem: &mut impl Memory,
    ) -> Result<(), (u8, u8, u8)> {
        match (h.opcode, h.placement) {
            // A zero-length WRITE places nothing (RFC 6581's RTR names STag 0).
            (RdmapOpcode::Write, Placement::Tagged { .. }) if payload.is_empty() => Ok(()),
            (RdmapOpcode::Write, Placement::Tagged { stag, offset }) => {
                mem.place(stag, offset, payload).map_err(tagged_error)
            }
            (RdmapOpcode::ReadResponse, Placement::Tagged { stag, offset }) => {
                self.on_read_response(stag, offset, payload, h.last, mem)
            }
            (
                RdmapOpcode::ReadRequest,
                Placement::Untagged {
                    msn,
                    queue: Queue::ReadRequest,
                    ..
                },
            ) => {
                if msn != self.read_req_msn {
                    return Err((term::DDP, term::UNTAGGED, term::U_MSN_RANGE));
                }
                if self.to_answer.len() >= self.cfg.ird {
                    return Err((term::DDP, term::UNTAGGED, term::U_NO_BUFFER));
                }
                let req = ReadRequestRepr::parse(payload)
                    .map_err(|_| (term::RDMAP, term::REMOTE_OPERATION, term::UNEXPECTED_OPCODE))?;
                self.read_req_msn = self.read_req_msn.wrapping_add(1);
                self.to_answer.push_back(req);
                Ok(())
            }
            (
                RdmapOpcode::Terminate,
                Placement::Untagged {
                    queue: Queue::Terminate,
                    ..
                },
            ) => {
                let t = TerminateRepr::parse(payload).ok();
                self.on_terminate(t);
                Ok(())
            }
            (
                op,
                Placement::Untagged {
                    ulp,
                    queue,
                    msn,
                    offset,
                },
            ) if queue == Queue::Send && op.queue() == Some(Queue::Send) => {
                self.on_send(op, ulp, msn, offset, payload, h.last, mem)
            }
            (_, Placement::Untagged { .. }) => Err((term::DDP, term::UNTAGGED, term::U_INVALID_QN)),
            _ => Err((term::RDMAP, term::REMOTE_OPERATION, term::UNEXPECTED_OPCODE)),
        }
    }

    fn on_read_response(
        &mut self,
        stag: u32,
        offset: u64,
        payload: &[u8],
        last: bool,
        mem: &mut impl Memory,
    ) -> Result<(), (u8, u8, u8)> {
        let bad_stag = (term::DDP, term::TAGGED, term::T_INVALID_STAG);
        let read = self.reads_out.front().ok_or(bad_stag)?;
        if read.sink_stag != stag {
            return Err(bad_stag);
        }
        let at = offset.wrapping_sub(read.sink_to);
        let end = at.checked_add(payload.len() as u64);
        if offset < read.sink_to || end.is_none_or(|e| e > read.len) {
            return Err((term::DDP, term::TAGGED, term::T_BOUNDS));
        }
        let placed = mem.scatter(&read.sges, at as usize, payload);
        if let Err(status) = placed {
            if let Some(read) = self.reads_out.pop_front() {
                let wc = self.wc(read.wr_id, status, WcOpcode::RdmaRead, 0);
                self.finish(read.slot, Some(wc));
            }
            return Err((term::RDMAP, term::LOCAL, 0));
        }
        if last {
            if let Some(read) = self.reads_out.pop_front() {
                let wc = read.signaled.then(|| {
                    let len = read.len as u32;
                    self.wc(read.wr_id, WcStatus::Success, WcOpcode::RdmaRead, len)
                });
                self.finish(read.slot, wc);
            }
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn on_send(
        &mut self,
        op: RdmapOpcode,
        ulp: u32,
        msn: u32,
        offset: u32,
        payload: &[u8],
        last: bool,
        mem: &mut impl Memory,
    ) -> Result<(), (u8, u8, u8)> {
        if msn != self.recv_msn {
            return Err((term::DDP, term::UNTAGGED, term::U_MSN_RANGE));
        }
        if self.rq.is_empty() {
            // A QP on an SRQ takes a receive there as a message begins.
            self.rq.extend(mem.shared_recv());
        }
        let Some(wr) = self.rq.front() else {
            return Err((term::DDP, term::UNTAGGED, term::U_NO_BUFFER));
        };
        match mem.scatter(&wr.sges, offset as usize, payload) {
            Ok(()) => {}
            Err(WcStatus::LocLenErr) => return Err((term::DDP, term::UNTAGGED, term::U_TOO_LONG)),
            Err(status) => {
                let Some(wr) = self.rq.pop_front() else {
                    return Ok(());
                };
                self.cq
                    .push_back(self.wc(wr.wr_id, status, WcOpcode::Recv, 0));
                return Err((term::RDMAP, term::LOCAL, 0));
            }
        }
        let len = u64::from(offset) + payload.len() as u64;
        let got = self
            .receiving
            .map_or(0, |r| if r.msn == msn { r.len } else { 0 });
        self.receiving = Some(Receiving {
            msn,
            len: got.max(len),
        });
        if !last {
            return Ok(());
        }
        let invalidates = op.invalidates();
        if invalidates && mem.invalidate(ulp).is_err() {
            return Err((term::RDMAP, term::REMOTE_OPERATION, term::CANNOT_INVALIDATE));
        }
        self.recv_msn = self.recv_msn.wrapping_add(1);
        let total = self.receiving.take().map_or(len, |r| r.len);
        if let Some(wr) = self.rq.pop_front() {
            let mut wc = self.wc(wr.wr_id, WcStatus::Success, WcOpcode::Recv, total as u32);
            wc.invalidated_rkey = invalidates.then_some(ulp);
            self.cq.push_back(wc);
        }
        Ok(())
    }

    /// The peer ended the stream: the oldest READ fails with what it said, the rest flush.
    fn on_terminate(&mut self, t: Option<TerminateRepr>) {
        self.counts.bump(crate::Counter::IwarpTerminateRcvd);
        if let Some(read) = self.reads_out.pop_front() {
            let status = match t {
                Some(t) if t.etype == term::REMOTE_PROTECTION || t.layer == term::DDP => {
                    WcStatus::RemAccessErr
                }
                _ => WcStatus::RemOpErr,
            };
            let wc = self.wc(read.wr_id, status, WcOpcode::RdmaRead, 0);
            self.finish(read.slot, Some(wc));
        }
        self.flush(true);
        self.state = State::Terminated {
            sent: None,
            received: t,
        };
    }
}

/// The TERMINATE a refused tagged placement calls for.
fn tagged_error(e: AccessError) -> (u8, u8, u8) {
    match e {
        AccessError::InvalidStag => (term::DDP, term::TAGGED, term::T_INVALID_STAG),
        AccessError::Bounds => (term::DDP, term::TAGGED, term::T_BOUNDS),
        AccessError::Rights => (term::RDMAP, term::REMOTE_PROTECTION, term::ACCESS),
    }
}
