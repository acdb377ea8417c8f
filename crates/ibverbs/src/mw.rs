//! Memory windows: `ibv_alloc_mw`, `ibv_dealloc_mw` and the `bind_mw` op behind the
//! header's inline `ibv_bind_mw` (type 1 windows). A type 2 window is bound by a BIND_MW
//! work request (`work::mw_bind`).

use crate::abi::*;
use crate::errno::{errno_of, ptr_or_errno};
use crate::object::Obj;
use crate::pd::Pd;
use crate::qp::qp_of;
use oxrdma::{MemoryWindow, MwType, SendFlags};
use std::ffi::{c_int, c_uint};

pub type Mw = Obj<ibv_mw, MemoryWindow>;

/// `ops.alloc_mw`: an unbound window of `type_` (`IBV_MW_TYPE_1` or `_2`) in `pd`.
///
/// # Safety
/// `pd` is NULL or allocated.
pub(crate) unsafe extern "C" fn alloc_mw(pd: *mut ibv_pd, type_: c_uint) -> *mut ibv_mw {
    // SAFETY: the caller's promise.
    let r = match unsafe { Pd::get(pd) } {
        None => Err(libc::EINVAL),
        Some(p) => match type_ {
            IBV_MW_TYPE_1 => Ok(MwType::Type1),
            IBV_MW_TYPE_2 => Ok(MwType::Type2),
            _ => Err(libc::EINVAL),
        }
        .and_then(|t| p.ox().alloc_mw(t).map_err(|e| errno_of(&e)))
        .map(|mw| {
            let ibv = ibv_mw {
                // SAFETY: `ibv()` points into the live PD; `context` is set at allocation.
                context: unsafe { (*p.ibv()).context },
                pd,
                rkey: mw.rkey(),
                handle: mw.handle(),
                type_,
            };
            Mw::into_raw(ibv, mw)
        }),
    };
    ptr_or_errno(r)
}

/// `ops.dealloc_mw`: the window's rkey stops working at once.
///
/// # Safety
/// `mw` is NULL or allocated and not used by another thread.
pub(crate) unsafe extern "C" fn dealloc_mw(mw: *mut ibv_mw) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { Mw::destroy(mw, MemoryWindow::try_destroy) }
}

/// `ops.bind_mw`, after the header's checks (type 1, a region unless unbinding, the same
/// PD): posts the bind on `qp`'s send queue with the next key of the rkey the program's
/// `ibv_mw` holds, and on success writes that key there, as rxe does (if the bind then
/// completes in error, the program puts the old key back).
///
/// # Safety
/// `qp` and `mw` are NULL or the program's; `bind` is NULL or readable and its region
/// NULL or registered.
pub(crate) unsafe extern "C" fn bind_mw(
    qp: *mut ibv_qp,
    mw: *mut ibv_mw,
    bind: *mut ibv_mw_bind,
) -> c_int {
    // SAFETY: the caller's promise.
    let (Some(q), Some(w), Some(b)) = (unsafe { qp_of(qp) }, unsafe { Mw::get(mw) }, unsafe {
        bind.as_ref()
    }) else {
        return libc::EINVAL;
    };
    if b.bind_info.mw_access_flags & IBV_ACCESS_ZERO_BASED != 0 {
        return libc::EINVAL;
    }
    // SAFETY: the program's struct, read through its pointer.
    let rkey = inc_rkey(unsafe { (*w.ibv()).rkey });
    // SAFETY: the caller's promise about the region.
    let ox = match unsafe { crate::work::mw_bind(mw, rkey, &b.bind_info) } {
        Ok(ox) => ox,
        Err(e) => return e,
    };
    let signaled = b.send_flags & SendFlags::SIGNALED.0 != 0;
    match q.ox().bind_mw(b.wr_id, signaled, ox) {
        Ok(()) => {
            // SAFETY: as above; the program owns the struct, the library updates it here
            // as rxe's provider does.
            unsafe { (*w.ibv()).rkey = rkey };
            0
        }
        Err(e) => errno_of(&e),
    }
}

/// `ibv_inc_rkey`: the same window index, the next key byte.
fn inc_rkey(rkey: u32) -> u32 {
    (rkey & !0xff) | (rkey.wrapping_add(1) & 0xff)
}

#[cfg(test)]
mod tests {
    use super::inc_rkey;

    #[test]
    fn inc_rkey_changes_only_the_key_byte() {
        assert_eq!(inc_rkey(0x1234_56fe), 0x1234_56ff);
        assert_eq!(inc_rkey(0x1234_56ff), 0x1234_5600);
    }
}
