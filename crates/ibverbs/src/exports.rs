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

use crate::{context, device};

export! {
    ibv_get_device_list @ "IBVERBS_1.1" => device::get_device_list;
    ibv_free_device_list @ "IBVERBS_1.1" => device::free_device_list;
    ibv_get_device_name @ "IBVERBS_1.1" => device::get_device_name;
    ibv_get_device_guid @ "IBVERBS_1.1" => device::get_device_guid;
    ibv_read_sysfs_file @ "IBVERBS_1.0" => device::read_sysfs_file;
    ibv_open_device @ "IBVERBS_1.1" => context::open_device;
    ibv_close_device @ "IBVERBS_1.1" => context::close_device;
    ibv_query_device @ "IBVERBS_1.1" => context::query_device;
    ibv_query_port @ "IBVERBS_1.1" => context::query_port;
    ibv_query_gid @ "IBVERBS_1.1" => context::query_gid;
    ibv_query_pkey @ "IBVERBS_1.1" => context::query_pkey;
    ibv_query_gid_type @ "IBVERBS_PRIVATE_34" => context::query_gid_type;
}
