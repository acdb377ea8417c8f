//! The extended CQ and QP: the structs whose function pointers the header's inline
//! `ibv_start_poll`/`ibv_wc_read_*` and `ibv_wr_*` verbs call, and their init attributes.

use super::objects::{ibv_ah, ibv_comp_channel, ibv_cq, ibv_mw, ibv_mw_bind_info, ibv_pd};
use super::qp::{ibv_qp, ibv_qp_cap};
use super::wr::ibv_sge;
use std::ffi::{c_int, c_uint, c_void};

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_poll_cq_attr {
    pub comp_mask: u32,
}

/// A `read_*` member of `ibv_cq_ex`.
pub type cq_read<T> = Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> T>;

/// `struct ibv_cq_ex`: `ibv_cq`'s members (the header repeats them; here they are the
/// `ibv_cq` itself, so `ibv_cq_ex_to_cq` is a cast), then the current completion's status
/// and wr_id and the polling functions.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_cq_ex {
    pub cq: ibv_cq,
    pub comp_mask: u32,
    pub status: c_uint,
    pub wr_id: u64,
    pub start_poll: Option<unsafe extern "C" fn(*mut ibv_cq_ex, *mut ibv_poll_cq_attr) -> c_int>,
    pub next_poll: cq_read<c_int>,
    pub end_poll: cq_read<()>,
    pub read_opcode: cq_read<c_uint>,
    pub read_vendor_err: cq_read<u32>,
    pub read_byte_len: cq_read<u32>,
    pub read_imm_data: cq_read<u32>,
    pub read_qp_num: cq_read<u32>,
    pub read_src_qp: cq_read<u32>,
    pub read_wc_flags: cq_read<c_uint>,
    pub read_slid: cq_read<u32>,
    pub read_sl: cq_read<u8>,
    pub read_dlid_path_bits: cq_read<u8>,
    pub read_completion_ts: cq_read<u64>,
    pub read_cvlan: cq_read<u16>,
    pub read_flow_tag: cq_read<u32>,
    pub read_tm_info: Option<unsafe extern "C" fn(*mut ibv_cq_ex, *mut c_void)>,
    pub read_completion_wallclock_ns: cq_read<u64>,
}

impl ibv_cq_ex {
    /// Everything zero or NULL.
    // SAFETY: every field is an integer, a raw pointer, an opaque byte array or an
    // `Option` of a function pointer: all zeros is valid for each.
    pub const EMPTY: Self = unsafe { std::mem::zeroed() };

    /// The `ibv_cq` at the start of it.
    pub fn as_cq(p: *mut ibv_cq_ex) -> *mut ibv_cq {
        p.cast()
    }
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_cq_init_attr_ex {
    pub cqe: u32,
    pub cq_context: *mut c_void,
    pub channel: *mut ibv_comp_channel,
    pub comp_vector: u32,
    pub wc_flags: u64,
    pub comp_mask: u32,
    pub flags: u32,
    pub parent_domain: *mut ibv_pd,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_rx_hash_conf {
    pub rx_hash_function: u8,
    pub rx_hash_key_len: u8,
    pub rx_hash_key: *mut u8,
    pub rx_hash_fields_mask: u64,
}

/// `struct ibv_qp_init_attr_ex`: `ibv_qp_init_attr`'s members first.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_qp_init_attr_ex {
    pub qp_context: *mut c_void,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut super::objects::ibv_srq,
    pub cap: ibv_qp_cap,
    pub qp_type: c_uint,
    pub sq_sig_all: c_int,
    pub comp_mask: u32,
    pub pd: *mut ibv_pd,
    pub xrcd: *mut c_void,
    pub create_flags: u32,
    pub max_tso_header: u16,
    pub rwq_ind_tbl: *mut c_void,
    pub rx_hash_conf: ibv_rx_hash_conf,
    pub source_qpn: u32,
    pub send_ops_flags: u64,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_data_buf {
    pub addr: *mut c_void,
    pub length: usize,
}

type Q = *mut ibv_qp_ex;

/// `struct ibv_qp_ex` of rdma-core 44: `ibv_qp`, the next WR's id and flags, and the
/// functions of the extended send API.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_qp_ex {
    pub qp_base: ibv_qp,
    pub comp_mask: u64,
    pub wr_id: u64,
    pub wr_flags: c_uint,
    pub wr_atomic_cmp_swp: Option<unsafe extern "C" fn(Q, u32, u64, u64, u64)>,
    pub wr_atomic_fetch_add: Option<unsafe extern "C" fn(Q, u32, u64, u64)>,
    pub wr_bind_mw: Option<unsafe extern "C" fn(Q, *mut ibv_mw, u32, *const ibv_mw_bind_info)>,
    pub wr_local_inv: Option<unsafe extern "C" fn(Q, u32)>,
    pub wr_rdma_read: Option<unsafe extern "C" fn(Q, u32, u64)>,
    pub wr_rdma_write: Option<unsafe extern "C" fn(Q, u32, u64)>,
    pub wr_rdma_write_imm: Option<unsafe extern "C" fn(Q, u32, u64, u32)>,
    pub wr_send: Option<unsafe extern "C" fn(Q)>,
    pub wr_send_imm: Option<unsafe extern "C" fn(Q, u32)>,
    pub wr_send_inv: Option<unsafe extern "C" fn(Q, u32)>,
    pub wr_send_tso: Option<unsafe extern "C" fn(Q, *mut c_void, u16, u16)>,
    pub wr_set_ud_addr: Option<unsafe extern "C" fn(Q, *mut ibv_ah, u32, u32)>,
    pub wr_set_xrc_srqn: Option<unsafe extern "C" fn(Q, u32)>,
    pub wr_set_inline_data: Option<unsafe extern "C" fn(Q, *mut c_void, usize)>,
    pub wr_set_inline_data_list: Option<unsafe extern "C" fn(Q, usize, *const ibv_data_buf)>,
    pub wr_set_sge: Option<unsafe extern "C" fn(Q, u32, u64, u32)>,
    pub wr_set_sge_list: Option<unsafe extern "C" fn(Q, usize, *const ibv_sge)>,
    pub wr_start: Option<unsafe extern "C" fn(Q)>,
    pub wr_complete: Option<unsafe extern "C" fn(Q) -> c_int>,
    pub wr_abort: Option<unsafe extern "C" fn(Q)>,
    pub wr_atomic_write: Option<unsafe extern "C" fn(Q, u32, u64, *const c_void)>,
}

impl ibv_qp_ex {
    /// Everything zero or NULL.
    // SAFETY: as for `ibv_cq_ex::EMPTY`.
    pub const EMPTY: Self = unsafe { std::mem::zeroed() };
}

/// What the library allocates for every QP: `ibv_qp_ex`, and the member newer headers add
/// after it (`wr_flush`, NULL here), so a program built against them reads NULL there,
/// not the library's own data.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct qp_ex_newest {
    pub ex: ibv_qp_ex,
    pub wr_flush: Option<unsafe extern "C" fn()>,
}
