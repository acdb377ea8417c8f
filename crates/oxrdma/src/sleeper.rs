//! What the engine thread sleeps on (`nic.rs` says when): the doorbell posting threads
//! ring, the device's socket while it is watched, and two timers.

use crate::lock::lock;
use oxrdma_core::driving::{Woke, MAX_SLEEP};
use rustix::buffer::spare_capacity;
use rustix::event::epoll;
use rustix::event::{eventfd, EventfdFlags};
use rustix::time::{
    timerfd_create, timerfd_settime, Itimerspec, TimerfdClockId, TimerfdFlags, TimerfdTimerFlags,
    Timespec,
};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// What woke the engine thread (epoll's data).
const DOORBELL: u64 = 0;
const SOCKET: u64 = 1;
const DEADLINE: u64 = 2;

/// Where the socket stands in the engine thread's epoll set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Watch {
    /// Not in it.
    Out,
    /// In it, and a packet wakes the engine thread.
    Armed,
    /// In it, disarmed by the packet that woke the engine thread (one shot).
    Fired,
}

/// What the engine thread sleeps on: the doorbell, the socket while it is watched, and a
/// timer for its own deadline (epoll's timeout counts whole milliseconds; the engine's
/// timers, tail-loss probes among them, need microseconds).
///
/// Arming a timer costs little unless it becomes the CPU's next timer event: then the
/// kernel reprograms the clock, which in this VM took 5.9 us per `timerfd_settime` (a
/// 200 us timer) against 0.55 us for one due after the next tick (`bench/timer_cost.c`).
/// So the deadline is set only when it changes, and nothing arms a timer per poll.
pub(crate) struct Sleeper {
    epoll: OwnedFd,
    doorbell: OwnedFd,
    deadline: OwnedFd,
    /// When the deadline timer fires (ns since `epoch`; `u64::MAX`: not armed). A lock,
    /// not an atomic: the timer must end up at the earliest instant anyone asked for.
    deadline_at: Mutex<u64>,
    /// The device's socket (a duplicate: the device owns the original).
    sock: OwnedFd,
    /// Where the socket stands in `epoll`. A lock held across the `epoll_ctl`, so that of
    /// two threads changing it the kernel keeps the last one's word.
    watch: Mutex<Watch>,
    epoch: Instant,
}

fn timer() -> std::io::Result<OwnedFd> {
    Ok(timerfd_create(
        TimerfdClockId::Monotonic,
        TimerfdFlags::NONBLOCK | TimerfdFlags::CLOEXEC,
    )?)
}

/// Reads an eventfd's or timerfd's count, so it is not readable until the next event.
fn clear(fd: &OwnedFd) {
    let mut count = [0u8; 8];
    let _ = rustix::io::read(fd, &mut count);
}

/// Starts a one-shot timer that fires `after` from now, or stops it (None).
fn set_timer(timer: &OwnedFd, after: Option<Duration>) -> rustix::io::Result<()> {
    let zero = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // At least 1 ns: zero stops the timer.
    let it_value = after.map_or(zero, |after| {
        Timespec::try_from(after.max(Duration::from_nanos(1))).unwrap_or(Timespec {
            tv_sec: i64::MAX,
            tv_nsec: 0,
        })
    });
    let spec = Itimerspec {
        it_interval: zero,
        it_value,
    };
    timerfd_settime(timer, TimerfdTimerFlags::empty(), &spec).map(drop)
}

impl Sleeper {
    pub fn new(sock: BorrowedFd<'_>) -> std::io::Result<Sleeper> {
        let doorbell = eventfd(0, EventfdFlags::NONBLOCK | EventfdFlags::CLOEXEC)?;
        let deadline = timer()?;
        let sock = sock.try_clone_to_owned()?;
        let epoll = epoll::create(epoll::CreateFlags::CLOEXEC)?;
        for (fd, key) in [(&doorbell, DOORBELL), (&deadline, DEADLINE)] {
            epoll::add(
                &epoll,
                fd,
                epoll::EventData::new_u64(key),
                epoll::EventFlags::IN,
            )?;
        }
        epoll::add(
            &epoll,
            &sock,
            epoll::EventData::new_u64(SOCKET),
            epoll::EventFlags::IN | epoll::EventFlags::ONESHOT,
        )?;
        Ok(Sleeper {
            epoll,
            doorbell,
            deadline,
            deadline_at: Mutex::new(u64::MAX),
            sock,
            watch: Mutex::new(Watch::Armed),
            epoch: Instant::now(),
        })
    }

