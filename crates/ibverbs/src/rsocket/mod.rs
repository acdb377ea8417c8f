//! librdmacm's rsocket calls (`rsocket` … `riomap`) on `oxrdma::rsocket`, so Debian's
//! `librspreload.so` and programs written to rsockets run on oxrdma.
//!
//! An rsocket is named, as in librdmacm, by the descriptor of its CM event channel: a
//! real descriptor of this process, so it never collides with one the program holds and
//! `rpoll` can tell rsockets from the other descriptors it is given. Datagram rsockets
//! (SOCK_DGRAM) are not offered: `rsocket` fails with ENOTSUP, and librspreload then
//! gives the program an ordinary UDP socket.

pub(crate) mod calls;
pub(crate) mod io;
pub(crate) mod opts;
pub(crate) mod poll;

use oxrdma::cm::EventChannel;
use oxrdma::rsocket::{RListener, RStream, RsOptions};
use std::collections::HashMap;
use std::ffi::c_int;
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// What an rsocket is now.
#[derive(Debug, Clone)]
pub(crate) enum Kind {
    Fresh,
    Listening(Arc<RListener>),
    Stream(Arc<RStream>),
    /// `rconnect` failed before there was a connection: its errno.
    Failed(c_int),
}

/// Socket options kept for `rgetsockopt` (and the sizes new connections are made with).
#[derive(Debug)]
pub(crate) struct Opts {
    pub rs: RsOptions,
    /// Bits by option name, per level, as rsockets keeps them.
    pub so: u64,
    pub tcp: u64,
    pub ipv6: u64,
    pub keepalive_time: c_int,
    pub bound: Option<SocketAddr>,
}

#[derive(Debug)]
pub(crate) struct Sock {
    pub ch: EventChannel,
    pub domain: c_int,
    pub kind: Mutex<Kind>,
    /// `rfcntl` F_GETFL/F_SETFL (O_NONBLOCK is what counts).
    pub fl: AtomicI32,
    pub opts: Mutex<Opts>,
}

impl Default for Opts {
    fn default() -> Self {
        Opts {
            rs: *config(),
            so: 0,
            tcp: 0,
            ipv6: 0,
            keepalive_time: 0,
            bound: None,
        }
    }
}

/// The sizes new rsockets get: oxrdma's defaults, with what rdma-core's configuration
/// files (`/etc/rdma/rsocket/`: `mem_default`, `wmem_default`, `sqsize_default`,
/// `rqsize_default`, `inline_default`, `iomap_size`, one number each) say instead.
fn config() -> &'static RsOptions {
    static CONFIG: std::sync::OnceLock<RsOptions> = std::sync::OnceLock::new();
    CONFIG.get_or_init(|| {
        let read = |name: &str| -> Option<u32> {
            let dir = std::env::var_os("OXRDMA_RSOCKET_CONF")
                .unwrap_or_else(|| "/etc/rdma/rsocket".into());
            std::fs::read_to_string(std::path::Path::new(&dir).join(name))
                .ok()?
                .trim()
                .parse()
                .ok()
        };
        let mut o = RsOptions::default();
        for (name, field) in [
            ("mem_default", &mut o.rbuf_size),
            ("wmem_default", &mut o.sbuf_size),
            ("sqsize_default", &mut o.sq_size),
            ("rqsize_default", &mut o.rq_size),
            ("inline_default", &mut o.inline),
            ("iomap_size", &mut o.iomap_size),
        ] {
            if let Some(v) = read(name) {
                *field = v;
            }
        }
        o
    })
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Sock {
    pub fn kind(&self) -> Kind {
        lock(&self.kind).clone()
    }
    pub fn set_kind(&self, k: Kind) {
        *lock(&self.kind) = k;
    }
    pub fn opts(&self) -> MutexGuard<'_, Opts> {
        lock(&self.opts)
    }
    pub fn nonblocking(&self) -> bool {
        self.fl.load(Ordering::Relaxed) & libc::O_NONBLOCK != 0
    }
    pub fn stream(&self) -> Result<Arc<RStream>, c_int> {
        match self.kind() {
            Kind::Stream(s) => Ok(s),
            _ => Err(libc::ENOTCONN),
        }
    }
}

static SOCKS: Mutex<Option<HashMap<c_int, Arc<Sock>>>> = Mutex::new(None);

/// Adds a socket on `ch`: its name.
pub(crate) fn insert(ch: EventChannel, domain: c_int, kind: Kind, opts: Opts) -> c_int {
    let fd = ch.as_fd().as_raw_fd();
    let s = Sock {
        ch,
        domain,
        kind: Mutex::new(kind),
        fl: AtomicI32::new(libc::O_RDWR),
        opts: Mutex::new(opts),
    };
    lock(&SOCKS)
        .get_or_insert_with(HashMap::new)
        .insert(fd, Arc::new(s));
    fd
}

pub(crate) fn get(fd: c_int) -> Option<Arc<Sock>> {
    lock(&SOCKS).as_ref()?.get(&fd).cloned()
}

pub(crate) fn remove(fd: c_int) -> Option<Arc<Sock>> {
    lock(&SOCKS).as_mut()?.remove(&fd)
}

/// Runs `f` on rsocket `fd`: its result, or -1 with errno set (EBADF for no rsocket).
pub(crate) fn with<R: From<i8>>(fd: c_int, f: impl FnOnce(&Sock) -> Result<R, c_int>) -> R {
    let r = match get(fd) {
        Some(s) => f(&s),
        None => Err(libc::EBADF),
    };
    r.unwrap_or_else(|e| {
        crate::errno::set_errno(e);
        R::from(-1)
    })
}

/// An I/O error's errno.
pub(crate) fn errno(e: &std::io::Error) -> c_int {
    e.raw_os_error().unwrap_or(libc::EIO)
}
