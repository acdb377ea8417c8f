//! The threads around one device on simulated cores: the engine thread (`engine.rs`, as
//! `oxrdma/src/nic.rs` runs it) and application models (`apps.rs`), sharing the device,
//! its lock, socket and timers (`device.rs`), scheduled on one or two cores with a run
//! queue, wake-up latency, time slices and wake-up preemption. Every decision about who
//! drives, watches, spins or sleeps is `oxrdma_core::driving`'s, the one the real threads
//! take; the rest is a model of the threads' calls and of the kernel's scheduler.
//!
//! Time moves in ticks of a microsecond. A thread's step is one call or one turn of a
//! loop, done whole at its start; its CPU time is then spent on its core (and a lock taken
//! in it stays taken until that time is spent, even if the thread loses its core).
//! Everything random (wake-up latencies, timer slack, which core steps first) comes from
//! the seed.

mod apps;
mod device;
mod engine;

pub use apps::Model;
pub use device::{Counts, Peer};

use apps::App;
use device::{Device, Tid, Watch};
use engine::{Engine, TIMER_SLACK_NS};
use oxrdma_core::Nanos;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::VecDeque;

/// A simulated tick.
const TICK: Nanos = 1_000;

/// The CPU time of one library call, loop turn or packet moved.
pub(crate) const COST: Nanos = 1_000;

/// What a thread does after a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Act {
    /// Spends this much CPU time, then steps again.
    Run(Nanos),
    /// The same, then yields its core if another thread waits for one.
    Yield(Nanos),
    /// Sleeps until `on` wakes it or `until` passes.
    Block { until: Option<Nanos>, on: On },
}

/// What wakes a sleeping thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum On {
    /// The engine thread's epoll set: the doorbell, the socket while watched, the deadline.
    Engine,
    /// A waiter's epoll set: its channel's events and the socket.
    Channel(usize),
    /// The device lock coming free.
    Lock,
    /// Only time.
    Nothing,
}

/// What a step may know besides the device.
pub(crate) struct Cx {
    pub now: Nanos,
    pub tid: Tid,
    /// No more threads are runnable than there are cores, counting this one (`cores.rs`).
    pub core_free: bool,
}

pub(crate) trait SimThread {
    fn step(&mut self, dev: &mut Device, cx: &Cx) -> Act;
    /// It gets a core again after sleeping on `on`; `slack` is its next sleep's lateness.
    fn resumed(&mut self, dev: &mut Device, now: Nanos, on: On, slack: Nanos);
}

/// The host's cores and scheduler.
#[derive(Debug, Clone, Copy)]
pub struct Machine {
    pub cores: usize,
    /// From a wake-up to the thread being runnable (uniform in this range).
    pub wake_ns: (Nanos, Nanos),
    /// How long a thread runs before another that waits gets its core.
    pub slice_ns: Nanos,
    /// How long a thread runs before a thread just woken takes its core.
    pub preempt_ns: Nanos,
}

impl Machine {
    /// This machine kind: 15-25 us wake-ups, 3 ms slices, wake-up preemption after
    /// 100 us (riostream's 200 us round trips show about that).
    pub fn cores(cores: usize) -> Machine {
        Machine {
            cores,
            wake_ns: (15_000, 25_000),
            slice_ns: 3_000_000,
            preempt_ns: 100_000,
        }
    }
}

#[derive(Debug, Clone)]
pub struct Config {
    pub machine: Machine,
    /// One application thread (and QP) per model.
    pub apps: Vec<Model>,
    /// Round trips each active model makes (READs a passive target answers).
    pub rounds: usize,
    pub peer: Peer,
    /// The QPs' retransmission timeout.
    pub qp_timeout_ns: Nanos,
    /// The simulated time after which the run stops, finished or not.
    pub limit_ns: Nanos,
    pub seed: u64,
}

impl Config {
    pub fn new(cores: usize, apps: Vec<Model>, seed: u64) -> Config {
        Config {
            machine: Machine::cores(cores),
            apps,
            rounds: 200,
            peer: Peer {
                wire_ns: 5_000,
                turnaround_ns: 5_000,
                think_ns: 20_000,
            },
            // Local ACK timeout 12 (16.8 ms), below perftest's 14.
            qp_timeout_ns: 16_777_216,
            limit_ns: 2_000_000_000,
            seed,
        }
    }
}

#[derive(Debug, Clone)]
pub struct Report {
    pub seed: u64,
    /// Whether every model made its rounds within the limit.
    pub finished: bool,
    pub elapsed_ns: Nanos,
    /// Per application: each round's time from post to answer (a passive target's: the
    /// peer's READ round trips).
    pub round_trips: Vec<Vec<Nanos>>,
    pub counts: Counts,
    pub engine_wakeups: u64,
    /// Of those, the ones a packet or the doorbell caused.
    pub engine_woken_by_work: u64,
    /// Sleeps of channel waiters, all applications.
    pub waiter_sleeps: u64,
    /// CPU time per thread (the engine thread first).
    pub cpu_ns: Vec<Nanos>,
}

