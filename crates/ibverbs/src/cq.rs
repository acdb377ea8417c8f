//! Completion queues and channels: `ibv_create_comp_channel`, `ibv_destroy_comp_channel`,
//! `ibv_create_cq`, `ibv_destroy_cq`, `ibv_get_cq_event`, `ibv_ack_cq_events`, and the
//! `poll_cq` and `req_notify_cq` ops the header's inline verbs call.

use crate::abi::*;
use crate::context::Context;
use crate::context::{forget, lookup, remember};
use crate::errno::{errno_of, ptr_or_errno, set_errno};
use crate::object::Obj;
use crate::registry::Kind;
use crate::work::write_wc;
use oxrdma::{CompletionChannel, CompletionQueue};
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// A completion channel and how many CQs report to it. Its events name a CQ by handle;
/// the program's `ibv_cq *` comes from the context's registry.
#[derive(Debug)]
pub struct Channel {
    ch: CompletionChannel,
    cqs: AtomicUsize,
}

/// A CQ, the channel it reports to (NULL for none), and the completion the extended
/// polling API is looking at.
#[derive(Debug)]
pub struct Cq {
    cq: CompletionQueue,
    channel: *mut ibv_comp_channel,
    pub(crate) current: Box<Mutex<Option<ibv_wc>>>,
}

pub type ChannelObj = Obj<ibv_comp_channel, Channel>;
/// Every CQ is allocated as an `ibv_cq_ex`, whose start is the `ibv_cq`.
pub type CqObj = Obj<ibv_cq_ex, Cq>;

impl Cq {
    pub fn ox(&self) -> &CompletionQueue {
        &self.cq
    }
}

/// The CQ behind a program's `ibv_cq *`.
///
/// # Safety
/// `p` is NULL or a CQ this library created and the program has not destroyed.
pub(crate) unsafe fn cq_of<'a>(p: *mut ibv_cq) -> Option<&'a CqObj> {
    // SAFETY: the caller's promise; the `ibv_cq` is the start of the `ibv_cq_ex`.
    unsafe { CqObj::get(p.cast()) }
}

/// `ibv_create_comp_channel`: its `fd` works with poll and epoll, and blocks reads until
/// an armed CQ has a completion (unless made non-blocking).
///
/// # Safety
/// `ctx` is NULL or open.
pub(crate) unsafe extern "C" fn create_comp_channel(
    ctx: *mut ibv_context,
) -> *mut ibv_comp_channel {
    // SAFETY: the caller's promise.
    let r = match unsafe { Context::from_ibv(ctx) } {
        None => Err(libc::EINVAL),
        Some(c) => match c.ox.create_comp_channel() {
            Ok(ch) => {
                use std::os::fd::{AsFd, AsRawFd};
                let ibv = ibv_comp_channel {
                    context: ctx,
                    fd: ch.as_fd().as_raw_fd(),
                    refcnt: 0,
                };
                let cqs = AtomicUsize::new(0);
                Ok(ChannelObj::into_raw(ibv, Channel { ch, cqs }))
            }
            Err(e) => Err(errno_of(&e)),
        },
    };
    ptr_or_errno(r)
}

/// `ibv_destroy_comp_channel`: EBUSY while CQs report to it.
///
/// # Safety
/// `channel` is NULL or created and not used by another thread.
pub(crate) unsafe extern "C" fn destroy_comp_channel(channel: *mut ibv_comp_channel) -> c_int {
    // SAFETY: the caller's promise.
    unsafe {
        ChannelObj::destroy(channel, |c| {
            if c.cqs.load(Ordering::Acquire) == 0 {
                Ok(())
            } else {
                let busy = oxrdma::VerbsError::Busy("CQs still report to the channel");
                Err((c, busy.into()))
            }
        })
    }
}

/// `ibv_create_cq`: `cqe` entries (1..=max_cqe), one completion vector.
///
/// # Safety
/// `ctx` is NULL or open; `channel` is NULL or a channel (of `ctx`, or EBADF).
pub(crate) unsafe extern "C" fn create_cq(
    ctx: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
) -> *mut ibv_cq {
    let Ok(cqe) = u32::try_from(cqe) else {
        set_errno(libc::EINVAL);
        return std::ptr::null_mut();
    };
    // SAFETY: the caller's promise.
    let r = unsafe { new_cq(ctx, cqe, cq_context, channel, comp_vector, None) };
    ptr_or_errno(r.map(ibv_cq_ex::as_cq))
}