    /// The device's socket, as watched here.
    pub fn sock(&self) -> BorrowedFd<'_> {
        self.sock.as_fd()
    }

    /// Wakes the engine thread.
    pub fn ring(&self) {
        let _ = rustix::io::write(&self.doorbell, &1u64.to_ne_bytes());
    }

    /// Arms the socket (a packet waiting or arriving wakes the engine thread), or takes it
    /// out of the epoll set: a socket left in it, even disarmed, costs every packet that
    /// arrives a call into epoll (1.5 % of an 8 B ping-pong's round trip here).
    pub fn set_watched(&self, on: bool) {
        let mut watch = lock(&self.watch);
        let data = epoll::EventData::new_u64(SOCKET);
        let flags = epoll::EventFlags::IN | epoll::EventFlags::ONESHOT;
        *watch = match (*watch, on) {
            (Watch::Out, true) => match epoll::add(&self.epoll, &self.sock, data, flags) {
                Ok(()) => Watch::Armed,
                Err(_) => Watch::Out,
            },
            (Watch::Fired, true) => match epoll::modify(&self.epoll, &self.sock, data, flags) {
                Ok(()) => Watch::Armed,
                Err(_) => Watch::Fired,
            },
            (Watch::Armed | Watch::Fired, false) => match epoll::delete(&self.epoll, &self.sock) {
                Ok(()) => Watch::Out,
                Err(_) => *watch,
            },
            (w, _) => w,
        };
    }

    /// Whether a packet arriving wakes the engine thread.
    pub fn watched(&self) -> bool {
        *lock(&self.watch) == Watch::Armed
    }

    /// Sets the deadline timer to the engine's next timer, `next` from now (None: none).
    /// The engine thread calls it with the device locked, so a later post's
    /// `pull_deadline` comes after it.
    pub fn set_deadline(&self, next: Option<Duration>) {
        let mut at = lock(&self.deadline_at);
        let want = next.map_or(u64::MAX, |d| self.ns_from_now(d));
        if want != *at {
            self.arm_deadline(&mut at, want);
        }
    }

    /// Brings the deadline timer forward to `next` from now if it is due later (a post
    /// armed a timer of the engine while its thread sleeps; it moves the deadline, not
    /// the thread).
    pub fn pull_deadline(&self, next: Duration) {
        let want = self.ns_from_now(next);
        let mut at = lock(&self.deadline_at);
        if want < *at {
            self.arm_deadline(&mut at, want);
        }
    }

    fn ns_from_now(&self, d: Duration) -> u64 {
        (self.epoch.elapsed() + d).as_nanos() as u64
    }

    fn arm_deadline(&self, at: &mut u64, want: u64) {
        let after = (want != u64::MAX).then(|| {
            Duration::from_nanos(want.saturating_sub(self.epoch.elapsed().as_nanos() as u64))
        });
        if set_timer(&self.deadline, after).is_ok() {
            *at = want;
        } else {
            // No timer: wake at once so the deadline is not slept past.
            *at = 0;
            self.ring();
        }
    }

    /// Sleeps until something wakes the engine thread, or `timeout` passes (rounded up to
    /// whole milliseconds, at most `MAX_SLEEP`: a stop request is seen even if its doorbell
    /// is missed). Says what woke it.
    pub fn wait(&self, timeout: Duration) -> Woke {
        let mut woke = Woke::Time;
        let mut events: Vec<epoll::Event> = Vec::with_capacity(4);
        let ms = timeout.min(MAX_SLEEP).as_micros().div_ceil(1000).max(1);
        let timeout = Timespec {
            tv_sec: 0,
            tv_nsec: ms as i64 * 1_000_000,
        };
        let _ = epoll::wait(&self.epoll, spare_capacity(&mut events), Some(&timeout));
        for e in &events {
            match e.data.u64() {
                // One shot: the kernel disarmed it.
                SOCKET => {
                    woke = Woke::Packet;
                    let mut watch = lock(&self.watch);
                    if *watch == Watch::Armed {
                        *watch = Watch::Fired;
                    }
                }
                DEADLINE => {
                    *lock(&self.deadline_at) = u64::MAX;
                    clear(&self.deadline);
                }
                _ => {
                    woke = woke.max(Woke::Doorbell);
                    clear(&self.doorbell);
                }
            }
        }
        woke
    }
}
