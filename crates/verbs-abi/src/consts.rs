//! The header's enum values the library tests or sets by name, under the header's names
//! (`tests/layout.rs` checks each against `verbs.h`). Values oxrdma's own types share with
//! the header (access flags, send flags, completion statuses and opcodes) are checked
//! there too.

use std::ffi::c_int;

/// `enum ibv_wc_flags`.
pub const IBV_WC_GRH: u32 = 1;
pub const IBV_WC_WITH_IMM: u32 = 1 << 1;
pub const IBV_WC_WITH_INV: u32 = 1 << 3;

/// `enum ibv_access_flags`: rxe offers neither on-demand paging nor zero-based windows;
/// flags in the optional range a provider may ignore (relaxed ordering and the like).
pub const IBV_ACCESS_ZERO_BASED: u32 = 1 << 5;
pub const IBV_ACCESS_ON_DEMAND: u32 = 1 << 6;
pub const IBV_ACCESS_OPTIONAL_RANGE: u32 = 0x3ff0_0000;

/// `enum ibv_qp_attr_mask` bits beyond those oxrdma's `QpAttr` carries.
pub const IBV_QP_EN_SQD_ASYNC_NOTIFY: u32 = 1 << 2;
pub const IBV_QP_ALT_PATH: u32 = 1 << 14;
pub const IBV_QP_PATH_MIG_STATE: u32 = 1 << 18;

/// `enum ibv_qp_init_attr_mask`.
pub const IBV_QP_INIT_ATTR_PD: u32 = 1;
pub const IBV_QP_INIT_ATTR_CREATE_FLAGS: u32 = 1 << 2;
pub const IBV_QP_INIT_ATTR_SEND_OPS_FLAGS: u32 = 1 << 6;

/// `enum ibv_cq_init_attr_mask`.
pub const IBV_CQ_INIT_ATTR_MASK_FLAGS: u32 = 1;

/// `enum ibv_srq_attr_mask`.
pub const IBV_SRQ_MAX_WR: c_int = 1;
pub const IBV_SRQ_LIMIT: c_int = 1 << 1;

/// `enum ibv_mw_type`.
pub const IBV_MW_TYPE_1: u32 = 1;
pub const IBV_MW_TYPE_2: u32 = 2;

/// `enum ibv_rate`: what an unknown multiple or speed maps to.
pub const IBV_RATE_MAX: c_int = 0;
