//! The rdma-core backend: the API's objects on a device of the system's `libibverbs.so.1`
//! (a ConnectX NIC, Linux rxe or siw, or oxrdma's own C library), loaded at run time, so
//! that a program tested on the software engine ships unchanged on hardware. Chosen per
//! device: [`Context::open_rdma_core`](crate::Context::open_rdma_core), or
//! `OXRDMA_BACKEND=rdma-core` for [`Context::open`](crate::Context::open).
//!
//! What it covers: PDs, memory regions (owned or lent), CQs (polling, blocking waits and
//! `aio::AsyncCq`), RC, UC and UD QPs (connect, post, state), address handles, and the
//! RDMA CM through the system's `librdmacm.so.1`: its Rust-shaped calls (`cm::connect`,
//! `cm::Listener`; `cm.rs`), its event API (`cm::CmId`, `cm::EventChannel`; `cm_id.rs`)
//! and so rsockets, which the API builds on that. The engine's own extras (counters,
//! captures, secure QPs, SRQs, memory windows, completion channels shared among CQs,
//! async events) are refused with [`Error::Unsupported`](crate::Error::Unsupported) on
//! such a device.

pub(crate) mod cm;
mod cm_id;
mod context;
mod convert;
mod cq;
mod device;
mod objects;
mod qp;
mod verbs;

pub(crate) use cm_id::{RcChannel, RcId};
pub(crate) use context::RdmaCoreContext;
pub(crate) use cq::Cq;
pub(crate) use device::Device;
pub(crate) use objects::{Ah, Mr, Pd};
pub(crate) use qp::{Ahs, Qp};

/// The names of the devices the system's libibverbs sees (`ibv_devices`); an error if the
/// library cannot be loaded.
pub fn devices() -> crate::Result<Vec<String>> {
    Device::names()
}
