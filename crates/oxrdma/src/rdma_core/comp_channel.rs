//! A completion channel shared by rdma-core CQs. Each rdma-core CQ is made with a channel
//! of its own (`cq.rs`), so arming a CQ for this one adds the CQ's channel to an epoll set:
//! the set's descriptor is readable while any of its CQs' channels is, and taking an event
//! takes it from the CQ's channel that has one. No thread forwards anything.

use super::cq::Cq;
use crate::error::Result;
use crate::lock::lock;
use rustix::buffer::spare_capacity;
use rustix::event::epoll;
use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

#[derive(Debug)]
pub(crate) struct CompChannel {
    epoll: OwnedFd,
    /// The CQs armed for it, by handle.
    cqs: Mutex<HashMap<u32, Weak<Cq>>>,
    nonblocking: AtomicBool,
}

impl CompChannel {
    pub fn new() -> Result<CompChannel> {
        let epoll = epoll::create(epoll::CreateFlags::CLOEXEC).map_err(std::io::Error::from)?;
        Ok(CompChannel {
            epoll,
            cqs: Mutex::default(),
            nonblocking: AtomicBool::new(false),
        })
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        self.epoll.as_fd()
    }

    pub fn set_nonblocking(&self, on: bool) {
        self.nonblocking.store(on, Ordering::Relaxed);
    }

    pub fn is_nonblocking(&self) -> bool {
        self.nonblocking.load(Ordering::Relaxed)
    }

    /// Arms `cq` for this channel (`ibv_req_notify_cq`).
    pub fn arm(&self, cq: &Arc<Cq>) -> Result<()> {
        if let Entry::Vacant(v) = lock(&self.cqs).entry(cq.handle) {
            let data = epoll::EventData::new_u64(u64::from(cq.handle));
            match epoll::add(&self.epoll, cq.channel_fd(), data, epoll::EventFlags::IN) {
                Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                Err(e) => return Err(std::io::Error::from(e).into()),
            }
            v.insert(Arc::downgrade(cq));
        }
        cq.arm()
    }

    /// The next event (the handle of its CQ), waiting up to `timeout` (None: for ever).
    pub fn next(&self, timeout: Option<Duration>) -> Result<Option<u32>> {
        let until = timeout.and_then(|t| Instant::now().checked_add(t));
        loop {
            let left = until.map(|u| u.saturating_duration_since(Instant::now()));
            let ts = left.and_then(|l| rustix::event::Timespec::try_from(l).ok());
            let mut ready: Vec<epoll::Event> = Vec::with_capacity(8);
            match epoll::wait(&self.epoll, spare_capacity(&mut ready), ts.as_ref()) {
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(std::io::Error::from(e).into()),
            }
            for e in &ready {
                let handle = e.data.u64() as u32;
                let cq = lock(&self.cqs).get(&handle).and_then(Weak::upgrade);
                // An armed CQ reports once per arm: one event taken is the one.
                if cq.is_some_and(|cq| cq.take_events().is_ok_and(|n| n > 0)) {
                    return Ok(Some(handle));
                }
            }
            if left.is_some_and(|l| l.is_zero()) {
                return Ok(None);
            }
        }
    }
}
