//! An engine and the link that drives it, as the API crate pairs them (`oxrdma::raw`):
//! what these tests run RC over.

use oxrdma_core::Engine;
use oxrdma_udp::{BindError, Link, RxDropReport};
use std::io;
use std::net::IpAddr;
use std::time::Duration;

pub struct Device {
    pub engine: Engine,
    pub link: Link,
}

#[allow(dead_code)] // each test uses some
impl Device {
    pub fn open(ip: IpAddr, seed: [u8; 32]) -> Result<Device, BindError> {
        let link = Link::open(ip, false)?;
        let engine = Engine::new(link.engine_config(), seed);
        Ok(Device { engine, link })
    }
    pub fn poll(&mut self) -> io::Result<usize> {
        self.link.poll(&mut self.engine)
    }
    pub fn transmit(&mut self) -> io::Result<usize> {
        self.link.transmit(&mut self.engine)
    }
    pub fn wait(&self, max: Duration) -> io::Result<()> {
        self.link.wait(&self.engine, max)
    }
    pub fn rx_drops(&self) -> RxDropReport {
        self.link.rx_drops(&self.engine)
    }
}
