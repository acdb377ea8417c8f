//! librdmacm's event API on an rdma-core device: the API's `CmId` and `EventChannel` over
//! the system's `rdma_cm_id` and `rdma_event_channel`. As librdmacm does for a QP made by
//! `rdma_create_qp`, an id moves the QP attached to it: INIT when attached (a UD QP on to
//! RTS), RTR and RTS on `accept` or when the REP comes (then the RTU, and the program sees
//! ESTABLISHED, or CONNECT_ERROR if a move failed), ERR on a rejection, an unreachable peer
//! or `disconnect`. Events are copied out and acknowledged as they are taken, so
//! destroying an id never waits for the program.

use super::cm::{check, rdmacm, to_storage, Channel, Id, RESOLVE_MS};
use super::qp::Qp;
use super::verbs::done_or_would_block;
use crate::cm::{CmEvent, CmEventType, CmIdKey, ConnParam, PortSpace, UdParam};
use crate::context::Context;
use crate::error::{Error, Result};
use crate::lock::lock;
use oxrdma_core::{Gid, QpAttr, QpState, QpType, VerbsError};
use oxrdma_verbs_abi::cm::*;
use rustix::io::Errno;
use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::net::SocketAddr;
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// An event channel and the ids whose events come on it (by key, which each id's
/// `context` field holds).
#[derive(Debug)]
pub(crate) struct RcChannel {
    ch: Channel,
    ids: Mutex<HashMap<u64, Weak<RcId>>>,
    /// Whether `get_event` returns at once when none waits. The descriptor itself is
    /// always non-blocking, so that a thread never blocks in `rdma_get_cm_event` on an
    /// event another thread took.
    nonblocking: AtomicBool,
}

impl RcChannel {
    pub fn new() -> Result<Arc<RcChannel>> {
        let ch = RcChannel {
            ch: Channel::new()?,
            ids: Mutex::default(),
            nonblocking: AtomicBool::new(false),
        };
        crate::fdqueue::set_nonblocking(ch.fd(), true)?;
        Ok(Arc::new(ch))
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the channel is live; its descriptor lives as long.
        unsafe { BorrowedFd::borrow_raw(self.ch.0.as_ref().fd) }
    }

    pub fn set_nonblocking(&self, on: bool) {
        self.nonblocking.store(on, Ordering::Relaxed);
    }

    pub fn is_nonblocking(&self) -> bool {
        self.nonblocking.load(Ordering::Relaxed)
    }

    /// The next event, waiting up to `timeout` (None: for ever) for it.
    pub fn next(self: &Arc<Self>, timeout: Option<Duration>) -> Result<Option<CmEvent>> {
        use rustix::event::{poll, PollFd, PollFlags, Timespec};
        let until = timeout.and_then(|t| Instant::now().checked_add(t));
        loop {
            if let Some(e) = self.take()? {
                return Ok(Some(e));
            }
            let left = until.map(|u| u.saturating_duration_since(Instant::now()));
            if left.is_some_and(|l| l.is_zero()) {
                return Ok(None);
            }
            let ts = left.and_then(|l| Timespec::try_from(l).ok());
            let fd = self.fd();
            let mut fds = [PollFd::new(&fd, PollFlags::IN)];
            match poll(&mut fds, ts.as_ref()) {
                Ok(_) | Err(Errno::INTR) => {}
                Err(e) => return Err(std::io::Error::from(e).into()),
            }
        }
    }

