//! errno values: what rdma-core on rxe answers for each kind of failure.

use oxrdma::Error;
use oxrdma::VerbsError;
use std::ffi::c_int;

/// Sets the C `errno`.
pub(crate) fn set_errno(e: c_int) {
    // SAFETY: __errno_location returns this thread's errno, always valid.
    unsafe { *libc::__errno_location() = e };
}

/// The errno for `e`, as the kernel's uverbs and rxe return it.
pub(crate) fn errno_of(e: &Error) -> c_int {
    match e {
        Error::Verbs(v) => match v {
            VerbsError::InvalidArgument(_)
            | VerbsError::InvalidTransition { .. }
            | VerbsError::NotFound(_)
            | VerbsError::BadState { .. } => libc::EINVAL,
            VerbsError::Exhausted(_) | VerbsError::OutOfMemory => libc::ENOMEM,
            VerbsError::Busy(_) => libc::EBUSY,
            _ => libc::EINVAL,
        },
        Error::Io(io) => io.raw_os_error().unwrap_or(libc::EIO),
        Error::Cm(oxrdma::CmError::InUse) => libc::EADDRINUSE,
        Error::Cm(_) | Error::CmState(_) => libc::EINVAL,
        Error::Unsupported(_) => libc::EOPNOTSUPP,
        Error::RdmaCore { errno, .. } => *errno,
        _ => libc::EIO,
    }
}

/// For verbs that return a pointer: the value, or NULL with errno set.
pub(crate) fn ptr_or_errno<T>(r: Result<*mut T, c_int>) -> *mut T {
    r.unwrap_or_else(|e| {
        set_errno(e);
        std::ptr::null_mut()
    })
}

/// The C `errno` as it stands, if set.
pub(crate) fn last_errno() -> Option<c_int> {
    // SAFETY: __errno_location returns this thread's errno, always valid.
    let e = unsafe { *libc::__errno_location() };
    (e != 0).then_some(e)
}
