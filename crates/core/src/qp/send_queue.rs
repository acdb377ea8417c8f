//! The send WQEs a QP took from the application, completed in order from the front. The
//! requester walks them, the completer retires them; what a completion frees, and what a
//! failure flushes, is done here, once.

use crate::qp::post::QpPost;
use crate::qp::{Ctx, SendWqe};
use crate::verbs::WcStatus;
use crate::wr::WorkCompletion;
use std::collections::VecDeque;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

#[derive(Debug)]
pub(crate) struct SendQueue {
    wqes: VecDeque<SendWqe>,
    /// WQEs removed from the front, ever: the requester's cursor counts its place from it.
    popped: u64,
    post: Arc<QpPost>,
    qpn: u32,
    send_cq: u32,
    sig_all: bool,
    /// A WQE failed (the rest were flushed): the QP is to go to ERR.
    failed: bool,
}

impl SendQueue {
    pub(crate) fn new(post: Arc<QpPost>, qpn: u32, send_cq: u32, sig_all: bool) -> Self {
        SendQueue {
            wqes: VecDeque::new(),
            popped: 0,
            post,
            qpn,
            send_cq,
            sig_all,
            failed: false,
        }
    }

    /// Whether every send WR completes, signaled or not.
    pub(crate) fn sig_all(&self) -> bool {
        self.sig_all
    }

    /// WQEs removed from the front, ever.
    pub(crate) fn popped(&self) -> u64 {
        self.popped
    }

    /// Completes the front WQE with `status` (a WC if signalled or an error).
    pub(crate) fn complete_front(&mut self, ctx: &mut Ctx<'_>, status: WcStatus) {
        // Read where it lies, then dropped there: a WQE is 328 bytes to move.
        let Some(w) = self.wqes.front() else {
            return;
        };
        let signaled = self.sig_all || w.wr.flags.contains(crate::SendFlags::SIGNALED);
        let wc = (status != WcStatus::Success || signaled).then(|| WorkCompletion {
            byte_len: w.len as u32,
            ..WorkCompletion::new(w.wr.wr_id, status, w.wr.opcode.wc_opcode(), self.qpn)
        });
        self.wqes.pop_front();
        self.popped += 1;
        // The slot is free before the completion can be seen, so the application may post
        // again as soon as it polls it.
        self.post.sq.retire(1);
        if let Some(wc) = wc {
            ctx.complete(self.send_cq, wc);
        }
    }

    /// Completes the front WQE with the error `status` and flushes the rest: the QP goes
    /// to ERR (`take_failed`).
    pub(crate) fn fail_front(&mut self, ctx: &mut Ctx<'_>, status: WcStatus) {
        self.complete_front(ctx, status);
        self.flush(ctx);
        self.failed = true;
    }

    /// Completes every WQE with WR_FLUSH_ERR.
    pub(crate) fn flush(&mut self, ctx: &mut Ctx<'_>) {
        while !self.wqes.is_empty() {
            self.complete_front(ctx, WcStatus::WrFlushErr);
        }
    }

    /// Whether a WQE failed since the last call.
    pub(crate) fn take_failed(&mut self) -> bool {
        std::mem::take(&mut self.failed)
    }

    /// Whether a WQE failed and the QP is yet to go to ERR.
    pub(crate) fn failed(&self) -> bool {
        self.failed
    }

    /// Completes executed local operations at the front; a failed one fails the queue, as
    /// its error completion says.
    pub(crate) fn drain_local_front(&mut self, ctx: &mut Ctx<'_>) {
        while let Some(status) = self
            .wqes
            .front()
            .filter(|w| w.started)
            .and_then(|w| w.local_done)
        {
            if status != WcStatus::Success {
                self.fail_front(ctx, status);
                return;
            }
            self.complete_front(ctx, status);
        }
    }

    /// Reports a local error of the front WQE once everything before it has completed.
    pub(crate) fn report_local_errors(&mut self, ctx: &mut Ctx<'_>) {
        if let Some(status) = self.wqes.front().and_then(|w| w.local_error) {
            self.fail_front(ctx, status);
        }
    }

    /// Drops every WQE without completions, freeing their slots.
    pub(crate) fn discard(&mut self) {
        self.post.sq.retire(self.wqes.len());
        self.popped += self.wqes.len() as u64;
        self.wqes.clear();
    }
}

impl Deref for SendQueue {
    type Target = VecDeque<SendWqe>;
    fn deref(&self) -> &Self::Target {
        &self.wqes
    }
}

impl DerefMut for SendQueue {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.wqes
    }
}
