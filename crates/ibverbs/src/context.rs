//! An open device and asking what it is: the context a program holds, its objects by
//! number (`registry.rs`), `ibv_query_device`, `ibv_query_port` (the exported compat form
//! and the `verbs_context` op the header's inline form calls), `ibv_query_gid`,
//! `ibv_query_gid_type`, `ibv_query_pkey`. The port reports what rxe reports: active,
//! Ethernet link layer, the active MTU of the interface, one RoCE v2 GID (the address).

use crate::abi::*;
use crate::device::Device;
use crate::errno::set_errno;
use crate::registry::{Kind, Registry};
use std::ffi::{c_int, c_uint, c_void};
use std::mem::offset_of;
use std::sync::Mutex;

/// One open device: the `verbs_context` the program sees (its `context` member is the
/// `ibv_context *` it holds), and the oxrdma context behind it.
#[repr(C)]
#[derive(Debug)]
pub struct Context {
    pub vctx: verbs_context,
    pub ox: oxrdma::Context,
    pub dev: &'static Device,
    /// Its CQs, QPs and SRQs by the numbers events name them by (`registry.rs`).
    pub objects: Mutex<Registry>,
    /// What `cmd_fd` is: /dev/null, a real descriptor for programs that dup it (rdma-core's
    /// shared-PD test does, and then finds `ibv_import_device` unsupported, as on rxe).
    pub cmd: Option<std::fs::File>,
}

/// What `ibv_port_attr` bytes rdma-core 44's exported `ibv_query_port` fills
/// (`struct _compat_ibv_port_attr`: everything before `flags`).
const COMPAT_PORT_ATTR_LEN: usize = offset_of!(ibv_port_attr, flags);

impl Context {
    /// The context behind a program's `ibv_context *`.
    ///
    /// # Safety
    /// `ctx` is NULL or was returned by `ibv_open_device` and not closed.
    pub(crate) unsafe fn from_ibv<'a>(ctx: *mut ibv_context) -> Option<&'a Context> {
        if ctx.is_null() {
            return None;
        }
        let at = offset_of!(Context, vctx) + offset_of!(verbs_context, context);
        // SAFETY: the caller's promise: `ctx` is the `context` member of a live Context.
        Some(unsafe { &*ctx.cast::<u8>().sub(at).cast::<Context>() })
    }

    /// GID `index` of port 1's table, if it holds one there.
    fn gid_at(&self, index: usize) -> Option<ibv_gid> {
        self.ox.gids().get(index).map(|g| ibv_gid { raw: g.0 })
    }
}

/// Runs `f` on the registry of `ctx`'s objects; None if `ctx` is NULL.
///
/// # Safety
/// `ctx` is NULL or an open context.
unsafe fn with_objects<R>(ctx: *mut ibv_context, f: impl FnOnce(&mut Registry) -> R) -> Option<R> {
    // SAFETY: the caller's promise.
    let c = unsafe { Context::from_ibv(ctx) }?;
    let mut r = c.objects.lock().unwrap_or_else(|p| p.into_inner());
    Some(f(&mut r))
}

/// Remembers the program's pointer `p` to object `id` of `ctx`.
///
/// # Safety
/// As `with_objects`.
pub(crate) unsafe fn remember<T>(ctx: *mut ibv_context, kind: Kind, id: u32, p: *mut T) {
    // SAFETY: the caller's promise.
    unsafe { with_objects(ctx, |r| r.remember(kind, id, p)) };
}

/// Forgets object `id` of `ctx` (it was destroyed).
///
/// # Safety
/// As `with_objects`.
pub(crate) unsafe fn forget(ctx: *mut ibv_context, kind: Kind, id: u32) {
    // SAFETY: the caller's promise.
    unsafe { with_objects(ctx, |r| r.forget(kind, id)) };
}

