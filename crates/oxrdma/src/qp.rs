//! Queue pairs: the public one (of an engine or an rdma-core device) and the engine's.

pub use crate::endpoint::Endpoint;
use crate::engine_context::EngineContext;
use crate::error::{Error, Result};
use crate::qp_rdma_core::RdmaCoreQp;
use crate::rdma_core::{self, RdmaCoreContext};
use crate::secure::{self, Offer};
use oxrdma_core::secure::{End, Suite};
use oxrdma_core::{AddressVector, Mtu, QpAttr, QpPost, QpState, RecvWr, SendWr, VerbsError};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

/// Connection parameters; `Default` suits most programs.
#[derive(Debug, Clone, Copy)]
pub struct ConnectOptions {
    /// The path MTU (the smaller of this and the peer's device's rules the wire).
    pub mtu: Mtu,
    /// What the peer may do to this QP's memory (remote rights).
    pub access: oxrdma_core::Access,
    /// The local ACK timeout: 4.096 us times 2 to this power (RC).
    pub timeout: u8,
    /// Transport retries before a WR fails with RETRY_EXC (RC, 0-7).
    pub retry_cnt: u8,
    /// RNR retries (RC, 0-7; 7 is for ever).
    pub rnr_retry: u8,
    /// The RNR delay this QP asks of a sender it turns away (IBA's 5-bit code).
    pub min_rnr_timer: u8,
    /// READs and atomics in flight each way (RC).
    pub max_rd_atomic: u8,
    /// Which of the device's GIDs the QP sends from (None: the one
    /// [`crate::Context::gid_index_for`] picks for the remote GID).
    pub gid_index: Option<u8>,
    /// Refuse to connect unless the QP becomes secure: both endpoints carry keys, or
    /// `psk` is set. Without it, a QP that offered keys to a peer that did not stays plain
    /// (both ends see both endpoints, so both decide alike).
    pub require_secure: bool,
    /// A key both ends were given (configuration): the QP is secure with it, mixed with
    /// the X25519 agreement if both ends offered keys. The peer must be oxrdma with the
    /// same key.
    pub psk: Option<[u8; 32]>,
    /// The AEAD of a secure QP (both ends must name the same).
    pub suite: Suite,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions {
            mtu: Mtu::Mtu4096,
            access: oxrdma_core::Access::ALL,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 12,
            max_rd_atomic: 16,
            gid_index: None,
            require_secure: false,
            psk: None,
            suite: Suite::default(),
        }
    }
}

/// A queue pair (`ibv_qp`): connect it ([`Self::connect`], or the RDMA CM), then post
/// work requests to it; they complete on its CQs.
///
/// ```
/// use oxrdma::{Access, ConnectOptions, Context, QpCap, QpType, RecvWr, SendWr};
/// use std::time::Duration;
/// # fn main() -> oxrdma::Result<()> {
/// let (a, b) = (Context::open("127.0.1.2".parse().unwrap())?,
///               Context::open("127.0.1.3".parse().unwrap())?);
/// let (pa, pb) = (a.alloc_pd()?, b.alloc_pd()?);
/// let (ma, mb) = (pa.register(64, Access::LOCAL_WRITE)?, pb.register(64, Access::LOCAL_WRITE)?);
/// let (ca, cb) = (a.create_cq(8)?, b.create_cq(8)?);
/// let qa = pa.create_qp(&ca, &ca, QpType::Rc, QpCap::default())?;
/// let qb = pb.create_qp(&cb, &cb, QpType::Rc, QpCap::default())?;
/// qa.connect(&qb.endpoint(), &ConnectOptions::default())?;
/// qb.connect(&qa.endpoint(), &ConnectOptions::default())?;
/// qb.post_recv(RecvWr { wr_id: 1, sges: vec![mb.sge(0, 64)?].into() })?;
/// qa.post_send(SendWr::send_inline(2, b"a message"))?;
/// let got = cb.wait_one(Duration::from_secs(10))?.result()?;
/// let mut text = vec![0u8; got.byte_len as usize];
/// mb.read(0, &mut text)?;
/// assert_eq!(text, b"a message");
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct QueuePair {
    kind: QpKind,
}

