//! `rdma_cm_id` and `rdma_event_channel` as C sees them: the program's struct and what
//! the library keeps beside it, the registry that finds an id by its oxrdma key, and what
//! an id does to its QP and route (the calls on them are in `calls.rs`). Each C id holds
//! an `oxrdma::cm::CmId`, made when its device is known (at bind, resolve or listen).

use super::abi::*;
use super::devices::{device_for, CmDevice};
use super::sockaddr;
use crate::abi::{ibv_qp, ibv_qp_init_attr};
use crate::context::Context;
use crate::errno::{errno_of, set_errno};
use oxrdma::cm::{CmEvent, CmId, EventChannel, PortSpace};
use oxrdma::QpType;
use std::cell::UnsafeCell;
use std::collections::{HashMap, HashSet, VecDeque};
use std::ffi::{c_int, c_void};
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};

/// librdmacm's failure: errno set, -1 returned.
pub fn fail(e: c_int) -> c_int {
    set_errno(e);
    -1
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// An event channel: the program's struct first, then the oxrdma channel behind its fd.
#[repr(C)]
#[derive(Debug)]
pub struct Chan {
    pub c: rdma_event_channel,
    pub ox: EventChannel,
    /// Events taken while a synchronous id waited for one of its own.
    pub parked: Mutex<VecDeque<CmEvent>>,
    /// The program's hold (until `rdma_destroy_event_channel`) and each call blocked in
    /// `rdma_get_cm_event` (`Chan::enter`): the last one frees the channel.
    holds: AtomicUsize,
}

/// The addresses of objects this library made that the program has not destroyed yet: a
/// call given any other pointer (a destroyed object's above all) fails with EINVAL and
/// reads nothing there.
struct Live(Mutex<Option<HashSet<usize>>>);

impl Live {
    const fn new() -> Live {
        Live(Mutex::new(None))
    }

    fn set(&self) -> MutexGuard<'_, Option<HashSet<usize>>> {
        lock(&self.0)
    }

    fn insert(&self, p: usize) {
        self.set().get_or_insert_default().insert(p);
    }

    /// False if `p` was not live.
    fn remove(&self, p: usize) -> bool {
        self.set().as_mut().is_some_and(|l| l.remove(&p))
    }

    fn contains(&self, p: usize) -> bool {
        self.set().as_ref().is_some_and(|l| l.contains(&p))
    }
}

/// The channels `Chan::new` made and nobody destroyed yet. rping's event thread calls
/// `rdma_get_cm_event` again after its main thread destroyed the channel (and is
/// exiting): librdmacm then reads a freed struct's stale fd and gets EBADF; a call here
/// on a channel not in this set gets EINVAL, and never touches freed memory.
static LIVE: Live = Live::new();

/// The ids `Id::alloc` made and nobody destroyed yet. Debian's perftest (4.5-0.17), when
/// a connection is rejected, destroys its ids and then calls `rdma_resolve_addr` on them
/// again (its retry loop): librdmacm reads the freed structs and fails the call; a call
/// here on an id not in this set gets EINVAL, and never touches freed memory.
static LIVE_IDS: Live = Live::new();

/// A call's hold on a channel (`Chan::enter`).
pub struct ChanUse(*mut Chan);

impl std::ops::Deref for ChanUse {
    type Target = Chan;
    fn deref(&self) -> &Chan {
        // SAFETY: the hold keeps the channel allocated.
        unsafe { &*self.0 }
    }
}

impl Drop for ChanUse {
    fn drop(&mut self) {
        // SAFETY: this hold is released once, here.
        unsafe { Chan::release(self.0) }
    }
}

impl Chan {
    pub fn new() -> Result<*mut Chan, c_int> {
        use std::os::fd::{AsFd, AsRawFd};
        let ox = EventChannel::new_engine().map_err(|e| errno_of(&e))?;
        let fd = ox.as_fd().as_raw_fd();
        let p = Box::into_raw(Box::new(Chan {
            c: rdma_event_channel { fd },
            ox,
            parked: Mutex::default(),
            holds: AtomicUsize::new(1),
        }));
        LIVE.insert(p as usize);
        Ok(p)
    }

