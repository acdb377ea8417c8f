//! What a device's threads share: the engine and its socket behind one mutex, what the
//! engine thread sleeps on, and the atomics that tell it whether an application drives
//! the device. What they mean and what each thread does about them are decided in
//! `oxrdma_core::driving` (`AppSeen`, `poll_watch`); this file keeps the words and carries
//! the answers out.

use crate::channel_events::ChannelInner;
use crate::cm::routes::CmRoutes;
use crate::device::Device;
use crate::error::Result;
use crate::events::Owners;
use crate::handoff::Handoff;
use crate::lock::lock;
use crate::sleeper::Sleeper;
use oxrdma_core::driving::{self, AppSeen, PollWatch};
use oxrdma_core::{CqRing, EngineConfig, Nanos};
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// An application that keeps polling has its time taken once in this many empty polls.
const CLOCK_EVERY: u32 = 32;

thread_local! {
    /// Empty CQ polls made by this thread.
    static EMPTY_POLLS: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// State shared by the engine thread and the API objects.
pub(crate) struct Shared {
    /// What never changes after the device opens (GID, active MTU, limits): read without a
    /// lock.
    pub facts: EngineConfig,
    /// The index of the network interface holding the address (0: none found).
    pub ifindex: u32,
    /// RoCE's (InfiniBand's) transport or iWARP's.
    pub transport: oxrdma_core::DeviceTransport,
    dev: Mutex<Device>,
    /// What the engine thread sleeps on (its doorbell and the socket).
    pub(crate) sleeper: Sleeper,
    pub(crate) stop: AtomicBool,
    /// CQs armed with `req_notify`.
    armed: Mutex<Vec<Armed>>,
    /// Whether `armed` holds any CQ: the application then waits on a channel, and the
    /// engine thread moves its packets even if it polled a moment ago.
    any_armed: AtomicBool,
    /// Work was posted while another thread held `dev`: whoever holds it drives again.
    pub(crate) pending: AtomicBool,
    /// Doorbells rung by posting threads (`kick`): one per post call or post list.
    pub(crate) doorbells: AtomicU64,
    /// When an application thread last polled a CQ and found nothing (ns since `epoch`).
    app_polled_at: AtomicU64,
    /// The last CQ poll found nothing: the application will poll (and drive) again.
    app_polling: AtomicBool,
    /// An application thread polled a CQ or posted since the engine thread last looked.
    app_called: AtomicBool,
    /// Threads sleeping on a completion channel that move the packets that wake them
    /// (`channel.rs`): while there are any, the engine thread leaves the socket to them.
    waiters: AtomicU32,
    /// Sleeps begun on a completion channel: the engine thread sees whether the program
    /// still waits on its channels.
    waits: AtomicU64,
    /// The key pairs of secure endpoints offered by QPs not yet connected, by QPN.
    pub(crate) offers: Mutex<std::collections::HashMap<u32, crate::secure::Offer>>,
    /// What the RDMA CM agreed for QPs to be secure, by QPN, until their moves key them
    /// (`secure::key_as_moved`) and they are destroyed.
    agreed: Mutex<std::collections::HashMap<u32, crate::secure::Agreed>>,
    /// When the last waiter woke (ns since `epoch`; 0: never).
    waiter_left_at: AtomicU64,
    /// The engine thread sleeps longer than `waiters::LOOK` (a long nap while the program
    /// sleeps on a channel, or its longest sleep): a waiter that wakes rings it, as the
    /// program may now go elsewhere and the socket it unwatched would not wake anyone.
    pub(crate) dozing: AtomicBool,
    /// Whether a poll that finds completions hands the socket to the engine thread.
    pub(crate) handoff: Handoff,
    /// The engine thread's OS thread id (0 until it runs).
    pub(crate) engine_tid: AtomicI32,
    epoch: Instant,
    /// Which context gets each object's asynchronous events (taken from the engine
    /// whenever a thread lets go of it).
    pub(crate) owners: Owners,
    /// Which event channel gets each connection manager event.
    pub(crate) cm: CmRoutes,
}

/// A CQ armed for its channel: the next completion added to it after the arm is reported.
struct Armed {
    cq: u32,
    ring: Arc<CqRing>,
    /// The CQ's count of completions added, when it was armed.
    added_at_arm: u64,
    channel: Arc<ChannelInner>,
}

/// A thread sleeping on a completion channel (`Shared::waiting`).
pub(crate) struct Waiting<'a>(&'a Shared);

