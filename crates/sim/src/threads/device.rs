//! The device as the simulated threads share it: the socket and what waits in it, the
//! device lock, each application's CQ, memory and request timer, the peer across the
//! wire, and the words the real driver keeps in atomics (`oxrdma/src/shared.rs`). The
//! calls an application makes (post, poll, arm, leave) decide as the driver does, through
//! `oxrdma_core::driving`.

use oxrdma_core::driving::{self, AppSeen, PollWatch, Score};
use oxrdma_core::Nanos;
use std::collections::VecDeque;
use std::time::Duration;

/// A thread's number (the engine thread is 0).
pub type Tid = usize;

/// What a packet in the socket is, for which application.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The peer's answer to a request: a receive completion (and the request's ACK).
    Reply,
    /// The peer's RDMA WRITE into the application's memory (and the request's ACK).
    Write,
    /// The peer's RDMA READ request: answered by whoever drives, no completion here.
    ReadRequest,
}

#[derive(Debug, Clone, Copy)]
pub struct Packet {
    pub app: usize,
    pub kind: Kind,
    /// When it arrived in the socket.
    pub at: Nanos,
}

/// Where the socket stands in the engine thread's epoll set (`sleeper.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Watch {
    Out,
    Armed,
    Fired,
}

/// One application's QP, CQ and memory.
#[derive(Debug, Default)]
pub struct AppQp {
    /// Completions waiting in the CQ (when each was added).
    pub cq: VecDeque<Nanos>,
    /// Completions ever added.
    pub added: u64,
    /// The CQ is armed, and the count of completions added when it was.
    pub armed: Option<u64>,
    /// Events waiting on the CQ's completion channel.
    pub events: u32,
    /// The peer's WRITE was placed in memory.
    pub placed: bool,
    /// A request posted and not yet sent (the device was held by another thread).
    pub unsent: bool,
    /// When the request in flight times out (its QP's retransmission timer).
    pub timer_at: Option<Nanos>,
}

/// What the run measured.
#[derive(Debug, Default, Clone)]
pub struct Counts {
    /// The longest any packet waited in the socket before a thread moved it.
    pub max_socket_wait: Nanos,
    /// Request timers that expired while the answer sat in the socket.
    pub late_timers: u32,
    /// Request timers that expired at all.
    pub timeouts: u32,
    /// Round trips the peer measured for its READs (passive target).
    pub read_round_trips: Vec<Nanos>,
}

/// How the peer answers.
#[derive(Debug, Clone, Copy)]
pub struct Peer {
    /// One way across the wire.
    pub wire_ns: Nanos,
    /// From a request's arrival to the peer's answer.
    pub turnaround_ns: Nanos,
    /// Between a READ's response and the peer's next READ (passive target).
    pub think_ns: Nanos,
}

pub struct Device {
    pub socket: VecDeque<Packet>,
    /// Packets on their way to the socket.
    pub wire: Vec<Packet>,
    /// The thread holding the device lock within its step.
    pub holder: Option<Tid>,
    /// The thread that took the lock in its last step, until that step's CPU time is
    /// spent: steps run whole, but others find the lock taken meanwhile (and behind a
    /// holder that lost its core).
    pub shadow: Option<Tid>,
    /// Who took the lock in the step running now.
    pub took: Option<Tid>,
    pub apps: Vec<AppQp>,
    /// Per application, what its peer sends when a request reaches it.
    pub answers: Vec<Kind>,
    pub peer: Peer,
    pub qp_timeout_ns: Nanos,
    // The driver's words (`shared.rs`).
    pub pending: bool,
    pub called: bool,
    pub polling: bool,
    pub polled_at: Nanos,
    pub found_at: Nanos,
    pub score: Score,
    pub waiters: u32,
    pub waits: u64,
    pub waiter_left_at: Nanos,
    pub dozing: bool,
    // The engine thread's sleeper (`sleeper.rs`).
    pub watch: Watch,
    pub doorbell: bool,
    pub deadline_at: Option<Nanos>,
    pub counts: Counts,
}

