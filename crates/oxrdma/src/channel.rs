//! Completion channels: a descriptor that becomes readable when an armed CQ gets a
//! completion (`ibv_comp_channel`).
//!
//! A thread that waits for an event in `get_event` moves the device's packets itself: it
//! sleeps on the channel's descriptor and the device's socket together, so a packet that
//! arrives wakes it, not the engine thread, which leaves the socket to it meanwhile
//! (`Shared::waiting`). A program that sleeps on its CQ, as a blocking TCP program on its
//! socket, so pays one wake-up per message, not two (the engine thread's, then its own);
//! and where a moment's polling catches its events, it polls before it sleeps, as a
//! polling program would (`waiters::SpinBudget`), and pays none. The descriptor itself
//! stays readable exactly while events wait: programs poll it and then take an event
//! without expecting to block.

use crate::channel_events::ChannelInner;
use crate::cores::Cores;
use crate::error::Result;
use crate::shared::Shared;
use oxrdma_core::driving::SpinBudget;
use rustix::buffer::spare_capacity;
use rustix::event::epoll;
use rustix::fs::{fcntl_getfl, OFlags};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// Longest single sleep of a waiter, so that a device closed meanwhile is noticed.
const MAX_SLEEP: Duration = Duration::from_millis(50);

/// What woke a waiter (epoll's data).
const EVENT: u64 = 0;
const PACKET: u64 = 1;

/// What the threads waiting on a channel did: to tune a program, and to see that a
/// waiter takes its own packets ([`crate::CompletionChannel::stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChannelStats {
    /// Events reported to the channel.
    pub events: u64,
    /// Of those, the events a thread waiting on the channel brought on itself by moving
    /// the packets (the rest came through the engine thread or the program's other calls).
    pub moved_by_waiter: u64,
    /// Waits that ended while polling, before any sleep.
    pub spun: u64,
    /// Sleeps of waiting threads.
    pub slept: u64,
}

/// A completion channel of an engine device.
#[derive(Debug)]
pub(crate) struct EngineCompChannel {
    pub(crate) inner: Arc<ChannelInner>,
    /// The device whose packets a waiter moves.
    device: Weak<Shared>,
    /// The count of events and the device's socket, for a waiter to sleep on.
    epoll: OwnedFd,
    /// How long this channel's waiters spin before they sleep (`SpinBudget::to_bits`).
    spin: AtomicU64,
    /// Whether a core is free to spin on.
    cores: Mutex<Cores>,
}

impl EngineCompChannel {
    pub(crate) fn new(device: &Arc<Shared>) -> Result<Self> {
        use rustix::event::{eventfd, EventfdFlags};
        // SEMAPHORE: each read takes one event, so the count matches `fired`.
        let fd = eventfd(0, EventfdFlags::SEMAPHORE | EventfdFlags::CLOEXEC)
            .map_err(std::io::Error::from)?;
        let epoll = epoll::create(epoll::CreateFlags::CLOEXEC).map_err(std::io::Error::from)?;
        for (f, key) in [(fd.as_fd(), EVENT), (device.sock(), PACKET)] {
            epoll::add(
                &epoll,
                f,
                epoll::EventData::new_u64(key),
                epoll::EventFlags::IN,
            )
            .map_err(std::io::Error::from)?;
        }
        Ok(EngineCompChannel {
            inner: Arc::new(ChannelInner::new(fd)),
            device: Arc::downgrade(device),
            epoll,
            spin: AtomicU64::new(0),
            cores: Mutex::new(Cores::new()),
        })
    }

    /// Waits up to `timeout` for an event; true if one came. Consumes it.
    pub fn wait(&self, timeout: Duration) -> Result<bool> {
        Ok(self.next_event(Some(timeout))?.is_some())
    }

    /// Takes the next event (`ibv_get_cq_event`): the handle of the CQ it is for. Blocks
    /// while none waits, unless the descriptor is non-blocking (then `Ok(None)`).
    pub fn get_event(&self) -> Result<Option<u32>> {
        let nonblocking = fcntl_getfl(&self.inner.fd)
            .map_err(std::io::Error::from)?
            .contains(OFlags::NONBLOCK);
        self.next_event(nonblocking.then_some(Duration::ZERO))
    }

