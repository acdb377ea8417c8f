//! The RDMA CM in Rust's shape: [`connect`] to an address with a QP and private data, or
//! [`Listener::bind`] then [`Listener::accept`], each returning a [`Connection`] once it is
//! established. Each call waits on an event channel of its own; the event API
//! ([`CmId`], [`EventChannel`]) stays for programs that want librdmacm's.
//!
//! The private data each side gives arrives with its real length: these calls put one
//! length byte before it (the CM pads a REQ's to 56 bytes and a REP's to 196), so the
//! peer must use them too (a program on the event API sees the length byte first).

use super::{CmEvent, CmEventType, CmId, ConnParam, EventChannel, PortSpace};
use crate::context::Context;
use crate::error::{Error, Result};
use crate::qp::QueuePair;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// How long the calls wait for the peer (the CM's own retries end sooner for a peer that
/// does not answer).
const WAIT: Duration = Duration::from_secs(30);

/// A REQ's private data after its CMA header, less the length byte.
pub const MAX_CONNECT_DATA: usize = 55;
/// A REP's private data, less the length byte.
pub const MAX_ACCEPT_DATA: usize = 195;
const CONNECT_TOO_LONG: &str = "connect carries 55 bytes of private data at most";
const ACCEPT_TOO_LONG: &str = "accept carries 195 bytes of private data at most";

/// `data` after its length byte; `too_long` if it exceeds `max`.
fn framed(data: &[u8], max: usize, too_long: &'static str) -> Result<Vec<u8>> {
    if data.len() > max {
        return Err(Error::CmState(too_long));
    }
    let mut v = Vec::with_capacity(data.len() + 1);
    v.push(data.len() as u8);
    v.extend_from_slice(data);
    Ok(v)
}

/// The application's bytes of framed private data (empty if the frame is not one).
fn unframed(data: &[u8]) -> Vec<u8> {
    match data.split_first() {
        Some((&n, rest)) if usize::from(n) <= rest.len() => rest[..usize::from(n)].to_vec(),
        _ => Vec::new(),
    }
}

/// The next event on `ch`, waiting up to `timeout`.
fn next(ch: &EventChannel, timeout: Duration) -> Result<CmEvent> {
    ch.get_event_timeout(timeout)?.ok_or_else(|| {
        std::io::Error::new(std::io::ErrorKind::TimedOut, "no answer from the peer").into()
    })
}

/// The event that ends a step: `want`, or an error that says what came instead.
fn expect(ch: &EventChannel, want: CmEventType) -> Result<CmEvent> {
    let e = next(ch, WAIT)?;
    match e.event {
        w if w == want => Ok(e),
        CmEventType::Rejected => Err(Error::Rejected {
            status: e.status,
            private_data: unframed(&e.conn.private_data),
        }),
        CmEventType::Unreachable => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "the peer did not answer (RDMA CM: unreachable)",
        )
        .into()),
        other => Err(Error::BadPeer(format!(
            "{} (status {}) while waiting for {}",
            other.name(),
            e.status,
            want.name()
        ))),
    }
}

/// An established RC connection and its QP's peer: dropping it disconnects.
#[derive(Debug)]
pub struct Connection {
    // Destroyed before its channel.
    id: CmId,
    _channel: EventChannel,
    private_data: Vec<u8>,
}

impl Connection {
    /// What the peer sent with its request or its answer, at its real length.
    pub fn private_data(&self) -> &[u8] {
        &self.private_data
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        self.id.peer_addr()
    }

    /// This side's address.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.id.local_addr()
    }

    /// The connection's id, for what the event API offers beyond these calls.
    pub fn id(&self) -> &CmId {
        &self.id
    }
}

/// Connects `qp` (an RC QP of `ctx`'s, in RESET) to the listener at `addr`, sending
/// `private_data` (55 bytes at most); returns once the connection is established, with
/// the listener's answer. A rejection is [`Error::Rejected`] with the peer's reason and
/// private data; no answer, a `TimedOut` I/O error.
pub fn connect(
    ctx: &Context,
    addr: SocketAddr,
    qp: &QueuePair,
    private_data: &[u8],
) -> Result<Connection> {
    let data = framed(private_data, MAX_CONNECT_DATA, CONNECT_TOO_LONG)?;
    let ch = EventChannel::for_context(ctx)?;
    let id = CmId::new(&ch, ctx, PortSpace::Tcp)?;
    id.resolve_addr(None, addr)?;
    expect(&ch, CmEventType::AddrResolved)?;
    id.resolve_route()?;
    expect(&ch, CmEventType::RouteResolved)?;
    id.attach_qp(qp)?;
    id.connect(&ConnParam {
        private_data: data,
        ..ConnParam::default()
    })?;
    let e = expect(&ch, CmEventType::Established)?;
    Ok(Connection {
        id,
        _channel: ch,
        private_data: unframed(&e.conn.private_data),
    })
}

