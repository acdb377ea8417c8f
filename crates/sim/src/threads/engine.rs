//! The engine thread as `oxrdma/src/nic.rs` runs it, on a simulated core: each step is one
//! turn of its loop, deciding through the same `EngineThread`.

use super::device::{Device, Tid, Watch};
use super::{Act, Cx, On, SimThread, COST};
use oxrdma_core::driving::{After, Before, EngineThread, Turn, Woke, MAX_SLEEP, RECHECK};
use oxrdma_core::Nanos;
use std::time::Duration;

/// How late a sleep's timeout may end (the real thread's timer slack).
pub const TIMER_SLACK_NS: Nanos = 4_000_000;

pub struct Engine {
    me: EngineThread,
    /// Wake-ups, and of those the ones a packet or the doorbell caused.
    pub wakeups: u64,
    pub woken_by_work: u64,
    /// A random part of the timer slack for the next sleep (set by the scheduler).
    slack: Nanos,
}

impl Engine {
    pub fn new() -> Engine {
        Engine {
            me: EngineThread::default(),
            wakeups: 0,
            woken_by_work: 0,
            slack: 0,
        }
    }

    fn sleep(&self, now: Nanos, timeout: Duration) -> Act {
        let ms = timeout.min(MAX_SLEEP).as_micros().div_ceil(1000).max(1) as Nanos;
        Act::Block {
            until: Some(now + ms * 1_000_000 + self.slack),
            on: On::Engine,
        }
    }

    /// What woke it (`Sleeper::wait`), taken when it runs again.
    pub fn woke_by(dev: &mut Device, now: Nanos) -> Woke {
        let mut woke = Woke::Time;
        if dev.watch == Watch::Fired {
            woke = Woke::Packet;
        }
        if std::mem::take(&mut dev.doorbell) {
            woke = woke.max(Woke::Doorbell);
        }
        if dev.deadline_at.is_some_and(|d| d <= now) {
            dev.deadline_at = None;
        }
        woke
    }
}

impl SimThread for Engine {
    fn resumed(&mut self, dev: &mut Device, now: Nanos, on: On, slack: Nanos) {
        self.slack = slack;
        if on == On::Engine {
            let woke = Engine::woke_by(dev, now);
            self.wakeups += 1;
            if woke != Woke::Time {
                self.woken_by_work += 1;
            }
            if woke == Woke::Packet {
                dev.score = dev.score.woken();
            }
            self.me.slept(woke);
        }
    }

    fn step(&mut self, dev: &mut Device, cx: &Cx) -> Act {
        let (now, tid): (Nanos, Tid) = (cx.now, cx.tid);
        match self.me.before(&dev.seen(), now) {
            Before::Look => {
                if !dev.try_lock(tid) {
                    return Act::Block {
                        until: None,
                        on: On::Lock,
                    };
                }
                dev.pending = false;
                let moved = dev.poll(now) as Nanos;
                dev.deadline_at = None;
                let next = dev.next_timer_in(now);
                dev.holder = None;
                dev.notify_armed();
                dev.set_watched(false);
                let l = self.me.looked(dev.waits, next);
                dev.dozing = l.dozing;
                if l.dozing && !dev.seen().waits(now) {
                    dev.dozing = false;
                    return Act::Run(COST * (1 + moved));
                }
                return self.sleep(now, l.nap);
            }
            Before::Sleep {
                timeout,
                clear_deadline,
            } => {
                dev.dozing = false;
                if clear_deadline {
                    dev.deadline_at = None;
                }
                return self.sleep(now, timeout);
            }
            Before::Turn => dev.dozing = false,
        }
        if !dev.try_lock(tid) {
            return Act::Block {
                until: None,
                on: On::Lock,
            };
        }
        let called = std::mem::take(&mut dev.called);
        match self.me.turn(called, &dev.seen()) {
            Turn::Leave => {
                dev.holder = None;
                return self.sleep(now, RECHECK);
            }
            Turn::Drive { taken_over } => {
                if taken_over {
                    dev.score = dev.score.taken_over();
                }
            }
        }
        dev.pending = false;
        let moved = dev.poll(now);
        dev.notify_armed();
        if moved == 0 {
            let next = self.me.deadline(&dev.seen(), now, dev.next_timer_in(now));
            dev.deadline_at = next.map(|d| now + d.as_nanos() as Nanos);
        }
        dev.holder = None;
        let cost = COST * (1 + moved as Nanos);
        match self.me.driven(moved, dev.waiters > 0, now, || cx.core_free) {
            After::Again => Act::Run(cost),
            After::Spin => Act::Yield(cost),
            After::Sleep => {
                dev.dozing = true;
                let l = self.me.sleep_after(dev.watch_unless_taken(now));
                dev.dozing = l.dozing;
                if dev.pending {
                    self.me.pending();
                    Act::Run(cost)
                } else {
                    self.sleep(now, l.nap)
                }
            }
        }
    }
}
