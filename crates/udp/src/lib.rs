//! The UDP driver: RoCEv2 packets to and from UDP port 4791, ICRC on every packet, and the
//! loop that drives an engine (the caller's) from a socket and the wall clock.

pub mod batch;
mod bind_error;
mod capture;
mod connected;
mod drops;
pub mod group;
pub mod gso;
pub mod host_slot;
pub mod interfaces;
mod kernel;
pub mod link;
pub mod mtu;
pub mod port;
mod sockopt;
mod sport;
pub mod steer;
mod turnaround;

pub use drops::RxDropReport;
pub use kernel::KernelUdpDrops;
pub use link::Link;
pub use port::{BindError, PortStats, UdpPort};
pub use sport::SOURCE_PORTS;

/// `$TMPDIR/<name>/<network namespace>`, where this host's processes meet (each network
/// namespace has its own addresses and ports, as in the kernel): made if missing, open to
/// every user (sticky, as /tmp) at the first two levels.
pub fn host_dir(name: &str) -> std::io::Result<std::path::PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    // The network namespace's inode (the calling thread's: a thread may have moved).
    let ns = std::fs::read_link("/proc/thread-self/ns/net")
        .ok()
        .and_then(|l| {
            let s = l.to_string_lossy().into_owned();
            let n = s.trim_start_matches("net:[").trim_end_matches(']');
            n.parse::<u64>().ok()
        })
        .map_or_else(|| "default".to_string(), |n| n.to_string());
    let base = std::env::temp_dir().join(name);
    let d = base.join(ns);
    for p in [&base, &d] {
        if std::fs::create_dir(p).is_ok() {
            let _ = std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o1777));
        }
    }
    Ok(d)
}

/// Whether a process holds a lock on the host file `f` (its owner, which keeps it locked
/// while it lives: a file whose process died is unlocked).
pub fn held(f: &std::fs::File) -> bool {
    use rustix::fs::{flock, FlockOperation};
    match flock(f, FlockOperation::NonBlockingLockShared) {
        Ok(()) => {
            let _ = flock(f, FlockOperation::Unlock);
            false
        }
        Err(_) => true,
    }
}
