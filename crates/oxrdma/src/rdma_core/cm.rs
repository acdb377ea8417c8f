//! The system's `librdmacm.so.1` (loaded at run time as libibverbs is; `OXRDMA_LIBRDMACM`
//! names another file): its calls, its event channels and ids, and how an id moves a QP
//! the API made (`rdma_create_qp` is not used, so, as librdmacm asks of such programs,
//! with the attributes `rdma_init_qp_attr` gives). The event API on them is `cm_id.rs`.

use super::qp::Qp;
use super::verbs::{library, verbs};
use crate::error::{Error, Result};
use oxrdma_verbs_abi::cm::*;
use oxrdma_verbs_abi::{ibv_context, ibv_qp_attr};
use std::ffi::{c_int, c_void, CStr};
use std::net::SocketAddr;
use std::ptr::NonNull;
use std::sync::OnceLock;

fn library_name() -> std::ffi::OsString {
    std::env::var_os("OXRDMA_LIBRDMACM").unwrap_or_else(|| "librdmacm.so.1".into())
}

type Sockaddr = libc::sockaddr;

library! {
    Rdmacm from library_name();
    rdma_create_event_channel: fn() -> *mut rdma_event_channel;
    rdma_destroy_event_channel: fn(*mut rdma_event_channel) -> ();
    rdma_create_id: fn(*mut rdma_event_channel, *mut *mut rdma_cm_id, *mut c_void, u32) -> c_int;
    rdma_destroy_id: fn(*mut rdma_cm_id) -> c_int;
    rdma_migrate_id: fn(*mut rdma_cm_id, *mut rdma_event_channel) -> c_int;
    rdma_bind_addr: fn(*mut rdma_cm_id, *mut Sockaddr) -> c_int;
    rdma_listen: fn(*mut rdma_cm_id, c_int) -> c_int;
    rdma_resolve_addr: fn(*mut rdma_cm_id, *mut Sockaddr, *mut Sockaddr, c_int) -> c_int;
    rdma_resolve_route: fn(*mut rdma_cm_id, c_int) -> c_int;
    rdma_connect: fn(*mut rdma_cm_id, *mut rdma_conn_param) -> c_int;
    rdma_accept: fn(*mut rdma_cm_id, *mut rdma_conn_param) -> c_int;
    rdma_reject: fn(*mut rdma_cm_id, *const c_void, u8) -> c_int;
    rdma_disconnect: fn(*mut rdma_cm_id) -> c_int;
    rdma_establish: fn(*mut rdma_cm_id) -> c_int;
    rdma_init_qp_attr: fn(*mut rdma_cm_id, *mut ibv_qp_attr, *mut c_int) -> c_int;
    rdma_get_cm_event: fn(*mut rdma_event_channel, *mut *mut rdma_cm_event) -> c_int;
    rdma_ack_cm_event: fn(*mut rdma_cm_event) -> c_int;
}

// SAFETY: function pointers into a library that stays loaded; librdmacm's calls may be
// made from any thread.
unsafe impl Send for Rdmacm {}
// SAFETY: as above; nothing is mutated after loading.
unsafe impl Sync for Rdmacm {}

pub(super) fn rdmacm() -> Result<&'static Rdmacm> {
    static LIB: OnceLock<std::result::Result<Rdmacm, String>> = OnceLock::new();
    // libibverbs first: librdmacm needs it, and finds the one loaded by its soname.
    verbs()?;
    LIB.get_or_init(Rdmacm::load)
        .as_ref()
        .map_err(|e| Error::NoRdmaCore(e.clone()))
}

/// A librdmacm call's result: 0, or -1 with errno set.
pub(super) fn check(call: &'static str, rc: c_int) -> Result<()> {
    match rc {
        0 => Ok(()),
        _ => Err(Error::RdmaCore {
            verb: call,
            errno: std::io::Error::last_os_error().raw_os_error().unwrap_or(0),
        }),
    }
}

/// How long address and route resolution may take (librdmacm's own examples' 2 s).
pub(super) const RESOLVE_MS: c_int = 2000;

/// An event channel (`rdma_create_event_channel`).
#[derive(Debug)]
pub(crate) struct Channel(pub(super) NonNull<rdma_event_channel>);

// SAFETY: a descriptor librdmacm reads from; its calls are thread-safe.
unsafe impl Send for Channel {}
// SAFETY: as above.
unsafe impl Sync for Channel {}

impl Channel {
    pub fn new() -> Result<Channel> {
        let cm = rdmacm()?;
        // SAFETY: no arguments; NULL on failure.
        let ch = unsafe { (cm.rdma_create_event_channel)() };
        NonNull::new(ch)
            .map(Channel)
            .ok_or_else(|| Error::RdmaCore {
                verb: "rdma_create_event_channel",
                errno: std::io::Error::last_os_error().raw_os_error().unwrap_or(0),
            })
    }
}

impl Drop for Channel {
    fn drop(&mut self) {
        if let Ok(cm) = rdmacm() {
            // SAFETY: made by `new`, destroyed once, after its ids (their owners hold it).
            unsafe { (cm.rdma_destroy_event_channel)(self.0.as_ptr()) };
        }
    }
}

/// An id (`rdma_create_id`), destroyed when dropped (a connection's DREQ goes then).
#[derive(Debug)]
pub(crate) struct Id {
    id: NonNull<rdma_cm_id>,
}