/// The program's pointer to object `id` of `ctx`, if it still exists.
///
/// # Safety
/// As `with_objects`.
pub(crate) unsafe fn lookup<T>(ctx: *mut ibv_context, kind: Kind, id: u32) -> Option<*mut T> {
    // SAFETY: the caller's promise.
    unsafe { with_objects(ctx, |r| r.lookup(kind, id)) }.flatten()
}

/// The device's attributes, as rxe words them.
fn device_attr(c: &Context) -> ibv_device_attr {
    let a = c.ox.attr();
    let guid = crate::device::guid(c.dev);
    let mut fw = [0; 64];
    for (o, b) in fw.iter_mut().zip(env!("CARGO_PKG_VERSION").bytes()) {
        *o = b as std::ffi::c_char;
    }
    let n = |v: u32| v.min(i32::MAX as u32) as c_int;
    ibv_device_attr {
        fw_ver: fw,
        node_guid: guid,
        sys_image_guid: guid,
        max_mr_size: a.max_mr_size,
        page_size_cap: 0xffff_f000,
        // As rxe: no vendor.
        vendor_id: 0xff_ffff,
        vendor_part_id: 0,
        hw_ver: 0,
        max_qp: n(a.max_qp),
        max_qp_wr: n(a.max_qp_wr),
        // RC_RNR_NAK_GEN, SYS_IMAGE_GUID, PORT_ACTIVE_EVENT, MEM_WINDOW,
        // MEM_MGT_EXTENSIONS, SRQ_RESIZE is not offered.
        device_cap_flags: (1 << 12) | (1 << 11) | (1 << 10) | (1 << 17) | (1 << 21),
        max_sge: n(a.max_sge),
        max_sge_rd: n(a.max_sge),
        max_cq: n(a.max_cq),
        max_cqe: n(a.max_cqe),
        max_mr: n(a.max_mr),
        max_pd: n(a.max_pd),
        max_qp_rd_atom: c_int::from(a.max_qp_rd_atom),
        max_ee_rd_atom: 0,
        max_res_rd_atom: c_int::from(a.max_qp_rd_atom) * n(a.max_qp).min(1 << 16),
        max_qp_init_rd_atom: c_int::from(a.max_qp_rd_atom),
        max_ee_init_rd_atom: 0,
        atomic_cap: a.atomic_cap as c_uint,
        max_ee: 0,
        max_rdd: 0,
        max_mw: n(a.max_mw),
        max_raw_ipv6_qp: 0,
        max_raw_ethy_qp: 0,
        max_mcast_grp: 0,
        max_mcast_qp_attach: 0,
        max_total_mcast_qp_attach: 0,
        max_ah: n(a.max_ah),
        max_fmr: 0,
        max_map_per_fmr: 0,
        max_srq: n(a.max_srq),
        max_srq_wr: n(a.max_srq_wr),
        max_srq_sge: n(a.max_srq_sge),
        max_pkeys: 1,
        local_ca_ack_delay: 15,
        phys_port_cnt: 1,
    }
}