    /// Destroys channel `p` (`rdma_destroy_event_channel`, or an id's private channel):
    /// later calls on it fail, and the program's hold goes (a call still blocked on it
    /// keeps it until it returns). False if it was not a live channel.
    ///
    /// # Safety
    /// `p` is any pointer: only a live channel is touched.
    pub unsafe fn destroy(p: *mut Chan) -> bool {
        let live = LIVE.remove(p as usize);
        if live {
            // SAFETY: live until here, and this is the program's hold.
            unsafe { Self::release(p) };
        }
        live
    }

    /// A hold on channel `p` for a call that may block on it. rping destroys its channel
    /// while its event thread still waits in `rdma_get_cm_event`: librdmacm's thread then
    /// stays blocked on the fd it read, and so does this one, on memory still there.
    ///
    /// # Safety
    /// As `get`.
    pub unsafe fn enter(p: *mut rdma_event_channel) -> Option<ChanUse> {
        // Under the registry's lock: a destroy cannot release the channel between the
        // check and the hold.
        let live = LIVE.set();
        if !live.as_ref().is_some_and(|l| l.contains(&(p as usize))) {
            return None;
        }
        // SAFETY: live, so allocated.
        unsafe { (*p.cast::<Chan>()).holds.fetch_add(1, Ordering::AcqRel) };
        Some(ChanUse(p.cast()))
    }

    /// Releases a hold (the program's, at `rdma_destroy_event_channel`, or a call's); the
    /// last frees the channel.
    ///
    /// # Safety
    /// `p` is a channel `new` made, and the caller has a hold on it that it gives up.
    pub unsafe fn release(p: *mut Chan) {
        // SAFETY: the caller's hold keeps it allocated until here.
        if unsafe { (*p).holds.fetch_sub(1, Ordering::AcqRel) } == 1 {
            // SAFETY: no hold is left: nobody else can reach it.
            drop(unsafe { Box::from_raw(p) });
        }
    }

    /// The channel at `p` if it is live (None for NULL, a destroyed one, or one not
    /// ours).
    ///
    /// # Safety
    /// The program does not destroy it while the reference is used (ids' channels outlive
    /// their ids).
    pub unsafe fn get<'a>(p: *mut rdma_event_channel) -> Option<&'a Chan> {
        if !LIVE.contains(p as usize) {
            return None;
        }
        // SAFETY: live; `c` is the first field of the repr(C) Chan.
        unsafe { p.cast::<Chan>().as_ref() }
    }
}

/// What an id keeps besides the program's struct.
#[derive(Debug, Default)]
pub struct State {
    pub ox: Option<CmId>,
    /// The device the oxrdma id is on (shown as `verbs` and `pd` unless `hide_device`).
    pub dev: Option<CmDevice>,
    /// No channel was given: each call waits for its event (on a channel of its own).
    pub sync: bool,
    pub own_chan: usize,
    /// `rdma_create_ep`: private data for the REQ, and (passive) the QP each request gets.
    pub connect_data: Vec<u8>,
    pub qp_init: Option<ibv_qp_init_attr>,
}

/// An id: the program's `rdma_cm_id` first, then its state.
#[repr(C)]
#[derive(Debug)]
pub struct Id {
    pub c: UnsafeCell<rdma_cm_id>,
    pub st: Mutex<State>,
    /// Events handed to the program and not yet acked (`rdma_destroy_id` waits for them).
    pub unacked: Mutex<u32>,
    pub acked: Condvar,
    /// The path record `c.route.path_rec` points to.
    pub path: UnsafeCell<ibv_sa_path_rec>,
}

// SAFETY: the raw pointers inside are the program's handles, used from any thread as C
// does; the state is behind mutexes.
unsafe impl Send for Id {}
// SAFETY: as above.
unsafe impl Sync for Id {}

/// Every live id by its oxrdma key (events name ids by key).
static IDS: Mutex<Option<HashMap<u64, usize>>> = Mutex::new(None);

pub fn register(key: u64, id: *mut Id) {
    let mut ids = lock(&IDS);
    if ids.is_none() {
        // SAFETY: registers a plain function with libc, once per process.
        unsafe { libc::atexit(end_all) };
    }
    ids.get_or_insert_with(HashMap::new)
        .insert(key, id as usize);
}

