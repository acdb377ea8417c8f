//! Opening a device and asking what it is: `ibv_open_device`, `ibv_close_device`,
//! `ibv_query_device`, `ibv_query_port` (the exported compat form and the
//! `verbs_context` op the header's inline form calls), `ibv_query_gid`,
//! `ibv_query_gid_type`, `ibv_query_pkey`. The port reports what rxe reports: active,
//! Ethernet link layer, the active MTU of the interface, one RoCE v2 GID (the address).

use crate::abi::*;
use crate::device::{lookup, Addr, Device};
use crate::errno::set_errno;
use crate::registry::Registry;
use oxrdma::{BindError, Error};
use std::ffi::{c_int, c_uint, c_void};
use std::mem::offset_of;
use std::net::{IpAddr, Ipv4Addr};
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

    fn gid(&self) -> ibv_gid {
        ibv_gid {
            raw: self.ox.gid().0,
        }
    }
}

/// Opens the oxrdma context for `d`: its own address, or the first free loopback one.
fn open_ox(d: &Device, name: &str) -> Result<oxrdma::Context, c_int> {
    let fail = |ip: IpAddr, e: Error| match &e {
        Error::Bind(BindError::InUse { .. }) => {
            eprintln!(
                "oxrdma: device {name}: {ip} is in use by another process; give this one \
                     its own address, e.g. OXRDMA_DEVICES={name}=127.0.0.9"
            );
            libc::EADDRINUSE
        }
        Error::Bind(BindError::NotLocal { .. }) => {
            eprintln!("oxrdma: device {name}: {e} (see OXRDMA_DEVICES)");
            libc::EADDRNOTAVAIL
        }
        _ => {
            eprintln!("oxrdma: device {name}: {e}");
            libc::ENODEV
        }
    };
    match d.addr {
        Addr::Fixed(ip) => oxrdma::Context::open(ip).map_err(|e| fail(ip, e)),
        Addr::FreeLoopback => {
            for n in 2..=254u8 {
                let ip = IpAddr::V4(Ipv4Addr::new(127, 0, 0, n));
                match oxrdma::Context::open(ip) {
                    Ok(c) => return Ok(c),
                    Err(Error::Bind(BindError::InUse { .. })) => continue,
                    Err(e) => return Err(fail(ip, e)),
                }
            }
            eprintln!("oxrdma: device {name}: every address 127.0.0.2-254 is taken");
            Err(libc::EADDRINUSE)
        }
    }
}

/// `ibv_open_device`.
///
/// # Safety
/// `dev` is NULL or any pointer (only ours are accepted).
pub(crate) unsafe extern "C" fn open_device(dev: *mut ibv_device) -> *mut ibv_context {
    let Some(d) = lookup(dev) else {
        set_errno(libc::ENODEV);
        return std::ptr::null_mut();
    };
    let name = crate::device::name(d);
    let ox = match open_ox(d, &name) {
        Ok(c) => c,
        Err(e) => {
            set_errno(e);
            return std::ptr::null_mut();
        }
    };
    let async_fd = {
        use std::os::fd::AsRawFd;
        ox.async_fd().as_raw_fd()
    };
    let ctx = Box::new(Context {
        vctx: verbs_context {
            query_port: Some(query_port_ex),
            query_device_ex: Some(query_device_ex),
            create_cq_ex: Some(crate::cq_ex::create_cq_ex),
            create_qp_ex: Some(crate::qp_ex::create_qp_ex),
            sz: size_of::<verbs_context>(),
            context: ibv_context {
                device: dev,
                ops: ibv_context_ops {
                    poll_cq: Some(crate::cq::poll_cq),
                    req_notify_cq: Some(crate::cq::req_notify_cq),
                    post_send: Some(crate::qp::post_send),
                    post_recv: Some(crate::qp::post_recv),
                    post_srq_recv: Some(crate::srq::post_srq_recv),
                    alloc_mw: Some(crate::mw::alloc_mw),
                    bind_mw: Some(crate::mw::bind_mw),
                    dealloc_mw: Some(crate::mw::dealloc_mw),
                    ..ibv_context_ops::EMPTY
                },
                cmd_fd: -1,
                async_fd,
                num_comp_vectors: 1,
                // PTHREAD_MUTEX_INITIALIZER is all zeros in glibc.
                mutex: pthread_mutex_t([0; 40]),
                abi_compat: usize::MAX as *mut c_void,
            },
            ..verbs_context::EMPTY
        },
        ox,
        dev: d,
        objects: Mutex::new(Registry::default()),
    });
    let ctx = Box::leak(ctx);
    &mut ctx.vctx.context
}

/// `ibv_close_device`.
///
/// # Safety
/// `ctx` is NULL or an open context whose objects are all destroyed.
pub(crate) unsafe extern "C" fn close_device(ctx: *mut ibv_context) -> c_int {
    // SAFETY: the caller's promise.
    let Some(c) = (unsafe { Context::from_ibv(ctx) }) else {
        return libc::EINVAL;
    };
    // SAFETY: `c` was leaked from a Box in `open_device` and is given back once.
    drop(unsafe { Box::from_raw(std::ptr::from_ref(c).cast_mut()) });
    0
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
unsafe extern "C" fn query_device_ex(
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
        gid_tbl_len: 1,
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
unsafe extern "C" fn query_port_ex(
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

/// `ibv_query_gid`: index 0 is the device's RoCE v2 GID (its address).
///
/// # Safety
/// `ctx` is NULL or open; `gid` is NULL or writable.
pub(crate) unsafe extern "C" fn query_gid(
    ctx: *mut ibv_context,
    port: u8,
    index: c_int,
    gid: *mut ibv_gid,
) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { write_port_entry(ctx, port, index.into(), gid, Context::gid) }
}

/// `ibv_query_gid_type` (IBVERBS_PRIVATE_34): every GID is RoCE v2
/// (`IBV_GID_TYPE_SYSFS_ROCE_V2`, 1).
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
    unsafe { write_port_entry(ctx, port, index.into(), ty, |_| 1) }
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

/// Port 1's one GID table entry.
fn gid_entry(c: &Context) -> ibv_gid_entry {
    ibv_gid_entry {
        gid: c.gid(),
        gid_index: 0,
        port_num: 1,
        gid_type: 2, // IBV_GID_TYPE_ROCE_V2
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
    if index != 0 {
        return libc::ENODATA;
    }
    // SAFETY: writable for at least the entry's size (caller's promise, checked above).
    unsafe { entry.write(gid_entry(c)) };
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
    // The kernel refuses an array too short for the table, as an empty one.
    if flags != 0 || entries.is_null() || entry_size < size_of::<ibv_gid_entry>() || max == 0 {
        return -(libc::EINVAL as isize);
    }
    // SAFETY: room for at least one entry (caller's promise, `max` >= 1).
    unsafe { entries.write(gid_entry(c)) };
    1
}
