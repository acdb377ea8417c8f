//! The system's `libibverbs.so.1`, loaded when the first rdma-core device is opened (so
//! building oxrdma needs no rdma-core): the exported verbs the backend calls. Posting,
//! polling and arming are inline functions in `verbs.h` that call through the context's
//! op table (`ibv_context.ops`); the backend does the same (`ops`).

use crate::error::{Error, Result};
use oxrdma_verbs_abi::*;
use std::ffi::{c_char, c_int, c_uint, c_void};
use std::sync::OnceLock;

/// The library's file: `OXRDMA_LIBIBVERBS` if set (a path), else the dynamic linker's
/// search for the soname, as a program linked with `-libverbs` would find it.
fn library_name() -> std::ffi::OsString {
    std::env::var_os("OXRDMA_LIBIBVERBS").unwrap_or_else(|| "libibverbs.so.1".into())
}

/// A C library's functions, by their C names and types, in a struct `$lib` loaded from
/// the file `$file()` names.
macro_rules! library {
    ($lib:ident from $file:expr; $($name:ident: fn($($arg:ty),*) -> $ret:ty;)*) => {
        /// The library's exported functions, resolved once.
        pub(crate) struct $lib {
            /// Kept loaded for the life of the process (the pointers below point into it).
            pub(crate) _lib: libloading::Library,
            $(pub(crate) $name: unsafe extern "C" fn($($arg),*) -> $ret,)*
        }

        impl $lib {
            pub(crate) fn load() -> std::result::Result<$lib, String> {
                let name = $file;
                // SAFETY: loading runs the library's initialisers; libibverbs' only set up
                // its own state (it reads its configuration and sysfs lazily).
                let lib = unsafe { libloading::Library::new(&name) }
                    .map_err(|e| format!("cannot load {}: {e}", name.to_string_lossy()))?;
                Ok($lib {
                    $($name: {
                        let sym = concat!(stringify!($name), "\0");
                        // SAFETY: the symbol is the C function of that name in every
                        // version of the library since its first, with the type its
                        // header gives it.
                        let f = unsafe {
                            lib.get::<unsafe extern "C" fn($($arg),*) -> $ret>(sym.as_bytes())
                        };
                        *f.map_err(|e| format!("{}: {e}", stringify!($name)))?
                    },)*
                    _lib: lib,
                })
            }
        }
    };
}
pub(crate) use library;

library! {
    Verbs from library_name();
    ibv_get_device_list: fn(*mut c_int) -> *mut *mut ibv_device;
    ibv_free_device_list: fn(*mut *mut ibv_device) -> ();
    ibv_get_device_name: fn(*mut ibv_device) -> *const c_char;
    ibv_open_device: fn(*mut ibv_device) -> *mut ibv_context;
    ibv_close_device: fn(*mut ibv_context) -> c_int;
    ibv_query_device: fn(*mut ibv_context, *mut ibv_device_attr) -> c_int;
    ibv_query_port: fn(*mut ibv_context, u8, *mut ibv_port_attr) -> c_int;
    ibv_query_gid: fn(*mut ibv_context, u8, c_int, *mut ibv_gid) -> c_int;
    ibv_alloc_pd: fn(*mut ibv_context) -> *mut ibv_pd;
    ibv_dealloc_pd: fn(*mut ibv_pd) -> c_int;
    ibv_reg_mr: fn(*mut ibv_pd, *mut c_void, usize, c_int) -> *mut ibv_mr;
    ibv_dereg_mr: fn(*mut ibv_mr) -> c_int;
    ibv_create_comp_channel: fn(*mut ibv_context) -> *mut ibv_comp_channel;
    ibv_destroy_comp_channel: fn(*mut ibv_comp_channel) -> c_int;
    ibv_create_cq: fn(*mut ibv_context, c_int, *mut c_void, *mut ibv_comp_channel, c_int)
        -> *mut ibv_cq;
    ibv_destroy_cq: fn(*mut ibv_cq) -> c_int;
    ibv_resize_cq: fn(*mut ibv_cq, c_int) -> c_int;
    ibv_get_cq_event: fn(*mut ibv_comp_channel, *mut *mut ibv_cq, *mut *mut c_void) -> c_int;
    ibv_ack_cq_events: fn(*mut ibv_cq, c_uint) -> ();
    ibv_create_qp: fn(*mut ibv_pd, *mut ibv_qp_init_attr) -> *mut ibv_qp;
    ibv_modify_qp: fn(*mut ibv_qp, *mut ibv_qp_attr, c_int) -> c_int;
    ibv_query_qp: fn(*mut ibv_qp, *mut ibv_qp_attr, c_int, *mut ibv_qp_init_attr) -> c_int;
    ibv_destroy_qp: fn(*mut ibv_qp) -> c_int;
    ibv_create_ah: fn(*mut ibv_pd, *mut ibv_ah_attr) -> *mut ibv_ah;
    ibv_destroy_ah: fn(*mut ibv_ah) -> c_int;
    ibv_create_srq: fn(*mut ibv_pd, *mut ibv_srq_init_attr) -> *mut ibv_srq;
    ibv_modify_srq: fn(*mut ibv_srq, *mut ibv_srq_attr, c_int) -> c_int;
    ibv_query_srq: fn(*mut ibv_srq, *mut ibv_srq_attr) -> c_int;
    ibv_destroy_srq: fn(*mut ibv_srq) -> c_int;
    ibv_get_async_event: fn(*mut ibv_context, *mut ibv_async_event) -> c_int;
    ibv_ack_async_event: fn(*mut ibv_async_event) -> ();
}

