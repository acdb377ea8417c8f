//! The sending half: work requests and READ answers cut into FPDUs, whole messages in
//! turn.

use super::{data_len, term, untagged, AccessError, Memory, Qp, ReadOut, Sending, Source};
use crate::iwarp::stream::Segmenter;
use crate::verbs::{SendFlags, WcStatus, WrOpcode};
use crate::wr::{SendData, SendWr};
use oxrdma_wire::iwarp::ddp::{Placement, Queue, RdmapOpcode, ReadRequestRepr};
use oxrdma_wire::iwarp::mpa;

impl Qp {
    /// Writes whole FPDUs to `out` until it holds at least `max` bytes or nothing is left
    /// to send.
    pub fn transmit(&mut self, mem: &impl Memory, out: &mut Vec<u8>, max: usize) {
        // The initiator's RTR is its first FPDU, even ahead of a TERMINATE.
        if let Some(rtr) = self.rtr_out.take() {
            out.extend_from_slice(&rtr);
            self.counts.bump(crate::Counter::IwarpFpdusSent);
        }
        if let Some(t) = self.terminate_out.take() {
            out.extend_from_slice(&t);
            self.counts.bump(crate::Counter::IwarpFpdusSent);
            return;
        }
        if self.hold {
            return;
        }
        while out.len() < max && !self.terminated() {
            if self.sending.is_none() && !self.start_next(mem) {
                // An answer that cannot be given ends the stream with its TERMINATE.
                if let Some(t) = self.terminate_out.take() {
                    out.extend_from_slice(&t);
                    self.counts.bump(crate::Counter::IwarpFpdusSent);
                }
                return;
            }
            let Some(s) = self.sending.as_mut() else {
                return;
            };
            let Some((header, range)) = s.segmenter.next() else {
                self.sending = None;
                continue;
            };
            // The FPDU is built in place at the end of `out`: its header, the payload
            // gathered straight from memory, then length, pad and CRC around them.
            let at = out.len();
            let (h, len) = (header.header_len(), (range.end - range.start) as usize);
            out.resize(at + mpa::fpdu_len(h + len, self.cfg.crc), 0);
            let fpdu = &mut out[at..];
            let body = mpa::FPDU_HEADER_LEN + h;
            let payload = &mut fpdu[body..body + len];
            let filled = match &s.source {
                Source::Wr(wr, _) => gather(mem, wr, range.start as usize, payload),
                Source::ReadRequest(b) => {
                    payload.copy_from_slice(b);
                    Ok(())
                }
                // Checked whole when the answer began: the buffer may have gone since.
                Source::Response { stag, to } => mem
                    .fetch(*stag, to + range.start, payload)
                    .map_err(|_| WcStatus::RemAccessErr),
            };
            let sealed = filled.and_then(|()| {
                header
                    .emit(&mut fpdu[mpa::FPDU_HEADER_LEN..])
                    .and_then(|_| mpa::seal(fpdu, h + len, self.cfg.crc))
                    .map_err(|_| WcStatus::LocLenErr)
            });
            if let Err(status) = sealed {
                out.truncate(at);
                let Some(Sending { source, .. }) = self.sending.take() else {
                    return;
                };
                match source {
                    // This side's own memory failed it: the WR says why, the stream ends.
                    Source::Wr(wr, slot) => {
                        self.complete(slot, &wr, status, 0, true);
                        self.terminate(term::RDMAP, term::LOCAL, 0, None);
                    }
                    _ => self.terminate(
                        term::RDMAP,
                        term::REMOTE_PROTECTION,
                        term::INVALID_STAG,
                        None,
                    ),
                }
                if let Some(t) = self.terminate_out.take() {
                    out.extend_from_slice(&t);
                    self.counts.bump(crate::Counter::IwarpFpdusSent);
                }
                return;
            }
            self.counts.bump(crate::Counter::IwarpFpdusSent);
            if header.last {
                self.sent_last();
            }
        }
    }

    /// Begins the next message: an answer or the QP's own, alternating; false if none
    /// can go now.
    fn start_next(&mut self, mem: &impl Memory) -> bool {
        for answer in [self.answer_next, !self.answer_next] {
            let started = if answer {
                self.start_answer(mem)
            } else {
                self.start_own()
            };
            if started {
                self.answer_next = !answer;
                return true;
            }
            if self.terminated() {
                return false;
            }
        }
        false
    }