impl Device {
    pub fn new(answers: Vec<Kind>, peer: Peer, qp_timeout_ns: Nanos) -> Device {
        Device {
            socket: VecDeque::new(),
            wire: Vec::new(),
            holder: None,
            shadow: None,
            took: None,
            apps: answers.iter().map(|_| AppQp::default()).collect(),
            answers,
            peer,
            qp_timeout_ns,
            pending: false,
            called: false,
            polling: false,
            polled_at: 0,
            found_at: 0,
            score: Score::default(),
            waiters: 0,
            waits: 0,
            waiter_left_at: 0,
            dozing: false,
            watch: Watch::Armed,
            doorbell: false,
            deadline_at: None,
            counts: Counts::default(),
        }
    }

    /// The words as the policy reads them.
    pub fn seen(&self) -> AppSeen {
        AppSeen {
            polling: self.polling,
            polled_at: self.polled_at,
            armed: self.any_armed(),
            waiters: self.waiters,
            waiter_left_at: self.waiter_left_at,
            waits: self.waits,
            score: self.score,
        }
    }

    pub fn any_armed(&self) -> bool {
        self.apps.iter().any(|a| a.armed.is_some())
    }

    /// Packets due by `now` reach the socket.
    pub fn deliver(&mut self, now: Nanos) {
        let (due, later): (Vec<_>, Vec<_>) = self.wire.drain(..).partition(|p| p.at <= now);
        self.wire = later;
        self.socket.extend(due);
    }

    /// Takes the lock for `tid` if it is free.
    pub fn try_lock(&mut self, tid: Tid) -> bool {
        if self.holder.is_none() && self.shadow.is_none_or(|s| s == tid) {
            self.holder = Some(tid);
            self.took = Some(tid);
        }
        self.holder == Some(tid)
    }

    /// Whether a thread blocked on the lock can take it.
    pub fn lock_free(&self) -> bool {
        self.holder.is_none() && self.shadow.is_none()
    }

    /// Sends what was posted: each request reaches the peer, whose answer comes back.
    /// Whether anything went.
    pub fn transmit(&mut self, now: Nanos) -> bool {
        let mut sent = false;
        for i in 0..self.apps.len() {
            if std::mem::take(&mut self.apps[i].unsent) {
                sent = true;
                self.apps[i].timer_at = Some(now + self.qp_timeout_ns);
                let at = now + 2 * self.peer.wire_ns + self.peer.turnaround_ns;
                let kind = self.answers[i];
                self.wire.push(Packet { app: i, kind, at });
            }
        }
        sent
    }

    /// Moves every packet in the socket, sends what was posted, serves the timers due:
    /// `Device::poll`. The packets moved.
    pub fn poll(&mut self, now: Nanos) -> usize {
        let mut moved = 0;
        while let Some(p) = self.socket.pop_front() {
            moved += 1;
            let c = &mut self.counts;
            c.max_socket_wait = c.max_socket_wait.max(now - p.at);
            let app = &mut self.apps[p.app];
            if app.timer_at.is_some_and(|t| t >= p.at && t <= now) {
                c.late_timers += 1;
            }
            match p.kind {
                Kind::Reply => {
                    app.timer_at = None;
                    app.cq.push_back(now);
                    app.added += 1;
                }
                Kind::Write => {
                    app.timer_at = None;
                    app.placed = true;
                }
                Kind::ReadRequest => {
                    // The response reaches the peer, which reads again after a while.
                    let back = now + self.peer.wire_ns;
                    // The request left the peer one wire time before it arrived.
                    c.read_round_trips.push(back - (p.at - self.peer.wire_ns));
                    let at = back + self.peer.think_ns + self.peer.wire_ns;
                    self.wire.push(Packet { at, ..p });
                }
            }
        }
        if self.transmit(now) {
            moved += 1;
        }
        for app in &mut self.apps {
            if app.timer_at.is_some_and(|t| t <= now) {
                // A retransmission: the answer is still to come (nothing is lost here).
                self.counts.timeouts += 1;
                app.timer_at = Some(now + self.qp_timeout_ns);
            }
        }
        moved
    }

    /// When the engine's next timer is due, from `now`.
    pub fn next_timer_in(&self, now: Nanos) -> Option<Duration> {
        self.apps
            .iter()
            .filter_map(|a| a.timer_at)
            .min()
            .map(|t| Duration::from_nanos(t.saturating_sub(now)))
    }

