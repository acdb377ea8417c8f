//! What the engine thread sleeps on (`nic.rs` says when): the doorbell posting threads
//! ring, the device's socket while it is watched, and two timers.

use rustix::buffer::spare_capacity;
use rustix::event::epoll;
use rustix::event::{eventfd, EventfdFlags};
use rustix::time::{
    timerfd_create, timerfd_settime, Itimerspec, TimerfdClockId, TimerfdFlags, TimerfdTimerFlags,
    Timespec,
};
use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// What woke the engine thread (epoll's data).
const DOORBELL: u64 = 0;
const SOCKET: u64 = 1;
const DEADLINE: u64 = 2;
const RECHECK: u64 = 3;

/// What the engine thread sleeps on: the doorbell, the socket while it is watched, the
/// recheck timer, and a timer for its own deadline (epoll's timeout counts whole
/// milliseconds; the engine's timers, tail-loss probes among them, need microseconds).
pub(crate) struct Sleeper {
    epoll: OwnedFd,
    doorbell: OwnedFd,
    deadline: OwnedFd,
    /// When the engine thread looks again whether the application still polls.
    recheck: OwnedFd,
    /// The device's socket (a duplicate: the device owns the original).
    sock: OwnedFd,
    /// Whether the socket is armed in `epoll` (it disarms itself when it fires).
    watched: AtomicBool,
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

/// Starts a one-shot timer.
fn set_timer(timer: &OwnedFd, after: Duration) -> rustix::io::Result<()> {
    let zero = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // At least 1 ns: zero would stop the timer.
    let it_value = Timespec::try_from(after.max(Duration::from_nanos(1))).unwrap_or(Timespec {
        tv_sec: i64::MAX,
        tv_nsec: 0,
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
        let (deadline, recheck) = (timer()?, timer()?);
        let sock = sock.try_clone_to_owned()?;
        let epoll = epoll::create(epoll::CreateFlags::CLOEXEC)?;
        for (fd, key) in [
            (&doorbell, DOORBELL),
            (&deadline, DEADLINE),
            (&recheck, RECHECK),
        ] {
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
            recheck,
            sock,
            watched: AtomicBool::new(true),
        })
    }

    /// Wakes the engine thread.
    pub fn ring(&self) {
        let _ = rustix::io::write(&self.doorbell, &1u64.to_ne_bytes());
    }

    /// The application found completions and may stop polling: watch the socket.
    pub fn hand_off(&self) {
        self.set_watched(true);
    }

    /// The application polls (and so drives the device): stop watching the socket. If the
    /// engine thread sleeps (`asleep`) it looks again after `window` at the latest.
    pub fn app_polls(&self, asleep: bool, window: Duration) {
        if asleep {
            let _ = set_timer(&self.recheck, window);
        }
        self.set_watched(false);
    }

    /// Arms the socket (a packet waiting or arriving wakes the engine thread), or disarms it.
    pub fn set_watched(&self, on: bool) {
        if self.watched.swap(on, Ordering::SeqCst) != on {
            let flags = if on {
                epoll::EventFlags::IN | epoll::EventFlags::ONESHOT
            } else {
                epoll::EventFlags::ONESHOT
            };
            let _ = epoll::modify(
                &self.epoll,
                &self.sock,
                epoll::EventData::new_u64(SOCKET),
                flags,
            );
        }
    }

    /// Sleeps until something wakes the engine thread or `timeout` passes.
    pub fn wait(&self, timeout: Duration) {
        if set_timer(&self.deadline, timeout).is_err() {
            // No timer: do not sleep past the deadline.
            return;
        }
        let mut events: Vec<epoll::Event> = Vec::with_capacity(4);
        let _ = epoll::wait(&self.epoll, spare_capacity(&mut events), None);
        for e in &events {
            match e.data.u64() {
                // One shot: the kernel disarmed it.
                SOCKET => self.watched.store(false, Ordering::SeqCst),
                DEADLINE => clear(&self.deadline),
                RECHECK => clear(&self.recheck),
                _ => clear(&self.doorbell),
            }
        }
    }
}