/// A listening id: requests to its address wait in [`Listener::next_request`].
///
/// ```
/// use oxrdma::cm::{self, Listener};
/// use oxrdma::{Context, QpCap, QpType};
/// # fn main() -> oxrdma::Result<()> {
/// let (s, c) = (Context::open("127.0.1.4".parse().unwrap())?,
///               Context::open("127.0.1.5".parse().unwrap())?);
/// let listener = Listener::bind(&s, "0.0.0.0:47401".parse().unwrap())?;
/// let server = std::thread::spawn(move || -> oxrdma::Result<Vec<u8>> {
///     let (pd, cq) = (s.alloc_pd()?, s.create_cq(8)?);
///     let qp = pd.create_qp(&cq, &cq, QpType::Rc, QpCap::default())?;
///     let conn = listener.accept(&qp, b"welcome")?;
///     Ok(conn.private_data().to_vec())
/// });
/// let (pd, cq) = (c.alloc_pd()?, c.create_cq(8)?);
/// let qp = pd.create_qp(&cq, &cq, QpType::Rc, QpCap::default())?;
/// let conn = cm::connect(&c, "127.0.0.1:47401".parse().unwrap(), &qp, b"hello")?;
/// assert_eq!(conn.private_data(), b"welcome");
/// assert_eq!(server.join().unwrap()?, b"hello");
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct Listener {
    id: CmId,
    channel: EventChannel,
}

impl Listener {
    /// Listens on `addr` (`0.0.0.0:port` for every address of `ctx`'s device) with a
    /// backlog of 128.
    pub fn bind(ctx: &Context, addr: SocketAddr) -> Result<Listener> {
        let channel = EventChannel::for_context(ctx)?;
        let id = CmId::new(&channel, ctx, PortSpace::Tcp)?;
        id.bind_addr(addr)?;
        id.listen(128)?;
        Ok(Listener { id, channel })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.id.local_addr()
    }

    /// The next connection request, waiting up to `timeout` for one.
    pub fn next_request(&self, timeout: Duration) -> Result<Request> {
        let start = Instant::now();
        loop {
            let left = timeout.saturating_sub(start.elapsed());
            let e = next(&self.channel, left)?;
            if e.event != CmEventType::ConnectRequest {
                continue; // nothing else concerns a listener here
            }
            let Some(id) = e.new_id else { continue };
            // The connection's events go to a channel of its own from now on.
            let channel = EventChannel::for_context(id.context())?;
            id.migrate(&channel)?;
            return Ok(Request {
                id,
                channel,
                private_data: unframed(&e.conn.private_data),
            });
        }
    }

    /// Accepts the next request (waiting for it) with `qp` (an RC QP of the listener's
    /// device, in RESET) and `private_data` (195 bytes at most) as the answer; returns
    /// once the connection is established, with what the peer sent.
    pub fn accept(&self, qp: &QueuePair, private_data: &[u8]) -> Result<Connection> {
        self.next_request(Duration::MAX)?.accept(qp, private_data)
    }
}

/// A connection request not yet answered: dropping it rejects it.
#[derive(Debug)]
pub struct Request {
    // Destroyed before its channel.
    id: CmId,
    channel: EventChannel,
    private_data: Vec<u8>,
}

impl Request {
    /// What the peer sent with its request, at its real length.
    pub fn private_data(&self) -> &[u8] {
        &self.private_data
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        self.id.peer_addr()
    }

    /// Accepts with `qp` (an RC QP of the listener's device, in RESET), answering
    /// `private_data` (195 bytes at most); returns once the peer confirms.
    pub fn accept(self, qp: &QueuePair, private_data: &[u8]) -> Result<Connection> {
        let data = framed(private_data, MAX_ACCEPT_DATA, ACCEPT_TOO_LONG)?;
        let Request {
            id,
            channel,
            private_data: peer_data,
        } = self;
        id.attach_qp(qp)?;
        id.accept(&ConnParam {
            private_data: data,
            ..ConnParam::default()
        })?;
        expect(&channel, CmEventType::Established)?;
        Ok(Connection {
            id,
            _channel: channel,
            private_data: peer_data,
        })
    }

    /// Rejects it, with `private_data` for the peer (147 bytes at most).
    pub fn reject(self, private_data: &[u8]) -> Result<()> {
        let data = framed(private_data, 147, "reject carries 147 bytes at most")?;
        self.id.reject(&data)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_data_keeps_its_length() {
        let f = framed(b"abc", MAX_CONNECT_DATA, CONNECT_TOO_LONG).unwrap();
        let mut padded = f.clone();
        padded.resize(56, 0);
        assert_eq!(unframed(&padded), b"abc");
        assert_eq!(unframed(&framed(b"", 5, "").unwrap()), b"");
        assert!(framed(&[0; 56], MAX_CONNECT_DATA, CONNECT_TOO_LONG).is_err());
        assert!(framed(&[0; 195], MAX_ACCEPT_DATA, ACCEPT_TOO_LONG).is_ok());
        assert_eq!(
            unframed(&[9, 1, 2]),
            b"",
            "a length past the data is no frame"
        );
        assert_eq!(unframed(&[]), b"");
    }
}