impl Drop for Waiting<'_> {
    /// The program may now go elsewhere: an engine thread that naps long is woken to
    /// take the socket back (one that looks every `waiters::LOOK` sees it by itself).
    fn drop(&mut self) {
        let shared = self.0;
        shared
            .waiter_left_at
            .store(shared.now_ns().max(1), Ordering::Relaxed);
        if shared.waiters.fetch_sub(1, Ordering::SeqCst) == 1
            && shared.dozing.load(Ordering::SeqCst)
        {
            shared.ring();
        }
    }
}

/// The device, locked; on unlock, work posted meanwhile by threads that found it locked
/// is driven (see `Shared::kick`).
pub(crate) struct DeviceGuard<'a> {
    shared: &'a Shared,
    guard: Option<MutexGuard<'a, Device>>,
}

impl std::ops::Deref for DeviceGuard<'_> {
    type Target = Device;
    fn deref(&self) -> &Device {
        self.guard.as_ref().expect("held until drop")
    }
}

impl std::ops::DerefMut for DeviceGuard<'_> {
    fn deref_mut(&mut self) -> &mut Device {
        self.guard.as_mut().expect("held until drop")
    }
}

impl Drop for DeviceGuard<'_> {
    fn drop(&mut self) {
        let next = self.guard.as_mut().and_then(|dev| {
            self.shared.collect_events(dev);
            self.shared.timer_to_pull(dev)
        });
        drop(self.guard.take());
        // What this thread moved may complete an armed CQ: its channel hears it now.
        self.shared.notify_armed();
        self.shared.timer_armed(next);
        std::sync::atomic::fence(Ordering::SeqCst);
        self.shared.drive_pending();
    }
}

impl Shared {
    /// The state of a device just opened.
    pub fn new(dev: Device) -> Result<Shared> {
        Ok(Shared {
            facts: dev.engine.config().clone(),
            ifindex: dev.link.ifindex,
            transport: if dev.is_iwarp() {
                oxrdma_core::DeviceTransport::Iwarp
            } else {
                oxrdma_core::DeviceTransport::Ib
            },
            sleeper: Sleeper::new(dev.wake_fd())?,
            dev: Mutex::new(dev),
            stop: AtomicBool::new(false),
            armed: Mutex::new(Vec::new()),
            any_armed: AtomicBool::new(false),
            pending: AtomicBool::new(false),
            doorbells: AtomicU64::new(0),
            app_polled_at: AtomicU64::new(0),
            app_polling: AtomicBool::new(false),
            app_called: AtomicBool::new(false),
            waiters: AtomicU32::new(0),
            waits: AtomicU64::new(0),
            offers: Mutex::new(std::collections::HashMap::new()),
            agreed: Mutex::new(std::collections::HashMap::new()),
            waiter_left_at: AtomicU64::new(0),
            dozing: AtomicBool::new(false),
            handoff: Handoff::default(),
            engine_tid: AtomicI32::new(0),
            epoch: Instant::now(),
            owners: Owners::default(),
            cm: CmRoutes::default(),
        })
    }

    /// What the RDMA CM agreed for QP `qpn` to be secure, if anything.
    pub(crate) fn agreed_for(&self, qpn: u32) -> Option<crate::secure::Agreed> {
        lock(&self.agreed).get(&qpn).cloned()
    }

    /// Records what the RDMA CM agreed for QP `qpn` (taken at its next moves).
    pub(crate) fn agree(&self, qpn: u32, agreed: crate::secure::Agreed) {
        lock(&self.agreed).insert(qpn, agreed);
    }

    /// Forgets QP `qpn`'s agreement (it is destroyed).
    pub(crate) fn forget_agreed(&self, qpn: u32) {
        lock(&self.agreed).remove(&qpn);
    }

