//! A context of an engine device: an open device (`shared.rs`) and its engine thread
//! (`nic.rs`). The public `Context` (context.rs) is this or an rdma-core device.

use crate::device::Device;
use crate::error::{Error, Result};
use crate::events::{Events, Source};
use crate::shared::Shared;
use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;

/// Owns the engine thread: stops and joins it when the last handle goes away.
pub(crate) struct Inner {
    pub shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        self.shared.ring();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// An open engine device: one IP address, UDP port 4791, one engine thread. Clones are
/// the same context.
#[derive(Clone)]
pub(crate) struct EngineContext {
    pub(crate) inner: Arc<Inner>,
    /// This context's asynchronous events (those of the CQs, QPs and SRQs made through it).
    events: Arc<Events>,
}

impl std::fmt::Debug for EngineContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Context({})", self.gid())
    }
}

/// The engine thread's name: "nic-" and as much of the device's address as Linux keeps (15
/// bytes), its end, so that two devices of one host (127.0.0.2 and 127.0.0.3 on loopback)
/// tell apart in `top -H`, `ps -L` and perf. ("oxrdma-nic-127.0.0.2" was cut to
/// "oxrdma-nic-127.", the same for both.)
fn engine_thread_name(ip: IpAddr) -> String {
    const LINUX_MAX: usize = 15;
    const PREFIX: &str = "nic-";
    let addr = ip.to_string();
    let keep = addr.len().min(LINUX_MAX - PREFIX.len());
    // An address is ASCII, so any byte is a character boundary.
    format!("{PREFIX}{}", &addr[addr.len() - keep..])
}

impl EngineContext {
    /// Opens the device whose GID is `ip` (an address of this host), which this user's
    /// processes share as a NIC's: each owns some of the QPNs (up to 64 processes on one
    /// address). `OXRDMA_SHARE=0` makes it [`Context::open_alone`].
    pub fn open(ip: IpAddr) -> Result<EngineContext> {
        Self::open_with(ip, false)
    }

    /// Opens the device whose GID is `ip` for this process alone: refused if another
    /// process uses the address.
    pub fn open_alone(ip: IpAddr) -> Result<EngineContext> {
        Self::open_with(ip, true)
    }

    /// Opens a device on network interface `name` (as `rdma link add rxe0 type rxe netdev
    /// NAME`): its GID table holds the interface's addresses in rxe's order (the default
    /// link-local GID, the IPv4 addresses, the other IPv6 ones), each shared with this
    /// user's other processes as [`Context::open`]'s; [`Context::gid`] is its main one.
    pub fn open_interface(name: &str) -> Result<EngineContext> {
        let iface = oxrdma_udp::interfaces::interface(name)
            .ok_or_else(|| Error::NoInterface(name.to_string()))?;
        let mut seed = [0u8; 32];
        getrandom_seed(&mut seed);
        let dev = Device::open_interface(&iface, seed)?;
        Self::start(dev, format!("nic-{name}"))
    }

    /// Opens an iWARP device on `ip`: its QPs are RC QPs over TCP (RFC 5040, 5041, 5044
    /// and 6581), connected with [`crate::iwarp`].
    pub fn open_iwarp(ip: IpAddr) -> Result<EngineContext> {
        let mut seed = [0u8; 32];
        getrandom_seed(&mut seed);
        let dev = Device::open_iwarp(ip, seed)?;
        Self::start(dev, format!("iw-{ip}"))
    }

    fn open_with(ip: IpAddr, alone: bool) -> Result<EngineContext> {
        let mut seed = [0u8; 32];
        getrandom_seed(&mut seed);
        let dev = Device::open(ip, alone, seed)?;
        Self::start(dev, engine_thread_name(ip))
    }

    /// Starts the engine thread of `dev`, named `name` (Linux keeps 15 bytes).
    fn start(dev: Device, name: String) -> Result<EngineContext> {
        let shared = Arc::new(Shared::new(dev)?);
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name(name.chars().take(15).collect())
            .spawn(move || crate::nic::engine_thread(&s))?;
        // Its thread id is known once it runs (`engine_tid`): wait for that, briefly.
        while shared.engine_tid.load(Ordering::Acquire) == 0 && !thread.is_finished() {
            std::thread::yield_now();
        }
        Ok(EngineContext {
            inner: Arc::new(Inner {
                shared,
                thread: Some(thread),
            }),
            events: Arc::new(Events::new()?),
        })
    }