// SAFETY: librdmacm's calls on an id may come from any thread; it is only read here.
unsafe impl Send for Id {}
// SAFETY: as above.
unsafe impl Sync for Id {}

impl Id {
    /// `rdma_create_id` in port space `ps`, its `context` field holding `key`.
    pub(super) fn create(ch: &Channel, ps: u32, key: u64) -> Result<Id> {
        let cm = rdmacm()?;
        let mut id = std::ptr::null_mut();
        let context = key as usize as *mut c_void;
        // SAFETY: a live channel; `id` is written on success.
        check("rdma_create_id", unsafe {
            (cm.rdma_create_id)(ch.0.as_ptr(), &mut id, context, ps)
        })?;
        Id::from_raw(id).ok_or(Error::RdmaCore {
            verb: "rdma_create_id",
            errno: rustix::io::Errno::NOMEM.raw_os_error(),
        })
    }

    /// The id librdmacm handed over (None for NULL, which it never gives).
    pub(super) fn from_raw(id: *mut rdma_cm_id) -> Option<Id> {
        Some(Id {
            id: NonNull::new(id)?,
        })
    }

    pub(super) fn ptr(&self) -> *mut rdma_cm_id {
        self.id.as_ptr()
    }

    /// Its address on `which` side (`dst`: the peer's).
    pub(super) fn addr(&self, dst: bool) -> Option<SocketAddr> {
        // SAFETY: a live id; the route addresses are plain bytes it owns.
        let route = unsafe { &(*self.ptr()).route.addr };
        from_storage(if dst {
            &route.dst_addr
        } else {
            &route.src_addr
        })
    }

    /// Whether the id is bound to `dev`'s device (after resolution or on a request).
    pub(super) fn on_device(&self, dev: &super::Device) -> Result<()> {
        // SAFETY: a live id; `verbs` is NULL or the context librdmacm opened.
        let ctx: *mut ibv_context = unsafe { (*self.ptr()).verbs };
        let name = (!ctx.is_null())
            .then(|| verbs().ok())
            .flatten()
            // SAFETY: an open context's device, its name a C string it owns.
            .map(|v| unsafe { CStr::from_ptr((v.ibv_get_device_name)((*ctx).device)) });
        match name {
            Some(n) if n.to_bytes() == dev.name.as_bytes() => Ok(()),
            _ => Err(oxrdma_core::VerbsError::InvalidArgument(
                "the RDMA CM routes this connection through another device than the QP's",
            )
            .into()),
        }
    }

    /// Moves `qp` to `state` with the attributes the CM gives for this connection. Before
    /// RTR the QP goes from INIT to INIT again, as librdmacm moves its own: an active
    /// side's INIT came before the REQ, with no remote access allowed yet, and the
    /// connection's rights (REMOTE_WRITE, and READ and atomics with responder resources)
    /// are known only now.
    pub(super) fn move_qp(&self, qp: &Qp, state: oxrdma_core::QpState) -> Result<()> {
        if state == oxrdma_core::QpState::Rtr {
            self.move_qp_once(qp, oxrdma_core::QpState::Init)?;
        }
        self.move_qp_once(qp, state)
    }

    fn move_qp_once(&self, qp: &Qp, state: oxrdma_core::QpState) -> Result<()> {
        let (mut attr, mask) = self.init_attr(state)?;
        qp.modify_raw(&mut attr, mask)
    }

    /// `rdma_init_qp_attr`: the attributes, and their mask, that take a QP of this
    /// connection to `state`.
    pub(super) fn init_attr(&self, state: oxrdma_core::QpState) -> Result<(ibv_qp_attr, c_int)> {
        let cm = rdmacm()?;
        let mut attr = ibv_qp_attr {
            qp_state: state as u32,
            ..Default::default()
        };
        let mut mask = 0;
        // SAFETY: a live id and writable attributes.
        check("rdma_init_qp_attr", unsafe {
            (cm.rdma_init_qp_attr)(self.ptr(), &mut attr, &mut mask)
        })?;
        Ok((attr, mask))
    }
}

impl Drop for Id {
    fn drop(&mut self) {
        if let Ok(cm) = rdmacm() {
            // SAFETY: a live id, destroyed once; its events were acknowledged as they
            // came.
            unsafe { (cm.rdma_destroy_id)(self.ptr()) };
        }
    }
}

/// `addr` in C form.
pub(super) fn to_storage(addr: SocketAddr) -> sockaddr_storage {
    let mut s = sockaddr_storage::default();
    oxrdma_verbs_abi::sockaddr::write(&mut s, addr);
    s
}

/// The address in `s`, if it holds an IPv4 or IPv6 one.
pub(super) fn from_storage(s: &sockaddr_storage) -> Option<SocketAddr> {
    // SAFETY: the storage is 128 bytes, large and aligned enough for either family.
    unsafe { oxrdma_verbs_abi::sockaddr::read(s.bytes.as_ptr().cast()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_addresses_go_to_c_and_back() {
        for a in ["10.1.2.3:7471", "[fd00::5]:18515"] {
            let a: SocketAddr = a.parse().unwrap();
            assert_eq!(from_storage(&to_storage(a)), Some(a));
        }
    }
}
