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

use crate::device;

export! {
    ibv_get_device_list @ "IBVERBS_1.1" => device::get_device_list;
    ibv_free_device_list @ "IBVERBS_1.1" => device::free_device_list;
    ibv_get_device_name @ "IBVERBS_1.1" => device::get_device_name;
    ibv_get_device_guid @ "IBVERBS_1.1" => device::get_device_guid;
}