/// `ibv_query_device`.
///
/// # Safety
/// `ctx` is NULL or open; `attr` is NULL or writable.
pub(crate) unsafe extern "C" fn query_device(
    ctx: *mut ibv_context,
    attr: *mut ibv_device_attr,
) -> c_int {
    // SAFETY: the caller's promise.
    let Some(c) = (unsafe { Context::from_ibv(ctx) }) else {
        return libc::EINVAL;
    };
    if attr.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: `attr` is writable (caller's promise, not NULL).
    unsafe { attr.write(device_attr(c)) };
    0
}

/// `verbs_context.query_device_ex` (behind the header's `ibv_query_device_ex`): the
/// attributes with the extended ones oxrdma has (the capability flags in 64 bits, the
/// port count), everything it lacks zero; the first `attr_size` bytes of them, or EINVAL
/// if that does not reach past `orig_attr`.
///
/// # Safety
/// `ctx` is NULL or open; `attr` is NULL or has `attr_size` writable bytes.
pub(crate) unsafe extern "C" fn query_device_ex(
    ctx: *mut ibv_context,
    _input: *const c_void,
    attr: *mut ibv_device_attr_ex,
    attr_size: usize,
) -> c_int {
    // SAFETY: the caller's promise.
    let Some(c) = (unsafe { Context::from_ibv(ctx) }) else {
        return libc::EINVAL;
    };
    if attr.is_null() || attr_size < size_of::<ibv_device_attr>() {
        return libc::EINVAL;
    }
    let orig_attr = device_attr(c);
    // SAFETY: all zeros is a valid ibv_device_attr_ex (integers and arrays of them).
    let mut ex: ibv_device_attr_ex = unsafe { std::mem::zeroed() };
    ex.device_cap_flags_ex = u64::from(orig_attr.device_cap_flags);
    ex.phys_port_cnt_ex = 1;
    ex.orig_attr = orig_attr;
    let n = attr_size.min(size_of::<ibv_device_attr_ex>());
    // SAFETY: `attr` has `attr_size` >= `n` writable bytes (caller's promise); `ex` is a
    // local of at least `n` bytes; they cannot overlap.
    unsafe { std::ptr::copy_nonoverlapping((&raw const ex).cast::<u8>(), attr.cast(), n) };
    0
}

/// The port's attributes, as rxe reports them for an Ethernet device.
fn port_attr(c: &Context) -> ibv_port_attr {
    ibv_port_attr {
        state: 4,   // IBV_PORT_ACTIVE
        max_mtu: 5, // IBV_MTU_4096
        active_mtu: c.ox.active_mtu() as c_uint,
        gid_tbl_len: GID_TBL_LEN as c_int,
        // CM_SUP and IP_BASED_GIDS.
        port_cap_flags: (1 << 16) | (1 << 26),
        max_msg_sz: 1 << 31,
        pkey_tbl_len: 1,
        max_vl_num: 1,
        active_width: 2,  // 4X
        active_speed: 32, // EDR
        phys_state: 5,    // LinkUp
        link_layer: 2,    // IBV_LINK_LAYER_ETHERNET
        ..Default::default()
    }
}

/// Writes the first `len` bytes of the port's attributes to `attr`.
///
/// # Safety
/// `ctx` is NULL or open; `attr` is NULL or has `len` writable bytes.
unsafe fn write_port_attr(ctx: *mut ibv_context, port: u8, attr: *mut u8, len: usize) -> c_int {
    // SAFETY: the caller's promise.
    let Some(c) = (unsafe { Context::from_ibv(ctx) }) else {
        return libc::EINVAL;
    };
    if port != 1 || attr.is_null() {
        return libc::EINVAL;
    }
    let a = port_attr(c);
    let n = len.min(size_of::<ibv_port_attr>());
    // SAFETY: `a` is a plain struct of `size_of` bytes; `attr` has `len` >= `n` writable
    // bytes (caller's promise).
    unsafe { std::ptr::copy_nonoverlapping(std::ptr::from_ref(&a).cast::<u8>(), attr, n) };
    0
}

/// The exported `ibv_query_port`: the 48-byte compat struct.
///
/// # Safety
/// As `write_port_attr`, with 48 writable bytes.
pub(crate) unsafe extern "C" fn query_port(
    ctx: *mut ibv_context,
    port: u8,
    attr: *mut ibv_port_attr,
) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { write_port_attr(ctx, port, attr.cast(), COMPAT_PORT_ATTR_LEN) }
}

/// `verbs_context.query_port`, which the header's inline `ibv_query_port` calls with the
/// size of the struct it was compiled with.
///
/// # Safety
/// As `write_port_attr`.
pub(crate) unsafe extern "C" fn query_port_ex(
    ctx: *mut ibv_context,
    port: u8,
    attr: *mut ibv_port_attr,
    len: usize,
) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { write_port_attr(ctx, port, attr.cast(), len) }
}

