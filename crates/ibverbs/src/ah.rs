//! Address handles: `ibv_create_ah`, `ibv_destroy_ah`, `ibv_init_ah_from_wc`,
//! `ibv_create_ah_from_wc`.

use crate::abi::*;
use crate::errno::{errno_of, ptr_or_errno, set_errno};
use crate::object::Obj;
use crate::pd::Pd;
use oxrdma::{AddressHandle, Gid};
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
    if a.is_global == 0 || a.grh.sgid_index != 0 {
        return ptr_or_errno(Err(libc::EINVAL));
    }
    let r = p
        .ox()
        .create_ah(Gid(a.grh.dgid.raw))
        .map_err(|e| errno_of(&e))
        .map(|ah| {
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

/// The sender's GID from a UD receive's 40-byte GRH area: the IPv6 header's source, or
/// for IPv4 (twenty zero bytes, then the IPv4 header) the IPv4 source, mapped.
fn source_gid(grh: &[u8; 40]) -> Gid {
    let mut g = [0u8; 16];
    if grh[20] >> 4 == 4 {
        g[10] = 0xff;
        g[11] = 0xff;
        g[12..].copy_from_slice(&grh[32..36]);
    } else {
        g.copy_from_slice(&grh[8..24]);
    }
    Gid(g)
}

/// `ibv_init_ah_from_wc`: the address that answers the sender of `wc`, whose receive
/// buffer began with `grh`.
///
/// # Safety
/// `wc` is NULL or readable; `grh` is NULL or 40 readable bytes; `attr` NULL or writable.
pub(crate) unsafe extern "C" fn init_ah_from_wc(
    _ctx: *mut ibv_context,
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
    let out = ibv_ah_attr {
        grh: ibv_global_route {
            dgid: ibv_gid {
                raw: source_gid(g).0,
            },
            flow_label: 0,
            sgid_index: 0,
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
    // SAFETY: the caller's promise; `a` is writable.
    if unsafe { init_ah_from_wc(std::ptr::null_mut(), port, wc, grh, &mut a) } != 0 {
        return std::ptr::null_mut();
    }
    // SAFETY: the caller's promise.
    unsafe { create_ah(pd, &mut a) }
}
