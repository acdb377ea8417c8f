//! The RDMA CM on an rdma-core device: the system's `librdmacm.so.1` (loaded at run time
//! as libibverbs is; `OXRDMA_LIBRDMACM` names another file) connecting a QP the API made.
//! The QP is not the id's (`rdma_create_qp` is not used), so, as librdmacm asks of such
//! programs, the QP is moved here with the attributes `rdma_init_qp_attr` gives: INIT
//! before the REQ, RTR and RTS on the REP then `rdma_establish` (the RTU); on the passive
//! side INIT and RTR before the REP, RTS once established.

use super::qp::Qp;
use super::verbs::{library, verbs};
use crate::error::{Error, Result};
use oxrdma_verbs_abi::cm::*;
use oxrdma_verbs_abi::{ibv_context, ibv_qp_attr};
use std::ffi::{c_int, c_void, CStr};
use std::net::SocketAddr;
use std::os::fd::BorrowedFd;
use std::ptr::NonNull;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

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

fn rdmacm() -> Result<&'static Rdmacm> {
    static LIB: OnceLock<std::result::Result<Rdmacm, String>> = OnceLock::new();
    // libibverbs first: librdmacm needs it, and finds the one loaded by its soname.
    verbs()?;
    LIB.get_or_init(Rdmacm::load)
        .as_ref()
        .map_err(|e| Error::NoRdmaCore(e.clone()))
}

/// A librdmacm call's result: 0, or -1 with errno set.
fn check(call: &'static str, rc: c_int) -> Result<()> {
    match rc {
        0 => Ok(()),
        _ => Err(Error::RdmaCore {
            verb: call,
            errno: std::io::Error::last_os_error().raw_os_error().unwrap_or(0),
        }),
    }
}

/// How long address and route resolution may take (librdmacm's own examples' 2 s).
const RESOLVE_MS: c_int = 2000;
/// How long a peer may take to answer.
const ANSWER: Duration = Duration::from_secs(30);

/// `RDMA_PS_TCP`.
const PS_TCP: u32 = 0x0106;

/// The events this file waits for (`enum rdma_cm_event_type`).
mod ev {
    pub const ADDR_RESOLVED: u32 = 0;
    pub const ROUTE_RESOLVED: u32 = 2;
    pub const CONNECT_REQUEST: u32 = 4;
    pub const CONNECT_RESPONSE: u32 = 5;
    pub const UNREACHABLE: u32 = 7;
    pub const REJECTED: u32 = 8;
    pub const ESTABLISHED: u32 = 9;
}

/// An event channel (`rdma_create_event_channel`).
#[derive(Debug)]
pub(crate) struct Channel(NonNull<rdma_event_channel>);

// SAFETY: a descriptor librdmacm reads from; its calls are thread-safe.
unsafe impl Send for Channel {}
// SAFETY: as above.
unsafe impl Sync for Channel {}

/// An event, copied out and acknowledged at once (so destroying its id never waits).
struct Event {
    kind: u32,
    status: c_int,
    id: *mut rdma_cm_id,
    private_data: Vec<u8>,
}

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

    /// The next event within `timeout`.
    fn next(&self, timeout: Duration) -> Result<Event> {
        use rustix::event::{poll, PollFd, PollFlags, Timespec};
        let cm = rdmacm()?;
        // SAFETY: the channel is live; its descriptor lives as long.
        let fd = unsafe { BorrowedFd::borrow_raw(self.0.as_ref().fd) };
        let until = Instant::now() + timeout;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            let mut fds = [PollFd::new(&fd, PollFlags::IN)];
            let ts = Timespec::try_from(left).ok();
            match poll(&mut fds, ts.as_ref()) {
                Ok(0) => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "no answer from the peer (RDMA CM)",
                    )
                    .into())
                }
                Ok(_) => break,
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(std::io::Error::from(e).into()),
            }
        }
        let mut e = std::ptr::null_mut();
        // SAFETY: a live channel with an event waiting; `e` is written on success.
        check("rdma_get_cm_event", unsafe {
            (cm.rdma_get_cm_event)(self.0.as_ptr(), &mut e)
        })?;
        // SAFETY: the event librdmacm just returned, valid until acknowledged below.
        let ev = unsafe { &*e };
        // SAFETY: `conn` is the member of connection events; its data pointer holds
        // `private_data_len` bytes until the event is acknowledged (or is NULL).
        let conn = unsafe { ev.param.conn };
        let private_data = if conn.private_data.is_null() {
            Vec::new()
        } else {
            // SAFETY: as above.
            unsafe {
                std::slice::from_raw_parts(
                    conn.private_data.cast::<u8>(),
                    usize::from(conn.private_data_len),
                )
            }
            .to_vec()
        };
        let out = Event {
            kind: ev.event,
            status: ev.status,
            id: ev.id,
            private_data,
        };
        // SAFETY: acknowledged once; nothing of it is read after.
        unsafe { (cm.rdma_ack_cm_event)(e) };
        Ok(out)
    }

    /// The next event, which must be `want` (about any id of the channel).
    fn expect(&self, want: u32) -> Result<Event> {
        let e = self.next(ANSWER)?;
        match e.kind {
            k if k == want => Ok(e),
            ev::REJECTED => Err(Error::Rejected {
                status: e.status,
                private_data: e.private_data,
            }),
            ev::UNREACHABLE => Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the peer did not answer (RDMA CM: unreachable)",
            )
            .into()),
            k => Err(Error::BadPeer(format!(
                "RDMA CM event {k} (status {}) while waiting for {want}",
                e.status
            ))),
        }
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