#[derive(Debug)]
enum QpKind {
    Engine(EngineQp),
    RdmaCore(RdmaCoreQp),
}

/// A QP of an engine device.
#[derive(Debug)]
pub(crate) struct EngineQp {
    pub(crate) ctx: EngineContext,
    pub(crate) qpn: u32,
    pub(crate) qp_type: oxrdma_core::QpType,
    /// Where work is posted, without the device lock.
    pub(crate) post: Arc<QpPost>,
    /// The first PSN it sends (drawn at creation; `set_psn`).
    pub(crate) psn: AtomicU32,
}

impl From<EngineQp> for QueuePair {
    fn from(qp: EngineQp) -> QueuePair {
        QueuePair {
            kind: QpKind::Engine(qp),
        }
    }
}

impl QueuePair {
    pub(crate) fn rdma_core(
        ctx: &Arc<RdmaCoreContext>,
        pd: &Arc<rdma_core::Pd>,
        send_cq: &Arc<rdma_core::Cq>,
        recv_cq: &Arc<rdma_core::Cq>,
        srq: Option<&Arc<rdma_core::Srq>>,
        init: crate::QpInit<'_>,
    ) -> Result<QueuePair> {
        Ok(QueuePair {
            kind: QpKind::RdmaCore(RdmaCoreQp::create(ctx, pd, [send_cq, recv_cq], srq, init)?),
        })
    }

    /// The rdma-core QP (None for an engine one).
    pub(crate) fn rdma_core_qp(&self) -> Option<&Arc<rdma_core::Qp>> {
        match &self.kind {
            QpKind::Engine(_) => None,
            QpKind::RdmaCore(q) => Some(&q.qp),
        }
    }

    /// The engine QP, or the error that names `what` as the engine's alone.
    pub(crate) fn engine(&self, what: &'static str) -> Result<&EngineQp> {
        match &self.kind {
            QpKind::Engine(q) => Ok(q),
            QpKind::RdmaCore(_) => Err(Error::Unsupported(what)),
        }
    }

    /// Its QP number.
    pub fn qpn(&self) -> u32 {
        match &self.kind {
            QpKind::Engine(q) => q.qpn,
            QpKind::RdmaCore(q) => q.qp.qpn,
        }
    }

    /// RC, UC or UD.
    pub fn qp_type(&self) -> oxrdma_core::QpType {
        match &self.kind {
            QpKind::Engine(q) => q.qp_type,
            QpKind::RdmaCore(q) => q.qp_type,
        }
    }

    /// The first PSN this QP sends: drawn from the CSPRNG when it was made, and what its
    /// [`Self::endpoint`] tells the peer and [`Self::connect`] sends from.
    pub fn psn(&self) -> u32 {
        match &self.kind {
            QpKind::Engine(q) => q.psn(),
            QpKind::RdmaCore(q) => q.psn.load(Ordering::Relaxed),
        }
    }

    /// Sets the first PSN this QP sends, for a peer that dictates it (interop with a
    /// program that exchanges PSNs its own way). Before [`Self::endpoint`] and
    /// [`Self::connect`]; refused after [`Self::secure_endpoint`] (its keys name the PSN).
    pub fn set_psn(&self, psn: u32) -> Result<()> {
        if psn >= 1 << 24 {
            return Err(VerbsError::InvalidArgument("a PSN has 24 bits").into());
        }
        match &self.kind {
            QpKind::Engine(q) => q.set_psn(psn),
            QpKind::RdmaCore(q) => {
                q.psn.store(psn, Ordering::Relaxed);
                Ok(())
            }
        }
    }

    /// This QP's endpoint (the device's main GID, its QPN and first PSN), for the peer's
    /// [`Self::connect`]; add the memory the peer may access with
    /// [`Endpoint::with_buffer`].
    pub fn endpoint(&self) -> Endpoint {
        match &self.kind {
            QpKind::Engine(q) => q.endpoint(),
            QpKind::RdmaCore(q) => q.endpoint(q.ctx.dev.main_gid()),
        }
    }