/// At `exit`: ends every connection still open, as the kernel does for a process that
/// exits with its ids (connected: DREQ; a request unanswered: REJ), so that peers are not
/// left waiting for a DREP until their retries run out (qperf's server exits so).
extern "C" fn end_all() {
    let ids: Vec<usize> = lock(&IDS)
        .as_ref()
        .map(|m| m.values().copied().collect())
        .unwrap_or_default();
    for p in ids {
        // SAFETY: registered ids are live; the program is exiting and calls no more.
        let id = unsafe { &*(p as *const Id) };
        let ox = lock(&id.st).ox.take();
        if let Some(ox) = ox {
            unregister(ox.key().0);
            // A signal handler that called `exit` (libinfinipath's does, on SIGTERM) may
            // have interrupted this very thread inside the library, holding the device:
            // then the connection is left to the peer's timeouts, and the exit goes on.
            if ox
                .context()
                .free_within(std::time::Duration::from_millis(100))
            {
                drop(ox);
            } else {
                std::mem::forget(ox);
            }
        }
    }
}

pub fn unregister(key: u64) {
    if let Some(m) = lock(&IDS).as_mut() {
        m.remove(&key);
    }
}

/// The live id with oxrdma key `key`.
pub fn by_key(key: u64) -> Option<*mut Id> {
    lock(&IDS)
        .as_ref()
        .and_then(|m| m.get(&key).copied())
        .map(|p| p as *mut Id)
}

impl Id {
    /// The id at `p` if it is live (None for NULL, a destroyed id, or one not ours).
    ///
    /// # Safety
    /// The program does not destroy it while the reference is used (as librdmacm, this
    /// library does not guard an id against its destruction by another thread mid-call).
    pub unsafe fn get<'a>(p: *mut rdma_cm_id) -> Option<&'a Id> {
        if !LIVE_IDS.contains(p as usize) {
            return None;
        }
        // SAFETY: live; `c` is the first field of the repr(C) Id.
        unsafe { p.cast::<Id>().as_ref() }
    }

    /// [`Self::get`] for `rdma_destroy_id`: the id is no longer live once this returns it
    /// (a second destroy, or any later call, gets EINVAL), and the caller frees it.
    ///
    /// # Safety
    /// As `get`.
    pub unsafe fn take<'a>(p: *mut rdma_cm_id) -> Option<&'a Id> {
        if !LIVE_IDS.remove(p as usize) {
            return None;
        }
        // SAFETY: live until just now, and only the caller frees it.
        unsafe { p.cast::<Id>().as_ref() }
    }

    pub fn c(&self) -> *mut rdma_cm_id {
        self.c.get()
    }

    /// A new id on `channel` (already known to be ours), as `rdma_create_id` makes it.
    pub fn alloc(
        channel: *mut rdma_event_channel,
        context: *mut c_void,
        ps: u32,
        qp_type: u32,
    ) -> *mut Id {
        let id = Box::new(Id {
            c: UnsafeCell::new(rdma_cm_id {
                verbs: std::ptr::null_mut(),
                channel,
                context,
                qp: std::ptr::null_mut(),
                route: rdma_route {
                    addr: rdma_addr::default(),
                    path_rec: std::ptr::null_mut(),
                    num_paths: 0,
                },
                ps,
                port_num: 0,
                event: std::ptr::null_mut(),
                send_cq_channel: std::ptr::null_mut(),
                send_cq: std::ptr::null_mut(),
                recv_cq_channel: std::ptr::null_mut(),
                recv_cq: std::ptr::null_mut(),
                srq: std::ptr::null_mut(),
                pd: std::ptr::null_mut(),
                qp_type,
            }),
            st: Mutex::default(),
            unacked: Mutex::new(0),
            acked: Condvar::new(),
            path: UnsafeCell::new(ibv_sa_path_rec::default()),
        });
        let p = Box::into_raw(id);
        LIVE_IDS.insert(p as usize);
        p
    }

    pub fn port_space(&self) -> PortSpace {
        // SAFETY: the id is live; `ps` is written only at creation.
        let ps = unsafe { (*self.c()).ps };
        PortSpace::from_value(ps as u16).unwrap_or(PortSpace::Tcp)
    }

    pub fn qp_type(&self) -> QpType {
        // SAFETY: as above.
        match unsafe { (*self.c()).qp_type } {
            3 => QpType::Uc,
            4 => QpType::Ud,
            _ => QpType::Rc,
        }
    }

    /// The channel this id's events come on.
    pub fn chan(&self) -> Option<&Chan> {
        // SAFETY: the id's channel outlives it (the program destroys ids first).
        unsafe { Chan::get((*self.c()).channel) }
    }

