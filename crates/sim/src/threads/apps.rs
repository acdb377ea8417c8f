//! Application threads as the programs that use oxrdma run them: one that busy-polls its
//! CQ (ib_send_lat), one that sleeps on its completion channel (ib_send_lat -e, qperf),
//! one that spins on its memory without calling the library (riostream), one that does
//! nothing while its peer READs (a passive target), and one that sleeps on its channel
//! while nothing comes. Each step is one call into the library, deciding as the driver
//! does (`device.rs`, `channel.rs`'s `next_event`).

use super::device::{Device, Kind};
use super::{Act, Cx, On, SimThread, COST};
use oxrdma_core::driving::{SpinBudget, MAX_SLEEP};
use oxrdma_core::Nanos;
use std::time::Duration;

/// How an application waits for its peer's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Model {
    /// Posts a SEND and polls its CQ until the answer's completion.
    Poller,
    /// Posts a SEND, sleeps on its completion channel, re-arms, polls (perftest's `-e`).
    EventSleeper,
    /// Posts an RDMA WRITE and spins on its memory for the peer's WRITE (riostream).
    MemorySpinner,
    /// Does nothing: its peer READs its memory.
    Passive,
    /// Arms its CQ and sleeps on the channel; nothing ever comes.
    IdleWaiter,
}

impl Model {
    /// What the peer sends this application.
    pub fn answer(self) -> Kind {
        match self {
            Model::Poller | Model::EventSleeper | Model::IdleWaiter => Kind::Reply,
            Model::MemorySpinner => Kind::Write,
            Model::Passive => Kind::ReadRequest,
        }
    }

    /// Whether it works in rounds of its own (else its peer drives it, or nothing does).
    pub fn active(self) -> bool {
        matches!(
            self,
            Model::Poller | Model::EventSleeper | Model::MemorySpinner
        )
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum St {
    Start,
    Post,
    Poll,
    /// In `get_event`: not yet waiting, spinning until, sleeping, woken (by a packet?).
    Event,
    Spin(Nanos),
    Sleep,
    Woke(bool),
    Drain,
    Memory,
    Done,
}

pub struct App {
    pub model: Model,
    /// Its QP and CQ.
    app: usize,
    st: St,
    rounds: usize,
    posted_at: Nanos,
    wait_start: Nanos,
    spin: SpinBudget,
    /// How long the current wait spun before sleeping.
    spun: Duration,
    /// Each round's time from post to answer.
    pub round_trips: Vec<Nanos>,
    /// Sleeps on the channel, and wake-ups from them.
    pub sleeps: u64,
}

impl App {
    pub fn new(model: Model, app: usize, rounds: usize) -> App {
        App {
            model,
            app,
            st: St::Start,
            rounds,
            posted_at: 0,
            wait_start: 0,
            spin: SpinBudget::default(),
            spun: Duration::ZERO,
            round_trips: Vec::new(),
            sleeps: 0,
        }
    }

    pub fn done(&self) -> bool {
        self.st == St::Done
    }

    fn answered(&mut self, now: Nanos) -> St {
        self.round_trips.push(now - self.posted_at);
        if self.round_trips.len() >= self.rounds {
            St::Done
        } else {
            St::Post
        }
    }

    /// The channel has an event: taken, and the wait ends (`Waiting::drop`).
    fn take_event(&mut self, dev: &mut Device, now: Nanos, waiting: bool) -> bool {
        let a = &mut dev.apps[self.app];
        if a.events == 0 {
            return false;
        }
        a.events -= 1;
        if waiting {
            self.spin = self
                .spin
                .waited(Duration::from_nanos(now - self.wait_start), self.spun);
            dev.end_wait(now);
        }
        true
    }

    fn sleep(&mut self, now: Nanos) -> Act {
        self.sleeps += 1;
        self.st = St::Sleep;
        Act::Block {
            until: Some(now + MAX_SLEEP.as_nanos() as Nanos),
            on: On::Channel(self.app),
        }
    }
}

impl SimThread for App {
    fn resumed(&mut self, dev: &mut Device, _now: Nanos, on: On, _slack: Nanos) {
        if let (St::Sleep, On::Channel(_)) = (self.st, on) {
            self.st = St::Woke(!dev.socket.is_empty());
        }
    }

    fn step(&mut self, dev: &mut Device, cx: &Cx) -> Act {
        let (now, tid, app) = (cx.now, cx.tid, self.app);
        self.st = match self.st {
            St::Start => match self.model {
                Model::Passive => St::Done,
                Model::EventSleeper => {
                    dev.arm(app, now);
                    St::Post
                }
                Model::IdleWaiter => {
                    dev.arm(app, now);
                    self.posted_at = now;
                    St::Event
                }
                _ => St::Post,
            },
            St::Post => {
                dev.post(tid, app, now);
                self.posted_at = now;
                match self.model {
                    Model::EventSleeper => St::Event,
                    Model::MemorySpinner => {
                        dev.app_leaves(now);
                        St::Memory
                    }
                    _ => St::Poll,
                }
            }
            St::Poll => match dev.poll_cq(tid, app, now) {
                0 => St::Poll,
                _ => self.answered(now),
            },
            St::Memory => {
                if std::mem::take(&mut dev.apps[app].placed) {
                    self.answered(now)
                } else {
                    St::Memory
                }
            }
            St::Event => {
                if self.take_event(dev, now, false) {
                    St::Drain
                } else {
                    self.wait_start = now;
                    dev.begin_wait();
                    let budget = self.spin.budget();
                    if !budget.is_zero() && cx.core_free {
                        self.spun = budget;
                        St::Spin(now + budget.as_nanos() as Nanos)
                    } else {
                        self.spun = Duration::ZERO;
                        return self.sleep(now);
                    }
                }
            }
            St::Spin(until) => {
                if dev.try_lock(tid) {
                    dev.poll(now);
                    dev.unlock_app(tid, now);
                }
                if self.take_event(dev, now, true) {
                    St::Drain
                } else if now >= until {
                    return self.sleep(now);
                } else {
                    St::Spin(until)
                }
            }
            St::Sleep => return self.sleep(now),
            St::Woke(packet) => {
                if packet {
                    if !dev.try_lock(tid) {
                        return Act::Block {
                            until: None,
                            on: On::Lock,
                        };
                    }
                    dev.poll(now);
                    dev.unlock_app(tid, now);
                }
                if self.take_event(dev, now, true) {
                    St::Drain
                } else {
                    return self.sleep(now);
                }
            }
            St::Drain => {
                if self.model == Model::IdleWaiter {
                    St::Done
                } else {
                    dev.arm(app, now);
                    match dev.poll_cq(tid, app, now) {
                        0 => St::Drain,
                        _ => self.answered(now),
                    }
                }
            }
            St::Done => {
                return Act::Block {
                    until: None,
                    on: On::Nothing,
                }
            }
        };
        Act::Run(COST)
    }
}
