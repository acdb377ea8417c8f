//! Address handles: `ibv_create_ah`, `ibv_destroy_ah`, `ibv_init_ah_from_wc`,
//! `ibv_create_ah_from_wc`.

use crate::abi::*;
use crate::errno::{errno_of, ptr_or_errno, set_errno};
use crate::object::Obj;
use crate::pd::Pd;
use oxrdma::{AddressHandle, AddressVector, Gid};
use std::ffi::c_int;

pub type AhObj = Obj<ibv_ah, AddressHandle>;

/// `ibv_create_ah`: RoCE needs the GRH (`is_global`), as the kernel insists.
///
/// # Safety
/// `pd` is NULL or allocated; `attr` is NULL or readable.
pub(crate) unsafe extern "C" fn create_ah(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah {
    // SAFETY: the caller's promise.
    let (Some(p), Some(a)) = (unsafe { Pd::get(pd) }, unsafe { attr.as_ref() }) else {
        return ptr_or_errno(Err(libc::EINVAL));
    };
    if a.is_global == 0 {
        return ptr_or_errno(Err(libc::EINVAL));
    }
    let av = AddressVector {
        dgid: Gid(a.grh.dgid.raw),
        sgid_index: a.grh.sgid_index,
    };
    let r = p.ox().create_ah_av(av).map_err(|e| errno_of(&e)).map(|ah| {
        let ibv = ibv_ah {
            // SAFETY: `ibv()` points into the live PD.
            context: unsafe { (*p.ibv()).context },
            pd,
            handle: ah.id(),
        };
        AhObj::into_raw(ibv, ah)
    });
    ptr_or_errno(r)
}

/// `ibv_destroy_ah`.
///
/// # Safety
/// `ah` is NULL or created and not used by another thread.
pub(crate) unsafe extern "C" fn destroy_ah(ah: *mut ibv_ah) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { AhObj::destroy(ah, AddressHandle::try_destroy) }
}

/// A GID from a UD receive's 40-byte GRH area: an IPv6 header's address at `v6`, or for
/// IPv4 (twenty zero bytes, then the IPv4 header) the address at `v4`, mapped.
fn grh_gid(grh: &[u8; 40], v6: usize, v4: usize) -> Gid {
    let mut g = [0u8; 16];
    if grh[20] >> 4 == 4 {
        g[10] = 0xff;
        g[11] = 0xff;
        g[12..].copy_from_slice(&grh[v4..v4 + 4]);
    } else {
        g.copy_from_slice(&grh[v6..v6 + 16]);
    }
    Gid(g)
}

/// The sender's GID.
fn source_gid(grh: &[u8; 40]) -> Gid {
    grh_gid(grh, 8, 32)
}

/// The GID a UD receive was sent to.
fn dest_gid(grh: &[u8; 40]) -> Gid {
    grh_gid(grh, 24, 36)
}

/// `ibv_init_ah_from_wc`: the address that answers the sender of `wc`, whose receive
/// buffer began with `grh`.
///
/// # Safety
/// `wc` is NULL or readable; `grh` is NULL or 40 readable bytes; `attr` NULL or writable.
pub(crate) unsafe extern "C" fn init_ah_from_wc(
    ctx: *mut ibv_context,
    port: u8,
    wc: *mut ibv_wc,
    grh: *mut [u8; 40],
    attr: *mut ibv_ah_attr,
) -> c_int {
    // SAFETY: the caller's promise.
    let (Some(w), Some(g)) = (unsafe { wc.as_ref() }, unsafe { grh.as_ref() }) else {
        set_errno(libc::EINVAL);
        return -1;
    };
    // RoCE: without a GRH there is no address to answer.
    if w.wc_flags & IBV_WC_GRH == 0 || attr.is_null() {
        set_errno(libc::EINVAL);
        return -1;
    }
    // Answered from the GID it was sent to, as rdma-core finds it in the table.
    // SAFETY: the caller's promise.
    let sgid_index = unsafe { crate::context::Context::from_ibv(ctx) }
        .and_then(|c| c.ox.gids().iter().position(|&x| x == dest_gid(g)))
        .unwrap_or(0) as u8;
    let out = ibv_ah_attr {
        grh: ibv_global_route {
            dgid: ibv_gid {
                raw: source_gid(g).0,
            },
            flow_label: 0,
            sgid_index,
            hop_limit: 0xff,
            traffic_class: 0,
        },
        dlid: 0,
        sl: w.sl,
        src_path_bits: w.dlid_path_bits,
        static_rate: 0,
        is_global: 1,
        port_num: port,
    };
    // SAFETY: writable (caller's promise, not NULL).
    unsafe { attr.write(out) };
    0
}

/// `ibv_create_ah_from_wc`.
///
/// # Safety
/// As `init_ah_from_wc`, and `pd` is NULL or allocated.
pub(crate) unsafe extern "C" fn create_ah_from_wc(
    pd: *mut ibv_pd,
    wc: *mut ibv_wc,
    grh: *mut [u8; 40],
    port: u8,
) -> *mut ibv_ah {
    let mut a = ibv_ah_attr::default();
    // The PD's context: its GID table says which GID the reply leaves from.
    // SAFETY: the caller's promise: `pd` is NULL or allocated.
    let ctx = unsafe { pd.as_ref() }.map_or(std::ptr::null_mut(), |p| p.context);
    // SAFETY: the caller's promise; `a` is writable.
    if unsafe { init_ah_from_wc(ctx, port, wc, grh, &mut a) } != 0 {
        return std::ptr::null_mut();
    }
    // SAFETY: the caller's promise.
    unsafe { create_ah(pd, &mut a) }
}