    /// [`Self::endpoint`] offering to be secure: it carries a fresh X25519 public key,
    /// whose private half the QP keeps until [`Self::connect`]. If the peer's endpoint
    /// carries one too, every packet between them is encrypted and authenticated
    /// (`oxrdma_core::secure`). An RC or UC QP's, of an engine device.
    pub fn secure_endpoint(&self) -> Result<Endpoint> {
        self.engine("secure QPs")?.secure_endpoint()
    }

    /// This QP's endpoint at the device's GID `gid_index` (a device on an interface has
    /// one per address), if the table has one there.
    pub fn endpoint_at(&self, gid_index: u8) -> Option<Endpoint> {
        match &self.kind {
            QpKind::Engine(q) => q.endpoint_at(gid_index),
            QpKind::RdmaCore(q) => {
                let gid = *q.ctx.dev.gids.get(usize::from(gid_index))?;
                (gid != oxrdma_core::Gid::default()).then(|| q.endpoint(gid))
            }
        }
    }

    /// `ibv_modify_qp`. On an engine device, an RC QP [`Self::connect`] did not key is
    /// keyed on the way if it is to be secure (keys agreed through the RDMA CM, or
    /// `OXRDMA_SECURE_KEY` with its peer among `OXRDMA_SECURE_PEERS`, where that is set):
    /// its receive key with RTR, its send key with RTS (`secure::key_as_moved`).
    pub fn modify(&self, attr: &QpAttr) -> Result<()> {
        match &self.kind {
            QpKind::Engine(q) => q.modify(attr),
            QpKind::RdmaCore(q) => q.qp.modify(attr),
        }
    }

    /// `ibv_query_qp`: every attribute as it stands, the capacities, and whether every
    /// send WR is signaled (`sq_sig_all`).
    pub fn query(&self) -> Result<(QpAttr, oxrdma_core::QpCap, bool)> {
        match &self.kind {
            QpKind::Engine(q) => q.query(),
            QpKind::RdmaCore(q) => q.qp.query(),
        }
    }

    /// What the QP's transport has been through: packets sent and sent again, whether
    /// the peer speaks selective repeat, the send window, the RTT. An engine device's.
    pub fn transport(&self) -> Result<oxrdma_core::QpTransport> {
        self.engine("transport figures")?.transport()
    }

    /// What this QP has counted: its traffic, the packets for it that were dropped, the
    /// NAKs it sent and received, its timeouts, probes and retries (see
    /// [`Context::counters`](crate::Context::counters)). An engine device's.
    pub fn counters(&self) -> Result<oxrdma_core::Counters> {
        self.engine("counters")?.counters()
    }

    /// Whether the QP is secure: it seals every packet it sends and opens every packet it
    /// takes (`oxrdma_core::secure`). Never on an rdma-core device.
    pub fn is_secure(&self) -> Result<bool> {
        match &self.kind {
            QpKind::Engine(q) => q.is_secure(),
            QpKind::RdmaCore(_) => Ok(false),
        }
    }

    /// The QP's current state (read without the device lock on the engine).
    pub fn state(&self) -> Result<QpState> {
        match &self.kind {
            QpKind::Engine(q) => q.state(),
            QpKind::RdmaCore(q) => q.qp.state(),
        }
    }

    /// RESET → INIT → RTR → RTS towards `remote`, sending from [`Self::psn`] (RC or UC; the
    /// reliability options are RC's and ignored for UC). Secure QPs are an engine
    /// device's: on rdma-core, `require_secure` and `psk` are refused and a key in
    /// `remote` is ignored (the QP is plain RoCE, as the peer's must then be).
    pub fn connect(&self, remote: &Endpoint, o: &ConnectOptions) -> Result<()> {
        match &self.kind {
            QpKind::Engine(q) => q.connect(remote, o),
            QpKind::RdmaCore(q) => {
                if o.require_secure || o.psk.is_some() {
                    return Err(Error::Unsupported("secure QPs"));
                }
                let sgid_index = o
                    .gid_index
                    .unwrap_or_else(|| q.ctx.dev.gid_index_for(remote.gid));
                // The port's MTU bounds the path's (a NIC refuses a larger one).
                let o = &ConnectOptions {
                    mtu: o.mtu.min(q.ctx.dev.active_mtu),
                    ..*o
                };
                let steps = connect_steps(q.qp_type, remote, o, sgid_index, self.psn());
                steps.iter().try_for_each(|a| q.qp.modify(a))
            }
        }
    }