    /// The next event, waiting up to `timeout` (None: for ever) and moving the device's
    /// packets meanwhile.
    fn next_event(&self, timeout: Option<Duration>) -> Result<Option<u32>> {
        if let Some(cq) = self.inner.take() {
            return Ok(Some(cq));
        }
        let Some(shared) = self.device.upgrade() else {
            // The device is closed: only events already reported can come.
            return self.sleep(timeout);
        };
        let start = Instant::now();
        // A blocking wait sleeps at once: a packet waiting wakes it (the socket is
        // level-triggered). One that must not sleep moves what waits first.
        let mut packet = false;
        if timeout == Some(Duration::ZERO) {
            self.drive(&shared, shared.try_lock());
            if let Some(cq) = self.inner.take() {
                return Ok(Some(cq));
            }
            // No event: the program may sleep on the descriptor next, and what the packets
            // just moved owe the peer must not wait for it.
            self.flush(&shared, false);
            return Ok(None);
        }
        // Taken before the first sleep, let go when this call returns: the socket is this
        // thread's meanwhile.
        let mut waiting = None;
        // How long this wait polled before its first sleep (`SpinBudget`).
        let mut spun = Duration::ZERO;
        loop {
            // Packets waiting (or the one that woke this thread) may complete an armed
            // CQ: moved here, the event is reported when the device is let go.
            if packet {
                self.drive(&shared, Some(shared.lock()));
            }
            if let Some(cq) = self.inner.take() {
                if waiting.is_some() {
                    self.waited(start.elapsed(), spun);
                }
                return Ok(Some(cq));
            }
            let left = match timeout {
                Some(t) => match t.checked_sub(start.elapsed()) {
                    Some(left) if !left.is_zero() => Some(left),
                    _ => {
                        if packet {
                            self.flush(&shared, true);
                        }
                        if waiting.is_some() {
                            // No event: a spin made for it missed.
                            self.waited(start.elapsed(), spun);
                        }
                        return Ok(None);
                    }
                },
                None => None,
            };
            if waiting.is_none() {
                waiting = Some(shared.waiting());
                let (cq, budget) = self.spin(&shared, start, left);
                if let Some(cq) = cq {
                    return Ok(Some(cq));
                }
                spun = budget;
            }
            if packet {
                // The packets moved brought no event but may owe the peer an answer (the
                // ACK of a retransmitted request, a READ's responses): it leaves now, not
                // at the engine thread's next look, up to 50 ms away. A peer that timed out
                // waits for exactly this ACK.
                self.flush(&shared, true);
            }
            self.inner.stats.slept.fetch_add(1, Ordering::Relaxed);
            packet = self.sleep_on_both(left)?;
            if let Some(cq) = self.inner.take() {
                self.waited(start.elapsed(), spun);
                return Ok(Some(cq));
            }
        }
    }

    /// Moves the device's packets from this thread, which waits on this channel.
    fn drive(&self, shared: &Shared, dev: Option<crate::shared::DeviceGuard<'_>>) {
        if let Some(mut dev) = dev {
            self.inner.as_waiter(|| {
                shared.drive(&mut dev);
                // The channel hears of the completions when the device is let go.
                drop(dev);
            });
        }
    }

    /// Sends what the engine has for the wire (`Link::poll` returns as soon as packets
    /// arrived, leaving their answers to the caller's next call); with `release`, held
    /// ACKs too: they wait for an answer of the program's to take them along, and the
    /// program is going to sleep.
    fn flush(&self, shared: &Shared, release: bool) {
        if let Some(mut dev) = shared.try_lock() {
            if release {
                dev.engine.release_acks();
            }
            let _ = dev.transmit();
        }
    }