    /// Another context on this context's device (what a second `ibv_open_device` of one
    /// device gives on a NIC): the same address, GID and engine, so QPs of the two reach
    /// each other through the one port and name each other by QPN; its own asynchronous
    /// events and descriptor. The device closes when the last context of it goes.
    pub fn open_again(&self) -> Result<EngineContext> {
        Ok(EngineContext {
            inner: self.inner.clone(),
            events: Arc::new(Events::new()?),
        })
    }

    /// This context's device, without keeping it open (`WeakDevice`).
    pub(crate) fn downgrade(&self) -> Weak<Inner> {
        Arc::downgrade(&self.inner)
    }

    /// A new context on the open device `inner` (its own asynchronous events).
    pub(crate) fn on(inner: Arc<Inner>) -> Result<EngineContext> {
        Ok(EngineContext {
            inner,
            events: Arc::new(Events::new()?),
        })
    }

    /// Whether `self` and `other` are contexts of the same open device.
    pub fn same_device(&self, other: &EngineContext) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// The events of `src` (just made through this context) go to this context.
    pub(crate) fn claim(&self, src: Source) {
        self.shared().owners.claim(src, &self.events);
    }

    pub(crate) fn shared(&self) -> &Shared {
        &self.inner.shared
    }

    /// The device's counters now: traffic by opcode class, every drop by reason, NAKs,
    /// retransmissions, timeouts, congestion notification (`Counter` names each, with
    /// rxe's and mlx5's names where they mean the same). A copy, taken under the device
    /// lock; QPs destroyed still count. `oxrdma stats` shows every device of the host.
    pub fn counters(&self) -> oxrdma_core::Counters {
        self.shared().lock().counters()
    }

    /// The OS thread id of the device's engine thread (the software NIC; None if it has
    /// died): to pin it to a core (`taskset -p`), or to read the CPU time it uses
    /// (`/proc/self/task/<tid>/schedstat`).
    pub fn engine_tid(&self) -> Option<i32> {
        let tid = self.shared().engine_tid.load(Ordering::Acquire);
        (tid != 0).then_some(tid)
    }

    /// This device's main GID (its IP address, IPv4 as `::ffff:a.b.c.d`; a device on an
    /// interface: its first IPv4 address, else its first global one, `main_gid`).
    pub fn gid(&self) -> oxrdma_core::Gid {
        oxrdma_core::main_gid(&self.shared().facts.gids)
    }

    /// The index of the device GID that sends to `dest` by default: the main one if it is
    /// of `dest`'s IP family, else the first of that family and scope (link-local or
    /// not), else the first of the family, else 0.
    pub fn gid_index_for(&self, dest: oxrdma_core::Gid) -> u8 {
        let gids = self.gids();
        let v4 = dest.ip().is_ipv4();
        let main = self.gid();
        let family = |g: &oxrdma_core::Gid| g.ip().is_ipv4() == v4;
        let at = gids.iter().position(|g| *g == main && family(g));
        let at = at.or_else(|| {
            gids.iter()
                .position(|g| family(g) && g.is_link_local() == dest.is_link_local())
        });
        let at = at.or_else(|| gids.iter().position(family));
        at.unwrap_or(0) as u8
    }

