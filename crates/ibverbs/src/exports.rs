//! The symbols the library exports, each bound to its rdma-core version node.
//!
//! rustc links a cdylib with a version script of its own that exports every `#[no_mangle]`
//! function unversioned, and a second script cannot move a symbol to another node. So the
//! entry points are plain Rust functions (not exported by rustc), and for each one a
//! two-instruction trampoline is defined here in assembly and given its versioned name with
//! `.symver`, against the nodes that `libibverbs.map` defines.

/// `export!(ibv_get_device_list @ "IBVERBS_1.1" => device::get_device_list);`
macro_rules! export {
    ($($name:ident @ $ver:literal => $f:path;)*) => {$(
        std::arch::global_asm!(
            concat!(".globl oxr_export_", stringify!($name)),
            concat!(".type oxr_export_", stringify!($name), ", @function"),
            concat!("oxr_export_", stringify!($name), ":"),
            "jmp {f}",
            concat!(".symver oxr_export_", stringify!($name), ", ", stringify!($name), "@@", $ver),
            f = sym $f,
        );
    )*};
}

/// `export_data!(name @ "NODE", size)`: a zeroed data object of `size` bytes.
macro_rules! export_data {
    ($name:ident @ $ver:literal, $size:literal) => {
        std::arch::global_asm!(
            ".pushsection .bss",
            concat!(".globl oxr_data_", stringify!($name)),
            concat!(".type oxr_data_", stringify!($name), ", @object"),
            concat!(
                ".size oxr_data_",
                stringify!($name),
                ", ",
                stringify!($size)
            ),
            concat!("oxr_data_", stringify!($name), ":"),
            concat!(".zero ", stringify!($size)),
            concat!(
                ".symver oxr_data_",
                stringify!($name),
                ", ",
                stringify!($name),
                "@@",
                $ver
            ),
            ".popsection",
        );
    };
}

use crate::stubs::{no_object, not_supported, nothing};
use crate::{ah, async_event, context, cq, device, open, pd, qp, qp_ex, rate, srq, strings, stubs};

