//! Where a stream's CQ reports that completions came, for a thread or task to sleep on:
//! a completion channel on an engine device, the CQ's own channel on an rdma-core one.

use crate::channel::CompletionChannel;
use crate::cq::CompletionQueue;
use crate::error::Result;
use crate::rdma_core;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::Arc;

#[derive(Debug)]
pub(super) enum Notify {
    Engine(CompletionChannel),
    RdmaCore(Arc<rdma_core::Cq>),
}

impl Notify {
    /// The channel for `cq`, made on `ctx`'s device.
    pub fn new(ctx: &crate::Context, cq: &CompletionQueue) -> Result<Notify> {
        if let Some(cq) = cq.rdma_core_cq() {
            return Ok(Notify::RdmaCore(cq.clone()));
        }
        let comp = ctx.create_comp_channel()?;
        comp.set_nonblocking(true)?;
        Ok(Notify::Engine(comp))
    }

    /// Asks for a report at `cq`'s next completion.
    pub fn arm(&self, cq: &CompletionQueue) -> Result<()> {
        match self {
            Notify::Engine(comp) => cq.req_notify(comp),
            Notify::RdmaCore(cq) => cq.arm(),
        }
    }

    /// The descriptor that becomes readable on the report.
    pub fn fd(&self) -> BorrowedFd<'_> {
        match self {
            Notify::Engine(comp) => comp.as_fd(),
            Notify::RdmaCore(cq) => cq.channel_fd(),
        }
    }

    /// Takes the reports that came, without waiting; whether any did (the CQ must then
    /// be armed again).
    pub fn take(&self) -> bool {
        match self {
            Notify::Engine(comp) => {
                let mut any = false;
                while let Ok(Some(_)) = comp.get_event() {
                    any = true;
                }
                any
            }
            Notify::RdmaCore(cq) => cq.take_events().is_ok_and(|n| n > 0),
        }
    }
}
