//! Connecting iWARP QPs (a [`Context::open_iwarp`](crate::Context::open_iwarp) device's):
//! iWARP has no out-of-band QP attributes, so a QP is connected by a TCP connection and
//! MPA's exchange on it (RFC 5044 with RFC 6581's enhanced setup: CRCs, each side's IRD
//! and ORD, the peer-to-peer RTR), which also carries up to 508 bytes of private data
//! each way. A QP in RESET is moved to INIT first, allowing remote READ and WRITE as the
//! kernel's iWARP CM allows them; once connected the QP is in RTS and the device's
//! engine drives its stream.
//!
//! ```no_run
//! # fn main() -> oxrdma::Result<()> {
//! use oxrdma::{iwarp, Context, QpCap, QpType};
//! let ctx = Context::open_iwarp("127.0.0.1".parse().unwrap())?;
//! let pd = ctx.alloc_pd()?;
//! let cq = ctx.create_cq(16)?;
//! let qp = pd.create_qp(&cq, &cq, QpType::Rc, QpCap::default())?;
//! let answer = iwarp::connect(&qp, "127.0.0.1:9999".parse().unwrap(), b"hello")?;
//! # let _ = answer;
//! # Ok(())
//! # }
//! ```

use crate::engine_context::EngineContext;
use crate::qp::EngineQp;
use crate::{Error, QueuePair, Result};
use oxrdma_core::iwarp::SetupConfig;
use oxrdma_core::{Access, QpAttr, QpState, VerbsError};
use oxrdma_tcp::{mpa, Established, Request};
use std::net::{SocketAddr, TcpListener};
use std::time::Duration;

/// How long MPA's exchange may take.
pub(crate) const SETUP_TIMEOUT: Duration = Duration::from_secs(10);

/// Connects `qp` to the iWARP listener at `addr`, offering `private_data`; returns the
/// listener's private data. The QP is in RTS when this returns.
pub fn connect(qp: &QueuePair, addr: SocketAddr, private_data: &[u8]) -> Result<Vec<u8>> {
    let eq = iwarp_qp(qp)?;
    to_init(eq)?;
    let cfg = setup_config(private_data);
    let est = mpa::connect(addr, cfg, SETUP_TIMEOUT).map_err(setup_error)?;
    attach(eq, est)
}

/// A TCP listener that connects QPs to the iWARP peers that connect to it.
#[derive(Debug)]
pub struct Listener {
    tcp: TcpListener,
}

impl Listener {
    /// Listens on `addr` (port 0: one the kernel picks).
    pub fn bind(addr: SocketAddr) -> Result<Listener> {
        Ok(Listener {
            tcp: TcpListener::bind(addr)?,
        })
    }

    /// Where it listens.
    pub fn local_addr(&self) -> Result<SocketAddr> {
        Ok(self.tcp.local_addr()?)
    }

    /// Waits for the next peer and connects it to `qp`, answering with `private_data`;
    /// returns the peer's private data. The QP is in RTS when this returns.
    pub fn accept(&self, qp: &QueuePair, private_data: &[u8]) -> Result<Vec<u8>> {
        iwarp_qp(qp)?;
        let incoming = self.incoming()?;
        let theirs = incoming.private_data().to_vec();
        incoming.accept(qp, private_data)?;
        Ok(theirs)
    }

    /// Waits for the next peer's request, to accept or reject once its private data is
    /// seen.
    pub fn incoming(&self) -> Result<Incoming> {
        let (sock, _) = self.tcp.accept()?;
        let req = Request::read(sock, setup_config(&[]), SETUP_TIMEOUT).map_err(setup_error)?;
        Ok(Incoming { req })
    }
}

/// A peer's connection request ([`Listener::incoming`]).
#[derive(Debug)]
pub struct Incoming {
    req: Request,
}