    /// The next event if one waits (None also for an event of an id already gone).
    fn take(self: &Arc<Self>) -> Result<Option<CmEvent>> {
        let cm = rdmacm()?;
        let mut e = std::ptr::null_mut();
        // SAFETY: a live channel whose descriptor is non-blocking; `e` is written on
        // success.
        let rc = unsafe { (cm.rdma_get_cm_event)(self.ch.0.as_ptr(), &mut e) };
        if !done_or_would_block("rdma_get_cm_event", rc)? {
            return Ok(None);
        }
        // SAFETY: the event just returned, valid until acknowledged below; its ids are
        // live (an event's id is not destroyed before its events are acknowledged).
        let raw = unsafe { copy_event(&*e) };
        // SAFETY: acknowledged once; nothing of it is read after.
        unsafe { (cm.rdma_ack_cm_event)(e) };
        let Some(kind) = CmEventType::from_raw(raw.event) else {
            return Ok(None); // a kind this API does not name (none reach RC or UD ids)
        };
        let mut ev = CmEvent {
            event: kind,
            id: CmIdKey(raw.key),
            listen_id: raw.listen_key.map(CmIdKey),
            new_id: None,
            status: raw.status,
            conn: raw.conn,
            ud: raw.ud,
        };
        if kind == CmEventType::ConnectRequest {
            let Some(new) = self.adopt(raw.id, raw.listen_key) else {
                return Ok(None);
            };
            ev.id = CmIdKey(new.key);
            ev.new_id = Some(crate::cm::CmId::from_rdma_core(new));
            return Ok(Some(ev));
        }
        let id = lock(&self.ids).get(&raw.key).and_then(Weak::upgrade);
        if let Some(id) = id {
            (ev.event, ev.status) = id.on_event(kind, raw.status);
        }
        Ok(Some(ev))
    }

    /// The id a connection request made, as the listener's child; None (and the request
    /// turned away) if the listener is gone.
    fn adopt(self: &Arc<Self>, raw: *mut rdma_cm_id, listener: Option<u64>) -> Option<Arc<RcId>> {
        let id = Id::from_raw(raw)?;
        let listener = listener.and_then(|k| lock(&self.ids).get(&k).and_then(Weak::upgrade))?;
        let key = crate::cm::next_key();
        // SAFETY: the new id is the program's from the event on; `context` is the
        // program's field.
        unsafe { (*raw).context = key as usize as *mut c_void };
        let new = Arc::new(RcId {
            id,
            key,
            ctx: listener.ctx.clone(),
            ps: listener.ps,
            qp_type: listener.qp_type,
            channel: Mutex::new(self.clone()),
            qp: Mutex::new(None),
        });
        lock(&self.ids).insert(key, Arc::downgrade(&new));
        Some(new)
    }
}

/// What an event says, copied out before it is acknowledged.
struct RawEvent {
    event: u32,
    status: i32,
    id: *mut rdma_cm_id,
    key: u64,
    listen_key: Option<u64>,
    conn: ConnParam,
    ud: Option<UdParam>,
}

/// # Safety
/// `ev` is an event not yet acknowledged.
unsafe fn copy_event(ev: &rdma_cm_event) -> RawEvent {
    // SAFETY: the event's id is live; its `context` and `ps` are plain fields.
    let (key, ps) = unsafe { ((*ev.id).context as usize as u64, (*ev.id).ps) };
    let listen_key = (!ev.listen_id.is_null())
        // SAFETY: as above, for the listener.
        .then(|| unsafe { (*ev.listen_id).context } as usize as u64);
    let mut conn = ConnParam {
        responder_resources: 0,
        initiator_depth: 0,
        retry_count: 0,
        rnr_retry_count: 0,
        ..ConnParam::default()
    };
    let mut ud = None;
    if u32::from(PortSpace::Udp.value()) == ps {
        // SAFETY: `ud` is the member of a UD id's events; its data pointer holds
        // `private_data_len` bytes until the event is acknowledged (or is NULL).
        let u = unsafe { ev.param.ud };
        ud = Some(UdParam {
            // SAFETY: as above.
            private_data: unsafe { bytes(u.private_data, u.private_data_len) },
            dgid: Gid(u.ah_attr.grh.dgid.raw),
            qp_num: u.qp_num,
            qkey: u.qkey,
        });
    } else {
        // SAFETY: `conn` is the member of connection events, as above.
        let c = unsafe { ev.param.conn };
        conn = ConnParam {
            // SAFETY: as above.
            private_data: unsafe { bytes(c.private_data, c.private_data_len) },
            responder_resources: c.responder_resources,
            initiator_depth: c.initiator_depth,
            flow_control: c.flow_control != 0,
            retry_count: c.retry_count,
            rnr_retry_count: c.rnr_retry_count,
            srq: c.srq != 0,
            qp_num: c.qp_num,
        };
    }
    RawEvent {
        event: ev.event,
        status: ev.status,
        id: ev.id,
        key,
        listen_key,
        conn,
        ud,
    }
}

