//! A device as the API owns it: the sans-IO engine (the verbs objects, the transport) and
//! the link that moves its packets (the UDP driver); an iWARP device has its QPs' TCP
//! streams too (`oxrdma_tcp::Streams`). The engine is ours; the drivers only drive it when
//! asked.

use crate::{Error, Result};
use oxrdma_core::{Counter, Counters, Engine, EngineConfig, Nanos};
use oxrdma_tcp::Streams;
use oxrdma_udp::{Link, RxDropReport};
use rustix::event::epoll;
use std::io;
use std::net::IpAddr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::Duration;

/// What the engine behind `link` is, with the limits `OXRDMA_LIMITS` sets
/// (`oxrdma_core::apply_limits`). A malformed `OXRDMA_SECURE_KEY` fails here too, before
/// any QP could go unkeyed.
fn configured(link: &Link) -> Result<EngineConfig> {
    crate::secure::configured_psk()?;
    crate::secure::configured_peers()?;
    crate::secure::configured_mode()?;
    crate::secure::configured_suite()?;
    let mut c = link.engine_config();
    if let Some(text) = std::env::var_os("OXRDMA_LIMITS") {
        let text = text.to_string_lossy();
        oxrdma_core::apply_limits(&text, &mut c.attr, &mut c.peer_limits)
            .map_err(|e| Error::Config(format!("OXRDMA_LIMITS: {e}")))?;
    }
    Ok(c)
}

/// A device as the engine thread holds it: the engine and its link to the network.
#[derive(Debug)]
pub struct Device {
    /// The protocol engine.
    pub engine: Engine,
    /// The UDP port (or ports) it sends and receives on.
    pub link: Link,
    /// An iWARP device's QPs' TCP streams (None: a RoCE device).
    pub streams: Option<Streams>,
    /// An iWARP device's wake-up: an epoll set over the link's socket and the streams'
    /// set, what its threads sleep on in place of the socket.
    wake: Option<OwnedFd>,
}

impl Device {
    /// Opens the device for `ip` (port 4791; this process's alone if `alone`). `seed`
    /// feeds the engine's CSPRNG.
    pub fn open(ip: IpAddr, alone: bool, seed: [u8; 32]) -> Result<Device> {
        let link = Link::open(ip, alone)?;
        let config = configured(&link)?;
        Ok(Device::on(link, config, seed))
    }

    /// A RoCE device on `link` with an engine of `config` (no streams yet).
    fn on(link: Link, config: EngineConfig, seed: [u8; 32]) -> Device {
        Device {
            engine: Engine::new(config, seed),
            link,
            streams: None,
            wake: None,
        }
    }

    /// Opens an iWARP device on `ip`: its QPs are iWARP's, each on a TCP connection of
    /// its own (the UDP port stays open for what the RoCE side of the engine serves).
    pub fn open_iwarp(ip: IpAddr, seed: [u8; 32]) -> Result<Device> {
        let link = Link::open(ip, false)?;
        let mut config = configured(&link)?;
        // RDMAP carries no atomics (`QpPost::iwarp_only` refuses them at post): none are
        // offered, as siw offers none.
        config.attr.atomic_cap = oxrdma_core::AtomicCap::None;
        let mut dev = Device::on(link, config, seed);
        let streams = Streams::new()?;
        let wake = epoll::create(epoll::CreateFlags::CLOEXEC).map_err(io::Error::from)?;
        for (i, fd) in [dev.link.as_fd(), streams.fd()].into_iter().enumerate() {
            let data = epoll::EventData::new_u64(i as u64);
            epoll::add(&wake, fd, data, epoll::EventFlags::IN).map_err(io::Error::from)?;
        }
        dev.streams = Some(streams);
        dev.wake = Some(wake);
        Ok(dev)
    }

    /// Whether it is an iWARP device.
    pub fn is_iwarp(&self) -> bool {
        self.streams.is_some()
    }

    /// What a thread sleeps on to hear of the device's traffic: its socket, or for an
    /// iWARP device the epoll set over the socket and the streams.
    pub fn wake_fd(&self) -> BorrowedFd<'_> {
        match &self.wake {
            Some(w) => w.as_fd(),
            None => self.link.as_fd(),
        }
    }

    /// `ibv_create_qp`: an iWARP QP on an iWARP device, else the engine's RoCE one.
    pub fn create_qp(&mut self, pd: u32, init: &oxrdma_core::QpInitAttr) -> Result<u32> {
        let qpn = if self.is_iwarp() {
            self.engine.create_iwarp_qp(pd, init)?
        } else {
            self.engine.create_qp(pd, init)?
        };
        Ok(qpn)
    }

    /// `ibv_destroy_qp`, closing an iWARP QP's stream.
    pub fn destroy_qp(&mut self, qpn: u32) -> Result<()> {
        if let Some(s) = self.streams.as_mut() {
            s.detach(qpn);
        }
        Ok(self.engine.destroy_qp(qpn)?)
    }

    /// Opens the device on network interface `iface`: a GID per address, in rxe's order
    /// (`Link::open_interface`).
    pub fn open_interface(
        iface: &oxrdma_udp::interfaces::Interface,
        seed: [u8; 32],
    ) -> Result<Device> {
        let link = Link::open_interface(iface)?;
        let config = configured(&link)?;
        Ok(Device::on(link, config, seed))
    }

    /// Sends what the engine has, takes in what arrived, fires due timers (`Link::poll`);
    /// an iWARP device's streams too.
    pub fn poll(&mut self) -> io::Result<usize> {
        let n = self.link.poll(&mut self.engine)?;
        Ok(n + self
            .streams
            .as_mut()
            .map_or(0, |s| s.poll(&mut self.engine)))
    }

    /// Sends what the engine has, and nothing else (`Link::transmit`).
    pub fn transmit(&mut self) -> io::Result<usize> {
        self.link.transmit(&mut self.engine)
    }

    /// How long until the engine's next timer is due.
    pub fn next_timer_in(&self) -> Option<Duration> {
        self.link.next_timer_in(&self.engine)
    }

    /// The link's clock.
    pub fn now(&self) -> Nanos {
        self.link.now()
    }

    /// Every receive drop so far, by who dropped it and why.
    pub fn rx_drops(&self) -> RxDropReport {
        self.link.rx_drops(&self.engine)
    }

    /// The device's counters: the engine's, and what only the link sees (ICRCs that did
    /// not verify, the kernel's receive-buffer drops, sends it refused).
    pub fn counters(&self) -> Counters {
        let mut c = self.engine.counters();
        let p = self.link.stats();
        c[Counter::BadIcrc] += p.rx_bad_icrc;
        c[Counter::RxqOverflow] += p.rx_overflow;
        c[Counter::SendErr] += p.tx_errors;
        c
    }
}

impl Drop for Device {
    /// With `OXRDMA_DROPS=1`, says where the packets it received went, as it closes.
    fn drop(&mut self) {
        if std::env::var("OXRDMA_DROPS").is_ok_and(|v| v == "1") {
            eprintln!(
                "oxrdma {}: receive path: {}",
                self.link.port().local_addr().ip(),
                self.rx_drops()
            );
        }
    }
}
