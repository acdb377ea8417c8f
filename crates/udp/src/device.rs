//! An engine driven over a UDP port on the wall clock: the loop a NIC runs.

use crate::port::{BindError, UdpPort};
use oxrdma_core::{DeviceAttr, Engine, EngineConfig, Mtu, Nanos, MAX_PACKET};
use std::io;
use std::net::IpAddr;
use std::time::{Duration, Instant};

#[derive(Debug)]
pub struct Device {
    pub engine: Engine,
    pub port: UdpPort,
    start: Instant,
    tx: Vec<u8>,
    rx: Vec<u8>,
}

impl Device {
    /// Opens the device for `ip` (port 4791). `seed` feeds the engine's CSPRNG.
    pub fn open(ip: IpAddr, seed: [u8; 32]) -> Result<Device, BindError> {
        let port = UdpPort::bind(ip)?;
        let config = EngineConfig {
            gid: port.gid(),
            max_mtu: Mtu::Mtu4096,
            attr: DeviceAttr::default(),
        };
        Ok(Device {
            engine: Engine::new(config, seed),
            port,
            start: Instant::now(),
            tx: vec![0; MAX_PACKET],
            rx: vec![0; MAX_PACKET + 64],
        })
    }

    pub fn now(&self) -> Nanos {
        self.start.elapsed().as_nanos() as Nanos
    }

    /// Sends what the engine has, takes in what arrived, fires due timers. Returns how many
    /// packets moved.
    pub fn poll(&mut self) -> io::Result<usize> {
        let mut moved = 0;
        loop {
            let now = self.now();
            let mut progressed = false;
            while let Some(t) = self.engine.poll_transmit(now, &mut self.tx) {
                match self.port.send(t.dest, &mut self.tx[..t.len]) {
                    Ok(()) => {}
                    // A full socket buffer is a lost packet; the transport recovers.
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e),
                }
                moved += 1;
                progressed = true;
            }
            let mut received = false;
            while let Some((src, len)) = self.port.recv(&mut self.rx)? {
                self.engine.handle_packet(self.now(), src, &self.rx[..len]);
                moved += 1;
                progressed = true;
                received = true;
            }
            let now = self.now();
            if self.engine.poll_timeout().is_some_and(|t| t <= now) {
                self.engine.handle_timeout(now);
                progressed = true;
            }
            // Back to the caller once something arrived: it may be waiting for exactly this
            // (a completion, a byte in memory), and the ACKs can go out on the next call.
            if !progressed || received {
                return Ok(moved);
            }
        }
    }

    /// How long until the engine's next timer is due (None: no timer armed).
    pub fn next_timer_in(&self) -> Option<Duration> {
        let now = self.now();
        self.engine
            .poll_timeout()
            .map(|t| Duration::from_nanos(t.saturating_sub(now)))
    }

    /// Blocks until a packet may have arrived or the next timer is due (at most `max`).
    pub fn wait(&self, max: Duration) -> io::Result<()> {
        let now = self.now();
        let until_timer = self
            .engine
            .poll_timeout()
            .map_or(max, |t| Duration::from_nanos(t.saturating_sub(now)));
        self.port.wait_readable(until_timer.min(max))
    }
}