/// A CQ of `ctx`; `poll` fills in the extended polling functions (`ibv_create_cq_ex`).
///
/// # Safety
/// As `create_cq`.
pub(crate) unsafe fn new_cq(
    ctx: *mut ibv_context,
    cqe: u32,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
    poll: Option<fn(&mut ibv_cq_ex)>,
) -> Result<*mut ibv_cq_ex, c_int> {
    // SAFETY: the caller's promise.
    let c = unsafe { Context::from_ibv(ctx) }.ok_or(libc::EINVAL)?;
    // SAFETY: the caller's promise.
    let ch = unsafe { ChannelObj::get(channel) };
    if cqe < 1 || comp_vector != 0 {
        return Err(libc::EINVAL);
    }
    // A channel of another context: as the kernel, which looks for it among the
    // context's descriptors. (It would hear of CQs its context cannot name.)
    // SAFETY: `ibv()` is the live channel's struct.
    if ch.is_some_and(|ch| unsafe { (*ch.ibv()).context } != ctx) {
        return Err(libc::EBADF);
    }
    let cq = c.ox.create_cq(cqe).map_err(|e| errno_of(&e))?;
    let handle = cq.handle();
    let mut ibv = ibv_cq_ex {
        cq: ibv_cq {
            context: ctx,
            channel,
            cq_context,
            handle,
            cqe: cqe as c_int,
            ..ibv_cq_ex::EMPTY.cq
        },
        ..ibv_cq_ex::EMPTY
    };
    if let Some(f) = poll {
        f(&mut ibv);
    }
    let current = Box::new(Mutex::new(None));
    let p = CqObj::into_raw(
        ibv,
        Cq {
            cq,
            channel,
            current,
        },
    );
    if let Some(ch) = ch {
        ch.ox().cqs.fetch_add(1, Ordering::AcqRel);
    }
    // SAFETY: `ctx` is open (checked above).
    unsafe { remember(ctx, Kind::Cq, handle, p) };
    Ok(p)
}

/// `ibv_destroy_cq`: EBUSY while a QP uses it.
///
/// # Safety
/// `cq` is NULL or created and not used by another thread.
pub(crate) unsafe extern "C" fn destroy_cq(cq: *mut ibv_cq) -> c_int {
    // SAFETY: the caller's promise: NULL or a live CQ.
    let ctx = unsafe { cq.as_ref() }.map_or(std::ptr::null_mut(), |c| c.context);
    // SAFETY: the caller's promise.
    unsafe {
        CqObj::destroy(cq.cast(), |c| {
            let Cq {
                cq,
                channel,
                current,
            } = c;
            let handle = cq.handle();
            match cq.try_destroy() {
                Ok(()) => {
                    // SAFETY: a CQ's channel outlives it (destroying it is EBUSY before).
                    if let Some(ch) = ChannelObj::get(channel) {
                        ch.ox().cqs.fetch_sub(1, Ordering::AcqRel);
                    }
                    // SAFETY: the CQ's context is open while the CQ lives.
                    forget(ctx, Kind::Cq, handle);
                    Ok(())
                }
                Err((cq, e)) => Err((
                    Cq {
                        cq,
                        channel,
                        current,
                    },
                    e,
                )),
            }
        })
    }
}

/// `ops.poll_cq`: up to `n` completions into `wc`; their number, or -1 for a bad CQ.
///
/// # Safety
/// `cq` is NULL or created; `wc` has room for `n` entries.
pub(crate) unsafe extern "C" fn poll_cq(cq: *mut ibv_cq, n: c_int, wc: *mut ibv_wc) -> c_int {
    // SAFETY: the caller's promise.
    let Some(c) = (unsafe { cq_of(cq) }) else {
        return -1;
    };
    if n <= 0 || wc.is_null() {
        return if n == 0 { 0 } else { -1 };
    }
    let mut i = 0usize;
    let r = c.ox().cq.poll_each(n as usize, |w| {
        // SAFETY: `i < n`: poll_each hands out at most `n` completions, and `wc` has
        // room for `n` (caller's promise).
        unsafe { write_wc(wc.add(i), &w) };
        i += 1;
    });
    match r {
        Ok(k) => k as c_int,
        Err(_) => -1,
    }
}