    /// RESET → INIT → RTR → RTS for a UD QP with Q_Key `qkey`, sending from [`Self::psn`].
    pub fn ready_ud(&self, qkey: u32) -> Result<()> {
        let psn = self.psn();
        self.modify(&QpAttr {
            qp_state: Some(QpState::Init),
            pkey_index: Some(0),
            port_num: Some(1),
            qkey: Some(qkey),
            ..Default::default()
        })?;
        self.modify(&QpAttr {
            qp_state: Some(QpState::Rtr),
            ..Default::default()
        })?;
        self.modify(&QpAttr {
            qp_state: Some(QpState::Rts),
            sq_psn: Some(psn),
            ..Default::default()
        })
    }

    /// `ibv_post_send` of one WR: checked and queued on this QP alone, then the doorbell.
    /// On the engine, if no other thread is driving the device, its first packets leave
    /// from the calling thread before this returns (as a doorbell write starts a hardware
    /// NIC at once); otherwise that thread sends them. Threads posting on different QPs
    /// never wait for each other.
    pub fn post_send(&self, wr: SendWr) -> Result<()> {
        match &self.kind {
            QpKind::Engine(q) => q.post_send(wr),
            QpKind::RdmaCore(q) => q.post_send(&wr),
        }
    }

    /// The capacities the QP was created with (on rdma-core, what the provider gave).
    pub fn cap(&self) -> oxrdma_core::QpCap {
        match &self.kind {
            QpKind::Engine(q) => q.cap(),
            QpKind::RdmaCore(q) => q.qp.cap,
        }
    }

    /// The extended send API's `ibv_wr_start` … `ibv_wr_complete`: all of `wrs`, in order,
    /// or none of them (the error says why). An engine device's.
    pub fn post_send_batch(&self, wrs: Vec<SendWr>) -> Result<()> {
        self.engine("all-or-nothing batches")?.post_send_batch(wrs)
    }

    /// `ibv_bind_mw` (type 1 windows): the bind runs in order on this QP's send queue and
    /// completes there (IBV_WC_BIND_MW) when `signaled`.
    pub fn bind_mw(&self, wr_id: u64, signaled: bool, bind: oxrdma_core::MwBind) -> Result<()> {
        match &self.kind {
            QpKind::Engine(q) => q.bind_mw(wr_id, signaled, bind),
            QpKind::RdmaCore(q) => q.qp.bind_mw(wr_id, signaled, &bind),
        }
    }

    /// A list of work requests posted as one: each [`PostList::post_send`] or
    /// [`PostList::post_recv`] checks and queues its WR at once, and the device is driven
    /// once, when the list is dropped, as a NIC's doorbell is rung once for all the WQEs
    /// written before it (`ibv_post_send` with a chain of WRs; on rdma-core each WR is
    /// posted as it comes).
    pub fn post_list(&self) -> PostList<'_> {
        PostList {
            qp: self,
            sends: false,
            flush: false,
        }
    }

    /// `ibv_post_recv` of one WR.
    pub fn post_recv(&self, wr: RecvWr) -> Result<()> {
        match &self.kind {
            QpKind::Engine(q) => q.post_recv(wr),
            QpKind::RdmaCore(q) => q.post_recv(&wr),
        }
    }
}

