//! The device, its context (with the operations the header's inline functions call
//! through), and the device and port attributes.

use super::ex::{ibv_cq_ex, ibv_cq_init_attr_ex, ibv_qp_init_attr_ex};
use super::objects::*;
use super::pthread_mutex_t;
use super::qp::ibv_qp;
use super::wr::{ibv_recv_wr, ibv_send_wr, ibv_wc};
use std::ffi::{c_char, c_int, c_uint, c_void};

pub const IBV_SYSFS_NAME_MAX: usize = 64;
pub const IBV_SYSFS_PATH_MAX: usize = 256;

/// `struct _ibv_device_ops`: unused since rdma-core 14, kept for the layout.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct _ibv_device_ops {
    pub _dummy1: Option<unsafe extern "C" fn(*mut ibv_device, c_int) -> *mut ibv_context>,
    pub _dummy2: Option<unsafe extern "C" fn(*mut ibv_context)>,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_device {
    pub _ops: _ibv_device_ops,
    pub node_type: c_uint,
    pub transport_type: c_uint,
    pub name: [c_char; IBV_SYSFS_NAME_MAX],
    pub dev_name: [c_char; IBV_SYSFS_NAME_MAX],
    pub dev_path: [c_char; IBV_SYSFS_PATH_MAX],
    pub ibdev_path: [c_char; IBV_SYSFS_PATH_MAX],
}

/// An entry nobody may call (the `_compat_*` slots).
pub type compat_fn = Option<unsafe extern "C" fn() -> *mut c_void>;