    /// The device (lock order: this before `armed`).
    pub fn lock(&self) -> DeviceGuard<'_> {
        DeviceGuard {
            shared: self,
            guard: Some(lock(&self.dev)),
        }
    }

    /// Arms `cq` (whose entries `ring` holds) to signal `channel` at the next completion
    /// added to it, not one it holds already (`ibv_req_notify_cq`, as rxe and NICs: a
    /// program that re-arms before polling the completion it was woken for, as perftest
    /// does, must not be woken again for it). Wakes the engine thread if it does not
    /// watch the socket and no thread waits in `get_event` (lock order: `dev` before
    /// `armed`).
    ///
    /// Returns whether `channel` is the one the CQ's next event goes to (false: the CQ was
    /// armed for another channel already).
    pub fn arm(&self, cq: u32, ring: Arc<CqRing>, channel: Arc<ChannelInner>) -> bool {
        let mut armed = lock(&self.armed);
        let added_at_arm = ring.added();
        // Armed again before its event: one arm, the earlier (its event is the one owed).
        let ours = match armed.iter().find(|a| a.cq == cq) {
            Some(a) => Arc::ptr_eq(&a.channel, &channel),
            None => {
                armed.push(Armed {
                    cq,
                    ring,
                    added_at_arm,
                    channel,
                });
                true
            }
        };
        self.any_armed.store(true, Ordering::SeqCst);
        drop(armed);
        if self
            .seen()
            .arm_rings(self.now_ns(), || self.sleeper.watched())
        {
            self.ring();
        }
        ours
    }

    /// Disarms `cq` (it is destroyed): it reports nothing more.
    pub(crate) fn disarm(&self, cq: u32) {
        let mut armed = lock(&self.armed);
        armed.retain(|a| a.cq != cq);
        self.any_armed.store(!armed.is_empty(), Ordering::SeqCst);
    }

    /// Signals the channel of each armed CQ that was given a completion since it was
    /// armed, and disarms it.
    pub(crate) fn notify_armed(&self) {
        if !self.any_armed() {
            return;
        }
        let mut armed = lock(&self.armed);
        armed.retain(|a| {
            if a.ring.added() > a.added_at_arm {
                a.channel.notify(a.cq);
                false
            } else {
                true
            }
        });
        self.any_armed.store(!armed.is_empty(), Ordering::SeqCst);
    }

    /// Whether a CQ is armed for a channel.
    pub(crate) fn any_armed(&self) -> bool {
        self.any_armed.load(Ordering::SeqCst)
    }

    /// The device's socket (or the epoll set over its ports), for a thread to sleep on.
    pub(crate) fn sock(&self) -> BorrowedFd<'_> {
        self.sleeper.sock()
    }

    /// A thread sleeps on a completion channel and the socket until the guard drops: the
    /// engine thread stops watching the socket (its packets wake that thread instead).
    pub(crate) fn waiting(&self) -> Waiting<'_> {
        self.waits.fetch_add(1, Ordering::Relaxed);
        self.waiters.fetch_add(1, Ordering::SeqCst);
        self.sleeper.set_watched(false);
        Waiting(self)
    }

    /// Whether a thread sleeps on a completion channel and the socket.
    pub(crate) fn waiter_sleeps(&self) -> bool {
        self.waiters.load(Ordering::SeqCst) > 0
    }

    /// Whether the program takes its packets by sleeping on completion channels (a thread
    /// sleeps on one, or woke from one a moment ago: `waiters::app_waits`).
    pub(crate) fn app_waits(&self) -> bool {
        let waiters = self.waiters.load(Ordering::SeqCst);
        let left = self.waiter_left_at.load(Ordering::Relaxed);
        driving::waiters::app_waits(waiters, left, || self.now_ns())
    }

    /// What the application threads have said, as the policy reads it.
    pub(crate) fn seen(&self) -> AppSeen {
        AppSeen {
            polling: self.app_polling.load(Ordering::SeqCst),
            polled_at: self.app_polled_at.load(Ordering::Relaxed),
            armed: self.any_armed(),
            waiters: self.waiters.load(Ordering::SeqCst),
            waiter_left_at: self.waiter_left_at.load(Ordering::Relaxed),
            waits: self.waits.load(Ordering::Relaxed),
            score: self.handoff.score(),
        }
    }

    /// Gives the socket to the engine thread unless the program takes its packets itself
    /// (`AppSeen::leaves_socket`): watched first, then looked, as those threads do the
    /// other way round. Whether it is watched.
    pub(crate) fn watch_unless_taken(&self) -> bool {
        self.sleeper.set_watched(true);
        let leave = self.seen().leaves_socket(self.now_ns());
        if !leave {
            self.sleeper.set_watched(false);
        }
        leave
    }

    /// Sleeps begun on completion channels so far.
    pub(crate) fn waits(&self) -> u64 {
        self.waits.load(Ordering::Relaxed)
    }

    /// Wakes the engine thread (after posting work).
    pub fn ring(&self) {
        self.sleeper.ring();
    }

    pub(crate) fn now_ns(&self) -> Nanos {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// Moves packets from the calling (application) thread.
    pub fn drive(&self, dev: &mut Device) {
        // This thread serves the timers it finds due (the engine thread's turns say again
        // whether the application still calls in).
        dev.engine.set_app_serves_timers(true);
        // A socket error here is the engine thread's to report; the packet is lost.
        let _ = dev.poll();
    }

    /// The device's requests received so far (`Engine::requests_received`), if no other
    /// thread holds it.
    pub(crate) fn requests_received(&self) -> Option<u64> {
        self.try_lock_raw().map(|d| d.engine.requests_received())
    }

    /// Drives the device from this (application) thread, whenever no other thread holds
    /// it, until a request arrives after the `since`-th, or `budget` passes; true if one
    /// did. (`riowrite` waiting for the peer's answer: `rsocket/answer.rs`.)
    pub(crate) fn poll_for_request(&self, since: u64, budget: Duration) -> bool {
        let began = std::time::Instant::now();
        // As a thread polling an empty CQ: the engine thread stops watching the socket,
        // so that the answer does not wake it too (`app_leaves` gives it back).
        self.polled(0);
        loop {
            if let Some(mut dev) = self.try_lock() {
                self.drive(&mut dev);
                if dev.engine.requests_received() > since {
                    return true;
                }
            }
            if began.elapsed() >= budget {
                return false;
            }
            std::hint::spin_loop();
        }
    }

    /// Drives until nothing moves (at most a few rounds): what a connection manager call
    /// sends goes out, and whatever the data path left waiting meanwhile (an ACK held for
    /// an answer that is not coming, packets that arrived since the last poll) is served
    /// now. An application that stops polling its CQs to set up a connection, as perftest
    /// does between its exchange and its data connection, would otherwise leave a held
    /// ACK to the engine thread's next look (1-5 ms), and its peer waiting for it.
    pub fn drive_through(&self, dev: &mut Device) {
        dev.engine.release_acks();
        for _ in 0..8 {
            if !matches!(dev.poll(), Ok(n) if n > 0) {
                break;
            }
        }
        let _ = dev.transmit();
    }

    /// Moves the engine's asynchronous events to their contexts' queues (where the program
    /// takes them without the device lock, and its descriptor says they wait).
    pub(crate) fn collect_events(&self, dev: &mut Device) {
        while let Some(e) = dev.engine.poll_event() {
            self.owners.deliver(e);
        }
        self.cm.deliver(std::ptr::from_ref(self) as usize, dev);
    }

    /// After posting: moves the new work from the calling thread if the device is free,
    /// and otherwise leaves it to the thread that holds it, which drives once more. A
    /// posting thread never waits for the lock, and does not wake the engine thread.
    pub fn kick(&self) {
        self.doorbells.fetch_add(1, Ordering::Relaxed);
        self.called();
        self.pending.store(true, Ordering::SeqCst);
        // Pairs with the fence in `drive_pending` (and the engine thread's look at
        // `pending` after it unlocks): either the holder sees `pending` after unlocking,
        // or our try_lock sees the lock free.
        std::sync::atomic::fence(Ordering::SeqCst);
        self.drive_pending();
    }

    /// After an application thread let go of the device, whose next timer is `next`: the
    /// engine thread's deadline comes forward if it was later (`AppSeen::pulls_deadline`).
    fn timer_armed(&self, next: Option<Duration>) {
        // (`timer_to_pull` already said None if the last poll found nothing.) The clock is
        // read only when there is a timer to pull.
        if let Some(next) = next {
            if self.seen().pulls_deadline(self.now_ns()) {
                self.sleeper.pull_deadline(next);
            }
        }
    }

    /// The engine's next timer, for `timer_armed`; not looked up while the application
    /// busy-polls (every empty poll comes here).
    fn timer_to_pull(&self, dev: &Device) -> Option<Duration> {
        if self.app_polling.load(Ordering::Relaxed) {
            return None;
        }
        dev.next_timer_in()
    }

    /// Drives the device from this thread while work is pending and the lock is free.
    fn drive_pending(&self) {
        while self.pending.load(Ordering::SeqCst) {
            let Some(mut dev) = self.try_lock_raw() else {
                break;
            };
            self.pending.store(false, Ordering::SeqCst);
            // Posted work goes out; what arrives is for the next poll, unless nothing could
            // go (the window is full: ACKs may be waiting).
            if dev.transmit().unwrap_or(0) == 0 {
                self.drive(&mut dev);
            }
            // A raw guard: `DeviceGuard`'s drop would do this.
            self.collect_events(&mut dev);
            let next = self.timer_to_pull(&dev);
            drop(dev);
            self.notify_armed();
            self.timer_armed(next);
            std::sync::atomic::fence(Ordering::SeqCst);
        }
    }

    /// The device, if no other thread holds it.
    pub fn try_lock(&self) -> Option<DeviceGuard<'_>> {
        self.try_lock_raw().map(|g| DeviceGuard {
            shared: self,
            guard: Some(g),
        })
    }

    /// The device, without driving pending work on unlock (the engine thread's loop comes
    /// back to it by itself).
    pub(crate) fn lock_raw(&self) -> MutexGuard<'_, Device> {
        lock(&self.dev)
    }

    fn try_lock_raw(&self) -> Option<MutexGuard<'_, Device>> {
        match self.dev.try_lock() {
            Ok(g) => Some(g),
            Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        }
    }

    /// After a CQ poll that found `found` completions: the socket's watch changes as
    /// `driving::poll_watch` says. A clock read, and no timer armed: arming one per poll
    /// cost more than the poll (`sleeper.rs`).
    pub fn polled(&self, found: usize) {
        self.called();
        let polling = self.app_polling.load(Ordering::Relaxed);
        if found == 0 {
            // The time is taken when the application starts polling and then once in
            // `CLOCK_EVERY` polls: a clock read per poll was 3 % of a bandwidth client's
            // CPU (the window it feeds is 200 us; a poll takes about 1 us).
            let starts = !polling;
            let count = EMPTY_POLLS.with(|c| {
                c.set(c.get().wrapping_add(1));
                c.get()
            });
            if starts || count.is_multiple_of(CLOCK_EVERY) {
                let now = self.now_ns();
                self.app_polled_at.store(now, Ordering::Relaxed);
                if starts {
                    self.handoff.polled_again(now);
                }
            }
            if starts {
                self.app_polling.store(true, Ordering::SeqCst);
            }
        } else if polling {
            self.app_polling.store(false, Ordering::SeqCst);
            self.handoff.found(self.now_ns());
        }
        match driving::poll_watch(found, polling, self.handoff.score()) {
            PollWatch::Keep => {}
            PollWatch::Watch => self.sleeper.set_watched(true),
            // A program that drains its CQ and then arms it (`ibv_req_notify_cq`) sleeps
            // on the channel: the engine thread keeps the socket. Unwatched first, then
            // looked, as `req_notify` arms first and then rings.
            PollWatch::Unwatch => {
                if !self.any_armed() {
                    self.sleeper.set_watched(false);
                    if self.any_armed() {
                        self.sleeper.set_watched(true);
                    } else if self.dozing.load(Ordering::SeqCst) {
                        self.ring();
                    }
                }
            }
        }
    }

    /// The library returns to a program that may now wait without calling in: rsockets'
    /// `riowrite`, after which riostream spins on its memory for the peer's answer. Its
    /// polls inside the call found completions and came back at once (a score that skips
    /// the hand-off, `handoff.rs`), but the program will not poll again: the engine thread
    /// takes the socket now, not at its next look (1-5 ms).
    pub(crate) fn app_leaves(&self) {
        self.app_polling.store(false, Ordering::SeqCst);
        let _ = self.watch_unless_taken();
    }

    /// An application thread polls or posts. Stored only when it changes: every poll comes
    /// here, and the line is the engine thread's to read.
    fn called(&self) {
        if !self.app_called.load(Ordering::Relaxed) {
            self.app_called.store(true, Ordering::Relaxed);
        }
    }

    /// Whether an application thread polled or posted since the engine thread last asked.
    pub(crate) fn app_called(&self) -> bool {
        self.app_called.swap(false, Ordering::Relaxed)
    }
}
