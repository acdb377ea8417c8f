//! What a program may call but oxrdma does not offer, answered as rdma-core answers it on
//! a device without the feature, and the private entry points that Debian's hardware
//! provider libraries (libmlx5, libefa: linked into perftest) bind at load time but only
//! call for a device of theirs, which never exists here.

use crate::errno::set_errno;
use std::ffi::{c_char, c_int, c_void};

/// An int-returning verb that is not offered: EOPNOTSUPP, returned and in errno.
pub(crate) extern "C" fn not_supported() -> c_int {
    set_errno(libc::EOPNOTSUPP);
    libc::EOPNOTSUPP
}

/// A pointer-returning verb that is not offered: NULL with errno EOPNOTSUPP.
pub(crate) extern "C" fn no_object() -> *mut c_void {
    set_errno(libc::EOPNOTSUPP);
    std::ptr::null_mut()
}

/// A void entry point with nothing to do (a provider registering itself, a log line).
pub(crate) extern "C" fn nothing() {}

/// Fork needs no care: registered memory is the program's own, with nothing pinned.
pub(crate) extern "C" fn fork_init() -> c_int {
    0
}

/// `ibv_is_fork_initialized`: `IBV_FORK_UNNEEDED`.
pub(crate) extern "C" fn is_fork_initialized() -> c_int {
    2
}

/// `ibv_query_qp_data_in_order`: 0, no promise beyond the spec's (rxe's provider has no
/// such operation, for which rdma-core answers the same).
pub(crate) extern "C" fn no_order_promise() -> c_int {
    0
}

/// `ibv_get_sysfs_path`.
pub(crate) extern "C" fn sysfs_path() -> *const c_char {
    c"/sys".as_ptr()
}

/// `ibv_get_pkey_index`: the one P_Key, 0xffff, is at index 0.
pub(crate) extern "C" fn get_pkey_index(_ctx: *mut c_void, port: u8, pkey: u16) -> c_int {
    if port == 1 && u16::from_be(pkey) == 0xffff {
        0
    } else {
        set_errno(libc::ENOENT);
        -1
    }
}
