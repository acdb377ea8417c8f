//! One address, many processes. Port 4791 of an address is a `SO_REUSEPORT` group of
//! [`SLOTS`] UDP sockets, formed whole by the first process that opens a device on the
//! address and then held by every process that uses it: a process joining gets all of
//! them (passed over a Unix socket by a member, `SCM_RIGHTS`) and owns one slot, whose
//! socket it reads. A program in the kernel (`steer.rs`) hands each packet to the socket
//! of the slot that owns its QPN or comm ID (`oxrdma_core::slot`).
//!
//! Why every member holds every socket: when a socket of a group closes, the kernel moves
//! the group's last socket into its index, and the indexes are what the program returns.
//! A socket held by every member closes only with the last of them, so the indexes never
//! move: a process that exits or crashes leaves its slot's socket to the others, where the
//! packets still coming for its QPs queue unread (the next owner drains and counts them),
//! and no other process's packets change hands.
//!
//! A device's slot is the host's (`host_slot.rs`): the same in the group of each of its
//! addresses. Who is a member is a lock: `<dir>/slot-N`, held with `flock` while the
//! member lives (the kernel lets it go when the process dies, however it dies). Joining
//! holds `<dir>/.lock`. `<dir>` is `$TMPDIR/oxrdma-host/<network namespace>/<address>-<port>`.
//! The kernel admits one user's sockets to a group: another user's process is refused.

use crate::bind_error::BindError;
use crate::host_slot::HostSlot;
use crate::steer;
use oxrdma_core::slot::SLOTS;
use oxrdma_core::Slot;
use rustix::fs::{flock, FlockOperation};
use std::fs::{self, File};
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// What a member sends a joiner before the sockets.
const HELLO: &[u8; 4] = b"OXG1";

/// A process's membership of an address's group.
#[derive(Debug)]
pub struct Group {
    /// Every socket of the group, by index (= slot); the server holds them too.
    sockets: Arc<Vec<UdpSocket>>,
    slot: Slot,
    dir: PathBuf,
    /// This slot's membership lock, held while this process is a member.
    member: File,
    /// The device's slot on the host, held while any of its groups is.
    _host: Arc<HostSlot>,
    /// Serves the sockets to processes that join.
    server: Server,
    /// Packets that waited in this slot's socket when it was claimed (for a process that
    /// had gone): dropped.
    pub stale: usize,
}

impl Group {
    /// Joins the group of `addr` (forming it if no process holds it) in the device's slot
    /// on the host.
    pub fn join(addr: SocketAddr, host: Arc<HostSlot>) -> Result<Group, BindError> {
        let io_err = |source| BindError::Io { addr, source };
        let dir = group_dir(addr).map_err(io_err)?;
        let lock = take_lock(&dir).map_err(io_err)?;
        let (index, host_key) = (host.slot().index, host.slot().key);
        let mut live = Vec::new();
        let mut claim = None;
        for s in 0..SLOTS {
            let f = open_lock(&dir.join(format!("slot-{s}"))).map_err(io_err)?;
            match flock(&f, FlockOperation::NonBlockingLockExclusive) {
                Ok(()) if s == index => claim = Some(f),
                Ok(()) => {}
                Err(_) => live.push(s),
            }
        }
        let Some(claim) = claim else {
            return Err(io_err(io::Error::other(format!(
                "slot {index} of this address is held by another device"
            ))));
        };
        // A member that dies lets go of its slot and its server in no set order: one that
        // does not answer may be gone, so who is live is asked again (for up to a second).
        let mut tries = 0;
        let (sockets, key) = loop {
            if live.is_empty() {
                break form(addr, index, host_key)?;
            }
            // Never formed anew beside live members: ours would join their group.
            if let Some(got) = fetch(addr, &live) {
                break got;
            }
            tries += 1;
            if tries == 100 {
                return Err(io_err(io::Error::other(format!(
                    "the processes sharing this address (slots {live:?}) did not hand over \
                     its sockets"
                ))));
            }
            std::thread::sleep(Duration::from_millis(10));
            live.retain(|s| held(&dir.join(format!("slot-{s}"))));
        };
        if key != host_key {
            return Err(io_err(io::Error::other(
                "the address's group was formed under another host key (was the host's \
                 oxrdma-host directory removed while it was in use?)",
            )));
        }
        let sockets = Arc::new(sockets);
        let slot = Slot::new(index, key);
        // Rewritten with this member among the live ones (the default may have gone).
        steer_now(&dir, &sockets, key).map_err(io_err)?;
        let stale = drain(&sockets[index as usize]);
        let server = Server::start(addr, index, sockets.clone(), key).map_err(io_err)?;
        drop(lock);
        Ok(Group {
            sockets,
            slot,
            dir,
            member: claim,
            _host: host,
            server,
            stale,
        })
    }