/// Writes entry `index` of one of port 1's tables (GIDs, GID types, P_Keys: one entry
/// each) to `out`: 0, or -1 with errno EINVAL for an unknown context, port or index.
///
/// # Safety
/// `ctx` is NULL or open; `out` is NULL or writable.
unsafe fn write_port_entry<T>(
    ctx: *mut ibv_context,
    port: u8,
    index: i64,
    out: *mut T,
    entry: impl FnOnce(&Context) -> T,
) -> c_int {
    // SAFETY: the caller's promise.
    let c = unsafe { Context::from_ibv(ctx) };
    match c {
        Some(c) if port == 1 && index == 0 && !out.is_null() => {
            // SAFETY: `out` is writable (caller's promise, not NULL).
            unsafe { out.write(entry(c)) };
            0
        }
        _ => {
            set_errno(libc::EINVAL);
            -1
        }
    }
}

/// The GID table's size, as rxe's: the device's GIDs come first (its address, or its
/// interface's addresses in rxe's order), the other entries are empty (programs and test
/// suites look for an empty index, and rxe's table is sparse).
pub const GID_TBL_LEN: u32 = 1024;

/// Writes what `entry` makes of GID `index` of `ctx`'s port 1 to `out`: 0; -1 with errno
/// EINVAL for an unknown context or port, an index past the table or a NULL `out`.
/// `entry` gets None for an empty index.
///
/// # Safety
/// `ctx` is NULL or open; `out` is NULL or writable.
unsafe fn write_gid_entry<T>(
    ctx: *mut ibv_context,
    port: u32,
    index: i64,
    out: *mut T,
    entry: impl FnOnce(&Context, Option<ibv_gid>) -> Option<T>,
) -> c_int {
    // SAFETY: the caller's promise.
    let c = unsafe { Context::from_ibv(ctx) };
    let valid = (0..i64::from(GID_TBL_LEN)).contains(&index);
    match c {
        Some(c) if port == 1 && valid && !out.is_null() => {
            match entry(c, c.gid_at(index as usize)) {
                // SAFETY: `out` is writable (caller's promise, not NULL).
                Some(v) => unsafe { out.write(v) },
                None => {
                    set_errno(libc::EINVAL);
                    return -1;
                }
            }
            0
        }
        _ => {
            set_errno(libc::EINVAL);
            -1
        }
    }
}

/// `ibv_query_gid`: the device's GIDs (RoCE v2, addresses); an empty index of the table
/// reads as the zero GID (rdma-core's behaviour for an empty entry).
///
/// # Safety
/// `ctx` is NULL or open; `gid` is NULL or writable.
pub(crate) unsafe extern "C" fn query_gid(
    ctx: *mut ibv_context,
    port: u8,
    index: c_int,
    gid: *mut ibv_gid,
) -> c_int {
    let zero = ibv_gid { raw: [0; 16] };
    // SAFETY: the caller's promise.
    unsafe {
        write_gid_entry(ctx, port.into(), index.into(), gid, |_, g| {
            Some(g.unwrap_or(zero))
        })
    }
}

/// `ibv_query_gid_type` (IBVERBS_PRIVATE_34): every GID is RoCE v2
/// (`IBV_GID_TYPE_SYSFS_ROCE_V2`, 1), an iWARP device's `IBV_GID_TYPE_SYSFS_IB_ROCE_V1`
/// (0, what sysfs shows for siw's); EINVAL for an empty index, whose type sysfs does not
/// show.
///
/// # Safety
/// `ctx` is NULL or open; `ty` is NULL or writable.
pub(crate) unsafe extern "C" fn query_gid_type(
    ctx: *mut ibv_context,
    port: u8,
    index: c_uint,
    ty: *mut c_uint,
) -> c_int {
    // SAFETY: the caller's promise.
    unsafe {
        write_gid_entry(ctx, port.into(), index.into(), ty, |c, g| {
            g.map(|_| u32::from(!iwarp(c)))
        })
    }
}

