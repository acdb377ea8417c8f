//! rdma-core 44's libibverbs structs, field for field, with the header's names (so a reader
//! can hold them against `verbs.h`). Enums are their C representation (`u32`); unions that C
//! leaves anonymous are named after their first member.
//!
//! Two users: oxrdma's own `libibverbs.so.1` (which hands these to programs) and the API's
//! rdma-core backend (which takes them from the system's `libibverbs.so.1`). Written by hand
//! rather than generated with bindgen, which would need libclang wherever this builds; the
//! C library's `tests/layout.rs` compiles a C program against the real header and compares
//! every size and offset.

#![allow(non_camel_case_types, non_snake_case)]

pub mod cm;
mod consts;
mod device;
mod ex;
mod objects;
mod qp;
pub mod qp_attr;
pub mod sockaddr;
mod wr;

pub use consts::*;
pub use device::*;
pub use ex::*;
pub use objects::*;
pub use qp::*;
pub use wr::*;

/// glibc's `pthread_mutex_t` on x86_64: 40 opaque bytes, 8-aligned. Programs never touch
/// it; it is here for the offsets of what follows it.
#[repr(C, align(8))]
#[derive(Debug, Clone, Copy)]
pub struct pthread_mutex_t(pub [u8; 40]);

/// glibc's `pthread_cond_t` on x86_64: 48 opaque bytes, 8-aligned.
#[repr(C, align(8))]
#[derive(Debug, Clone, Copy)]
pub struct pthread_cond_t(pub [u8; 48]);