impl Report {
    /// The median and the largest of application `i`'s round trips.
    pub fn median_max(&self, i: usize) -> (Nanos, Nanos) {
        let mut v = self.round_trips[i].clone();
        v.sort_unstable();
        (
            v.get(v.len() / 2).copied().unwrap_or(0),
            v.last().copied().unwrap_or(0),
        )
    }
}

enum Thread {
    Engine(Engine),
    App(App),
}

impl Thread {
    fn as_dyn(&mut self) -> &mut dyn SimThread {
        match self {
            Thread::Engine(e) => e,
            Thread::App(a) => a,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ts {
    Running,
    Ready,
    Blocked { until: Option<Nanos>, on: On },
    Waking { at: Nanos, on: On },
}

struct Slot {
    thread: Thread,
    ts: Ts,
    /// CPU time its last step still has to spend.
    busy: Nanos,
    /// Whether it yields when that is spent.
    yields: bool,
    /// How long it has run since it got its core.
    ran: Nanos,
    /// What it slept on, told when it runs again.
    resume: Option<On>,
    cpu: Nanos,
}

/// Runs the models until they have made their rounds or the limit passes.
pub fn run(cfg: &Config) -> Report {
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
    let answers = cfg.apps.iter().map(|m| m.answer()).collect();
    let mut dev = Device::new(answers, cfg.peer, cfg.qp_timeout_ns);
    let mut slots = vec![slot(Thread::Engine(Engine::new()))];
    for (i, &m) in cfg.apps.iter().enumerate() {
        slots.push(slot(Thread::App(App::new(m, i, cfg.rounds))));
        if m == Model::Passive {
            let at = 100_000 + 10_000 * i as Nanos;
            dev.wire.push(device::Packet {
                app: i,
                kind: m.answer(),
                at,
            });
        }
    }
    let mut queue: VecDeque<usize> = (0..slots.len()).collect();
    for s in &mut slots {
        s.ts = Ts::Ready;
    }
    let mut cores: Vec<Option<usize>> = vec![None; cfg.machine.cores];
    let mut now: Nanos = 0;
    let passive = cfg.apps.iter().filter(|m| **m == Model::Passive).count();
    let done = |slots: &[Slot], dev: &Device| {
        let apps_done = slots.iter().all(|s| match &s.thread {
            Thread::App(a) => !a.model.active() || a.done(),
            Thread::Engine(_) => true,
        });
        apps_done && dev.counts.read_round_trips.len() >= passive * cfg.rounds
    };
    let idle_only = cfg.apps.iter().all(|m| !m.active() && *m != Model::Passive);
    while now < cfg.limit_ns && (idle_only || !done(&slots, &dev)) {
        dev.deliver(now);
        wake(
            &mut slots,
            &mut dev,
            &mut queue,
            now,
            &cfg.machine,
            &mut rng,
        );
        preempt(&mut slots, &mut cores, &mut queue, &cfg.machine);
        for c in cores.iter_mut().filter(|c| c.is_none()) {
            if let Some(t) = queue.pop_front() {
                slots[t].ts = Ts::Running;
                slots[t].ran = 0;
                if let Some(on) = slots[t].resume.take() {
                    let slack = rng.random_range(0..=TIMER_SLACK_NS);
                    slots[t].thread.as_dyn().resumed(&mut dev, now, on, slack);
                }
                *c = Some(t);
            }
        }
        let runnable = slots
            .iter()
            .filter(|s| matches!(s.ts, Ts::Running | Ts::Ready))
            .count();
        let first = rng.random_range(0..cores.len());
        for k in 0..cores.len() {
            let c = (first + k) % cores.len();
            let Some(t) = cores[c] else { continue };
            let s = &mut slots[t];
            if s.busy == 0 {
                let cx = Cx {
                    now,
                    tid: t,
                    core_free: runnable <= cfg.machine.cores,
                };
                dev.took = None;
                let act = s.thread.as_dyn().step(&mut dev, &cx);
                assert_eq!(dev.holder, None, "a step kept the lock (seed {})", cfg.seed);
                if dev.took == Some(t) {
                    dev.shadow = Some(t);
                }
                match act {
                    Act::Run(c) | Act::Yield(c) => {
                        s.busy = c.max(TICK);
                        s.yields = matches!(act, Act::Yield(_));
                    }
                    Act::Block { until, on } => {
                        s.ts = Ts::Blocked { until, on };
                        s.cpu += TICK;
                        release(&mut dev, t);
                        cores[c] = None;
                        continue;
                    }
                }
            }
            s.busy -= TICK;
            s.cpu += TICK;
            s.ran += TICK;
            if s.busy == 0 {
                release(&mut dev, t);
                if s.yields && !queue.is_empty() {
                    s.ts = Ts::Ready;
                    queue.push_back(t);
                    cores[c] = None;
                }
            }
        }
        now = next_time(&slots, &dev, &queue, &cores, now);
    }
    let mut report = Report {
        seed: cfg.seed,
        finished: done(&slots, &dev),
        elapsed_ns: now,
        round_trips: Vec::new(),
        counts: dev.counts.clone(),
        engine_wakeups: 0,
        engine_woken_by_work: 0,
        waiter_sleeps: 0,
        cpu_ns: slots.iter().map(|s| s.cpu).collect(),
    };
    for s in &slots {
        match &s.thread {
            Thread::Engine(e) => {
                report.engine_wakeups = e.wakeups;
                report.engine_woken_by_work = e.woken_by_work;
            }
            Thread::App(a) => {
                report.waiter_sleeps += a.sleeps;
                report.round_trips.push(if a.model == Model::Passive {
                    dev.counts.read_round_trips.clone()
                } else {
                    a.round_trips.clone()
                });
            }
        }
    }
    report
}

fn slot(thread: Thread) -> Slot {
    Slot {
        thread,
        ts: Ts::Ready,
        busy: 0,
        yields: false,
        ran: 0,
        resume: None,
        cpu: 0,
    }
}

/// A lock taken in a step is let go when the step's time is spent.
fn release(dev: &mut Device, t: Tid) {
    if dev.shadow == Some(t) {
        dev.shadow = None;
    }
}

/// Sleeping threads whose wake-up came become runnable after the wake-up latency.
fn wake(
    slots: &mut [Slot],
    dev: &mut Device,
    queue: &mut VecDeque<usize>,
    now: Nanos,
    m: &Machine,
    rng: &mut ChaCha8Rng,
) {
    for (t, s) in slots.iter_mut().enumerate() {
        match s.ts {
            Ts::Blocked { until, on } => {
                let woken = until.is_some_and(|u| u <= now)
                    || match on {
                        On::Engine => {
                            let packet = dev.watch == Watch::Armed && !dev.socket.is_empty();
                            if packet {
                                // One shot: the kernel disarms it.
                                dev.watch = Watch::Fired;
                            }
                            packet || dev.doorbell || dev.deadline_at.is_some_and(|d| d <= now)
                        }
                        On::Channel(a) => dev.apps[a].events > 0 || !dev.socket.is_empty(),
                        On::Lock => dev.lock_free(),
                        On::Nothing => false,
                    };
                if woken {
                    let at = now + rng.random_range(m.wake_ns.0..=m.wake_ns.1);
                    s.ts = Ts::Waking { at, on };
                }
            }
            Ts::Waking { at, on } if at <= now => {
                s.ts = Ts::Ready;
                s.resume = Some(on);
                queue.push_back(t);
            }
            _ => {}
        }
    }
}

/// A thread that ran its slice gives its core to one waiting; one that ran
/// `preempt_ns` gives it to a thread just woken.
fn preempt(
    slots: &mut [Slot],
    cores: &mut [Option<usize>],
    queue: &mut VecDeque<usize>,
    m: &Machine,
) {
    let Some(&head) = queue.front() else { return };
    let woken = slots[head].resume.is_some();
    for c in cores.iter_mut() {
        let Some(t) = *c else { continue };
        let s = &mut slots[t];
        if s.ran >= m.slice_ns || (woken && s.ran >= m.preempt_ns) {
            s.ts = Ts::Ready;
            queue.push_back(t);
            *c = None;
            return;
        }
    }
}

/// The next tick at which anything can happen: the next one while a thread runs or
/// waits for a core, else the earliest wake-up, arrival or timer.
fn next_time(
    slots: &[Slot],
    dev: &Device,
    queue: &VecDeque<usize>,
    cores: &[Option<usize>],
    now: Nanos,
) -> Nanos {
    let next = now + TICK;
    if !queue.is_empty() || cores.iter().any(Option::is_some) || dev.doorbell {
        return next;
    }
    let mut at = Nanos::MAX;
    for s in slots {
        match s.ts {
            Ts::Blocked { until, on } => {
                at = at.min(until.unwrap_or(Nanos::MAX));
                if on == On::Engine {
                    at = at.min(dev.deadline_at.unwrap_or(Nanos::MAX));
                }
                if on == On::Lock || (!dev.socket.is_empty()) {
                    return next;
                }
            }
            Ts::Waking { at: w, .. } => at = at.min(w),
            _ => return next,
        }
    }
    if let Some(w) = dev.wire.iter().map(|p| p.at).min() {
        at = at.min(w);
    }
    // Whole ticks, never backwards.
    at.div_ceil(TICK).saturating_mul(TICK).max(next)
}