/// # Safety
/// `p` is NULL or holds `len` readable bytes.
unsafe fn bytes(p: *const c_void, len: u8) -> Vec<u8> {
    if p.is_null() {
        return Vec::new();
    }
    // SAFETY: the caller's promise.
    unsafe { std::slice::from_raw_parts(p.cast::<u8>(), usize::from(len)) }.to_vec()
}

/// An id of the system's RDMA CM.
#[derive(Debug)]
pub(crate) struct RcId {
    // Destroyed before the channel it holds (field order).
    id: Id,
    pub key: u64,
    pub ctx: Context,
    pub ps: PortSpace,
    pub qp_type: QpType,
    channel: Mutex<Arc<RcChannel>>,
    /// The attached QP, moved as the connection goes while it lives.
    qp: Mutex<Option<Weak<Qp>>>,
}

impl RcId {
    pub fn create(
        ch: &Arc<RcChannel>,
        ctx: &Context,
        ps: PortSpace,
        qp_type: QpType,
    ) -> Result<Arc<RcId>> {
        if !matches!(
            (ps, qp_type),
            (PortSpace::Tcp, QpType::Rc) | (PortSpace::Udp, QpType::Ud)
        ) {
            return Err(Error::Unsupported(
                "on rdma-core the RDMA CM's ids are RDMA_PS_TCP with RC or RDMA_PS_UDP with UD",
            ));
        }
        let key = crate::cm::next_key();
        let id = Id::create(&ch.ch, u32::from(ps.value()), key)?;
        let new = Arc::new(RcId {
            id,
            key,
            ctx: ctx.clone(),
            ps,
            qp_type,
            channel: Mutex::new(ch.clone()),
            qp: Mutex::new(None),
        });
        lock(&ch.ids).insert(key, Arc::downgrade(&new));
        Ok(new)
    }

