//! Completion queues on an rdma-core device, each with a completion channel of its own
//! for the API's blocking waits.

use super::convert::work_completion;
use super::device::Device;
use super::verbs::{check, last_error, verbs};
use crate::error::{Error, Result};
use oxrdma_core::{VerbsError, WorkCompletion};
use oxrdma_verbs_abi::*;
use std::os::fd::BorrowedFd;
use std::ptr::NonNull;
use std::sync::Arc;
use std::time::Duration;

/// Completions taken from the provider per call.
const BATCH: usize = 16;

/// `ibv_create_cq` with its own `ibv_comp_channel` (non-blocking).
#[derive(Debug)]
pub(crate) struct Cq {
    pub dev: Arc<Device>,
    cq: NonNull<ibv_cq>,
    /// The number its asynchronous events and completion events name.
    pub handle: u32,
    channel: NonNull<ibv_comp_channel>,
}

// SAFETY: rdma-core's CQ verbs (poll, arm, events) may be called from any thread.
unsafe impl Send for Cq {}
// SAFETY: as above.
unsafe impl Sync for Cq {}

impl Cq {
    pub fn create(dev: &Arc<Device>, depth: u32) -> Result<Cq> {
        let v = verbs()?;
        let depth = i32::try_from(depth)
            .map_err(|_| VerbsError::InvalidArgument("CQ depth beyond rdma-core's"))?;
        // SAFETY: an open context.
        let channel = unsafe { (v.ibv_create_comp_channel)(dev.ctx()) };
        let channel = NonNull::new(channel).ok_or_else(|| last_error("ibv_create_comp_channel"))?;
        // SAFETY: an open context and its channel.
        let cq = unsafe {
            (v.ibv_create_cq)(dev.ctx(), depth, std::ptr::null_mut(), channel.as_ptr(), 0)
        };
        let Some(cq) = NonNull::new(cq) else {
            let e = last_error("ibv_create_cq");
            // SAFETY: made above, destroyed once.
            unsafe { (v.ibv_destroy_comp_channel)(channel.as_ptr()) };
            return Err(e);
        };
        // From here on Drop destroys both.
        let made = Cq {
            dev: dev.clone(),
            // SAFETY: the CQ the library just returned.
            handle: unsafe { cq.as_ref().handle },
            cq,
            channel,
        };
        crate::fdqueue::set_nonblocking(made.channel_fd(), true)?;
        Ok(made)
    }

    /// The channel's descriptor (non-blocking): readable when an armed completion comes, for
    /// a reactor or an epoll set (`take_events` then).
    pub fn channel_fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the channel and its descriptor live while this CQ does.
        unsafe { BorrowedFd::borrow_raw(self.channel.as_ref().fd) }
    }

    pub fn ptr(&self) -> *mut ibv_cq {
        self.cq.as_ptr()
    }

    /// The context's op table (`ibv_poll_cq` and `ibv_req_notify_cq` are inline calls
    /// through it).
    fn ops(&self) -> &ibv_context_ops {
        // SAFETY: the device is open while this CQ holds it; the table is not written
        // after the context is made.
        unsafe { &(*self.dev.ctx()).ops }
    }

    /// Hands up to `max` completions to `f`, oldest first; returns how many.
    pub fn poll_each(&self, max: usize, f: &mut dyn FnMut(WorkCompletion)) -> Result<usize> {
        let poll = self.ops().poll_cq.ok_or(Error::Unsupported("poll_cq"))?;
        let mut wcs = [ibv_wc::default(); BATCH];
        let mut n = 0;
        while n < max {
            let want = (max - n).min(BATCH);
            // SAFETY: a live CQ and room for `want` completions.
            let got = unsafe { poll(self.ptr(), want as i32, wcs.as_mut_ptr()) };
            let got = usize::try_from(got).map_err(|_| Error::RdmaCore {
                verb: "ibv_poll_cq",
                errno: got.abs(),
            })?;
            for wc in &wcs[..got] {
                f(work_completion(wc)?);
            }
            n += got;
            if got < want {
                break;
            }
        }
        Ok(n)
    }

    /// `ibv_resize_cq`.
    pub fn resize(&self, depth: u32) -> Result<()> {
        let v = verbs()?;
        let depth = i32::try_from(depth)
            .map_err(|_| VerbsError::InvalidArgument("CQ depth beyond rdma-core's"))?;
        // SAFETY: a live CQ.
        check("ibv_resize_cq", unsafe {
            (v.ibv_resize_cq)(self.ptr(), depth)
        })
    }

    /// Asks for an event at the next completion (`ibv_req_notify_cq`, any completion).
    pub fn arm(&self) -> Result<()> {
        let arm = self
            .ops()
            .req_notify_cq
            .ok_or(Error::Unsupported("req_notify_cq"))?;
        // SAFETY: a live CQ.
        check("ibv_req_notify_cq", unsafe { arm(self.ptr(), 0) })
    }

    /// Sleeps until the CQ's channel reports it (after `arm`) or `left` passes; takes and
    /// acknowledges the events. Whether one came.
    pub fn sleep(&self, left: Duration) -> Result<bool> {
        use rustix::event::{poll, PollFd, PollFlags, Timespec};
        let fd = self.channel_fd();
        let mut fds = [PollFd::new(&fd, PollFlags::IN)];
        let ts = Timespec::try_from(left).ok();
        match poll(&mut fds, ts.as_ref()) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(std::io::Error::from(e).into()),
        }
        Ok(self.take_events()? > 0)
    }

    /// Takes and acknowledges every event the channel holds, without waiting; how many.
    pub fn take_events(&self) -> Result<usize> {
        let v = verbs()?;
        let mut n = 0;
        loop {
            let mut cq = std::ptr::null_mut();
            let mut user = std::ptr::null_mut();
            // SAFETY: the channel is live; the descriptor is non-blocking, so this returns
            // at once whether or not an event waits.
            let rc = unsafe { (v.ibv_get_cq_event)(self.channel.as_ptr(), &mut cq, &mut user) };
            if rc != 0 {
                return Ok(n);
            }
            // SAFETY: the one event just taken, of this channel's only CQ.
            unsafe { (v.ibv_ack_cq_events)(cq, 1) };
            n += 1;
        }
    }
}

impl Drop for Cq {
    fn drop(&mut self) {
        if let Ok(v) = verbs() {
            // SAFETY: made by `create`; every event taken was acknowledged at once; the
            // CQ goes before its channel, each once, after the QPs that use it (each
            // holds it).
            unsafe {
                (v.ibv_destroy_cq)(self.ptr());
                (v.ibv_destroy_comp_channel)(self.channel.as_ptr());
            }
        }
    }
}