/// The three moves that connect a QP of `qp_type` to `remote`, sending from `my_psn` out
/// of the device's GID `sgid_index`: to INIT, RTR and RTS.
fn connect_steps(
    qp_type: oxrdma_core::QpType,
    remote: &Endpoint,
    o: &ConnectOptions,
    sgid_index: u8,
    my_psn: u32,
) -> [QpAttr; 3] {
    let rc = qp_type == oxrdma_core::QpType::Rc;
    let rc_only = |v| if rc { Some(v) } else { None };
    [
        QpAttr {
            qp_state: Some(QpState::Init),
            pkey_index: Some(0),
            port_num: Some(1),
            qp_access_flags: Some(o.access),
            ..Default::default()
        },
        QpAttr {
            qp_state: Some(QpState::Rtr),
            ah_attr: Some(AddressVector {
                dgid: remote.gid,
                sgid_index,
            }),
            path_mtu: Some(o.mtu),
            dest_qp_num: Some(remote.qpn),
            rq_psn: Some(remote.psn),
            max_dest_rd_atomic: rc_only(o.max_rd_atomic),
            min_rnr_timer: rc_only(o.min_rnr_timer),
            ..Default::default()
        },
        QpAttr {
            qp_state: Some(QpState::Rts),
            sq_psn: Some(my_psn),
            timeout: rc_only(o.timeout),
            retry_cnt: rc_only(o.retry_cnt),
            rnr_retry: rc_only(o.rnr_retry),
            max_rd_atomic: rc_only(o.max_rd_atomic),
            ..Default::default()
        },
    ]
}

impl EngineQp {
    /// RC or UC: the types that can be secure.
    fn connected(&self) -> bool {
        matches!(
            self.qp_type,
            oxrdma_core::QpType::Rc | oxrdma_core::QpType::Uc
        )
    }

    pub fn psn(&self) -> u32 {
        self.psn.load(Ordering::Relaxed)
    }

    /// Sets the first PSN this QP sends, for a peer that dictates it (interop with a
    /// program that exchanges PSNs its own way). Before [`Self::endpoint`] and
    /// [`Self::connect`]; refused after [`Self::secure_endpoint`] (its keys name the PSN).
    /// (A PSN of 24 bits: `QueuePair::set_psn` checked it.)
    fn set_psn(&self, psn: u32) -> Result<()> {
        if self.offers().contains_key(&self.qpn) {
            return Err(VerbsError::InvalidArgument(
                "the PSN is set before the secure endpoint is made",
            )
            .into());
        }
        self.psn.store(psn, Ordering::Relaxed);
        Ok(())
    }

    /// This QP's endpoint (the device's main GID, its QPN and first PSN), for the peer's
    /// [`Self::connect`]; add the memory the peer may access with
    /// [`Endpoint::with_buffer`].
    pub fn endpoint(&self) -> Endpoint {
        Endpoint {
            gid: self.ctx.gid(),
            qpn: self.qpn,
            psn: self.psn(),
            key: None,
            buffers: Vec::new(),
        }
    }

    /// [`Self::endpoint`] offering to be secure: it carries a fresh X25519 public key,
    /// whose private half the QP keeps until [`Self::connect`]. If the peer's endpoint
    /// carries one too, every packet between them is encrypted and authenticated
    /// (`oxrdma_core::secure`). An RC or UC QP's.
    pub fn secure_endpoint(&self) -> Result<Endpoint> {
        if !self.connected() {
            return Err(VerbsError::InvalidArgument("only RC and UC QPs are secure").into());
        }
        let gid = self.ctx.gid();
        let (offer, key) = Offer::new(gid)?;
        self.offers().insert(self.qpn, offer);
        Ok(Endpoint {
            gid,
            qpn: self.qpn,
            psn: self.psn(),
            key: Some(key),
            buffers: Vec::new(),
        })
    }

    /// This QP's endpoint at the device's GID `gid_index` (a device on an interface has
    /// one per address), if the table has one there.
    pub fn endpoint_at(&self, gid_index: u8) -> Option<Endpoint> {
        let gid = *self.ctx.gids().get(usize::from(gid_index))?;
        Some(Endpoint {
            gid,
            ..self.endpoint()
        })
    }

