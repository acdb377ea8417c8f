//! The rdma-core backend: the API's objects on a device of the system's `libibverbs.so.1`
//! (a ConnectX NIC, Linux rxe or siw, or oxrdma's own C library), loaded at run time, so
//! that a program tested on the software engine ships unchanged on hardware. Chosen per
//! device: [`Context::open_rdma_core`](crate::Context::open_rdma_core), or
//! `OXRDMA_BACKEND=rdma-core` for [`Context::open`](crate::Context::open).
//!
//! What it covers: PDs, memory regions (owned or lent), CQs (polling, blocking waits and
//! `aio::AsyncCq`), completion channels shared among CQs (`comp_channel.rs`), RC, UC and
//! UD QPs (connect, post, state, query), SRQs (`srq.rs`), memory windows (`mw.rs`),
//! address handles, asynchronous events (`context.rs`), and the RDMA CM through the
//! system's `librdmacm.so.1`: its event API (`cm::CmId`, `cm::EventChannel`; `cm.rs` loads
//! the library, `cm_id.rs`) and so the Rust-shaped calls (`cm::connect`, `cm::Listener`)
//! and rsockets, which the API builds on it. The engine's own extras (counters, captures,
//! secure QPs, all-or-nothing batches) are refused with
//! [`Error::Unsupported`](crate::Error::Unsupported) on such a device.

pub(crate) mod cm;
mod cm_id;
mod comp_channel;
mod context;
mod convert;
mod cq;
mod device;
mod mw;
mod objects;
mod qp;
mod srq;
mod verbs;

pub(crate) use cm_id::{RcChannel, RcId};
pub(crate) use comp_channel::CompChannel;
pub(crate) use context::RdmaCoreContext;
pub(crate) use cq::Cq;
pub(crate) use device::Device;
pub(crate) use mw::Mw;
pub(crate) use objects::{Ah, Mr, Pd};
pub(crate) use qp::{Ahs, Qp};
pub(crate) use srq::Srq;

/// The names of the devices the system's libibverbs sees (`ibv_devices`); an error if the
/// library cannot be loaded.
pub fn devices() -> crate::Result<Vec<String>> {
    Device::names()
}
