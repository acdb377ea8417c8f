//! Shared receive queues: one pool of receive WQEs for many QPs, with the limit event that
//! tells the application to refill it.

use crate::error::{Result, VerbsError};
use crate::verbs::{AsyncEvent, EventType};
use crate::wr::RecvWr;
use std::collections::VecDeque;

#[derive(Debug)]
pub(crate) struct Srq {
    pub pd: u32,
    pub max_wr: u32,
    pub max_sge: u32,
    /// Armed limit: when fewer WQEs than this remain, raise SRQ_LIMIT_REACHED once and
    /// disarm (0 = not armed), as `ibv_modify_srq` describes.
    pub limit: u32,
    pub queue: VecDeque<RecvWr>,
}

/// What `Engine::query_srq` reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SrqAttr {
    /// Max receive WRs the SRQ holds.
    pub max_wr: u32,
    /// Max scatter/gather elements in one of its receive WRs.
    pub max_sge: u32,
    /// The armed limit (0: not armed): below it the SRQ raises SRQ_LIMIT_REACHED.
    pub srq_limit: u32,
    /// WQEs posted and not yet taken.
    pub posted: u32,
}

impl Srq {
    pub fn post(&mut self, wr: RecvWr) -> Result<()> {
        if self.queue.len() >= self.max_wr as usize {
            return Err(VerbsError::Exhausted("shared receive queue is full"));
        }
        if wr.sges.len() > self.max_sge as usize {
            return Err(VerbsError::InvalidArgument(
                "more SGEs than the SRQ's max_sge",
            ));
        }
        self.queue.push_back(wr);
        Ok(())
    }

    /// Arms (or disarms, with 0) the limit. Like rxe, a limit above the WQEs posted now is
    /// refused: the event would describe a state the SRQ is already in.
    pub fn arm(&mut self, limit: u32) -> Result<()> {
        if limit > self.max_wr {
            return Err(VerbsError::InvalidArgument("srq_limit above max_wr"));
        }
        if limit as usize > self.queue.len() {
            return Err(VerbsError::InvalidArgument(
                "srq_limit above the number of receives posted",
            ));
        }
        self.limit = limit;
        Ok(())
    }

    /// Takes the next WQE for a QP of SRQ `id`; crossing the armed limit raises
    /// SRQ_LIMIT_REACHED once (into `events`) and disarms it.
    pub fn take(&mut self, id: u32, events: &mut VecDeque<AsyncEvent>) -> Option<RecvWr> {
        let wr = self.queue.pop_front()?;
        if self.limit > 0 && (self.queue.len() as u32) < self.limit {
            self.limit = 0;
            events.push_back(AsyncEvent::Srq {
                srq: id,
                event: EventType::SrqLimitReached,
            });
        }
        Some(wr)
    }
}