// SAFETY: plain function pointers into a library that stays loaded; libibverbs' exported
// verbs may be called from any thread.
unsafe impl Send for Verbs {}
// SAFETY: as above; nothing here is mutated after loading.
unsafe impl Sync for Verbs {}

/// The library, loaded at the first call; the same error ever after if it cannot be.
pub(crate) fn verbs() -> Result<&'static Verbs> {
    static VERBS: OnceLock<std::result::Result<Verbs, String>> = OnceLock::new();
    VERBS
        .get_or_init(Verbs::load)
        .as_ref()
        .map_err(|e| Error::NoRdmaCore(e.clone()))
}

/// `_ibv_query_gid_ex` (libibverbs 1.11, rdma-core 32): a GID with its type. Looked up
/// apart from the rest because older libraries lack it (the type is then read from sysfs).
pub(crate) type QueryGidEx =
    unsafe extern "C" fn(*mut ibv_context, u32, u32, *mut ibv_gid_entry, u32, usize) -> c_int;

pub(crate) fn query_gid_ex() -> Option<QueryGidEx> {
    static F: OnceLock<Option<QueryGidEx>> = OnceLock::new();
    *F.get_or_init(|| {
        let v = verbs().ok()?;
        // SAFETY: as in `Verbs::load`: the symbol has this type where it exists.
        unsafe { v._lib.get::<QueryGidEx>(b"_ibv_query_gid_ex\0") }
            .ok()
            .map(|f| *f)
    })
}

/// A failed verb's error: `errno` as the verbs that return NULL leave it.
pub(crate) fn last_error(verb: &'static str) -> Error {
    let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
    Error::RdmaCore {
        verb,
        errno: if errno == 0 { libc_enomem() } else { errno },
    }
}

/// A verb that returns its errno (0 on success, as `ibv_modify_qp` does; some providers
/// return -1 and set errno).
pub(crate) fn check(verb: &'static str, rc: c_int) -> Result<()> {
    match rc {
        0 => Ok(()),
        -1 => Err(last_error(verb)),
        e => Err(Error::RdmaCore {
            verb,
            errno: e.abs(),
        }),
    }
}

/// A call on a non-blocking descriptor that returns 0 or -1 with errno: whether it did
/// something (false: it would have blocked).
pub(crate) fn done_or_would_block(verb: &'static str, rc: c_int) -> Result<bool> {
    if rc == 0 {
        return Ok(true);
    }
    let err = std::io::Error::last_os_error();
    if err.kind() == std::io::ErrorKind::WouldBlock {
        return Ok(false);
    }
    Err(Error::RdmaCore {
        verb,
        errno: err.raw_os_error().unwrap_or(0),
    })
}

fn libc_enomem() -> i32 {
    rustix::io::Errno::NOMEM.raw_os_error()
}
