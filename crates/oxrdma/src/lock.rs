//! The one way this crate takes its mutexes.

use std::sync::{Mutex, MutexGuard};

/// Locks `m`, poisoned or not: a panic while holding one of these locks would be a bug in
/// the engine, and going on with the state as it is beats failing every later call.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
