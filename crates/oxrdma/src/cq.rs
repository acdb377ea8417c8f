//! Completion queues: the public one (of an engine or an rdma-core device) and the
//! engine's, polled without locks and armed for a completion channel.

use crate::channel::EngineCompChannel;
use crate::engine_context::EngineContext;
use crate::error::{Error, Result};
use crate::rdma_core;
use crate::CompletionChannel;
use oxrdma_core::WorkCompletion;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// How often [`CompletionQueue::wait`] looks at a CQ armed for another channel.
const ELSEWHERE: Duration = Duration::from_millis(1);

/// An empty poll that finds another thread driving yields the CPU once in this many.
const YIELD_EVERY: u32 = 32;

thread_local! {
    /// Empty polls this thread made while another thread drove.
    static BUSY: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// A completion queue (`ibv_cq`): where the work requests of its QPs complete. Poll it
/// ([`Self::poll`]), wait on it ([`Self::wait`], [`Self::wait_one`]) or arm it for a
/// [`CompletionChannel`] ([`Self::req_notify`]).
///
/// ```
/// use oxrdma::{Access, ConnectOptions, Context, QpCap, QpType, RecvWr, SendWr, WcStatus};
/// use std::time::Duration;
/// # fn main() -> oxrdma::Result<()> {
/// let (a, b) = (Context::open("127.0.1.18".parse().unwrap())?,
///               Context::open("127.0.1.19".parse().unwrap())?);
/// let (pa, pb) = (a.alloc_pd()?, b.alloc_pd()?);
/// let (ma, mb) = (pa.register(64, Access::LOCAL_WRITE)?, pb.register(64, Access::LOCAL_WRITE)?);
/// let (ca, cb) = (a.create_cq(8)?, b.create_cq(8)?);
/// let qa = pa.create_qp(&ca, &ca, QpType::Rc, QpCap::default())?;
/// let qb = pb.create_qp(&cb, &cb, QpType::Rc, QpCap::default())?;
/// qa.connect(&qb.endpoint(), &ConnectOptions::default())?;
/// qb.connect(&qa.endpoint(), &ConnectOptions::default())?;
/// for i in 0..2 {
///     qb.post_recv(RecvWr { wr_id: i, sges: vec![mb.sge(32 * i as usize, 32)?].into() })?;
///     qa.post_send(SendWr::send_inline(10 + i, b"ping"))?;
/// }
/// for wc in ca.wait_for(2, Duration::from_secs(10))? {
///     wc.result()?;
/// }
/// let got = cb.wait_for(2, Duration::from_secs(10))?;
/// assert_eq!((got[0].wr_id, got[1].wr_id, got[1].byte_len), (0, 1, 4));
/// // A READ of memory b did not open to peers completes in error: `result` makes it an Err.
/// qa.post_send(SendWr::read(3, [ma.sge(0, 8)?], mb.remote())?)?;
/// let err = ca.wait_one(Duration::from_secs(10))?.result().unwrap_err();
/// assert_eq!((err.wr_id, err.status), (3, WcStatus::RemAccessErr));
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct CompletionQueue {
    kind: CqKind,
}

#[derive(Debug)]
enum CqKind {
    Engine(EngineCq),
    RdmaCore(Arc<rdma_core::Cq>),
}

/// How long [`CompletionQueue::wait`] polls an rdma-core CQ before it arms it and sleeps.
const RDMA_CORE_SPIN: Duration = Duration::from_micros(50);

impl From<EngineCq> for CompletionQueue {
    fn from(cq: EngineCq) -> CompletionQueue {
        CompletionQueue {
            kind: CqKind::Engine(cq),
        }
    }
}

impl CompletionQueue {
    pub(crate) fn rdma_core(dev: &Arc<rdma_core::Device>, depth: u32) -> Result<Self> {
        Ok(CompletionQueue {
            kind: CqKind::RdmaCore(Arc::new(rdma_core::Cq::create(dev, depth)?)),
        })
    }

    pub(crate) fn engine_cq(&self) -> Option<&EngineCq> {
        match &self.kind {
            CqKind::Engine(cq) => Some(cq),
            CqKind::RdmaCore(_) => None,
        }
    }

    pub(crate) fn rdma_core_cq(&self) -> Option<&Arc<rdma_core::Cq>> {
        match &self.kind {
            CqKind::Engine(_) => None,
            CqKind::RdmaCore(cq) => Some(cq),
        }
    }

    /// The CQ's handle, as [`CompletionChannel::get_event`] and asynchronous events name
    /// it.
    pub fn handle(&self) -> u32 {
        match &self.kind {
            CqKind::Engine(cq) => cq.cq,
            CqKind::RdmaCore(cq) => cq.handle,
        }
    }

    /// `ibv_resize_cq`: holds up to `depth` completions from now on; refused (invalid
    /// argument) below what it holds now.
    pub fn resize(&self, depth: u32) -> Result<()> {
        match &self.kind {
            CqKind::Engine(cq) => {
                cq.ctx.shared().lock().engine.resize_cq(cq.cq, depth)?;
            }
            CqKind::RdmaCore(cq) => cq.resize(depth)?,
        }
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
        match &self.kind {
            CqKind::Engine(cq) => cq.poll_each(max, f),
            CqKind::RdmaCore(cq) => cq.poll_each(max, &mut f),
        }
    }

    /// Asks for `channel` to report this CQ at its next completion (`ibv_req_notify_cq`).
    /// The channel must be of the CQ's kind of device.
    pub fn req_notify(&self, channel: &CompletionChannel) -> Result<()> {
        let other =
            || oxrdma_core::VerbsError::InvalidArgument("a channel of another kind of device");
        match &self.kind {
            CqKind::Engine(cq) => {
                let channel = channel.engine_channel().ok_or_else(other)?;
                cq.ctx
                    .shared()
                    .arm(cq.cq, cq.ring.clone(), channel.inner.clone());
                Ok(())
            }
            CqKind::RdmaCore(cq) => channel.rdma_core_channel().ok_or_else(other)?.arm(cq),
        }
    }

    /// Waits up to `timeout` for completions and appends up to `max` of them to `out`
    /// (the first that come; 0 if none came in time). While none is there it moves the
    /// device's packets, spins briefly, then sleeps on a completion channel of its own
    /// (armed here; a CQ a program armed for its own channel is looked at every
    /// millisecond instead), so an idle waiter costs no CPU.
    pub fn wait(
        &self,
        out: &mut Vec<WorkCompletion>,
        max: usize,
        timeout: Duration,
    ) -> Result<usize> {
        let start = Instant::now();
        loop {
            let n = self.poll(out, max)?;
            if n > 0 || max == 0 {
                return Ok(n);
            }
            let left = match timeout.checked_sub(start.elapsed()) {
                Some(left) if !left.is_zero() => left,
                _ => return Ok(0),
            };
            match &self.kind {
                CqKind::Engine(cq) => {
                    let (channel, ours) = cq.arm_waiter()?;
                    // What came before the arm raises no event: look once more.
                    let n = self.poll(out, max)?;
                    if n > 0 {
                        return Ok(n);
                    }
                    channel.wait(if ours { left } else { left.min(ELSEWHERE) })?;
                }
                CqKind::RdmaCore(cq) => {
                    // A NIC completes in microseconds: poll a little before the syscalls.
                    if start.elapsed() < RDMA_CORE_SPIN {
                        std::hint::spin_loop();
                        continue;
                    }
                    cq.arm()?;
                    let n = self.poll(out, max)?;
                    if n > 0 {
                        return Ok(n);
                    }
                    cq.sleep(left)?;
                }
            }
        }
    }

    /// The next completion, waiting up to `timeout` for it ([`Self::wait`]); an error
    /// (`TimedOut`) if none came.
    pub fn wait_one(&self, timeout: Duration) -> Result<WorkCompletion> {
        let mut out = Vec::with_capacity(1);
        self.wait(&mut out, 1, timeout)?;
        out.pop().ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::TimedOut, "no completion came in time").into()
        })
    }

    /// The next `n` completions, waiting up to `timeout` in all ([`Self::wait`]); an error
    /// (`TimedOut`) naming how many came if not all did (those stay taken).
    pub fn wait_for(&self, n: usize, timeout: Duration) -> Result<Vec<WorkCompletion>> {
        let start = Instant::now();
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            let left = timeout.saturating_sub(start.elapsed());
            let want = n - out.len();
            if self.wait(&mut out, want, left)? == 0 {
                let why = format!("{} of {n} completions came in {timeout:?}", out.len());
                return Err(std::io::Error::new(std::io::ErrorKind::TimedOut, why).into());
            }
        }
        Ok(out)
    }

    /// `ibv_destroy_cq`: busy while a QP uses it; the CQ comes back with the error.
    pub fn try_destroy(self) -> std::result::Result<(), (Self, Error)> {
        match self.kind {
            CqKind::Engine(cq) => cq.try_destroy().map_err(|(cq, e)| (cq.into(), e)),
            CqKind::RdmaCore(cq) => match Arc::try_unwrap(cq) {
                Ok(_) => Ok(()),
                Err(cq) => Err((
                    CompletionQueue {
                        kind: CqKind::RdmaCore(cq),
                    },
                    oxrdma_core::VerbsError::Busy("CQ in use").into(),
                )),
            },
        }
    }
}

