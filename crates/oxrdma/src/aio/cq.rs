//! A completion queue whose completions are awaited.

use super::Fd;
use crate::error::Result;
use crate::{CompletionChannel, CompletionQueue};
use oxrdma_core::driving::waiters::SpinBudget;
use oxrdma_core::WorkCompletion;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::io::unix::AsyncFd;

/// A CQ with a completion channel of its own, armed whenever a task finds it empty (an
/// engine CQ's made here; an rdma-core CQ's is the one it was made with).
#[derive(Debug)]
pub struct AsyncCq {
    // Dropped first: the reactor lets the descriptor go before the channel closes it.
    fd: AsyncFd<Fd>,
    /// The engine CQ's channel (None on rdma-core).
    channel: Option<CompletionChannel>,
    cq: CompletionQueue,
    /// How long its waits spin before they sleep (`SpinBudget::to_bits`).
    spin: AtomicU64,
}

impl AsyncCq {
    /// `cq`, its completions to be awaited (within a tokio runtime). A CQ is armed for
    /// one channel at a time: do not arm this one for another.
    pub fn new(cq: CompletionQueue) -> Result<AsyncCq> {
        if let Some(engine) = cq.engine_cq() {
            let channel = engine.ctx.create_comp_channel()?;
            channel.set_nonblocking(true)?;
            // SAFETY: `channel` owns the descriptor and is dropped after `fd` (field order).
            let fd = unsafe { super::register(channel.as_raw_fd()) }?;
            return Ok(AsyncCq {
                fd,
                channel: Some(channel),
                cq,
                spin: AtomicU64::new(0),
            });
        }
        let raw = cq.rdma_core_cq().map(|c| c.channel_fd().as_raw_fd());
        let raw = raw.ok_or(crate::Error::Unsupported("awaiting this CQ"))?;
        // SAFETY: the CQ owns its channel's descriptor and is dropped after `fd`.
        let fd = unsafe { super::register(raw) }?;
        Ok(AsyncCq {
            fd,
            channel: None,
            cq,
            spin: AtomicU64::new(0),
        })
    }

    /// The CQ, for what does not wait.
    pub fn cq(&self) -> &CompletionQueue {
        &self.cq
    }

    /// Asks for an event at the next completion.
    fn arm(&self) -> Result<()> {
        match (&self.channel, self.cq.rdma_core_cq()) {
            (Some(channel), _) => self.cq.req_notify(channel),
            (None, Some(cq)) => cq.arm(),
            (None, None) => Err(crate::Error::Unsupported("awaiting this CQ")),
        }
    }

    /// Takes the events that woke the task.
    fn take_events(&self) -> Result<()> {
        match (&self.channel, self.cq.rdma_core_cq()) {
            (Some(channel), _) => while channel.try_get_event()?.is_some() {},
            (None, Some(cq)) => {
                cq.take_events()?;
            }
            (None, None) => {}
        }
        Ok(())
    }

    /// Appends up to `max` completions to `out` once at least one is there; returns how
    /// many.
    ///
    /// While the CQ is empty the task polls on, yielding to the runtime between looks, for
    /// as long as a blocking waiter would (`SpinBudget`: twice its typical wait, a probe
    /// after a miss, none while misses back it off), then arms the CQ and sleeps until its
    /// channel wakes it. A ping-pong's answer is so taken without a wake-up; an idle CQ
    /// costs a probe now and then.
    pub async fn poll(&self, out: &mut Vec<WorkCompletion>, max: usize) -> Result<usize> {
        let start = std::time::Instant::now();
        let spin = SpinBudget::from_bits(self.spin.load(Ordering::Relaxed));
        let budget = spin.budget();
        let mut waited = false;
        loop {
            let n = self.cq.poll(out, max)?;
            if n > 0 || max == 0 {
                if waited {
                    let next = spin.waited(start.elapsed(), budget);
                    self.spin.store(next.to_bits(), Ordering::Relaxed);
                }
                return Ok(n);
            }
            waited = true;
            if start.elapsed() < budget {
                tokio::task::yield_now().await;
                continue;
            }
            self.arm()?;
            // What came before the arm raises no event: look once more.
            let n = self.cq.poll(out, max)?;
            if n > 0 {
                let next = spin.waited(start.elapsed(), budget);
                self.spin.store(next.to_bits(), Ordering::Relaxed);
                return Ok(n);
            }
            // This task will not poll again until woken: the engine thread must move the
            // packets meanwhile (an empty poll told it the program polls on).
            if let Some(cq) = self.cq.engine_cq() {
                cq.ctx.shared().app_leaves();
            }
            let mut ready = self.fd.readable().await?;
            self.take_events()?;
            ready.clear_ready();
            // Woken: look again at once, and learn how long this wait took when it ends.
        }
    }

    /// The next completion.
    pub async fn next(&self) -> Result<WorkCompletion> {
        let mut out = Vec::with_capacity(1);
        while out.is_empty() {
            self.poll(&mut out, 1).await?;
        }
        Ok(out.remove(0))
    }
}