impl Incoming {
    /// What the peer sent with its request.
    pub fn private_data(&self) -> &[u8] {
        &self.req.private_data
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> Result<SocketAddr> {
        Ok(self.req.peer_addr()?)
    }

    /// Connects the peer to `qp`, answering with `private_data`; the QP is in RTS when
    /// this returns.
    pub fn accept(self, qp: &QueuePair, private_data: &[u8]) -> Result<()> {
        let eq = iwarp_qp(qp)?;
        to_init(eq)?;
        let est = self.req.accept_with(private_data).map_err(setup_error)?;
        attach(eq, est).map(|_| ())
    }

    /// Turns the peer down with `private_data` (its `connect` fails with
    /// [`Error::Rejected`]), and closes the connection.
    pub fn reject(self, private_data: &[u8]) -> Result<()> {
        self.req.reject(private_data).map_err(setup_error)
    }
}

/// The engine QP behind `qp`, if it is an iWARP one.
fn iwarp_qp(qp: &QueuePair) -> Result<&EngineQp> {
    let eq = qp.engine("iWARP connections")?;
    if !eq.ctx.shared().lock().engine.is_iwarp_qp(eq.qpn) {
        return Err(VerbsError::InvalidArgument(
            "not an iWARP QP: make it on a device Context::open_iwarp opened",
        )
        .into());
    }
    Ok(eq)
}

/// RESET -> INIT, with remote READ and WRITE allowed (a QP in INIT stays as it is).
fn to_init(eq: &EngineQp) -> Result<()> {
    let mut dev = eq.ctx.shared().lock();
    if dev.engine.qp_state(eq.qpn)? == QpState::Reset {
        dev.engine.modify_qp(eq.qpn, &init_attr())?;
    }
    Ok(())
}

/// The move to INIT the kernel's iWARP CM gives a QP: remote READ and WRITE allowed.
pub(crate) fn init_attr() -> QpAttr {
    QpAttr {
        qp_state: Some(QpState::Init),
        qp_access_flags: Some(Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ),
        ..Default::default()
    }
}

pub(crate) fn setup_config(private_data: &[u8]) -> SetupConfig {
    SetupConfig {
        private_data: private_data.to_vec(),
        ..Default::default()
    }
}

/// The QP takes the stream: RTS, its driver attached, the engine thread told.
fn attach(eq: &EngineQp, est: Established) -> Result<Vec<u8>> {
    let peer = est.negotiated.peer_private_data.clone();
    attach_stream(&eq.ctx, eq.qpn, est, |_| {})?;
    Ok(peer)
}

/// QP `qpn` of `ctx` takes the stream (RTS, its driver attached); `then` runs with the
/// device still locked (the RDMA CM routes the stream's end to its id there, before the
/// engine thread can see it end), and the engine thread is told.
pub(crate) fn attach_stream(
    ctx: &EngineContext,
    qpn: u32,
    est: Established,
    then: impl FnOnce(&crate::shared::Shared),
) -> Result<()> {
    let shared = ctx.shared();
    let mut dev = shared.lock();
    dev.engine.iwarp_established(qpn, &est.stream())?;
    let streams = dev
        .streams
        .as_mut()
        .ok_or(VerbsError::InvalidArgument("not an iWARP device"))?;
    streams.attach(qpn, est.sock, &est.early)?;
    then(shared);
    drop(dev);
    shared.ring();
    Ok(())
}

/// MPA's failures as the API's errors: a refusal with the peer's private data (status
/// 28, an application's, as `cm::connect` reports one), the rest I/O.
pub(crate) fn setup_error(e: oxrdma_tcp::MpaError) -> Error {
    match e {
        oxrdma_tcp::MpaError::Io(io) => Error::Io(io),
        oxrdma_tcp::MpaError::Rejected { private_data } => Error::Rejected {
            status: 28,
            private_data,
        },
        other => Error::Io(std::io::Error::new(
            std::io::ErrorKind::ConnectionAborted,
            other,
        )),
    }
}