    /// The socket of this process's slot.
    pub fn socket(&self) -> &UdpSocket {
        &self.sockets[self.slot.index as usize]
    }

    /// This process's slot and the group's key.
    pub fn slot(&self) -> Slot {
        self.slot
    }

    /// Steers the connection requests (REQ, SIDR_REQ) for `service_id` to this process
    /// until the guard is dropped (the RDMA CM's listeners; another process's REQs would
    /// find no listener there and be rejected).
    pub fn listen(&self, service_id: u64) -> io::Result<Listening> {
        let _lock = take_lock(&self.dir)?;
        let path = self.dir.join(format!("listen-{service_id:016x}"));
        let mut file = open_lock(&path)?;
        flock(&file, FlockOperation::NonBlockingLockExclusive).map_err(|_| {
            io::Error::new(io::ErrorKind::AddrInUse, "another process listens on it")
        })?;
        use std::io::Write;
        file.set_len(0)?;
        writeln!(file, "{}", self.slot.index)?;
        steer_now(&self.dir, &self.sockets, self.slot.key)?;
        Ok(Listening {
            file,
            path,
            dir: self.dir.clone(),
            sockets: self.sockets.clone(),
            key: self.slot.key,
        })
    }
}

/// A listener's steering (`Group::listen`): its REQs come to this process until dropped.
#[derive(Debug)]
pub struct Listening {
    file: File,
    path: PathBuf,
    dir: PathBuf,
    sockets: Arc<Vec<UdpSocket>>,
    key: u32,
}

impl Drop for Listening {
    fn drop(&mut self) {
        if let Ok(_lock) = take_lock(&self.dir) {
            let _ = fs::remove_file(&self.path);
            let _ = flock(&self.file, FlockOperation::Unlock);
            let _ = steer_now(&self.dir, &self.sockets, self.key);
        }
    }
}

/// `<dir>/.lock`, held: joins, listeners and the program's rewrites take turns.
fn take_lock(dir: &Path) -> io::Result<File> {
    let f = open_lock(&dir.join(".lock"))?;
    flock(&f, FlockOperation::LockExclusive)?;
    Ok(f)
}

/// Whether the lock file at `path` is held by a live process (not by the caller: the
/// caller's own locks are on other open files, which conflict too).
fn held(path: &Path) -> bool {
    open_lock(path).is_ok_and(|f| flock(&f, FlockOperation::NonBlockingLockExclusive).is_err())
}

/// Rewrites the group's program from what `dir` says now (with `.lock` held): the live
/// listeners (a listener's file whose process died is removed), and the lowest live slot
/// as the default.
fn steer_now(dir: &Path, sockets: &[UdpSocket], key: u32) -> io::Result<()> {
    let live = (0..SLOTS)
        .filter(|s| held(&dir.join(format!("slot-{s}"))))
        .fold(0u64, |m, s| m | 1 << s);
    let default = if live == 0 { 0 } else { live.trailing_zeros() };
    let mut listeners = Vec::new();
    for e in fs::read_dir(dir)?.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(sid) = name.strip_prefix("listen-") else {
            continue;
        };
        let Ok(sid) = u64::from_str_radix(sid, 16) else {
            continue;
        };
        if !held(&e.path()) {
            let _ = fs::remove_file(e.path());
            continue;
        }
        let slot = fs::read_to_string(e.path())
            .ok()
            .and_then(|t| t.trim().parse::<u32>().ok())
            .filter(|&s| s < SLOTS);
        if let Some(slot) = slot {
            listeners.push((sid, slot));
        }
    }
    steer::attach(&sockets[0], &steer::program(key, &listeners, default, live))
}

impl Drop for Group {
    fn drop(&mut self) {
        // Out of the group first, between joins (which hold `.lock` while they ask a live
        // member for the sockets: this one serves until it is no longer live). The members
        // left steer what was this device's to the default (a live member's), which drops
        // and counts it. (A process that dies leaves that to the next join.)
        if let Ok(_lock) = take_lock(&self.dir) {
            let _ = flock(&self.member, FlockOperation::Unlock);
            let _ = steer_now(&self.dir, &self.sockets, self.slot.key);
        }
        self.server.stop();
        // A process that then finds no live member forms the group anew only once the
        // port is free: it waits for these sockets to close (`form`).
    }
}

