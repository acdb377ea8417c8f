//! MPA's exchange on a TCP connection, blocking (a connect or an accept waits for it):
//! the frames are `oxrdma_core::iwarp::Setup`'s, the socket and the waiting are here.

use oxrdma_core::iwarp::{Negotiated, Setup, SetupConfig, SetupError, SetupEvent};
use oxrdma_core::IwarpStream;
use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// Why a connection did not come up.
#[derive(Debug, thiserror::Error)]
pub enum MpaError {
    /// The socket's error (connecting, reading, writing).
    #[error("{0}")]
    Io(#[from] io::Error),
    /// The peer's frame broke MPA's rules, or the terms cannot be met.
    #[error(transparent)]
    Setup(#[from] SetupError),
    /// The responder refused, with its private data.
    #[error("the peer rejected the connection ({} bytes of private data)", private_data.len())]
    Rejected {
        /// What the responder said with its refusal.
        private_data: Vec<u8>,
    },
    /// The peer closed the connection before its MPA frame was whole.
    #[error("the peer closed the connection during MPA's exchange")]
    Closed,
    /// No whole MPA frame came in time.
    #[error("no MPA frame from the peer within {0:?}")]
    TimedOut(Duration),
}

/// A connection whose MPA exchange is done: FPDUs follow. Tell the QP
/// ([`oxrdma_core::Engine::iwarp_established`] with [`Self::stream`]), then hand the
/// socket and `early` to the QP's driver ([`crate::Streams::attach`]).
#[derive(Debug)]
pub struct Established {
    /// The connection.
    pub sock: TcpStream,
    /// What the exchange settled.
    pub negotiated: Negotiated,
    /// This side sent the request.
    pub initiator: bool,
    /// Bytes read past the peer's MPA frame: its first FPDUs, the QP's first input.
    pub early: Vec<u8>,
}

impl Established {
    /// What the QP is told: the terms, its role, and the longest FPDU it sends (one TCP
    /// segment of this connection, as RFC 5044 asks).
    pub fn stream(&self) -> IwarpStream {
        IwarpStream {
            negotiated: self.negotiated.clone(),
            initiator: self.initiator,
            max_fpdu: max_fpdu(&self.sock),
        }
    }
}

/// Connects to `addr` and asks for an iWARP connection with `cfg` (its private data,
/// CRCs, IRD and ORD), waiting up to `timeout` in all.
pub fn connect(
    addr: SocketAddr,
    cfg: SetupConfig,
    timeout: Duration,
) -> Result<Established, MpaError> {
    let sock = TcpStream::connect_timeout(&addr, timeout)?;
    initiate(sock, cfg, timeout)
}

/// [`connect`] from the local address `src` (the device's: the connection comes from
/// the RNIC's address, as an iWARP NIC's does, not from the one the routing would pick).
pub fn connect_from(
    src: IpAddr,
    addr: SocketAddr,
    cfg: SetupConfig,
    timeout: Duration,
) -> Result<Established, MpaError> {
    request_from(src, addr, cfg, timeout)?.reply(timeout)
}

/// The first half of [`connect_from`]: connects (within `connect_timeout`) and sends the
/// request; the reply is [`Requested::reply`]'s to wait for. A caller that makes several
/// connections one after the other, each sent before the next begins, has them reach the
/// listener in that order (as the kernel's iWARP CM sends them within `rdma_connect`).
pub fn request_from(
    src: IpAddr,
    addr: SocketAddr,
    cfg: SetupConfig,
    connect_timeout: Duration,
) -> Result<Requested, MpaError> {
    use socket2::{Domain, Protocol, Socket, Type};
    let sock = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    if !src.is_unspecified() {
        sock.bind(&SocketAddr::new(src, 0).into())?;
    }
    sock.connect_timeout(&addr.into(), connect_timeout)?;
    request(sock.into(), cfg)
}

/// The initiator's exchange on a connected socket.
pub fn initiate(
    sock: TcpStream,
    cfg: SetupConfig,
    timeout: Duration,
) -> Result<Established, MpaError> {
    request(sock, cfg)?.reply(timeout)
}

/// Sends the initiator's request on a connected socket.
fn request(mut sock: TcpStream, cfg: SetupConfig) -> Result<Requested, MpaError> {
    sock.set_nodelay(true)?;
    let (setup, request) = Setup::initiator(cfg)?;
    sock.write_all(&request)?;
    Ok(Requested { sock, setup })
}

/// An initiator whose request is sent, waiting for the reply.
#[derive(Debug)]
pub struct Requested {
    sock: TcpStream,
    setup: Setup,
}

impl Requested {
    /// Waits up to `timeout` for the responder's reply: the connection is up, or refused.
    pub fn reply(mut self, timeout: Duration) -> Result<Established, MpaError> {
        let (event, early) = read_frame(&mut self.sock, &mut self.setup, timeout)?;
        match event {
            SetupEvent::Established(negotiated) => Ok(Established {
                sock: self.sock,
                negotiated,
                initiator: true,
                early,
            }),
            SetupEvent::Rejected { private_data } => Err(MpaError::Rejected { private_data }),
            _ => Err(SetupError::State("a request where the reply was expected").into()),
        }
    }
}

/// A connection request read from an accepted connection, waiting for the application's
/// answer ([`Self::accept`] or [`Self::reject`]).
#[derive(Debug)]
pub struct Request {
    sock: TcpStream,
    setup: Setup,
    early: Vec<u8>,
    /// The initiator's private data.
    pub private_data: Vec<u8>,
    /// The initiator's IRD and ORD (RFC 6581; 0 from a revision 1 peer).
    pub ird: u16,
    /// See `ird`.
    pub ord: u16,
}

impl Request {
    /// Reads the request on an accepted connection (waiting up to `timeout`); `cfg` is
    /// this side's part of the terms, its private data the reply's.
    pub fn read(
        mut sock: TcpStream,
        cfg: SetupConfig,
        timeout: Duration,
    ) -> Result<Request, MpaError> {
        sock.set_nodelay(true)?;
        let mut setup = Setup::responder(cfg);
        let (event, early) = read_frame(&mut sock, &mut setup, timeout)?;
        let SetupEvent::Request {
            private_data,
            ird,
            ord,
        } = event
        else {
            return Err(SetupError::State("a reply where a request was expected").into());
        };
        Ok(Request {
            sock,
            setup,
            early,
            private_data,
            ird,
            ord,
        })
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.sock.peer_addr()
    }

    /// This side's address (where the peer connected to).
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.sock.local_addr()
    }

    /// Accepts with `private_data` in the reply (in place of the configuration's).
    pub fn accept_with(mut self, private_data: &[u8]) -> Result<Established, MpaError> {
        self.setup.set_private_data(private_data.to_vec());
        self.accept()
    }

    /// Accepts: writes the reply; the connection is up.
    pub fn accept(mut self) -> Result<Established, MpaError> {
        let (reply, negotiated) = self.setup.accept()?;
        self.sock.write_all(&reply)?;
        Ok(Established {
            sock: self.sock,
            negotiated,
            initiator: false,
            early: self.early,
        })
    }

    /// Refuses with `private_data`, and closes the connection.
    pub fn reject(mut self, private_data: &[u8]) -> Result<(), MpaError> {
        let reply = self.setup.reject(private_data)?;
        self.sock.write_all(&reply)?;
        let _ = self.sock.shutdown(std::net::Shutdown::Write);
        Ok(())
    }
}

/// Reads until `setup` has a whole frame; returns its event and the bytes read past it.
fn read_frame(
    sock: &mut TcpStream,
    setup: &mut Setup,
    timeout: Duration,
) -> Result<(SetupEvent, Vec<u8>), MpaError> {
    let deadline = Instant::now() + timeout;
    let mut buf = vec![0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(MpaError::TimedOut(timeout));
        }
        sock.set_read_timeout(Some(left))?;
        let n = match sock.read(&mut buf) {
            Ok(0) => return Err(MpaError::Closed),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Err(MpaError::TimedOut(timeout))
            }
            Err(e) => return Err(e.into()),
        };
        let (event, used) = setup.feed(&buf[..n])?;
        if event != SetupEvent::Pending {
            sock.set_read_timeout(None)?;
            return Ok((event, buf[used..n].to_vec()));
        }
    }
}

/// The longest FPDU for `sock`: its MSS (so one FPDU a segment), within MPA's 16-bit
/// length and at least what any path carries.
fn max_fpdu(sock: &TcpStream) -> usize {
    let mut mss: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `mss` and `len` are live locals of the sizes given; the kernel writes at
    // most `len` bytes into `mss` and updates `len`.
    let r = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_MAXSEG,
            (&mut mss as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    let mss = if r == 0 { mss.max(0) as usize } else { 1460 };
    // MPA's ULPDU length is 16 bits; the FPDU adds 2 (length), pad and 4 (CRC).
    mss.clamp(536, 65_532)
}