    /// The secure endpoints offered on this device (the key pair of ours, until it
    /// connects).
    fn offers(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<u32, Offer>> {
        self.ctx
            .shared()
            .offers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// `ibv_modify_qp`. An RC QP [`Self::connect`] did not key is keyed on the way if it
    /// is to be secure (keys agreed through the RDMA CM, or `OXRDMA_SECURE_KEY` with its
    /// peer among `OXRDMA_SECURE_PEERS`, where that is set): its receive key with RTR, its
    /// send key with RTS (`secure::key_as_moved`).
    pub fn modify(&self, attr: &QpAttr) -> Result<()> {
        let shared = self.ctx.shared();
        let agreed = shared.agreed_for(self.qpn);
        let mut dev = shared.lock();
        dev.engine.modify_qp(self.qpn, attr)?;
        // (Secure QPs are RoCE's: an iWARP QP's stream is TCP's.)
        let keyed = if self.connected() && !dev.engine.is_iwarp_qp(self.qpn) {
            secure::key_as_moved(self.ctx.gids(), &mut dev.engine, self.qpn, agreed)
        } else {
            Ok(())
        };
        drop(dev);
        shared.ring();
        keyed
    }

    /// `ibv_query_qp`: every attribute as it stands, the capacities, and whether every
    /// send WR is signaled (`sq_sig_all`).
    pub fn query(&self) -> Result<(QpAttr, oxrdma_core::QpCap, bool)> {
        Ok(self.ctx.shared().lock().engine.query_qp(self.qpn)?)
    }

    /// What the QP's transport has been through: packets sent and sent again, whether
    /// the peer speaks selective repeat, the send window, the RTT.
    pub fn transport(&self) -> Result<oxrdma_core::QpTransport> {
        Ok(self.ctx.shared().lock().engine.qp_transport(self.qpn)?)
    }

    /// What this QP has counted: its traffic, the packets for it that were dropped, the
    /// NAKs it sent and received, its timeouts, probes and retries (see
    /// [`Context::counters`](crate::Context::counters)).
    pub fn counters(&self) -> Result<oxrdma_core::Counters> {
        Ok(self.ctx.shared().lock().engine.qp_counters(self.qpn)?)
    }

    /// Whether the QP is secure: it seals every packet it sends and opens every packet it
    /// takes (`oxrdma_core::secure`).
    pub fn is_secure(&self) -> Result<bool> {
        Ok(self
            .ctx
            .shared()
            .lock()
            .engine
            .qp_secure(self.qpn)?
            .is_some())
    }

    /// The QP's current state (read without the device lock).
    pub fn state(&self) -> Result<QpState> {
        Ok(self.post.state())
    }

    pub fn connect(&self, remote: &Endpoint, o: &ConnectOptions) -> Result<()> {
        let my_psn = self.psn();
        let sgid_index = o
            .gid_index
            .unwrap_or_else(|| self.ctx.gid_index_for(remote.gid));
        // (`set_psn` refuses once an offer is made: its PSN is the QP's.)
        let offer = self.offers().remove(&self.qpn);
        let secure = (offer.is_some() && remote.key.is_some()) || o.psk.is_some();
        if o.require_secure && !secure {
            return Err(Error::BadPeer(
                "the peer offered no key and no PSK is set: not secure".into(),
            ));
        }
        let [init, rtr, rts] = connect_steps(self.qp_type, remote, o, sgid_index, my_psn);
        self.modify(&init)?;
        if secure {
            let local = End {
                gid: self
                    .ctx
                    .gids()
                    .get(usize::from(sgid_index))
                    .copied()
                    .unwrap_or_default(),
                qpn: self.qpn,
                psn: my_psn,
            };
            let far = End {
                gid: remote.gid,
                qpn: remote.qpn,
                psn: remote.psn,
            };
            let keys = secure::keys(
                o.suite,
                offer,
                local,
                far,
                remote.key.as_ref(),
                o.psk.as_ref(),
            )?;
            self.ctx.shared().lock().engine.secure_qp(self.qpn, &keys)?;
        }
        self.modify(&rtr)?;
        self.modify(&rts)
    }

    /// `ibv_post_send` of one WR: checked and queued on this QP alone, then the doorbell.
    /// If no other thread is driving the device, its first packets leave from the calling
    /// thread before this returns (as a doorbell write starts a hardware NIC at once);
    /// otherwise that thread sends them. Threads posting on different QPs never wait for
    /// each other.
    pub fn post_send(&self, wr: SendWr) -> Result<()> {
        self.post.post_send(wr)?;
        self.ctx.shared().kick();
        Ok(())
    }

    /// The capacities the QP was created with (read without the engine).
    pub fn cap(&self) -> oxrdma_core::QpCap {
        self.post.cap()
    }

    /// The extended send API's `ibv_wr_start` … `ibv_wr_complete`: all of `wrs`, in order,
    /// or none of them (the error says why).
    pub fn post_send_batch(&self, wrs: Vec<SendWr>) -> Result<()> {
        self.post.post_send_batch(wrs)?;
        self.ctx.shared().kick();
        Ok(())
    }

    /// `ibv_bind_mw` (type 1 windows): the bind runs in order on this QP's send queue and
    /// completes there (IBV_WC_BIND_MW) when `signaled`.
    pub fn bind_mw(&self, wr_id: u64, signaled: bool, bind: oxrdma_core::MwBind) -> Result<()> {
        let shared = self.ctx.shared();
        let mut dev = shared.lock();
        dev.engine.bind_mw(self.qpn, wr_id, signaled, bind)?;
        shared.drive(&mut dev);
        Ok(())
    }

    /// `ibv_post_recv` of one WR.
    pub fn post_recv(&self, wr: RecvWr) -> Result<()> {
        self.post.post_recv(wr)?;
        if self.post.state() == QpState::Err {
            // To be flushed.
            self.ctx.shared().kick();
        }
        Ok(())
    }
}

/// Work requests queued on one QP, the device driven once when dropped
/// ([`QueuePair::post_list`]).
#[derive(Debug)]
pub struct PostList<'a> {
    qp: &'a QueuePair,
    /// Sends were queued: the device has work.
    sends: bool,
    /// Receives were posted in ERR: the engine flushes them.
    flush: bool,
}

impl PostList<'_> {
    /// Checks and queues one send WR (the errors of `ibv_post_send`; nothing is queued on
    /// error). It leaves when the list is dropped, or earlier if the device is busy anyway.
    pub fn post_send(&mut self, wr: SendWr) -> Result<()> {
        match &self.qp.kind {
            QpKind::Engine(q) => {
                q.post.post_send(wr)?;
                self.sends = true;
            }
            // A NIC's doorbell is per post: posted now.
            QpKind::RdmaCore(q) => q.post_send(&wr)?,
        }
        Ok(())
    }