/// `$TMPDIR/oxrdma-host/<netns>/<address>-<port>`, made if missing.
fn group_dir(addr: SocketAddr) -> io::Result<PathBuf> {
    let d = crate::host_dir("oxrdma-host")?.join(format!("{}-{}", addr.ip(), addr.port()));
    if fs::create_dir(&d).is_ok() {
        // Only this user's processes can share the port; their files are theirs.
        let _ = fs::set_permissions(&d, fs::Permissions::from_mode(0o700));
    }
    Ok(d)
}

use crate::host_slot::open_lock;

/// A socket bound to `addr` that joins its group.
fn member_socket(addr: SocketAddr) -> Result<UdpSocket, BindError> {
    use rustix::net::{bind, socket_with, sockopt, AddressFamily, SocketFlags, SocketType};
    let io_err = |e: rustix::io::Errno| BindError::Io {
        addr,
        source: e.into(),
    };
    let family = if addr.is_ipv4() {
        AddressFamily::INET
    } else {
        AddressFamily::INET6
    };
    // Close-on-exec: a program this one runs must not hold the group.
    let fd = socket_with(family, SocketType::DGRAM, SocketFlags::CLOEXEC, None).map_err(io_err)?;
    sockopt::set_socket_reuseport(&fd, true).map_err(io_err)?;
    if addr.is_ipv6() {
        sockopt::set_ipv6_v6only(&fd, true).map_err(io_err)?;
    }
    bind(&fd, &addr).map_err(|e| match e {
        rustix::io::Errno::ADDRINUSE => BindError::InUse { addr },
        rustix::io::Errno::ADDRNOTAVAIL => BindError::NotLocal { addr },
        e => io_err(e),
    })?;
    Ok(UdpSocket::from(fd))
}

/// Forms the group: `SLOTS` sockets, a key, the program. Only on a free port: the sockets
/// of a group whose last process is still closing them would take the first indexes, so
/// a socket that cannot share is bound first, to see the port free (and let go).
fn form(addr: SocketAddr, claimer: u32, key: u32) -> Result<(Vec<UdpSocket>, u32), BindError> {
    let io_err = |source| BindError::Io { addr, source };
    let mut tries = 0;
    loop {
        match UdpSocket::bind(addr) {
            Ok(alone) => drop(alone),
            Err(e) if e.kind() == io::ErrorKind::AddrInUse && tries < 50 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
            Err(e) if e.kind() == io::ErrorKind::AddrInUse => {
                return Err(BindError::InUse { addr });
            }
            Err(e) if e.kind() == io::ErrorKind::AddrNotAvailable => {
                return Err(BindError::NotLocal { addr });
            }
            Err(e) => return Err(io_err(e)),
        }
        let sockets = (0..SLOTS)
            .map(|_| member_socket(addr))
            .collect::<Result<Vec<_>, _>>()?;
        let only = 1u64 << claimer;
        steer::attach(&sockets[0], &steer::program(key, &[], claimer, only)).map_err(io_err)?;
        return Ok((sockets, key));
    }
}

/// Reads and drops what waits in `socket`; how many.
fn drain(socket: &UdpSocket) -> usize {
    let mut n = 0;
    let mut b = [0u8; 64];
    let _ = socket.set_nonblocking(true);
    while socket.recv(&mut b).is_ok() {
        n += 1;
    }
    n
}

/// The Unix socket name member `slot` of `addr`'s group serves on (abstract: per network
/// namespace, gone with the process).
fn server_name(addr: SocketAddr, slot: u32) -> String {
    format!("oxrdma-group/{}/{}/{slot}", addr.ip(), addr.port())
}

/// With `OXRDMA_DEBUG_GROUP=1`, says why a join went wrong.
fn debug(what: std::fmt::Arguments<'_>) {
    if std::env::var_os("OXRDMA_DEBUG_GROUP").is_some_and(|v| v == "1") {
        eprintln!("oxrdma group: {what}");
    }
}

/// Gets the group's sockets and key from one of the `live` members.
fn fetch(addr: SocketAddr, live: &[u32]) -> Option<(Vec<UdpSocket>, u32)> {
    use std::os::linux::net::SocketAddrExt;
    for &s in live {
        let name = std::os::unix::net::SocketAddr::from_abstract_name(server_name(addr, s)).ok()?;
        let stream = match UnixStream::connect_addr(&name) {
            Ok(s) => s,
            Err(e) => {
                debug(format_args!("{addr}: member {s} does not answer: {e}"));
                continue;
            }
        };
        let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
        if let Some(got) = receive(&stream, addr) {
            return Some(got);
        }
    }
    None
}