/// A CQ of an engine device.
#[derive(Debug)]
pub(crate) struct EngineCq {
    pub(crate) ctx: EngineContext,
    pub(crate) cq: u32,
    /// The CQ's entries, popped without the device lock.
    pub(crate) ring: Arc<oxrdma_core::CqRing>,
    /// Cleared by `try_destroy` once the engine has let the CQ go.
    pub(crate) live: bool,
    /// The channel [`CompletionQueue::wait`] sleeps on, made at its first sleep.
    pub(crate) waiter: OnceLock<Box<EngineCompChannel>>,
}

impl EngineCq {
    /// A CQ of `depth` entries on `ctx`'s device.
    pub(crate) fn create(ctx: &EngineContext, depth: u32) -> Result<EngineCq> {
        let mut dev = ctx.shared().lock();
        let cq = dev.engine.create_cq(depth)?;
        let ring = dev
            .engine
            .cq_ring(cq)
            .ok_or(oxrdma_core::VerbsError::NotFound(
                "the ring of the CQ just made",
            ))?;
        ctx.claim(crate::events::Source::Cq(cq));
        drop(dev);
        Ok(EngineCq {
            ctx: ctx.clone(),
            cq,
            ring,
            live: true,
            waiter: OnceLock::new(),
        })
    }

    fn poll_each(&self, max: usize, mut f: impl FnMut(WorkCompletion)) -> Result<usize> {
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

    /// Arms the CQ for its own waiting channel (made at the first call); the channel, and
    /// whether the arm is ours (false: the program armed it for its own channel).
    fn arm_waiter(&self) -> Result<(&EngineCompChannel, bool)> {
        let channel = match self.waiter.get() {
            Some(c) => c,
            None => {
                let c = Box::new(EngineCompChannel::new(&self.ctx.inner.shared)?);
                self.waiter.get_or_init(|| c)
            }
        };
        let ours = self
            .ctx
            .shared()
            .arm(self.cq, self.ring.clone(), channel.inner.clone());
        Ok((channel, ours))
    }

    /// Once destroyed: an arm left waiting reports nothing (and no longer tells the
    /// engine thread that a program sleeps on a channel).
    fn disarm(&self) {
        self.ctx.shared().disarm(self.cq);
    }
}

crate::destroy::destroy_with! {
    /// `ibv_destroy_cq`: busy while a QP uses it.
    EngineCq.cq => destroy_cq, events Cq, then disarm;
}