    /// Checks and queues one receive WR.
    pub fn post_recv(&mut self, wr: RecvWr) -> Result<()> {
        match &self.qp.kind {
            QpKind::Engine(q) => {
                q.post.post_recv(wr)?;
                self.flush |= q.post.state() == QpState::Err;
            }
            QpKind::RdmaCore(q) => q.post_recv(&wr)?,
        }
        Ok(())
    }
}

impl Drop for PostList<'_> {
    fn drop(&mut self) {
        if let (QpKind::Engine(q), true) = (&self.qp.kind, self.sends || self.flush) {
            q.ctx.shared().kick();
        }
    }
}

impl Drop for EngineQp {
    fn drop(&mut self) {
        self.offers().remove(&self.qpn);
        self.ctx.shared().forget_agreed(self.qpn);
        let mut dev = self.ctx.shared().lock();
        // Send what is queued first (the ACK for the peer's last message, above all, held
        // or not), so a program that exits right after its last completion does not leave
        // the peer retrying into the void.
        dev.engine.release_ack(self.qpn);
        for _ in 0..4 {
            if dev.poll().unwrap_or(0) == 0 {
                break;
            }
        }
        let _ = dev.destroy_qp(self.qpn);
        // Under the device lock, as the claim was: a QP made right after this one cannot
        // take its number before its events stop coming here.
        self.ctx
            .shared()
            .owners
            .release(crate::events::Source::Qp(self.qpn));
        drop(dev);
    }
}
