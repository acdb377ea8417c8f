//! librdmacm 44's C API on oxrdma's RDMA CM (`oxrdma::cm`), inside this library so that
//! its ids share the devices, PDs, CQs and QPs of the verbs programs already use. The
//! functions are exported from libibverbs.so.1 under private names (`oxr_rdma_*`, node
//! `OXRDMA_RDMACM`); the `librdmacm.so.1` beside it (crate `oxrdma-rdmacm`) binds
//! rdma-core's names and version nodes to them.

pub use oxrdma_verbs_abi::cm as abi;
pub(crate) mod addrinfo;
pub(crate) mod calls;
pub(crate) mod devices;
pub(crate) mod event;
pub(crate) mod id;
pub(crate) mod misc;
pub(crate) mod qp;
mod qpattr;
pub(crate) use oxrdma_verbs_abi::sockaddr;