export! {
    // Devices and contexts.
    ibv_get_device_list @ "IBVERBS_1.1" => device::get_device_list;
    ibv_free_device_list @ "IBVERBS_1.1" => device::free_device_list;
    ibv_get_device_name @ "IBVERBS_1.1" => device::get_device_name;
    ibv_get_device_guid @ "IBVERBS_1.1" => device::get_device_guid;
    ibv_get_device_index @ "IBVERBS_1.9" => device::get_device_index;
    ibv_read_sysfs_file @ "IBVERBS_1.0" => device::read_sysfs_file;
    ibv_get_sysfs_path @ "IBVERBS_1.0" => stubs::sysfs_path;
    ibv_open_device @ "IBVERBS_1.1" => open::open_device;
    ibv_close_device @ "IBVERBS_1.1" => open::close_device;
    ibv_query_device @ "IBVERBS_1.1" => context::query_device;
    ibv_query_port @ "IBVERBS_1.1" => context::query_port;
    ibv_query_gid @ "IBVERBS_1.1" => context::query_gid;
    _ibv_query_gid_ex @ "IBVERBS_1.11" => context::query_gid_ex;
    _ibv_query_gid_table @ "IBVERBS_1.11" => context::query_gid_table;
    ibv_query_pkey @ "IBVERBS_1.1" => context::query_pkey;
    ibv_get_pkey_index @ "IBVERBS_1.5" => stubs::get_pkey_index;
    ibv_query_gid_type @ "IBVERBS_PRIVATE_34" => context::query_gid_type;
    ibv_get_async_event @ "IBVERBS_1.1" => async_event::get_async_event;
    ibv_ack_async_event @ "IBVERBS_1.1" => async_event::ack_async_event;
    // Protection domains and memory.
    ibv_alloc_pd @ "IBVERBS_1.1" => pd::alloc_pd;
    ibv_dealloc_pd @ "IBVERBS_1.1" => pd::dealloc_pd;
    ibv_reg_mr @ "IBVERBS_1.1" => pd::reg_mr;
    ibv_reg_mr_iova @ "IBVERBS_1.7" => pd::reg_mr_iova;
    ibv_reg_mr_iova2 @ "IBVERBS_1.8" => pd::reg_mr_iova2;
    ibv_rereg_mr @ "IBVERBS_1.1" => pd::rereg_mr;
    ibv_dereg_mr @ "IBVERBS_1.1" => pd::dereg_mr;
    ibv_fork_init @ "IBVERBS_1.1" => stubs::fork_init;
    ibv_is_fork_initialized @ "IBVERBS_1.13" => stubs::is_fork_initialized;
    ibv_dofork_range @ "IBVERBS_1.1" => stubs::fork_init;
    ibv_dontfork_range @ "IBVERBS_1.1" => stubs::fork_init;
    // Completion queues.
    ibv_create_comp_channel @ "IBVERBS_1.0" => cq::create_comp_channel;
    ibv_destroy_comp_channel @ "IBVERBS_1.0" => cq::destroy_comp_channel;
    ibv_create_cq @ "IBVERBS_1.1" => cq::create_cq;
    ibv_destroy_cq @ "IBVERBS_1.1" => cq::destroy_cq;
    ibv_get_cq_event @ "IBVERBS_1.1" => cq::get_cq_event;
    ibv_ack_cq_events @ "IBVERBS_1.1" => cq::ack_cq_events;
    ibv_resize_cq @ "IBVERBS_1.1" => cq::resize_cq;
    // Queue pairs, SRQs, address handles.
    ibv_create_qp @ "IBVERBS_1.1" => qp::create_qp;
    ibv_modify_qp @ "IBVERBS_1.1" => qp::modify_qp;
    ibv_query_qp @ "IBVERBS_1.1" => qp::query_qp;
    ibv_destroy_qp @ "IBVERBS_1.1" => qp::destroy_qp;
    ibv_qp_to_qp_ex @ "IBVERBS_1.6" => qp_ex::qp_to_qp_ex;
    ibv_create_srq @ "IBVERBS_1.1" => srq::create_srq;
    ibv_modify_srq @ "IBVERBS_1.1" => srq::modify_srq;
    ibv_query_srq @ "IBVERBS_1.1" => srq::query_srq;
    ibv_destroy_srq @ "IBVERBS_1.1" => srq::destroy_srq;
    ibv_create_ah @ "IBVERBS_1.1" => ah::create_ah;
    ibv_destroy_ah @ "IBVERBS_1.1" => ah::destroy_ah;
    ibv_init_ah_from_wc @ "IBVERBS_1.1" => ah::init_ah_from_wc;
    ibv_create_ah_from_wc @ "IBVERBS_1.1" => ah::create_ah_from_wc;
    // Not offered: multicast, ECE, L2 resolution (providers' own business).
    ibv_attach_mcast @ "IBVERBS_1.1" => not_supported;
    ibv_detach_mcast @ "IBVERBS_1.1" => not_supported;
    ibv_query_ece @ "IBVERBS_1.10" => not_supported;
    ibv_set_ece @ "IBVERBS_1.10" => not_supported;
    ibv_resolve_eth_l2_from_gid @ "IBVERBS_1.1" => not_supported;
    ibv_copy_ah_attr_from_kern @ "IBVERBS_1.1" => nothing;
    ibv_copy_path_rec_from_kern @ "IBVERBS_1.0" => nothing;
    ibv_copy_path_rec_to_kern @ "IBVERBS_1.0" => nothing;
    ibv_copy_qp_attr_from_kern @ "IBVERBS_1.0" => nothing;
    // Static rates.
    ibv_rate_to_mult @ "IBVERBS_1.0" => rate::rate_to_mult;
    mult_to_ibv_rate @ "IBVERBS_1.0" => rate::mult_to_rate;
    ibv_rate_to_mbps @ "IBVERBS_1.1" => rate::rate_to_mbps;
    mbps_to_ibv_rate @ "IBVERBS_1.1" => rate::mbps_to_rate;
    // Not offered: sharing objects between processes by the kernel's file descriptor,
    // dma-buf memory, device memory; no ordering promise beyond the spec's.
    ibv_import_device @ "IBVERBS_1.10" => no_object;
    ibv_import_pd @ "IBVERBS_1.10" => no_object;
    ibv_import_mr @ "IBVERBS_1.10" => no_object;
    ibv_unimport_pd @ "IBVERBS_1.10" => nothing;
    ibv_unimport_mr @ "IBVERBS_1.10" => nothing;
    ibv_reg_dmabuf_mr @ "IBVERBS_1.12" => no_object;
    ibv_import_dm @ "IBVERBS_1.13" => no_object;
    ibv_unimport_dm @ "IBVERBS_1.13" => nothing;
    ibv_query_qp_data_in_order @ "IBVERBS_1.14" => stubs::no_order_promise;
    ibv_register_driver @ "IBVERBS_1.1" => nothing;
    // Words.
    ibv_wc_status_str @ "IBVERBS_1.1" => strings::wc_status_str;
    ibv_node_type_str @ "IBVERBS_1.1" => strings::node_type_str;
    ibv_port_state_str @ "IBVERBS_1.1" => strings::port_state_str;
    ibv_event_type_str @ "IBVERBS_1.1" => strings::event_type_str;
}