    /// Whether the device is free to take within `within` (nobody holds it then). At
    /// `exit`, a thread that a signal interrupted inside the library may hold it for good:
    /// an exit handler asks before it tears anything down.
    pub fn free_within(&self, within: std::time::Duration) -> bool {
        let until = std::time::Instant::now() + within;
        loop {
            if self.shared().try_lock().is_some() {
                return true;
            }
            if std::time::Instant::now() >= until {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    /// This device's GID table, by index (one entry, unless the device is on an
    /// interface: then its addresses in Linux rxe's order).
    pub fn gids(&self) -> &[oxrdma_core::Gid] {
        &self.shared().facts.gids
    }

    /// Writes every RoCEv2 packet this device sends or receives to a pcap file (raw IP
    /// frames with the headers they had on the wire), until the device closes.
    pub fn capture_to(&self, path: &std::path::Path) -> Result<()> {
        self.shared().lock().link.port_mut().capture_to(path)?;
        Ok(())
    }

    /// The index of the network interface that holds the device's address (the GID
    /// table's `ndev_ifindex`), or 0 if none is found.
    pub fn ifindex(&self) -> u32 {
        self.shared().ifindex
    }

    /// The port's active MTU: the largest path MTU a QP may use (from the interface MTU).
    pub fn active_mtu(&self) -> oxrdma_core::Mtu {
        self.shared().facts.max_mtu
    }

    /// Every received packet dropped so far, by who dropped it (kernel, port, engine) and
    /// why: the first thing to look at when a peer seems to send nothing.
    pub fn rx_drops(&self) -> oxrdma_udp::RxDropReport {
        self.shared().lock().rx_drops()
    }

    /// Device limits.
    pub fn attr(&self) -> oxrdma_core::DeviceAttr {
        self.shared().facts.attr
    }

    /// RoCE's (InfiniBand's) transport, or iWARP's ([`EngineContext::open_iwarp`]).
    pub fn transport(&self) -> oxrdma_core::DeviceTransport {
        self.shared().transport
    }

    /// A completion channel: a file descriptor that becomes readable when an armed CQ gets
    /// a completion (use it with epoll, poll or an async runtime).
    pub fn create_comp_channel(&self) -> Result<crate::CompletionChannel> {
        crate::channel::EngineCompChannel::new(&self.inner.shared)
            .map(crate::CompletionChannel::engine)
    }

    /// The next asynchronous event, without waiting: CQ overflow, QP errors and
    /// communication established, SRQ limit reached, last WQE reached.
    pub fn poll_event(&self) -> Option<oxrdma_core::AsyncEvent> {
        let shared = self.shared();
        // Events the engine holds are moved out when the lock is let go.
        drop(shared.try_lock());
        self.events.pop()
    }

    /// The next asynchronous event (`ibv_get_async_event`): waits for one, unless
    /// [`Context::async_fd`] was made non-blocking (then `Ok(None)` when none waits).
    pub fn get_async_event(&self) -> Result<Option<oxrdma_core::AsyncEvent>> {
        drop(self.shared().try_lock());
        self.events.wait()
    }

    /// A descriptor readable exactly while asynchronous events wait
    /// (`ibv_context.async_fd`).
    pub fn async_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.events.as_fd()
    }

    /// How many doorbells posting threads have rung on this device: one per `post_send`
    /// call, one per [`crate::QueuePair::post_list`] however many WRs it holds (a NIC's
    /// doorbell counter; each one drives the device once).
    pub fn doorbells(&self) -> u64 {
        self.shared().doorbells.load(Ordering::Relaxed)
    }

    /// A random 24-bit PSN from the device's CSPRNG.
    pub fn random_psn(&self) -> u32 {
        self.shared().lock().engine.random_psn()
    }
}

/// Fills `seed` from the OS (the engine's CSPRNG draws keys, QPNs and PSNs from it).
fn getrandom_seed(seed: &mut [u8; 32]) {
    use std::io::Read;
    if std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(seed))
        .is_err()
    {
        // No /dev/urandom: fall back to time and address entropy (still never sequential).
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        seed[..16].copy_from_slice(&t.as_nanos().to_le_bytes());
        let here = seed.as_ptr() as u64;
        seed[16..24].copy_from_slice(&here.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::engine_thread_name;

    #[test]
    fn a_thread_name_keeps_the_end_of_the_address_within_linux_limit() {
        let name = |a: &str| engine_thread_name(a.parse().unwrap());
        assert_eq!(name("127.0.0.2"), "nic-127.0.0.2");
        assert_eq!(name("::1"), "nic-::1");
        // Longer addresses keep their end, where two devices of a host differ.
        assert_eq!(name("192.168.100.200"), "nic-168.100.200");
        assert_eq!(name("fd00::1:2:3:4"), "nic-00::1:2:3:4");
        for a in ["255.255.255.255", "fe80::1234:5678:9abc:def0"] {
            assert!(name(a).len() <= 15, "{a}: {}", name(a));
        }
    }
}