/// An id (`rdma_create_id`); disconnected (if connected) and destroyed when dropped.
#[derive(Debug)]
pub(crate) struct Id {
    id: NonNull<rdma_cm_id>,
    connected: bool,
}

// SAFETY: librdmacm's calls on an id may come from any thread; it is only read here.
unsafe impl Send for Id {}
// SAFETY: as above.
unsafe impl Sync for Id {}

impl Id {
    fn new(ch: &Channel) -> Result<Id> {
        let cm = rdmacm()?;
        let mut id = std::ptr::null_mut();
        // SAFETY: a live channel; `id` is written on success.
        check("rdma_create_id", unsafe {
            (cm.rdma_create_id)(ch.0.as_ptr(), &mut id, std::ptr::null_mut(), PS_TCP)
        })?;
        Id::from_raw(id).ok_or(Error::RdmaCore {
            verb: "rdma_create_id",
            errno: rustix::io::Errno::NOMEM.raw_os_error(),
        })
    }

    /// The id librdmacm handed over (None for NULL, which it never gives).
    fn from_raw(id: *mut rdma_cm_id) -> Option<Id> {
        Some(Id {
            id: NonNull::new(id)?,
            connected: false,
        })
    }

    fn ptr(&self) -> *mut rdma_cm_id {
        self.id.as_ptr()
    }

    /// Its address on `which` side (`dst`: the peer's).
    fn addr(&self, dst: bool) -> Option<SocketAddr> {
        // SAFETY: a live id; the route addresses are plain bytes it owns.
        let route = unsafe { &(*self.ptr()).route.addr };
        from_storage(if dst {
            &route.dst_addr
        } else {
            &route.src_addr
        })
    }

    /// Whether the id is bound to `dev`'s device (after resolution or on a request).
    fn on_device(&self, dev: &super::Device) -> Result<()> {
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

    /// Moves `qp` to `state` with the attributes the CM gives for this connection.
    fn move_qp(&self, qp: &Qp, state: oxrdma_core::QpState) -> Result<()> {
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
        qp.modify_raw(&mut attr, mask)
    }
}

impl Drop for Id {
    fn drop(&mut self) {
        if let Ok(cm) = rdmacm() {
            // SAFETY: a live id, disconnected once if connected, then destroyed once; its
            // events were acknowledged as they came.
            unsafe {
                if self.connected {
                    (cm.rdma_disconnect)(self.ptr());
                }
                (cm.rdma_destroy_id)(self.ptr());
            }
        }
    }
}

/// The connection parameters of a QP's side: its number, READ depths, retries.
fn conn_param(qp: &Qp, data: &[u8]) -> Result<rdma_conn_param> {
    let depth = qp.pd.dev.attr.max_qp_rd_atom.min(16);
    Ok(rdma_conn_param {
        private_data: data.as_ptr().cast(),
        private_data_len: u8::try_from(data.len())
            .map_err(|_| Error::CmState("private data longer than 255 bytes"))?,
        responder_resources: depth,
        initiator_depth: depth,
        flow_control: 0,
        retry_count: 7,
        rnr_retry_count: 7,
        srq: 0,
        qp_num: qp.qpn,
    })
}

/// A connection: its id and the channel its events come on.
#[derive(Debug)]
pub(crate) struct Conn {
    // Dropped first: the id before its channel.
    id: Id,
    _channel: Channel,
    /// What the peer's REP or REQ carried.
    pub private_data: Vec<u8>,
}

impl Conn {
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        self.id.addr(true)
    }

    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.id.addr(false)
    }
}