    /// Signals the channel of each armed CQ given a completion since it was armed.
    pub fn notify_armed(&mut self) {
        for a in &mut self.apps {
            if a.armed.is_some_and(|at| a.added > at) {
                a.armed = None;
                a.events += 1;
            }
        }
    }

    /// Lets go of the device after an application thread held it (`DeviceGuard::drop`,
    /// then `drive_pending`): channels hear of completions, the engine's deadline comes
    /// forward if the policy says so, and work posted meanwhile goes out.
    pub fn unlock_app(&mut self, tid: Tid, now: Nanos) {
        let next = (!self.polling).then(|| self.next_timer_in(now)).flatten();
        self.holder = None;
        self.notify_armed();
        if let Some(next) = next {
            if self.seen().pulls_deadline(now) {
                self.pull_deadline(now + next.as_nanos() as Nanos);
            }
        }
        if self.pending && self.try_lock(tid) {
            self.pending = false;
            if !self.transmit(now) {
                self.poll(now);
            }
            self.holder = None;
            self.notify_armed();
        }
    }

    pub fn pull_deadline(&mut self, at: Nanos) {
        if self.deadline_at.is_none_or(|d| at < d) {
            self.deadline_at = Some(at);
        }
    }

    /// `Shared::kick` after a post by `tid`: sent from this thread if the device is free,
    /// else left to the holder.
    pub fn post(&mut self, tid: Tid, app: usize, now: Nanos) {
        self.apps[app].unsent = true;
        self.called = true;
        self.pending = true;
        if self.try_lock(tid) {
            self.pending = false;
            if !self.transmit(now) {
                self.poll(now);
            }
            self.unlock_app(tid, now);
        }
    }

    /// `CompletionQueue::poll` by `tid` for `app`'s CQ, then `Shared::polled`: how many
    /// completions it found (at most one).
    pub fn poll_cq(&mut self, tid: Tid, app: usize, now: Nanos) -> usize {
        let mut n = usize::from(self.apps[app].cq.pop_front().is_some());
        if n == 0 && self.try_lock(tid) {
            self.poll(now);
            n = usize::from(self.apps[app].cq.pop_front().is_some());
            self.unlock_app(tid, now);
        }
        self.called = true;
        let polling = self.polling;
        if n == 0 {
            self.polled_at = now;
            if !polling {
                self.score = self.score.polled_again(self.found_at, now);
                self.polling = true;
            }
        } else if polling {
            self.polling = false;
            self.found_at = now;
        }
        match driving::poll_watch(n, polling, self.score) {
            PollWatch::Keep => {}
            PollWatch::Watch => self.set_watched(true),
            PollWatch::Unwatch => {
                if !self.any_armed() {
                    self.set_watched(false);
                    if self.dozing {
                        self.doorbell = true;
                    }
                }
            }
        }
        n
    }

    /// `req_notify` on `app`'s CQ.
    pub fn arm(&mut self, app: usize, now: Nanos) {
        let a = &mut self.apps[app];
        if a.armed.is_none() {
            a.armed = Some(a.added);
        }
        if self.seen().arm_rings(now, || self.watch == Watch::Armed) {
            self.doorbell = true;
        }
    }

    /// `Shared::app_leaves`: the program will not call in for a while.
    pub fn app_leaves(&mut self, now: Nanos) {
        self.polling = false;
        let _ = self.watch_unless_taken(now);
    }

    /// `Shared::watch_unless_taken`.
    pub fn watch_unless_taken(&mut self, now: Nanos) -> bool {
        let leave = self.seen().leaves_socket(now);
        self.set_watched(leave);
        leave
    }

    pub fn set_watched(&mut self, on: bool) {
        self.watch = match (self.watch, on) {
            (Watch::Out | Watch::Fired, true) => Watch::Armed,
            (Watch::Armed | Watch::Fired, false) => Watch::Out,
            (w, _) => w,
        };
    }

    /// A thread begins to sleep on a completion channel (`Shared::waiting`).
    pub fn begin_wait(&mut self) {
        self.waits += 1;
        self.waiters += 1;
        self.set_watched(false);
    }

    /// It woke (`Waiting::drop`): an engine thread that dozes is rung.
    pub fn end_wait(&mut self, now: Nanos) {
        self.waiter_left_at = now.max(1);
        self.waiters -= 1;
        if self.waiters == 0 && self.dozing {
            self.doorbell = true;
        }
    }
}