    /// What the threads waiting on this channel did so far.
    pub fn stats(&self) -> ChannelStats {
        let c = &self.inner.stats;
        ChannelStats {
            events: c.events.load(Ordering::Relaxed),
            moved_by_waiter: c.moved_by_waiter.load(Ordering::Relaxed),
            spun: c.spun.load(Ordering::Relaxed),
            slept: c.slept.load(Ordering::Relaxed),
        }
    }

    /// Polls the device for an event for as long as the channel's `SpinBudget` says (only
    /// where a core is free): a ping-pong's answer is then taken without the wake-up, as a
    /// polling program takes it. The event if one came, and the spin made.
    fn spin(
        &self,
        shared: &Shared,
        start: Instant,
        left: Option<Duration>,
    ) -> (Option<u32>, Duration) {
        let budget = self
            .spin_budget()
            .budget()
            .min(left.unwrap_or(Duration::MAX));
        if budget.is_zero() {
            return (None, Duration::ZERO);
        }
        let Some(alone) = self
            .cores
            .try_lock()
            .ok()
            .and_then(|mut c| c.free().then(|| c.alone()))
        else {
            return (None, Duration::ZERO);
        };
        while start.elapsed() < budget {
            self.drive(shared, shared.try_lock());
            if let Some(cq) = self.inner.take() {
                self.waited(start.elapsed(), budget);
                self.inner.stats.spun.fetch_add(1, Ordering::Relaxed);
                return (Some(cq), budget);
            }
            if alone {
                // On its one core the peer that answers may be waiting for this one.
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
        (None, budget)
    }

    /// How this channel's waiters spin (`waiters::SpinBudget`).
    fn spin_budget(&self) -> SpinBudget {
        SpinBudget::from_bits(self.spin.load(Ordering::Relaxed))
    }

    /// A wait for an event that spun `spun` first lasted `d`.
    fn waited(&self, d: Duration, spun: Duration) {
        let next = self.spin_budget().waited(d, spun);
        self.spin.store(next.to_bits(), Ordering::Relaxed);
    }

    /// Sleeps until an event or a packet comes, or `left` passes (at most `MAX_SLEEP`);
    /// whether a packet woke it.
    fn sleep_on_both(&self, left: Option<Duration>) -> Result<bool> {
        let wait = left.map_or(MAX_SLEEP, |l| l.min(MAX_SLEEP));
        let ts = rustix::event::Timespec::try_from(wait).ok();
        let mut events: Vec<epoll::Event> = Vec::with_capacity(2);
        match epoll::wait(&self.epoll, spare_capacity(&mut events), ts.as_ref()) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(std::io::Error::from(e).into()),
        }
        Ok(events.iter().any(|e| e.data.u64() == PACKET))
    }

    /// Sleeps on the descriptor alone (the device is gone) for an event, up to `left`.
    fn sleep(&self, left: Option<Duration>) -> Result<Option<u32>> {
        use rustix::event::{poll, PollFd, PollFlags, Timespec};
        loop {
            if let Some(cq) = self.inner.take() {
                return Ok(Some(cq));
            }
            let mut fds = [PollFd::new(&self.inner.fd, PollFlags::IN)];
            let ts = left.and_then(|l| Timespec::try_from(l).ok());
            match poll(&mut fds, ts.as_ref()) {
                Ok(0) if left.is_some() => return Ok(self.inner.take()),
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(std::io::Error::from(e).into()),
            }
        }
    }
}

impl AsFd for EngineCompChannel {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.inner.fd.as_fd()
    }
}

impl EngineCompChannel {
    /// Makes [`Self::get_event`] return `Ok(None)` at once when no event waits (as
    /// `O_NONBLOCK` on the descriptor does), or wait again.
    pub fn set_nonblocking(&self, nonblocking: bool) -> Result<()> {
        crate::fdqueue::set_nonblocking(self.as_fd(), nonblocking)
    }

    /// The next event if one waits (the handle of its CQ), without waiting.
    pub fn try_get_event(&self) -> Result<Option<u32>> {
        self.next_event(Some(Duration::ZERO))
    }
}