/// Connects `qp` (RC, in RESET) to the listener at `addr`, the REQ carrying `data`.
pub(crate) fn connect(qp: &Qp, addr: SocketAddr, data: &[u8]) -> Result<Conn> {
    let cm = rdmacm()?;
    let channel = Channel::new()?;
    let mut id = Id::new(&channel)?;
    let mut dst = to_storage(addr);
    // SAFETY: a live id and a socket address of its family's length.
    check("rdma_resolve_addr", unsafe {
        (cm.rdma_resolve_addr)(
            id.ptr(),
            std::ptr::null_mut(),
            (&mut dst as *mut sockaddr_storage).cast(),
            RESOLVE_MS,
        )
    })?;
    channel.expect(ev::ADDR_RESOLVED)?;
    // SAFETY: a live id whose address is resolved.
    check("rdma_resolve_route", unsafe {
        (cm.rdma_resolve_route)(id.ptr(), RESOLVE_MS)
    })?;
    channel.expect(ev::ROUTE_RESOLVED)?;
    id.on_device(&qp.pd.dev)?;
    id.move_qp(qp, oxrdma_core::QpState::Init)?;
    let mut param = conn_param(qp, data)?;
    // SAFETY: a live, routed id; `param` and the data it points at outlive the call.
    check("rdma_connect", unsafe {
        (cm.rdma_connect)(id.ptr(), &mut param)
    })?;
    let rep = channel.expect(ev::CONNECT_RESPONSE)?;
    id.move_qp(qp, oxrdma_core::QpState::Rtr)?;
    id.move_qp(qp, oxrdma_core::QpState::Rts)?;
    // SAFETY: a live id whose REP came; this sends the RTU.
    check("rdma_establish", unsafe { (cm.rdma_establish)(id.ptr()) })?;
    id.connected = true;
    Ok(Conn {
        id,
        _channel: channel,
        private_data: rep.private_data,
    })
}

/// A listening id.
#[derive(Debug)]
pub(crate) struct Listener {
    id: Id,
    channel: Channel,
}

impl Listener {
    pub fn bind(addr: SocketAddr) -> Result<Listener> {
        let cm = rdmacm()?;
        let channel = Channel::new()?;
        let id = Id::new(&channel)?;
        let mut at = to_storage(addr);
        // SAFETY: a live id and a socket address of its family's length.
        check("rdma_bind_addr", unsafe {
            (cm.rdma_bind_addr)(id.ptr(), (&mut at as *mut sockaddr_storage).cast())
        })?;
        // SAFETY: a live, bound id.
        check("rdma_listen", unsafe { (cm.rdma_listen)(id.ptr(), 128) })?;
        Ok(Listener { id, channel })
    }

    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.id.addr(false)
    }

    /// The next connection request within `timeout`, moved to a channel of its own.
    pub fn next_request(&self, timeout: Duration) -> Result<Request> {
        let cm = rdmacm()?;
        let until = Instant::now() + timeout.min(Duration::from_secs(1 << 30));
        loop {
            let e = self
                .channel
                .next(until.saturating_duration_since(Instant::now()))?;
            if e.kind != ev::CONNECT_REQUEST {
                continue; // nothing else concerns a listener here
            }
            let Some(id) = Id::from_raw(e.id) else {
                continue;
            };
            let channel = Channel::new()?;
            // SAFETY: the request's id, live, moved to a channel that outlives it.
            check("rdma_migrate_id", unsafe {
                (cm.rdma_migrate_id)(id.ptr(), channel.0.as_ptr())
            })?;
            return Ok(Request {
                id,
                channel,
                private_data: e.private_data,
            });
        }
    }
}

/// A connection request, to accept or reject.
#[derive(Debug)]
pub(crate) struct Request {
    id: Id,
    channel: Channel,
    pub private_data: Vec<u8>,
}

impl Request {
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        self.id.addr(true)
    }

    /// Accepts with `qp` (RC, in RESET), the REP carrying `data`.
    pub fn accept(mut self, qp: &Qp, data: &[u8]) -> Result<Conn> {
        let cm = rdmacm()?;
        self.id.on_device(&qp.pd.dev)?;
        self.id.move_qp(qp, oxrdma_core::QpState::Init)?;
        self.id.move_qp(qp, oxrdma_core::QpState::Rtr)?;
        let mut param = conn_param(qp, data)?;
        // SAFETY: a live requested id; `param` and its data outlive the call.
        check("rdma_accept", unsafe {
            (cm.rdma_accept)(self.id.ptr(), &mut param)
        })?;
        self.id.connected = true;
        self.channel.expect(ev::ESTABLISHED)?;
        self.id.move_qp(qp, oxrdma_core::QpState::Rts)?;
        Ok(Conn {
            id: self.id,
            _channel: self.channel,
            private_data: self.private_data,
        })
    }

    /// Rejects it, the REJ carrying `data`.
    pub fn reject(self, data: &[u8]) -> Result<()> {
        let cm = rdmacm()?;
        let len = u8::try_from(data.len())
            .map_err(|_| Error::CmState("private data longer than 255 bytes"))?;
        // SAFETY: a live requested id; the data outlives the call.
        check("rdma_reject", unsafe {
            (cm.rdma_reject)(self.id.ptr(), data.as_ptr().cast(), len)
        })
    }
}

/// `addr` in C form.
fn to_storage(addr: SocketAddr) -> sockaddr_storage {
    let mut s = sockaddr_storage::default();
    oxrdma_verbs_abi::sockaddr::write(&mut s, addr);
    s
}

/// The address in `s`, if it holds an IPv4 or IPv6 one.
fn from_storage(s: &sockaddr_storage) -> Option<SocketAddr> {
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