    fn start_answer(&mut self, mem: &impl Memory) -> bool {
        let Some(req) = self.to_answer.pop_front() else {
            return false;
        };
        // The whole source is checked before the first byte goes: its key and rights,
        // its first and its last byte.
        let whole = mem
            .fetch(req.source_stag, req.source_offset, &mut [])
            .and_then(|()| {
                if req.size == 0 {
                    return Ok(());
                }
                let last = req.source_offset.checked_add(u64::from(req.size) - 1);
                let last = last.ok_or(AccessError::Bounds)?;
                mem.fetch(req.source_stag, last, &mut [0u8; 1])
            });
        if let Err(e) = whole {
            let code = match e {
                AccessError::InvalidStag => term::INVALID_STAG,
                AccessError::Bounds => term::BOUNDS,
                AccessError::Rights => term::ACCESS,
            };
            self.terminate(term::RDMAP, term::REMOTE_PROTECTION, code, None);
            return false;
        }
        let first = Placement::Tagged {
            stag: req.sink_stag,
            offset: req.sink_offset,
        };
        let Ok(segmenter) = Segmenter::new(
            RdmapOpcode::ReadResponse,
            first,
            u64::from(req.size),
            self.cfg.max_fpdu,
            self.cfg.crc,
        ) else {
            return false;
        };
        self.sending = Some(Sending {
            segmenter,
            source: Source::Response {
                stag: req.source_stag,
                to: req.source_offset,
            },
        });
        true
    }

    fn start_own(&mut self) -> bool {
        let Some(wr) = self.sq.front() else {
            return false;
        };
        let is_read = wr.opcode == WrOpcode::RdmaRead;
        // A fenced WR waits for the READs before it; a READ waits for room in the ORD.
        if wr.flags.contains(SendFlags::FENCE) && !self.reads_out.is_empty()
            || is_read && self.reads_out.len() >= self.cfg.ord
        {
            return false;
        }
        let Some(wr) = self.sq.pop_front() else {
            return false;
        };
        let slot = self.start_slot();
        let len = data_len(&wr);
        let (opcode, first, source) = match wr.opcode {
            WrOpcode::RdmaWrite => (
                RdmapOpcode::Write,
                Placement::Tagged {
                    stag: wr.rkey,
                    offset: wr.remote_addr,
                },
                Source::Wr(wr, slot),
            ),
            WrOpcode::RdmaRead => {
                let sink = match &wr.data {
                    SendData::Sges(s) => s.iter().copied().find(|s| s.length > 0),
                    SendData::Inline(_) => None,
                };
                let (sink_stag, sink_to) = sink.map_or((0, 0), |s| (s.lkey, s.addr));
                let req = ReadRequestRepr {
                    sink_stag,
                    sink_offset: sink_to,
                    size: len as u32,
                    source_stag: wr.rkey,
                    source_offset: wr.remote_addr,
                };
                let mut body = [0u8; ReadRequestRepr::LEN];
                // LEN bytes is the body's length.
                let _ = req.emit(&mut body);
                self.reads_out.push_back(ReadOut {
                    slot,
                    wr_id: wr.wr_id,
                    sges: sink.into_iter().collect(),
                    sink_stag,
                    sink_to,
                    len,
                    signaled: self.signaled(&wr),
                });
                let msn = self.read_msn;
                self.read_msn = self.read_msn.wrapping_add(1);
                let first = untagged(Queue::ReadRequest, msn, 0);
                let s = Segmenter::new(
                    RdmapOpcode::ReadRequest,
                    first,
                    ReadRequestRepr::LEN as u64,
                    self.cfg.max_fpdu,
                    self.cfg.crc,
                );
                return match s {
                    Ok(segmenter) => {
                        self.sending = Some(Sending {
                            segmenter,
                            source: Source::ReadRequest(body),
                        });
                        true
                    }
                    Err(_) => false,
                };
            }
            _ => {
                let (op, ulp) = match (wr.opcode, wr.flags.contains(SendFlags::SOLICITED)) {
                    (WrOpcode::SendWithInv, false) => {
                        (RdmapOpcode::SendInvalidate, wr.invalidate_rkey)
                    }
                    (WrOpcode::SendWithInv, true) => {
                        (RdmapOpcode::SendSeInvalidate, wr.invalidate_rkey)
                    }
                    (_, false) => (RdmapOpcode::Send, 0),
                    (_, true) => (RdmapOpcode::SendSe, 0),
                };
                let msn = self.send_msn;
                self.send_msn = self.send_msn.wrapping_add(1);
                let mut first = untagged(Queue::Send, msn, 0);
                if let Placement::Untagged { ulp: u, .. } = &mut first {
                    *u = ulp;
                }
                (op, first, Source::Wr(wr, slot))
            }
        };
        match Segmenter::new(opcode, first, len, self.cfg.max_fpdu, self.cfg.crc) {
            Ok(segmenter) => {
                self.sending = Some(Sending { segmenter, source });
                true
            }
            Err(_) => false,
        }
    }

    /// The message being sent has left whole: a WRITE or SEND completes.
    fn sent_last(&mut self) {
        if let Some(Sending {
            source: Source::Wr(wr, slot),
            ..
        }) = self.sending.take()
        {
            let len = data_len(&wr) as u32;
            self.complete(slot, &wr, WcStatus::Success, len, false);
        }
    }
}

/// A WR's bytes from `at` on into `out`.
fn gather(mem: &impl Memory, wr: &SendWr, at: usize, out: &mut [u8]) -> Result<(), WcStatus> {
    match &wr.data {
        SendData::Sges(s) => mem.gather(s, at, out),
        SendData::Inline(b) => {
            let src = b.get(at..at + out.len()).ok_or(WcStatus::LocLenErr)?;
            out.copy_from_slice(src);
            Ok(())
        }
    }
}
