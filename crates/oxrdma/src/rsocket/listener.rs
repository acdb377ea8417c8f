//! A listening rsocket: takes connection requests off its CM channel and accepts each
//! as an `RStream` with its own channel.

use super::stream::RStream;
use super::{io, os, RsOptions};
use crate::cm::{CmEventType, CmId, EventChannel, PortSpace};
use crate::Context;
use oxrdma_wire::rsocket::ConnData;
use rustix::io::Errno;
use std::io::Result;
use std::net::SocketAddr;
use std::os::fd::{AsFd, BorrowedFd};

/// A listening rsocket (`rlisten`).
#[derive(Debug)]
pub struct RListener {
    id: CmId,
    ch: EventChannel,
}

impl RListener {
    /// Listens on `addr` (any address of `ctx`'s host for a wildcard), the requests
    /// coming on `ch`.
    pub fn listen(
        ch: &EventChannel,
        ctx: &Context,
        addr: SocketAddr,
        backlog: usize,
    ) -> Result<RListener> {
        let id = CmId::new(ch, ctx, PortSpace::Tcp).map_err(io)?;
        id.bind_addr(addr).map_err(io)?;
        id.listen(backlog).map_err(io)?;
        Ok(RListener { id, ch: ch.clone() })
    }

    /// Listens on `addr` of `ctx`'s device (a backlog of 128), as `TcpListener::bind`.
    pub fn bind(ctx: &Context, addr: SocketAddr) -> Result<RListener> {
        let ch = EventChannel::for_context(ctx).map_err(io)?;
        RListener::listen(&ch, ctx, addr, 128)
    }

    /// The next connection, waiting for it, with the default options (as
    /// `TcpListener::accept`).
    pub fn accept(&self) -> Result<RStream> {
        self.accept_with(false, &RsOptions::default())
    }

    /// Accepts the next connection request as a connection with `options` (WouldBlock
    /// if none waits and `nonblock`). A request that is not an rsocket's is rejected
    /// and skipped.
    pub fn accept_with(&self, nonblock: bool, options: &RsOptions) -> Result<RStream> {
        loop {
            let ev = if nonblock {
                self.ch.try_event()
            } else {
                self.ch.get_event().map_err(io)?
            };
            let Some(ev) = ev else {
                return Err(os(Errno::AGAIN));
            };
            if ev.event != CmEventType::ConnectRequest {
                continue;
            }
            let Some(new) = ev.new_id else { continue };
            let Ok(peer) = ConnData::parse(&ev.conn.private_data) else {
                let _ = new.reject(&[]);
                continue;
            };
            let ch = EventChannel::for_context(new.context()).map_err(io)?;
            new.migrate(&ch).map_err(io)?;
            match RStream::accept(new.clone(), ch, &ev.conn, &peer, options) {
                Ok(s) => return Ok(s),
                Err(e) => {
                    let _ = new.reject(&[]);
                    if nonblock {
                        return Err(e);
                    }
                }
            }
        }
    }

    /// Readable while a connection request waits.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.ch.as_fd()
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.id.local_addr()
    }
}