    fn dev(&self) -> &super::Device {
        // An RcId is made only on an rdma-core context.
        match &self.ctx.kind {
            crate::context::Kind::RdmaCore(r) => &r.dev,
            crate::context::Kind::Engine(_) => unreachable!("an rdma-core id on an engine device"),
        }
    }

    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.id
            .addr(false)
            .filter(|a| !a.ip().is_unspecified() || a.port() != 0)
    }

    pub fn peer_addr(&self) -> Option<SocketAddr> {
        self.id.addr(true).filter(|a| !a.ip().is_unspecified())
    }

    /// The attached QP, if it lives.
    fn qp(&self) -> Option<Arc<Qp>> {
        lock(&self.qp).as_ref().and_then(Weak::upgrade)
    }

    pub fn qp_num(&self) -> Option<u32> {
        self.qp().map(|q| q.qpn)
    }

    pub fn bind_addr(&self, addr: SocketAddr) -> Result<()> {
        let cm = rdmacm()?;
        let mut at = to_storage(addr);
        // SAFETY: a live id and a socket address of its family's length.
        check("rdma_bind_addr", unsafe {
            (cm.rdma_bind_addr)(self.id.ptr(), (&mut at as *mut sockaddr_storage).cast())
        })?;
        if addr.ip().is_unspecified() {
            return Ok(());
        }
        self.id.on_device(self.dev())
    }

    pub fn listen(&self, backlog: usize) -> Result<()> {
        let cm = rdmacm()?;
        let backlog = c_int::try_from(backlog).unwrap_or(c_int::MAX);
        // SAFETY: a live id.
        check("rdma_listen", unsafe {
            (cm.rdma_listen)(self.id.ptr(), backlog)
        })
    }

    pub fn resolve_addr(&self, src: Option<SocketAddr>, dst: SocketAddr) -> Result<()> {
        let cm = rdmacm()?;
        let mut src = src.map(to_storage);
        let src = src.as_mut().map_or(std::ptr::null_mut(), |s| {
            (s as *mut sockaddr_storage).cast()
        });
        let mut dst = to_storage(dst);
        // SAFETY: a live id and socket addresses of their families' lengths (or NULL).
        check("rdma_resolve_addr", unsafe {
            (cm.rdma_resolve_addr)(
                self.id.ptr(),
                src,
                (&mut dst as *mut sockaddr_storage).cast(),
                RESOLVE_MS,
            )
        })
    }

    /// `rdma_resolve_route`, once the address resolved to this id's device.
    pub fn resolve_route(&self) -> Result<()> {
        let cm = rdmacm()?;
        self.id.on_device(self.dev())?;
        // SAFETY: a live id whose address resolved.
        check("rdma_resolve_route", unsafe {
            (cm.rdma_resolve_route)(self.id.ptr(), RESOLVE_MS)
        })
    }

    /// Makes `qp` the id's: INIT now (a UD QP on to RTS), then moved as the connection
    /// goes. The id must know its device (after resolution, or a request's).
    pub fn attach_qp(&self, qp: &Arc<Qp>) -> Result<()> {
        self.id.on_device(&qp.pd.dev)?;
        self.id.move_qp(qp, QpState::Init)?;
        if self.qp_type == QpType::Ud {
            // INIT gave the port space's Q_Key: RTR needs nothing more, RTS the first PSN.
            qp.modify(&QpAttr {
                qp_state: Some(QpState::Rtr),
                ..QpAttr::default()
            })?;
            qp.modify(&QpAttr {
                qp_state: Some(QpState::Rts),
                sq_psn: Some(0),
                ..QpAttr::default()
            })?;
        }
        *lock(&self.qp) = Some(Arc::downgrade(qp));
        Ok(())
    }

    /// `rdma_init_qp_attr`: what takes a QP of this connection to `state`.
    pub fn init_qp_attr(&self, state: QpState) -> Result<oxrdma_core::QpAttr> {
        let (attr, mask) = self.id.init_attr(state)?;
        oxrdma_verbs_abi::qp_attr::from_c(&attr, mask as u32)
            .map_err(|e| Error::BadPeer(format!("librdmacm's attributes for {state:?}: {e}")))
    }

    pub fn detach_qp(&self) {
        *lock(&self.qp) = None;
    }

    pub fn migrate(&self, to: &Arc<RcChannel>) -> Result<()> {
        let cm = rdmacm()?;
        let mut cur = lock(&self.channel);
        if Arc::ptr_eq(&cur, to) {
            return Ok(());
        }
        // SAFETY: a live id and a live channel, which the id holds from now on.
        check("rdma_migrate_id", unsafe {
            (cm.rdma_migrate_id)(self.id.ptr(), to.ch.0.as_ptr())
        })?;
        let me = lock(&cur.ids).remove(&self.key);
        if let Some(me) = me {
            lock(&to.ids).insert(self.key, me);
        }
        *cur = to.clone();
        Ok(())
    }

    pub fn connect(&self, param: &ConnParam) -> Result<()> {
        let cm = rdmacm()?;
        let mut p = self.c_param(param)?;
        // SAFETY: a live id; `p` and the data it points at outlive the call.
        check("rdma_connect", unsafe {
            (cm.rdma_connect)(self.id.ptr(), &mut p)
        })
    }

    /// `rdma_accept`; an attached RC QP goes to RTR and RTS first, as librdmacm moves
    /// its own QPs, so it may send as soon as this returns.
    pub fn accept(&self, param: &ConnParam) -> Result<()> {
        let cm = rdmacm()?;
        if let (Some(qp), QpType::Rc) = (self.qp(), self.qp_type) {
            self.id.move_qp(&qp, QpState::Rtr)?;
            self.id.move_qp(&qp, QpState::Rts)?;
        }
        let mut p = self.c_param(param)?;
        // SAFETY: a live requested id; `p` and its data outlive the call.
        check("rdma_accept", unsafe {
            (cm.rdma_accept)(self.id.ptr(), &mut p)
        })
    }

    pub fn reject(&self, data: &[u8]) -> Result<()> {
        let cm = rdmacm()?;
        let len = private_len(data)?;
        // SAFETY: a live requested id; the data outlives the call.
        check("rdma_reject", unsafe {
            (cm.rdma_reject)(self.id.ptr(), data.as_ptr().cast(), len)
        })
    }

    pub fn establish(&self) -> Result<()> {
        let cm = rdmacm()?;
        // SAFETY: a live id.
        check("rdma_establish", unsafe {
            (cm.rdma_establish)(self.id.ptr())
        })
    }

    /// `rdma_disconnect`, the attached QP to ERR first (its WRs flush).
    pub fn disconnect(&self) -> Result<()> {
        let cm = rdmacm()?;
        if let Some(qp) = self.qp() {
            let _ = to_err(&qp);
        }
        // SAFETY: a live id.
        check("rdma_disconnect", unsafe {
            (cm.rdma_disconnect)(self.id.ptr())
        })
    }

    /// `param` in C form, with the attached QP's number.
    fn c_param(&self, param: &ConnParam) -> Result<rdma_conn_param> {
        Ok(rdma_conn_param {
            private_data: param.private_data.as_ptr().cast(),
            private_data_len: private_len(&param.private_data)?,
            responder_resources: param.responder_resources,
            initiator_depth: param.initiator_depth,
            flow_control: u8::from(param.flow_control),
            retry_count: param.retry_count,
            rnr_retry_count: param.rnr_retry_count,
            srq: u8::from(param.srq),
            qp_num: self.qp_num().unwrap_or(param.qp_num),
        })
    }

    /// What an event does to the attached QP, and what the program is told.
    fn on_event(&self, kind: CmEventType, status: i32) -> (CmEventType, i32) {
        let Some(qp) = self.qp() else {
            return (kind, status);
        };
        match kind {
            CmEventType::ConnectResponse => match self.finish_connect(&qp) {
                Ok(()) => (CmEventType::Established, 0),
                Err(e) => {
                    let _ = to_err(&qp);
                    let errno = std::io::Error::from(e).raw_os_error().unwrap_or(22);
                    (CmEventType::ConnectError, -errno)
                }
            },
            CmEventType::Rejected | CmEventType::Unreachable | CmEventType::ConnectError => {
                let _ = to_err(&qp);
                (kind, status)
            }
            _ => (kind, status),
        }
    }

    /// The active side's QP to RTR and RTS, then the RTU.
    fn finish_connect(&self, qp: &Qp) -> Result<()> {
        if self.qp_type != QpType::Rc {
            return Ok(());
        }
        self.id.move_qp(qp, QpState::Rtr)?;
        self.id.move_qp(qp, QpState::Rts)?;
        self.establish()
    }
}