    /// The oxrdma id, made on the device for `ip` if there is none yet.
    pub fn ox_for(&self, ip: Option<IpAddr>) -> Result<CmId, c_int> {
        let mut st = lock(&self.st);
        if let Some(ox) = &st.ox {
            return Ok(ox.clone());
        }
        let dev = device_for(ip.filter(|ip| !ip.is_unspecified()))?;
        let chan = self.chan().ok_or(libc::EINVAL)?;
        // SAFETY: `dev.verbs()` is open for the process's life.
        let ctx = unsafe { Context::from_ibv(dev.verbs()) }.ok_or(libc::ENODEV)?;
        let ox = CmId::with_type(&chan.ox, &ctx.ox, self.port_space(), self.qp_type())
            .map_err(|e| crate::errno::errno_of(&e))?;
        register(ox.key().0, std::ptr::from_ref(self).cast_mut());
        self.on_device(dev);
        st.ox = Some(ox.clone());
        st.dev = Some(dev);
        Ok(ox)
    }

    /// Shows the id's device as `verbs` (and its PD) again, after `hide_device`.
    pub fn show_device(&self) {
        if let Some(dev) = lock(&self.st).dev {
            self.on_device(dev);
        }
    }

    /// Shows no device, as the kernel's CM for an id bound to a loopback address where no
    /// RDMA device has one (a host whose devices are on its interfaces): the id gets one
    /// when it resolves a route or takes a request. (libfabric then offers the devices'
    /// own addresses to listen on, which other hosts reach, not 127.0.0.1.)
    pub fn hide_device(&self) {
        let c = self.c();
        // SAFETY: the id is live; the library writes these.
        unsafe {
            if (*c).verbs
                == lock(&self.st)
                    .dev
                    .map_or(std::ptr::null_mut(), |d| d.verbs())
            {
                (*c).verbs = std::ptr::null_mut();
                (*c).pd = std::ptr::null_mut();
            }
        }
    }

    /// The oxrdma id, if it has one.
    pub fn ox(&self) -> Result<CmId, c_int> {
        lock(&self.st).ox.clone().ok_or(libc::EINVAL)
    }

    fn on_device(&self, dev: CmDevice) {
        let c = self.c();
        // SAFETY: the id is live; the program reads these, the library writes them.
        unsafe {
            (*c).verbs = dev.verbs();
            if (*c).pd.is_null() {
                (*c).pd = dev.pd();
            }
            (*c).port_num = 1;
        }
    }

    /// Writes the id's addresses and path (`route`) as they stand.
    pub fn write_route(&self, ox: &CmId) {
        let c = self.c();
        let ctx = ox.context();
        let own = ox.local_gid().0;
        // SAFETY: the id is live; the library owns `route`.
        unsafe {
            if let Some(a) = ox.local_addr() {
                sockaddr::write(&mut (*c).route.addr.src_addr, a);
            }
            if let Some(a) = ox.peer_addr() {
                sockaddr::write(&mut (*c).route.addr.dst_addr, a);
            }
            let dgid = ox
                .peer_gid()
                .or_else(|| ox.peer_addr().map(|a| a.ip().into()))
                .unwrap_or_default();
            (*c).route.addr.ibaddr.sgid.raw = own.0;
            (*c).route.addr.ibaddr.dgid.raw = dgid.0;
            (*c).route.addr.ibaddr.pkey = 0xffff;
            let p = &mut *self.path.get();
            p.sgid.raw = own.0;
            p.dgid.raw = dgid.0;
            p.hop_limit = 64;
            p.pkey = 0xffffu16.to_be();
            p.reversible = 1;
            p.numb_path = 1;
            p.mtu = ctx.active_mtu() as u8;
            p.packet_life_time = 18;
            if let (Some(s), Some(d)) = (ox.local_addr(), ox.peer_addr()) {
                p.flow_label = oxrdma::cm::flow_label(s.port(), d.port()).to_be();
            }
            (*c).route.path_rec = self.path.get();
            (*c).route.num_paths = 1;
        }
    }

    /// The program's QP on this id, if it made one.
    pub fn qp(&self) -> *mut ibv_qp {
        // SAFETY: the id is live.
        unsafe { (*self.c()).qp }
    }
}