// The provider interface: libmlx5 and libefa register themselves from their constructors
// and bind these at load time; none is called without one of their devices.
export! {
    verbs_register_driver_34 @ "IBVERBS_PRIVATE_34" => nothing;
    __verbs_log @ "IBVERBS_PRIVATE_34" => nothing;
    verbs_set_ops @ "IBVERBS_PRIVATE_34" => nothing;
    verbs_uninit_context @ "IBVERBS_PRIVATE_34" => nothing;
    verbs_init_cq @ "IBVERBS_PRIVATE_34" => nothing;
    _verbs_init_and_alloc_context @ "IBVERBS_PRIVATE_34" => no_object;
    verbs_open_device @ "IBVERBS_PRIVATE_34" => no_object;
    execute_ioctl @ "IBVERBS_PRIVATE_34" => not_supported;
    ibv_cmd_advise_mr @ "IBVERBS_PRIVATE_34" => not_supported;
    ibv_cmd_alloc_dm @ "IBVERBS_PRIVATE_34" => not_supported;
    ibv_cmd_alloc_mw @ "IBVERBS_PRIVATE_34" => not_supported;
    ibv_cmd_alloc_pd @ "IBVERBS_PRIVATE_34" => not_supported;
    ibv_cmd_attach_mcast @ "IBVERBS_PRIVATE_34" => not_supported;
    ibv_cmd_close_xrcd @ "IBVERBS_PRIVATE_34" => not_supported;
    ibv_cmd_create_ah @ "IBVERBS_PRIVATE_34" => not_supported;
    ibv_cmd_create_counters @ "IBVERBS_PRIVATE_34" => not_supported;
    ibv_cmd_create_cq @ "IBVERBS_PRIVATE_34" => not_supported;
    ibv_cmd_create_cq_ex @ "IBVERBS_PRIVATE_34" => not_supported;
    ibv_cmd_create_flow @ "IBVERBS_PRIVATE_34" => not_supported;
    ibv_cmd_create_flow_action_esp @ "IBVERBS_PRIVATE_34" => not_supported;
    ibv_cmd_create_qp @ "IBVERBS_PRIVATE_34" => not_supported;
    ibv_cmd_create_qp_ex @ "IBVERBS_PRIVATE_34" => not_supported;
    ibv_cmd_create_qp_ex2 @ "IBVERBS_PRIVATE_34" => not_supported;
    ibv_cmd_create_rwq_ind_table @ "IBVERBS_PRIVATE_34" => not_supported;
    ibv_cmd_create_srq @ "IBVERBS_PRIVATE_34" => not_supported;
    ibv_cmd_create_srq_ex @ "IBVERBS_PRIVATE_34" => not_supported;
    ibv_cmd_create_wq @ "IBVERBS_PRIVATE_34" => not_supported;
    ibv_cmd_dealloc_mw @ "IBVERBS_PRIVATE_34" => not_supported;
    ibv_cmd_dealloc_pd @ "IBVERBS_PRIVATE_34" => not_supported;
    ibv_cmd_dereg_mr @ "IBVERBS_PRIVATE_34" => not_supported;
    ibv_cmd_destroy_ah @ "IBVERBS_PRIVATE_34" => not_supported;
    ibv_cmd_destroy_counters @ "IBVERBS_PRIVATE_34" => not_supported;
    ibv_cmd_destroy_cq @ "IBVERBS_PRIVATE_34" => not_supported;
    ibv_cmd_destroy_flow @ "IBVERBS_PRIVATE_34" => not_supported;
    ibv_cmd_destroy_flow_action @ "IBVERBS_PRIVATE_34" => not_supported;
    ibv_cmd_destroy_qp @ "IBVERBS_PRIVATE_34" => not_supported;
    ibv_cmd_destroy_rwq_ind_table @ "IBVERBS_PRIVATE_34" => not_supported;
    ibv_cmd_destroy_srq @ "IBVERBS_PRIVATE_34" => not_supported;
    ibv_cmd_destroy_wq @ "IBVERBS_PRIVATE_34" => not_supported;
    ibv_cmd_detach_mcast @ "IBVERBS_PRIVATE_34" => not_supported;
    ibv_cmd_free_dm @ "IBVERBS_PRIVATE_34" => not_supported;
    ibv_cmd_get_context @ "IBVERBS_PRIVATE_34" => not_supported;
    ibv_cmd_modify_cq @ "IBVERBS_PRIVATE_34" => not_supported;
    ibv_cmd_modify_flow_action_esp @ "IBVERBS_PRIVATE_34" => not_supported;
    ibv_cmd_modify_qp @ "IBVERBS_PRIVATE_34" => not_supported;
    ibv_cmd_modify_qp_ex @ "IBVERBS_PRIVATE_34" => not_supported;
    ibv_cmd_modify_srq @ "IBVERBS_PRIVATE_34" => not_supported;
    ibv_cmd_modify_wq @ "IBVERBS_PRIVATE_34" => not_supported;
    ibv_cmd_open_qp @ "IBVERBS_PRIVATE_34" => not_supported;
    ibv_cmd_open_xrcd @ "IBVERBS_PRIVATE_34" => not_supported;
    ibv_cmd_query_context @ "IBVERBS_PRIVATE_34" => not_supported;
    ibv_cmd_query_device_any @ "IBVERBS_PRIVATE_34" => not_supported;
    ibv_cmd_query_mr @ "IBVERBS_PRIVATE_34" => not_supported;
    ibv_cmd_query_port @ "IBVERBS_PRIVATE_34" => not_supported;
    ibv_cmd_query_qp @ "IBVERBS_PRIVATE_34" => not_supported;
    ibv_cmd_query_srq @ "IBVERBS_PRIVATE_34" => not_supported;
    ibv_cmd_read_counters @ "IBVERBS_PRIVATE_34" => not_supported;
    ibv_cmd_reg_dm_mr @ "IBVERBS_PRIVATE_34" => not_supported;
    ibv_cmd_reg_dmabuf_mr @ "IBVERBS_PRIVATE_34" => not_supported;
    ibv_cmd_reg_mr @ "IBVERBS_PRIVATE_34" => not_supported;
    ibv_cmd_rereg_mr @ "IBVERBS_PRIVATE_34" => not_supported;
    ibv_cmd_resize_cq @ "IBVERBS_PRIVATE_34" => not_supported;
}

