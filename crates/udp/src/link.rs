//! The link between an engine and the network: a UDP port on the wall clock, and the loop
//! a NIC runs (send what the engine has, hand it what arrived, fire its timers). The
//! engine is the caller's (the API crate owns it); every call that drives one takes it.

use crate::batch::{RxBatch, TxBatch, BATCH};
use crate::kernel::{KernelCounters, KernelUdpDrops};
use crate::port::{BindError, UdpPort};
use crate::RxDropReport;
use oxrdma_core::{DeviceAttr, Engine, EngineConfig, Gid, Mtu, Nanos, Transmit};
use oxrdma_wire::ROCE_V2_PORT;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

#[derive(Debug)]
pub struct Link {
    pub port: UdpPort,
    /// The index of the network interface holding the address (0 if none is found).
    pub ifindex: u32,
    start: Instant,
    tx: TxBatch,
    /// What the engine wrote into `tx`'s free slots on the last call, in slot order.
    sent: Vec<Transmit>,
    rx: RxBatch,
    /// Whether packets that arrived together go to the engine together (its run path);
    /// `OXRDMA_RUNS=0` hands them over one by one.
    runs: bool,
    /// The kernel's UDP counters of the device's namespace, and their values at open.
    kernel: KernelCounters,
    kernel_at_open: KernelUdpDrops,
}

impl Link {
    /// Opens the link for `ip` (port 4791), shared with this user's other processes on
    /// the address unless `alone` (`UdpPort::bind`, `bind_alone`).
    pub fn open(ip: IpAddr, alone: bool) -> Result<Link, BindError> {
        let port = if alone {
            UdpPort::bind_alone(ip)?
        } else {
            UdpPort::bind(ip)?
        };
        let port_gro = port.gro();
        let kernel = KernelCounters::open();
        Ok(Link {
            port,
            ifindex: crate::mtu::interface_index(ip).unwrap_or(0),
            start: Instant::now(),
            tx: TxBatch::default(),
            sent: Vec::with_capacity(BATCH),
            rx: RxBatch::new(port_gro),
            runs: std::env::var("OXRDMA_RUNS").map_or(true, |v| v != "0"),
            kernel_at_open: kernel.read(),
            kernel,
        })
    }

    /// What an engine behind this link is: its GID (the address), the largest MTU the
    /// interface carries (packets that would not fit cannot be sent with DF set), and
    /// whether it speaks selective repeat.
    pub fn engine_config(&self) -> EngineConfig {
        let ip = self.port.local_addr().ip();
        EngineConfig {
            gid: self.port.gid(),
            max_mtu: crate::mtu::interface_mtu(ip).map_or(Mtu::Mtu4096, crate::mtu::active_mtu),
            attr: DeviceAttr::default(),
            selective_repeat: selective_repeat_enabled(),
            slot: self.port.slot(),
        }
    }

    /// Every receive drop so far, by who dropped it (this link, or `engine`) and why.
    pub fn rx_drops(&self, engine: &Engine) -> RxDropReport {
        RxDropReport {
            received: self.port.stats.rx,
            port: self.port.stats,
            engine: engine.stats().rx_drops,
            kernel: self.kernel.read().since(&self.kernel_at_open),
        }
    }

    pub fn now(&self) -> Nanos {
        self.start.elapsed().as_nanos() as Nanos
    }

    /// Sends what the engine has, takes in what arrived, fires due timers. Returns how many
    /// packets moved.
    pub fn poll(&mut self, engine: &mut Engine) -> io::Result<usize> {
        let mut moved = 0;
        loop {
            let mut now = self.now();
            let sent = self.transmit_at(engine, now)?;
            moved += sent;
            let mut progressed = sent > 0;
            let mut received = false;
            while self.port.recv_batch(&mut self.rx)? > 0 {
                now = self.now();
                let rx = &self.rx;
                for (src, ce, run) in rx.runs(self.runs) {
                    let packets = run.map(|i| rx.datagram(i));
                    engine.handle_packets(now, Gid::from(src.ip()), ce, packets);
                }
                moved += self.rx.count;
                progressed = true;
                received = true;
                if self.rx.drained() {
                    break;
                }
            }
            // The clock as last read (when packets arrived, the read that stamped them; else
            // the one before this round's sends): a timer found due a few microseconds late
            // is served by the next round, never early.
            if engine.poll_timeout().is_some_and(|t| t <= now) {
                engine.handle_timeout(now);
                progressed = true;
            }
            // Back to the caller once something arrived: it may be waiting for exactly this
            // (a completion, a byte in memory), and the ACKs can go out on the next call.
            if !progressed || received {
                return Ok(moved);
            }
        }
    }

    /// Sends what the engine has (what a post added), and nothing else: the receive a
    /// [`Self::poll`] would try comes with the poller's next call. Returns how many packets
    /// went.
    pub fn transmit(&mut self, engine: &mut Engine) -> io::Result<usize> {
        let now = self.now();
        self.transmit_at(engine, now)
    }

    fn transmit_at(&mut self, engine: &mut Engine, now: Nanos) -> io::Result<usize> {
        let mut moved = 0;
        loop {
            // Into every free slot at once: a QP's burst is built in one call.
            let sent = &mut self.sent;
            sent.clear();
            engine.poll_transmit_many(now, self.tx.free_slots(), |t| sent.push(t));
            // A burst's packets go to one peer: its address is made once.
            let mut to: Option<(Gid, SocketAddr)> = None;
            for t in &self.sent {
                let dest = match to {
                    Some((gid, addr)) if gid == t.dest => addr,
                    _ => {
                        let addr = SocketAddr::new(t.dest.ip(), ROCE_V2_PORT);
                        to = Some((t.dest, addr));
                        addr
                    }
                };
                self.tx.push_from(dest, t.src_port, t.len);
            }
            let n = self.tx.count;
            if n == 0 {
                return Ok(moved);
            }
            self.port.send_batch(&mut self.tx)?;
            moved += n;
        }
    }

    /// How long until `engine`'s next timer is due (None: no timer armed).
    pub fn next_timer_in(&self, engine: &Engine) -> Option<Duration> {
        let now = self.now();
        engine
            .poll_timeout()
            .map(|t| Duration::from_nanos(t.saturating_sub(now)))
    }

    /// Blocks until a packet may have arrived or the next timer is due (at most `max`).
    pub fn wait(&self, engine: &Engine, max: Duration) -> io::Result<()> {
        let now = self.now();
        let until_timer = engine
            .poll_timeout()
            .map_or(max, |t| Duration::from_nanos(t.saturating_sub(now)));
        self.port.wait_readable(until_timer.min(max))
    }
}

/// Whether the device speaks selective repeat with peers that do: yes, unless
/// `OXRDMA_SELECTIVE_REPEAT=0` (to measure go-back-N, as rxe does it, between oxrdma peers).
fn selective_repeat_enabled() -> bool {
    std::env::var("OXRDMA_SELECTIVE_REPEAT").map_or(true, |v| v != "0")
}

impl Drop for Link {
    /// With `OXRDMA_BATCHES=1`, says how well this device batched what it moved
    /// (`PortStats::batching`): a stream whose messages go as runs of 60 packets and of 4
    /// costs both ends nearly twice what full runs would.
    fn drop(&mut self) {
        if std::env::var("OXRDMA_BATCHES").is_ok_and(|v| v == "1") {
            eprintln!(
                "oxrdma {}: {}",
                self.port.local_addr().ip(),
                self.port.stats.batching()
            );
        }
    }
}
