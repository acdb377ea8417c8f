//! `rpoll` and `rselect` over rsockets and ordinary descriptors together: each rsocket
//! is asked what is ready (moving its connection on), and if nothing is, the thread
//! sleeps in one `poll` on the ordinary descriptors and every rsocket's completion and
//! CM channels.

use super::{get, Kind, Sock};
use oxrdma::rsocket::Ready;
use std::ffi::c_int;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The longest one sleep lasts: a wakeup another thread took is noticed after it.
const NAP: Duration = Duration::from_millis(100);

fn want(events: i16) -> Ready {
    Ready {
        readable: events & libc::POLLIN != 0,
        writable: events & libc::POLLOUT != 0,
        ..Ready::default()
    }
}

fn revents(r: Ready) -> i16 {
    let mut e = 0;
    if r.readable {
        e |= libc::POLLIN;
    }
    if r.writable {
        e |= libc::POLLOUT;
    }
    if r.hangup {
        e |= libc::POLLHUP;
    }
    if r.error {
        e |= libc::POLLERR;
    }
    e
}

/// What an rsocket reports now; with `arm`, None means "sleep on its descriptors".
fn check(s: &Sock, events: i16, arm: bool) -> Option<i16> {
    let w = want(events);
    let r = match s.kind() {
        Kind::Stream(st) if arm => st.arm(w)?,
        Kind::Stream(st) => st.ready(w),
        Kind::Listening(_) => {
            let mut p = libc::pollfd {
                fd: s.ch.as_fd().as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one live pollfd.
            let n = unsafe { libc::poll(&mut p, 1, 0) };
            Ready {
                readable: w.readable && n > 0,
                ..Ready::default()
            }
        }
        Kind::Failed(_) => Ready { error: true, ..w },
        Kind::Fresh => Ready::default(),
    };
    let e = revents(r);
    (e != 0 || !arm).then_some(e)
}

/// # Safety
/// `fds` NULL or `n` writable `pollfd`s.
pub(crate) unsafe extern "C" fn rpoll(
    fds: *mut libc::pollfd,
    n: libc::nfds_t,
    timeout: c_int,
) -> c_int {
    if fds.is_null() && n > 0 {
        crate::errno::set_errno(libc::EFAULT);
        return -1;
    }
    let fds: &mut [libc::pollfd] = if n == 0 {
        &mut []
    } else {
        // SAFETY: the caller's promise.
        unsafe { std::slice::from_raw_parts_mut(fds, n as usize) }
    };
    match rpoll_slice(fds, timeout) {
        Ok(k) => k,
        Err(e) => {
            crate::errno::set_errno(e);
            -1
        }
    }
}

pub(crate) fn rpoll_slice(fds: &mut [libc::pollfd], timeout: c_int) -> Result<c_int, c_int> {
    let socks: Vec<Option<Arc<Sock>>> = fds.iter().map(|p| get(p.fd)).collect();
    let deadline = (timeout >= 0).then(|| Instant::now() + Duration::from_millis(timeout as u64));
    loop {
        // Arm every rsocket; any ready one ends the wait.
        let mut ready = false;
        for (p, s) in fds.iter_mut().zip(&socks) {
            p.revents = 0;
            if let Some(s) = s {
                if let Some(e) = check(s, p.events, true) {
                    p.revents = e;
                    ready = true;
                }
            }
        }
        let left = match deadline {
            _ if ready => Duration::ZERO,
            Some(d) => d.saturating_duration_since(Instant::now()),
            None => NAP,
        };
        let sleep = left.min(NAP);
        let k = sleep_on(fds, &socks, sleep)?;
        if ready || k > 0 {
            // Ready rsockets, ready descriptors, and any rsocket the sleep woke.
            let mut count = 0;
            for (p, s) in fds.iter_mut().zip(&socks) {
                if let Some(s) = s {
                    if p.revents == 0 {
                        p.revents = check(s, p.events, false).unwrap_or(0);
                    }
                }
                if p.revents != 0 {
                    count += 1;
                }
            }
            if count > 0 {
                return Ok(count);
            }
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok(0);
        }
    }
}

/// One `poll` over the ordinary descriptors (their results go into `fds`) and the
/// rsockets' channels (whose events are taken): how many descriptors had events.
fn sleep_on(
    fds: &mut [libc::pollfd],
    socks: &[Option<Arc<Sock>>],
    sleep: Duration,
) -> Result<usize, c_int> {
    let streams: Vec<_> = socks
        .iter()
        .map(|s| match s.as_ref().map(|s| s.kind()) {
            Some(Kind::Stream(st)) => Some(st),
            _ => None,
        })
        .collect();
    let mut raw: Vec<libc::pollfd> = Vec::with_capacity(fds.len() * 2);
    let mut owner: Vec<(usize, bool)> = Vec::new();
    for (i, p) in fds.iter().enumerate() {
        let fd = |b: BorrowedFd<'_>| b.as_raw_fd();
        let (mine, list): (bool, Vec<c_int>) = match (&socks[i], &streams[i]) {
            (Some(_), Some(st)) => (true, st.fds().iter().map(|b| fd(b.as_fd())).collect()),
            (Some(s), None) => (true, vec![s.ch.as_fd().as_raw_fd()]),
            (None, _) => (false, vec![p.fd]),
        };
        for f in list {
            let events = if mine { libc::POLLIN } else { p.events };
            raw.push(libc::pollfd {
                fd: f,
                events,
                revents: 0,
            });
            owner.push((i, mine));
        }
    }
    let ms = c_int::try_from(sleep.as_millis()).unwrap_or(c_int::MAX);
    // SAFETY: `raw` is a live array of `raw.len()` pollfds.
    let k = unsafe { libc::poll(raw.as_mut_ptr(), raw.len() as libc::nfds_t, ms) };
    if k < 0 {
        let e = crate::errno::last_errno().unwrap_or(libc::EINVAL);
        return if e == libc::EINTR { Ok(0) } else { Err(e) };
    }
    for (r, &(i, mine)) in raw.iter().zip(&owner) {
        if !mine {
            fds[i].revents = r.revents;
        } else if r.revents != 0 {
            if let Some(st) = &streams[i] {
                st.woke();
            }
        }
    }
    Ok(k as usize)
}

/// # Safety
/// The sets NULL or valid `fd_set`s; `timeout` NULL or valid.
pub(crate) unsafe extern "C" fn rselect(
    nfds: c_int,
    rd: *mut libc::fd_set,
    wr: *mut libc::fd_set,
    ex: *mut libc::fd_set,
    timeout: *mut libc::timeval,
) -> c_int {
    let nfds = nfds.clamp(0, libc::FD_SETSIZE as c_int);
    // SAFETY: the caller's promise for each set.
    let isset = |set: *mut libc::fd_set, fd| !set.is_null() && unsafe { libc::FD_ISSET(fd, set) };
    let mut fds = Vec::new();
    for fd in 0..nfds {
        let mut events = 0;
        if isset(rd, fd) {
            events |= libc::POLLIN;
        }
        if isset(wr, fd) {
            events |= libc::POLLOUT;
        }
        if events != 0 || isset(ex, fd) {
            fds.push(libc::pollfd {
                fd,
                events,
                revents: 0,
            });
        }
    }
    // SAFETY: the caller's promise.
    let ms =
        unsafe { timeout.as_ref() }.map_or(-1, |t| (t.tv_sec * 1000 + t.tv_usec / 1000) as c_int);
    let r = rpoll_slice(&mut fds, ms);
    for set in [rd, wr, ex] {
        if !set.is_null() {
            // SAFETY: the caller's promise.
            unsafe { libc::FD_ZERO(set) };
        }
    }
    let k = match r {
        Ok(k) => k,
        Err(e) => {
            crate::errno::set_errno(e);
            return -1;
        }
    };
    let mut count = 0;
    if k > 0 {
        for p in &fds {
            // SAFETY: the caller's promise for each set.
            unsafe {
                if !rd.is_null() && p.revents & (libc::POLLIN | libc::POLLHUP) != 0 {
                    libc::FD_SET(p.fd, rd);
                    count += 1;
                }
                if !wr.is_null() && p.revents & libc::POLLOUT != 0 {
                    libc::FD_SET(p.fd, wr);
                    count += 1;
                }
                if !ex.is_null() && p.revents & !(libc::POLLIN | libc::POLLOUT) != 0 {
                    libc::FD_SET(p.fd, ex);
                    count += 1;
                }
            }
        }
    }
    count
}