/// `struct ibv_context_ops`: `ibv_post_send`, `ibv_poll_cq` and the other inline verbs of
/// the header call through these slots.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_context_ops {
    pub _compat_query_device:
        Option<unsafe extern "C" fn(*mut ibv_context, *mut ibv_device_attr) -> c_int>,
    pub _compat_query_port:
        Option<unsafe extern "C" fn(*mut ibv_context, u8, *mut c_void) -> c_int>,
    pub _compat_alloc_pd: compat_fn,
    pub _compat_dealloc_pd: compat_fn,
    pub _compat_reg_mr: compat_fn,
    pub _compat_rereg_mr: compat_fn,
    pub _compat_dereg_mr: compat_fn,
    pub alloc_mw: Option<unsafe extern "C" fn(*mut ibv_pd, c_uint) -> *mut ibv_mw>,
    pub bind_mw: Option<unsafe extern "C" fn(*mut ibv_qp, *mut ibv_mw, *mut ibv_mw_bind) -> c_int>,
    pub dealloc_mw: Option<unsafe extern "C" fn(*mut ibv_mw) -> c_int>,
    pub _compat_create_cq: compat_fn,
    pub poll_cq: Option<unsafe extern "C" fn(*mut ibv_cq, c_int, *mut ibv_wc) -> c_int>,
    pub req_notify_cq: Option<unsafe extern "C" fn(*mut ibv_cq, c_int) -> c_int>,
    pub _compat_cq_event: compat_fn,
    pub _compat_resize_cq: compat_fn,
    pub _compat_destroy_cq: compat_fn,
    pub _compat_create_srq: compat_fn,
    pub _compat_modify_srq: compat_fn,
    pub _compat_query_srq: compat_fn,
    pub _compat_destroy_srq: compat_fn,
    pub post_srq_recv: Option<
        unsafe extern "C" fn(*mut ibv_srq, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int,
    >,
    pub _compat_create_qp: compat_fn,
    pub _compat_query_qp: compat_fn,
    pub _compat_modify_qp: compat_fn,
    pub _compat_destroy_qp: compat_fn,
    pub post_send:
        Option<unsafe extern "C" fn(*mut ibv_qp, *mut ibv_send_wr, *mut *mut ibv_send_wr) -> c_int>,
    pub post_recv:
        Option<unsafe extern "C" fn(*mut ibv_qp, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int>,
    pub _compat_create_ah: compat_fn,
    pub _compat_destroy_ah: compat_fn,
    pub _compat_attach_mcast: compat_fn,
    pub _compat_detach_mcast: compat_fn,
    pub _compat_async_event: compat_fn,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_context {
    pub device: *mut ibv_device,
    pub ops: ibv_context_ops,
    pub cmd_fd: c_int,
    pub async_fd: c_int,
    pub num_comp_vectors: c_int,
    pub mutex: pthread_mutex_t,
    /// `(void *)UINTPTR_MAX` marks a `verbs_context` in front of this one.
    pub abi_compat: *mut c_void,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_device_attr {
    pub fw_ver: [c_char; 64],
    pub node_guid: u64,
    pub sys_image_guid: u64,
    pub max_mr_size: u64,
    pub page_size_cap: u64,
    pub vendor_id: u32,
    pub vendor_part_id: u32,
    pub hw_ver: u32,
    pub max_qp: c_int,
    pub max_qp_wr: c_int,
    pub device_cap_flags: c_uint,
    pub max_sge: c_int,
    pub max_sge_rd: c_int,
    pub max_cq: c_int,
    pub max_cqe: c_int,
    pub max_mr: c_int,
    pub max_pd: c_int,
    pub max_qp_rd_atom: c_int,
    pub max_ee_rd_atom: c_int,
    pub max_res_rd_atom: c_int,
    pub max_qp_init_rd_atom: c_int,
    pub max_ee_init_rd_atom: c_int,
    pub atomic_cap: c_uint,
    pub max_ee: c_int,
    pub max_rdd: c_int,
    pub max_mw: c_int,
    pub max_raw_ipv6_qp: c_int,
    pub max_raw_ethy_qp: c_int,
    pub max_mcast_grp: c_int,
    pub max_mcast_qp_attach: c_int,
    pub max_total_mcast_qp_attach: c_int,
    pub max_ah: c_int,
    pub max_fmr: c_int,
    pub max_map_per_fmr: c_int,
    pub max_srq: c_int,
    pub max_srq_wr: c_int,
    pub max_srq_sge: c_int,
    pub max_pkeys: u16,
    pub local_ca_ack_delay: u8,
    pub phys_port_cnt: u8,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_port_attr {
    pub state: c_uint,
    pub max_mtu: c_uint,
    pub active_mtu: c_uint,
    pub gid_tbl_len: c_int,
    pub port_cap_flags: u32,
    pub max_msg_sz: u32,
    pub bad_pkey_cntr: u32,
    pub qkey_viol_cntr: u32,
    pub pkey_tbl_len: u16,
    pub lid: u16,
    pub sm_lid: u16,
    pub lmc: u8,
    pub max_vl_num: u8,
    pub sm_sl: u8,
    pub subnet_timeout: u8,
    pub init_type_reply: u8,
    pub active_width: u8,
    pub active_speed: u8,
    pub phys_state: u8,
    pub link_layer: u8,
    pub flags: u8,
    pub port_cap_flags2: u16,
}

/// `union ibv_gid`: 16 raw bytes (the `global` view is the same bytes as two big-endian
/// 64-bit halves, which give it 8-byte alignment).
#[repr(C, align(8))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ibv_gid {
    pub raw: [u8; 16],
}

/// One GID table entry (`ibv_query_gid_ex`, `ibv_query_gid_table`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_gid_entry {
    pub gid: ibv_gid,
    pub gid_index: u32,
    pub port_num: u32,
    /// `enum ibv_gid_type`: 2 is RoCE v2 (unlike sysfs's numbering in
    /// `ibv_query_gid_type`).
    pub gid_type: u32,
    pub ndev_ifindex: u32,
}

/// A `verbs_context` slot whose operation oxrdma does not offer (left NULL, so the
/// header's inline verbs answer EOPNOTSUPP themselves) or has not typed yet.
pub type op_fn = Option<unsafe extern "C" fn()>;

/// `struct ibv_odp_caps`: on-demand paging, which oxrdma does not offer.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_odp_caps {
    pub general_caps: u64,
    /// rc, uc, ud.
    pub per_transport_caps: [u32; 3],
}

/// `struct ibv_rss_caps`: receive-side scaling (raw packet QPs), not offered.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_rss_caps {
    pub supported_qpts: u32,
    pub max_rwq_indirection_tables: u32,
    pub max_rwq_indirection_table_size: u32,
    pub rx_hash_fields_mask: u64,
    pub rx_hash_function: u8,
}

