//! Completion queues: polled without locks, armed for a completion channel.

use crate::channel::CompletionChannel;
use crate::context::Context;
use crate::error::Result;
use oxrdma_core::WorkCompletion;
use std::sync::Arc;

/// An empty poll that finds another thread driving yields the CPU once in this many.
const YIELD_EVERY: u32 = 32;

thread_local! {
    /// Empty polls this thread made while another thread drove.
    static BUSY: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

#[derive(Debug)]
pub struct CompletionQueue {
    pub(crate) ctx: Context,
    pub(crate) cq: u32,
    /// The CQ's entries, popped without the device lock.
    pub(crate) ring: Arc<oxrdma_core::CqRing>,
    /// Cleared by `try_destroy` once the engine has let the CQ go.
    pub(crate) live: bool,
}

impl CompletionQueue {
    /// The CQ's handle, as [`CompletionChannel::get_event`] names it.
    pub fn handle(&self) -> u32 {
        self.cq
    }

    /// `ibv_resize_cq`: holds up to `depth` completions from now on; refused (invalid
    /// argument) below what it holds now.
    pub fn resize(&self, depth: u32) -> Result<()> {
        self.ctx.shared().lock().engine.resize_cq(self.cq, depth)?;
        Ok(())
    }

    /// Appends up to `max` completions to `out`, oldest first; returns how many.
    pub fn poll(&self, out: &mut Vec<WorkCompletion>, max: usize) -> Result<usize> {
        self.poll_each(max, |wc| out.push(wc))
    }

    /// Hands up to `max` completions to `f`, oldest first; returns how many.
    ///
    /// Completions are taken without locking anything. When the queue is empty the calling
    /// thread moves packets itself before looking again, if no other thread is doing so,
    /// so a thread that busy-polls drives the device directly instead of competing with the
    /// engine thread for the CPU.
    pub fn poll_each(&self, max: usize, mut f: impl FnMut(WorkCompletion)) -> Result<usize> {
        let mut n = 0;
        while n < max {
            match self.ring.pop() {
                Some(wc) => f(wc),
                None => break,
            }
            n += 1;
        }
        if n == 0 && max > 0 {
            // Another thread driving the device will bring the completions: no waiting.
            let shared = self.ctx.shared();
            if let Some(mut dev) = shared.try_lock() {
                shared.drive(&mut dev);
                // Also moves completions that overflowed the ring into it.
                n = dev.engine.poll_cq_each(self.cq, max, &mut f)?;
            } else {
                // Another thread drives. A drive takes microseconds: poll again at once,
                // but let that thread run now and then in case it shares this core.
                BUSY.with(|b| {
                    b.set(b.get().wrapping_add(1));
                    if b.get() % YIELD_EVERY == 0 {
                        std::thread::yield_now();
                    }
                });
            }
        }
        self.ctx.shared().polled(n);
        Ok(n)
    }

    /// Asks for `channel` to report this CQ at its next completion (`ibv_req_notify_cq`).
    pub fn req_notify(&self, channel: &CompletionChannel) {
        self.ctx
            .shared()
            .arm(self.cq, self.ring.clone(), channel.inner.clone());
    }

    /// Once destroyed: an arm left waiting reports nothing (and no longer tells the
    /// engine thread that a program sleeps on a channel).
    fn disarm(&self) {
        self.ctx.shared().disarm(self.cq);
    }
}

crate::destroy::destroy_with! {
    /// `ibv_destroy_cq`: busy while a QP uses it.
    CompletionQueue.cq => destroy_cq, events Cq, then disarm;
}
