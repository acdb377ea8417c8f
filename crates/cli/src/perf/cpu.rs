//! `--cpu-util`: the CPU time one side of a run uses, its own thread's and its device's
//! engine thread's, read per thread from the kernel's scheduler statistics (nanoseconds
//! on a CPU), so the two sides of a `--loopback` run, one process, are told apart.

use oxrdma::Context;
use std::time::Duration;

/// Time on a CPU of the thread whose `/proc` directory is `dir`.
fn on_cpu(dir: &str) -> Option<Duration> {
    let s = std::fs::read_to_string(format!("{dir}/schedstat")).ok()?;
    let ns = s.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(ns))
}

/// CPU time used so far by the calling thread and `ctx`'s engine thread (None where the
/// kernel does not say).
pub fn side(ctx: &Context) -> Option<Duration> {
    let engine = on_cpu(&format!("/proc/self/task/{}", ctx.engine_tid()?))?;
    Some(on_cpu("/proc/thread-self")? + engine)
}

/// Milliseconds of CPU per GB (10^9 bytes) moved.
pub fn ms_per_gb(cpu: Duration, bytes: f64) -> f64 {
    cpu.as_secs_f64() * 1e3 / (bytes / 1e9)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_busy_thread_is_seen_on_the_cpu() {
        let t0 = super::on_cpu("/proc/thread-self").expect("schedstat");
        // 50 ms of wall time spent computing: at least a millisecond of it on a CPU.
        let start = std::time::Instant::now();
        let mut x = 0u64;
        while start.elapsed() < std::time::Duration::from_millis(50) {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        let used = super::on_cpu("/proc/thread-self").unwrap() - t0;
        assert!(used > std::time::Duration::from_millis(1), "{used:?}");
        assert_eq!(
            super::ms_per_gb(std::time::Duration::from_millis(250), 0.5e9),
            500.0
        );
    }
}
