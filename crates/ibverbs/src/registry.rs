//! Each context's CQs, QPs and SRQs by the numbers oxrdma's events carry (a CQ's handle,
//! a QPN, an SRQ's id), so that a completion event or an asynchronous event can hand the
//! program its own pointer. An object is remembered when created and forgotten when
//! destroyed; an event for a number no longer here is for nobody.

use crate::abi::ibv_context;
use crate::context::Context;
use std::collections::HashMap;

/// Which table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Cq,
    Qp,
    Srq,
}

/// The program's pointers, by kind and number.
#[derive(Debug, Default)]
pub struct Registry {
    objects: HashMap<(Kind, u32), usize>,
}

/// Runs `f` on the registry of `ctx`; None if `ctx` is NULL.
///
/// # Safety
/// `ctx` is NULL or an open context.
unsafe fn with<R>(ctx: *mut ibv_context, f: impl FnOnce(&mut Registry) -> R) -> Option<R> {
    // SAFETY: the caller's promise.
    let c = unsafe { Context::from_ibv(ctx) }?;
    let mut r = c.objects.lock().unwrap_or_else(|p| p.into_inner());
    Some(f(&mut r))
}

/// Remembers the program's pointer `p` to object `id` of `ctx`.
///
/// # Safety
/// As `with`.
pub(crate) unsafe fn remember<T>(ctx: *mut ibv_context, kind: Kind, id: u32, p: *mut T) {
    // SAFETY: the caller's promise.
    unsafe { with(ctx, |r| r.objects.insert((kind, id), p as usize)) };
}

/// Forgets object `id` of `ctx` (it was destroyed).
///
/// # Safety
/// As `with`.
pub(crate) unsafe fn forget(ctx: *mut ibv_context, kind: Kind, id: u32) {
    // SAFETY: the caller's promise.
    unsafe { with(ctx, |r| r.objects.remove(&(kind, id))) };
}

/// The program's pointer to object `id` of `ctx`, if it still exists.
///
/// # Safety
/// As `with`.
pub(crate) unsafe fn lookup<T>(ctx: *mut ibv_context, kind: Kind, id: u32) -> Option<*mut T> {
    // SAFETY: the caller's promise.
    unsafe { with(ctx, |r| r.objects.get(&(kind, id)).copied()) }
        .flatten()
        .map(|p| p as *mut T)
}
