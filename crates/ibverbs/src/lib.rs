//! oxrdma as `libibverbs.so.1`: rdma-core 44's C ABI, so that unmodified verbs programs
//! (ibv_devinfo, ibv_rc_pingpong, perftest) run on oxrdma.
//!
//! `abi` (the `oxrdma-verbs-abi` crate, shared with the API's rdma-core backend) holds
//! every struct a compiled program touches, laid out exactly as rdma-core 44's
//! `infiniband/verbs.h` lays it out on x86_64 Linux (`tests/layout.rs` compiles a C
//! program against the real header and compares every size and offset). The entry points
//! (one file per verbs object) are a thin translation onto the `oxrdma` API: no
//! transport logic here.

pub use oxrdma_verbs_abi as abi;
mod ah;
mod async_event;
pub mod cm;
pub mod context;
mod cq;
mod cq_ex;
pub mod device;
mod errno;
mod exports;
mod mw;
mod object;
mod open;
mod pd;
mod qp;
mod qp_ex;
mod rate;
mod registry;
mod rsocket;
mod srq;
mod strings;
mod stubs;
mod work;
