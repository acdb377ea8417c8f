//! An open rdma-core device as the API's `Context` holds it: the device and what the API
//! keeps beside it.

use super::{Ahs, Device};
use crate::error::Result;
use crate::events::Events;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::{Arc, Mutex};

#[derive(Debug)]
pub(crate) struct RdmaCoreContext {
    pub dev: Arc<Device>,
    /// Address handles by the id `UdDest` names.
    pub ahs: Mutex<Ahs>,
    /// A descriptor that never becomes readable: rdma-core's asynchronous events are not
    /// carried (`Context::async_fd`).
    events: Events,
}

impl RdmaCoreContext {
    pub fn new(dev: Device) -> Result<RdmaCoreContext> {
        Ok(RdmaCoreContext {
            dev: Arc::new(dev),
            ahs: Mutex::default(),
            events: Events::new()?,
        })
    }

    /// A random 24-bit PSN from the OS's CSPRNG.
    pub fn random_psn(&self) -> u32 {
        crate::secure::random_u32() & 0xff_ffff
    }

    pub fn async_fd(&self) -> BorrowedFd<'_> {
        self.events.as_fd()
    }
}