export_data!(verbs_allow_disassociate_destroy @ "IBVERBS_PRIVATE_34", 1);

// librdmacm's calls, under private names for oxrdma's librdmacm.so.1 (crate
// `oxrdma-rdmacm`), which binds rdma-core's names and versions to them.
export! {
    oxr_rdma_create_event_channel @ "OXRDMA_RDMACM" => crate::cm::calls::create_event_channel;
    oxr_rdma_destroy_event_channel @ "OXRDMA_RDMACM" => crate::cm::calls::destroy_event_channel;
    oxr_rdma_create_id @ "OXRDMA_RDMACM" => crate::cm::calls::create_id;
    oxr_rdma_destroy_id @ "OXRDMA_RDMACM" => crate::cm::calls::destroy_id;
    oxr_rdma_bind_addr @ "OXRDMA_RDMACM" => crate::cm::calls::bind_addr;
    oxr_rdma_resolve_addr @ "OXRDMA_RDMACM" => crate::cm::calls::resolve_addr;
    oxr_rdma_resolve_route @ "OXRDMA_RDMACM" => crate::cm::calls::resolve_route;
    oxr_rdma_listen @ "OXRDMA_RDMACM" => crate::cm::calls::listen;
    oxr_rdma_connect @ "OXRDMA_RDMACM" => crate::cm::calls::connect;
    oxr_rdma_accept @ "OXRDMA_RDMACM" => crate::cm::calls::accept;
    oxr_rdma_reject @ "OXRDMA_RDMACM" => crate::cm::calls::reject;
    oxr_rdma_reject_ece @ "OXRDMA_RDMACM" => crate::cm::calls::reject_ece;
    oxr_rdma_disconnect @ "OXRDMA_RDMACM" => crate::cm::calls::disconnect;
    oxr_rdma_establish @ "OXRDMA_RDMACM" => crate::cm::calls::establish;
    oxr_rdma_get_src_port @ "OXRDMA_RDMACM" => crate::cm::calls::get_src_port;
    oxr_rdma_get_dst_port @ "OXRDMA_RDMACM" => crate::cm::calls::get_dst_port;
    oxr_rdma_get_cm_event @ "OXRDMA_RDMACM" => crate::cm::event::get_cm_event;
    oxr_rdma_ack_cm_event @ "OXRDMA_RDMACM" => crate::cm::event::ack_cm_event;
    oxr_rdma_event_str @ "OXRDMA_RDMACM" => crate::cm::event::event_str;
    oxr_rdma_create_qp @ "OXRDMA_RDMACM" => crate::cm::qp::create_qp;
    oxr_rdma_create_qp_ex @ "OXRDMA_RDMACM" => crate::cm::qp::create_qp_ex;
    oxr_rdma_destroy_qp @ "OXRDMA_RDMACM" => crate::cm::qp::destroy_qp;
    oxr_rdma_create_srq @ "OXRDMA_RDMACM" => crate::cm::qp::create_srq;
    oxr_rdma_create_srq_ex @ "OXRDMA_RDMACM" => crate::cm::qp::create_srq_ex;
    oxr_rdma_destroy_srq @ "OXRDMA_RDMACM" => crate::cm::qp::destroy_srq;
    oxr_rdma_getaddrinfo @ "OXRDMA_RDMACM" => crate::cm::addrinfo::getaddrinfo;
    oxr_rdma_freeaddrinfo @ "OXRDMA_RDMACM" => crate::cm::addrinfo::freeaddrinfo;
    oxr_rdma_create_ep @ "OXRDMA_RDMACM" => crate::cm::addrinfo::create_ep;
    oxr_rdma_destroy_ep @ "OXRDMA_RDMACM" => crate::cm::addrinfo::destroy_ep;
    oxr_rdma_get_request @ "OXRDMA_RDMACM" => crate::cm::addrinfo::get_request;
    oxr_rdma_init_qp_attr @ "OXRDMA_RDMACM" => crate::cm::misc::init_qp_attr;
    oxr_rdma_set_option @ "OXRDMA_RDMACM" => crate::cm::misc::set_option;
    oxr_rdma_migrate_id @ "OXRDMA_RDMACM" => crate::cm::misc::migrate_id;
    oxr_rdma_notify @ "OXRDMA_RDMACM" => crate::cm::misc::notify;
    oxr_rdma_get_devices @ "OXRDMA_RDMACM" => crate::cm::misc::get_devices;
    oxr_rdma_free_devices @ "OXRDMA_RDMACM" => crate::cm::misc::free_devices;
    oxr_rdma_set_local_ece @ "OXRDMA_RDMACM" => crate::cm::misc::set_local_ece;
    oxr_rdma_get_remote_ece @ "OXRDMA_RDMACM" => crate::cm::misc::get_remote_ece;
    oxr_rdma_join_multicast @ "OXRDMA_RDMACM" => crate::cm::misc::no_multicast;
    oxr_rdma_join_multicast_ex @ "OXRDMA_RDMACM" => crate::cm::misc::no_multicast;
    oxr_rdma_leave_multicast @ "OXRDMA_RDMACM" => crate::cm::misc::no_multicast;
    oxr_raccept @ "OXRDMA_RDMACM" => crate::rsocket::calls::raccept;
    oxr_rbind @ "OXRDMA_RDMACM" => crate::rsocket::calls::rbind;
    oxr_rclose @ "OXRDMA_RDMACM" => crate::rsocket::calls::rclose;
    oxr_rconnect @ "OXRDMA_RDMACM" => crate::rsocket::calls::rconnect;
    oxr_rfcntl @ "OXRDMA_RDMACM" => crate::rsocket::opts::rfcntl;
    oxr_rgetpeername @ "OXRDMA_RDMACM" => crate::rsocket::calls::rgetpeername;
    oxr_rgetsockname @ "OXRDMA_RDMACM" => crate::rsocket::calls::rgetsockname;
    oxr_rgetsockopt @ "OXRDMA_RDMACM" => crate::rsocket::opts::rgetsockopt;
    oxr_riomap @ "OXRDMA_RDMACM" => crate::rsocket::io::riomap;
    oxr_riounmap @ "OXRDMA_RDMACM" => crate::rsocket::io::riounmap;
    oxr_riowrite @ "OXRDMA_RDMACM" => crate::rsocket::io::riowrite;
    oxr_rlisten @ "OXRDMA_RDMACM" => crate::rsocket::calls::rlisten;
    oxr_rpoll @ "OXRDMA_RDMACM" => crate::rsocket::poll::rpoll;
    oxr_rread @ "OXRDMA_RDMACM" => crate::rsocket::io::rread;
    oxr_rreadv @ "OXRDMA_RDMACM" => crate::rsocket::io::rreadv;
    oxr_rrecv @ "OXRDMA_RDMACM" => crate::rsocket::io::rrecv;
    oxr_rrecvfrom @ "OXRDMA_RDMACM" => crate::rsocket::io::rrecvfrom;
    oxr_rrecvmsg @ "OXRDMA_RDMACM" => crate::rsocket::io::rrecvmsg;
    oxr_rselect @ "OXRDMA_RDMACM" => crate::rsocket::poll::rselect;
    oxr_rsend @ "OXRDMA_RDMACM" => crate::rsocket::io::rsend;
    oxr_rsendmsg @ "OXRDMA_RDMACM" => crate::rsocket::io::rsendmsg;
    oxr_rsendto @ "OXRDMA_RDMACM" => crate::rsocket::io::rsendto;
    oxr_rsetsockopt @ "OXRDMA_RDMACM" => crate::rsocket::opts::rsetsockopt;
    oxr_rshutdown @ "OXRDMA_RDMACM" => crate::rsocket::calls::rshutdown;
    oxr_rsocket @ "OXRDMA_RDMACM" => crate::rsocket::calls::rsocket;
    oxr_rwrite @ "OXRDMA_RDMACM" => crate::rsocket::io::rwrite;
    oxr_rwritev @ "OXRDMA_RDMACM" => crate::rsocket::io::rwritev;
}