impl Drop for RcId {
    fn drop(&mut self) {
        lock(&lock(&self.channel).ids).remove(&self.key);
    }
}

fn to_err(qp: &Qp) -> Result<()> {
    qp.modify(&QpAttr {
        qp_state: Some(QpState::Err),
        ..QpAttr::default()
    })
}

fn private_len(data: &[u8]) -> Result<u8> {
    u8::try_from(data.len())
        .map_err(|_| VerbsError::InvalidArgument("private data longer than 255 bytes").into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_data_longer_than_a_byte_counts_is_refused() {
        assert!(private_len(&[0; 255]).is_ok());
        assert!(private_len(&[0; 256]).is_err());
    }

    #[test]
    fn a_udp_event_carries_the_peers_qp_and_qkey() {
        // SAFETY: plain C data (pointers and numbers), valid all zero.
        let mut id: rdma_cm_id = unsafe { std::mem::zeroed() };
        id.ps = u32::from(PortSpace::Udp.value());
        id.context = 42usize as *mut c_void;
        let data = [7u8; 3];
        // SAFETY: as above.
        let mut ev: rdma_cm_event = unsafe { std::mem::zeroed() };
        ev.id = &mut id;
        ev.event = CmEventType::Established as u32;
        // Writing a union's member is safe; reading it back is what `copy_event` does.
        ev.param.ud.private_data = data.as_ptr().cast();
        ev.param.ud.private_data_len = 3;
        ev.param.ud.qp_num = 0x12;
        ev.param.ud.qkey = 0x0123_4567;
        ev.param.ud.ah_attr.grh.dgid.raw = [9; 16];
        // SAFETY: every pointer in `ev` is live for the call.
        let raw = unsafe { copy_event(&ev) };
        assert_eq!(raw.key, 42);
        let ud = raw.ud.expect("a UD id's event has UD parameters");
        assert_eq!(
            (ud.qp_num, ud.qkey, ud.dgid),
            (0x12, 0x0123_4567, Gid([9; 16]))
        );
        assert_eq!(ud.private_data, data);
    }
}