fn receive(stream: &UnixStream, addr: SocketAddr) -> Option<(Vec<UdpSocket>, u32)> {
    use rustix::net::{recvmsg, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags};
    let mut data = [0u8; 8];
    let mut space =
        vec![std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(SLOTS as usize))];
    let mut anc = RecvAncillaryBuffer::new(&mut space);
    let got = recvmsg(
        stream,
        &mut [io::IoSliceMut::new(&mut data)],
        &mut anc,
        RecvFlags::CMSG_CLOEXEC,
    )
    .ok()?;
    let mut fds: Vec<OwnedFd> = Vec::new();
    for m in anc.drain() {
        if let RecvAncillaryMessage::ScmRights(r) = m {
            fds.extend(r);
        }
    }
    if got.bytes != 8 || &data[..4] != HELLO || fds.len() != SLOTS as usize {
        debug(format_args!(
            "{addr}: a member handed over {} bytes and {} sockets (flags {:?})",
            got.bytes,
            fds.len(),
            got.flags
        ));
        return None;
    }
    let key = u32::from_be_bytes([data[4], data[5], data[6], data[7]]);
    let sockets: Vec<UdpSocket> = fds.into_iter().map(UdpSocket::from).collect();
    sockets
        .iter()
        .all(|s| s.local_addr().is_ok_and(|a| a == addr))
        .then_some((sockets, key))
}

/// Hands the group's sockets to each process of this user that asks.
#[derive(Debug)]
struct Server {
    /// Written to stop the thread (an eventfd it polls beside the listener: connecting to
    /// the listener would not do from a thread in another network namespace).
    stop: OwnedFd,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    fn start(
        addr: SocketAddr,
        slot: u32,
        sockets: Arc<Vec<UdpSocket>>,
        key: u32,
    ) -> io::Result<Server> {
        use std::os::linux::net::SocketAddrExt;
        let name = server_name(addr, slot);
        let listener =
            UnixListener::bind_addr(&std::os::unix::net::SocketAddr::from_abstract_name(&name)?)?;
        listener.set_nonblocking(true)?;
        use rustix::event::{eventfd, EventfdFlags};
        let stop = eventfd(0, EventfdFlags::CLOEXEC).map_err(io::Error::from)?;
        let stopped = stop.try_clone()?;
        let thread = std::thread::Builder::new()
            .name("oxrdma-group".into())
            .spawn(move || serve(&listener, &sockets, key, &stopped))?;
        Ok(Server {
            stop,
            thread: Some(thread),
        })
    }

    fn stop(&mut self) {
        let _ = rustix::io::write(&self.stop, &1u64.to_ne_bytes());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve(listener: &UnixListener, sockets: &[UdpSocket], key: u32, stop: &OwnedFd) {
    use rustix::event::{poll, PollFd, PollFlags};
    use rustix::net::{sendmsg, SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
    let me = rustix::process::getuid();
    loop {
        let mut fds = [
            PollFd::new(listener, PollFlags::IN),
            PollFd::new(stop, PollFlags::IN),
        ];
        if poll(&mut fds, None).is_err() {
            continue;
        }
        if !fds[1].revents().is_empty() {
            return;
        }
        let Ok((stream, _)) = listener.accept() else {
            continue;
        };
        let _ = stream.set_nonblocking(false);
        // Only this user's processes: the sockets carry its traffic.
        let peer = rustix::net::sockopt::socket_peercred(&stream);
        if !peer.is_ok_and(|c| c.uid == me) {
            continue;
        }
        let mut data = [0u8; 8];
        data[..4].copy_from_slice(HELLO);
        data[4..].copy_from_slice(&key.to_be_bytes());
        let borrowed: Vec<_> = sockets.iter().map(AsFd::as_fd).collect();
        let mut space =
            vec![std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(borrowed.len()))];
        let mut anc = SendAncillaryBuffer::new(&mut space);
        anc.push(SendAncillaryMessage::ScmRights(&borrowed));
        let _ = sendmsg(
            &stream,
            &[io::IoSlice::new(&data)],
            &mut anc,
            SendFlags::NOSIGNAL,
        );
    }
}