/// `struct ibv_device_attr_ex`. The capability structs for what oxrdma lacks (TSO, packet
/// pacing, tag matching, CQ moderation, PCI atomics) are kept as their words: all zero.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_device_attr_ex {
    pub orig_attr: ibv_device_attr,
    pub comp_mask: u32,
    pub odp_caps: ibv_odp_caps,
    pub completion_timestamp_mask: u64,
    pub hca_core_clock: u64,
    pub device_cap_flags_ex: u64,
    pub tso_caps: [u32; 2],
    pub rss_caps: ibv_rss_caps,
    pub max_wq_type_rq: u32,
    pub packet_pacing_caps: [u32; 3],
    pub raw_packet_caps: u32,
    pub tm_caps: [u32; 5],
    pub cq_mod_caps: [u16; 2],
    pub max_dm_size: u64,
    pub pci_atomic_caps: [u16; 3],
    pub xrc_odp_caps: u32,
    pub phys_port_cnt_ex: u32,
}

/// `struct verbs_context`: the extended operations, placed in memory right before the
/// `ibv_context` the program holds (found by `container_of` when `abi_compat` is
/// `UINTPTR_MAX`). New slots were added at the top, so `sz` says how many exist.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct verbs_context {
    pub query_port:
        Option<unsafe extern "C" fn(*mut ibv_context, u8, *mut ibv_port_attr, usize) -> c_int>,
    pub advise_mr: op_fn,
    pub alloc_null_mr: op_fn,
    pub read_counters: op_fn,
    pub attach_counters_point_flow: op_fn,
    pub create_counters: op_fn,
    pub destroy_counters: op_fn,
    pub reg_dm_mr: op_fn,
    pub alloc_dm: op_fn,
    pub free_dm: op_fn,
    pub modify_flow_action_esp: op_fn,
    pub destroy_flow_action: op_fn,
    pub create_flow_action_esp: op_fn,
    pub modify_qp_rate_limit: op_fn,
    pub alloc_parent_domain: op_fn,
    pub dealloc_td: op_fn,
    pub alloc_td: op_fn,
    pub modify_cq: op_fn,
    pub post_srq_ops: op_fn,
    pub destroy_rwq_ind_table: op_fn,
    pub create_rwq_ind_table: op_fn,
    pub destroy_wq: op_fn,
    pub modify_wq: op_fn,
    pub create_wq: op_fn,
    pub query_rt_values: op_fn,
    pub create_cq_ex:
        Option<unsafe extern "C" fn(*mut ibv_context, *mut ibv_cq_init_attr_ex) -> *mut ibv_cq_ex>,
    pub priv_: *mut c_void,
    pub query_device_ex: Option<
        unsafe extern "C" fn(
            *mut ibv_context,
            *const c_void,
            *mut ibv_device_attr_ex,
            usize,
        ) -> c_int,
    >,
    pub ibv_destroy_flow: op_fn,
    pub ABI_placeholder2: op_fn,
    pub ibv_create_flow: op_fn,
    pub ABI_placeholder1: op_fn,
    pub open_qp: op_fn,
    pub create_qp_ex:
        Option<unsafe extern "C" fn(*mut ibv_context, *mut ibv_qp_init_attr_ex) -> *mut ibv_qp>,
    pub get_srq_num: op_fn,
    pub create_srq_ex: op_fn,
    pub open_xrcd: op_fn,
    pub close_xrcd: op_fn,
    pub _ABI_placeholder3: u64,
    /// Bytes of this struct from the first slot in use to the end of `context`.
    pub sz: usize,
    pub context: ibv_context,
}

impl ibv_context_ops {
    /// Every slot empty.
    // SAFETY: every field is an `Option` of a function pointer, for which all zeros is
    // `None`.
    pub const EMPTY: Self = unsafe { std::mem::zeroed() };
}

impl verbs_context {
    /// Every slot empty, `sz` 0, the context zeroed.
    // SAFETY: every field is an `Option` of a function pointer (all zeros: `None`), a raw
    // pointer (null), an integer or byte array, or an `ibv_context` made of the same.
    pub const EMPTY: Self = unsafe { std::mem::zeroed() };
}
