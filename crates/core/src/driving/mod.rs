//! Who drives a device, as values with the clock passed in: the application thread that
//! polls its CQ, the one that sleeps on a completion channel, or the engine thread; who
//! watches the socket; when to spin, sleep or wake whom. The driver (`oxrdma`'s `nic.rs`,
//! `shared.rs`, `channel.rs`) holds the atomics, locks, epoll sets and timers and carries
//! these answers out; the thread simulator (`oxrdma-sim`'s `threads`) asks the same
//! questions on simulated cores.

pub mod app;
pub mod engine;
pub mod handoff;
pub mod waiters;

pub use app::{poll_watch, AppSeen, PollWatch, APP_ACTIVE_NS};
pub use engine::{After, Before, EngineThread, Turn, Woke, MAX_SLEEP, RECHECK, SPIN};
pub use handoff::Score;
pub use waiters::{Look, Nap, SpinBudget};