/// Whether `c` is an iWARP device's context.
fn iwarp(c: &Context) -> bool {
    c.ox.transport() == oxrdma::DeviceTransport::Iwarp
}

/// `ibv_query_pkey`: one P_Key, the default 0xffff.
///
/// # Safety
/// `ctx` is NULL or open; `pkey` is NULL or writable.
pub(crate) unsafe extern "C" fn query_pkey(
    ctx: *mut ibv_context,
    port: u8,
    index: c_int,
    pkey: *mut u16,
) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { write_port_entry(ctx, port, index.into(), pkey, |_| 0xffff_u16.to_be()) }
}

/// Entry `index` of port 1's GID table (one that holds a GID).
fn gid_entry(c: &Context, gid: ibv_gid, index: u32) -> ibv_gid_entry {
    ibv_gid_entry {
        gid,
        gid_index: index,
        port_num: 1,
        // IBV_GID_TYPE_ROCE_V2; an iWARP device's IBV_GID_TYPE_IB (0), as siw's.
        gid_type: if iwarp(c) { 0 } else { 2 },
        ndev_ifindex: c.ox.ifindex(),
    }
}

/// `_ibv_query_gid_ex` (what the header's `ibv_query_gid_ex` calls): 0, or EINVAL for an
/// unknown context, port, flags or too small an entry, ENODATA for an empty index.
///
/// # Safety
/// `ctx` is NULL or open; `entry` is NULL or has `entry_size` writable bytes.
pub(crate) unsafe extern "C" fn query_gid_ex(
    ctx: *mut ibv_context,
    port: u32,
    index: u32,
    entry: *mut ibv_gid_entry,
    flags: u32,
    entry_size: usize,
) -> c_int {
    // SAFETY: the caller's promise.
    let Some(c) = (unsafe { Context::from_ibv(ctx) }) else {
        return libc::EINVAL;
    };
    if port != 1 || flags != 0 || entry.is_null() || entry_size < size_of::<ibv_gid_entry>() {
        return libc::EINVAL;
    }
    if index >= GID_TBL_LEN {
        return libc::EINVAL;
    }
    let Some(gid) = c.gid_at(index as usize) else {
        return libc::ENODATA;
    };
    // SAFETY: writable for at least the entry's size (caller's promise, checked above).
    unsafe { entry.write(gid_entry(c, gid, index)) };
    0
}

/// `_ibv_query_gid_table`: the valid entries of every port (one), or -EINVAL (also for
/// an array with no room).
///
/// # Safety
/// `ctx` is NULL or open; `entries` is NULL or has `max` entries of `entry_size` bytes.
pub(crate) unsafe extern "C" fn query_gid_table(
    ctx: *mut ibv_context,
    entries: *mut ibv_gid_entry,
    max: usize,
    flags: u32,
    entry_size: usize,
) -> isize {
    // SAFETY: the caller's promise.
    let Some(c) = (unsafe { Context::from_ibv(ctx) }) else {
        return -(libc::EINVAL as isize);
    };
    let gids = c.ox.gids();
    // The kernel refuses an array too short for the table, as an empty one.
    if flags != 0
        || entries.is_null()
        || entry_size < size_of::<ibv_gid_entry>()
        || max < gids.len()
    {
        return -(libc::EINVAL as isize);
    }
    for (i, g) in gids.iter().enumerate() {
        let e = gid_entry(c, ibv_gid { raw: g.0 }, i as u32);
        // SAFETY: room for `max` >= gids.len() entries of `entry_size` bytes (caller's
        // promise, checked above); an entry may be larger than ours, so step by its size.
        unsafe {
            entries
                .cast::<u8>()
                .add(i * entry_size)
                .cast::<ibv_gid_entry>()
                .write_unaligned(e)
        };
    }
    gids.len() as isize
}