/// `ibv_resize_cq`: 0, or EINVAL for a depth outside 1..=max_cqe or below the completions
/// the CQ holds now (as rxe answers). `cq->cqe` says the new depth.
///
/// # Safety
/// `cq` is NULL or created, and not used by another thread meanwhile (as the verbs ask).
pub(crate) unsafe extern "C" fn resize_cq(cq: *mut ibv_cq, cqe: c_int) -> c_int {
    // SAFETY: the caller's promise.
    let Some(c) = (unsafe { cq_of(cq) }) else {
        return libc::EINVAL;
    };
    let Ok(depth) = u32::try_from(cqe) else {
        return libc::EINVAL;
    };
    match c.ox().cq.resize(depth) {
        Ok(()) => {
            // SAFETY: `cq` is the live CQ (checked above), not used meanwhile.
            unsafe { (*cq).cqe = cqe };
            0
        }
        Err(e) => errno_of(&e),
    }
}

/// `ops.req_notify_cq`: the CQ's channel becomes readable at its next completion (any
/// completion, solicited or not: waking more often than asked is allowed, never less).
///
/// # Safety
/// `cq` is NULL or created.
pub(crate) unsafe extern "C" fn req_notify_cq(cq: *mut ibv_cq, _solicited_only: c_int) -> c_int {
    // SAFETY: the caller's promise.
    let Some(c) = (unsafe { cq_of(cq) }) else {
        return libc::EINVAL;
    };
    // SAFETY: a CQ's channel outlives it.
    if let Some(ch) = unsafe { ChannelObj::get(c.ox().channel) } {
        if let Err(e) = c.ox().cq.req_notify(&ch.ox().ch) {
            return crate::errno::errno_of(&e);
        }
    }
    0
}

/// `ibv_get_cq_event`: waits for the next event of the channel (unless its fd was made
/// non-blocking: then -1 with EAGAIN) and says which CQ it is for.
///
/// # Safety
/// `channel` is NULL or created; `cq` and `cq_context` are writable.
pub(crate) unsafe extern "C" fn get_cq_event(
    channel: *mut ibv_comp_channel,
    cq: *mut *mut ibv_cq,
    cq_context: *mut *mut c_void,
) -> c_int {
    // SAFETY: the caller's promise.
    let Some(ch) = (unsafe { ChannelObj::get(channel) }) else {
        set_errno(libc::EINVAL);
        return -1;
    };
    if cq.is_null() || cq_context.is_null() {
        set_errno(libc::EINVAL);
        return -1;
    }
    loop {
        let handle = match ch.ox().ch.get_event() {
            Ok(Some(h)) => h,
            Ok(None) => {
                set_errno(libc::EAGAIN);
                return -1;
            }
            Err(e) => {
                set_errno(errno_of(&e));
                return -1;
            }
        };
        // An event of a CQ destroyed since: not for anyone; wait for the next.
        // SAFETY: the channel's context is open while the channel lives.
        let Some(p) = (unsafe { lookup::<ibv_cq>((*ch.ibv()).context, Kind::Cq, handle) }) else {
            continue;
        };
        // SAFETY: `p` is a live CQ of the channel's context (destroying it forgets it);
        // `cq` and `cq_context` are writable (caller's promise, not NULL).
        unsafe {
            *cq = p;
            *cq_context = (*p).cq_context;
        }
        return 0;
    }
}

/// `ibv_ack_cq_events`: nothing to release here (destroying a CQ does not wait for its
/// events to be acknowledged).
///
/// # Safety
/// Any arguments (none is touched).
pub(crate) unsafe extern "C" fn ack_cq_events(_cq: *mut ibv_cq, _nevents: u32) {}
