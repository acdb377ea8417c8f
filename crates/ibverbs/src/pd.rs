//! Protection domains and memory regions: `ibv_alloc_pd`, `ibv_dealloc_pd`, `ibv_reg_mr`,
//! `ibv_reg_mr_iova2`, `ibv_rereg_mr`, `ibv_dereg_mr`. A region is the program's own
//! buffer: the engine reads and writes it in place.

use crate::abi::*;
use crate::context::Context;
use crate::errno::{errno_of, ptr_or_errno, set_errno};
use crate::object::Obj;
use oxrdma::{Access, MemoryRegion, ProtectionDomain};
use std::ffi::{c_int, c_uint, c_void};

pub type Pd = Obj<ibv_pd, ProtectionDomain>;
pub type Mr = Obj<ibv_mr, MemoryRegion>;

/// `ibv_alloc_pd`.
///
/// # Safety
/// `ctx` is NULL or open.
pub(crate) unsafe extern "C" fn alloc_pd(ctx: *mut ibv_context) -> *mut ibv_pd {
    // SAFETY: the caller's promise.
    let r = match unsafe { Context::from_ibv(ctx) } {
        None => Err(libc::EINVAL),
        Some(c) => match c.ox.alloc_pd() {
            Ok(pd) => Ok(Pd::into_raw(
                ibv_pd {
                    context: ctx,
                    handle: 0,
                },
                pd,
            )),
            Err(e) => Err(errno_of(&e)),
        },
    };
    ptr_or_errno(r)
}

/// `ibv_dealloc_pd`: EBUSY while anything is still in it.
///
/// # Safety
/// `pd` is NULL or allocated and not used by another thread.
pub(crate) unsafe extern "C" fn dealloc_pd(pd: *mut ibv_pd) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { Pd::destroy(pd, ProtectionDomain::try_destroy) }
}

/// The access flags oxrdma implements, from the C ones.
fn access(flags: c_uint) -> Result<Access, c_int> {
    let flags = flags & !IBV_ACCESS_OPTIONAL_RANGE;
    if flags & IBV_ACCESS_ON_DEMAND != 0 {
        return Err(libc::EOPNOTSUPP);
    }
    if flags & !Access::ALL.bits() != 0 {
        return Err(libc::EINVAL);
    }
    Ok(Access::from_bits_retain(flags))
}

/// Registers `len` bytes at `addr` that peers address from `iova`.
///
/// # Safety
/// `pd` is NULL or allocated; `addr..addr+len` is the program's memory, valid until the
/// region is deregistered.
unsafe fn reg(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    len: usize,
    iova: u64,
    flags: c_uint,
) -> Result<*mut ibv_mr, c_int> {
    // SAFETY: the caller's promise.
    let p = unsafe { Pd::get(pd) }.ok_or(libc::EINVAL)?;
    let access = access(flags)?;
    // The kernel refuses an empty region, and an iova whose offset in its page differs
    // from the address's.
    if len == 0 || addr.is_null() || (addr as u64 ^ iova) & 0xfff != 0 {
        return Err(libc::EINVAL);
    }
    // SAFETY: the caller's promise: the bytes stay valid until `dereg_mr`, which drops
    // the region.
    let mr =
        unsafe { p.ox().register_raw(addr.cast(), len, iova, access) }.map_err(|e| errno_of(&e))?;
    // SAFETY: `ibv()` points into the live PD; `context` is set once at allocation.
    let context = unsafe { (*p.ibv()).context };
    let ibv = ibv_mr {
        context,
        pd,
        addr,
        length: len,
        handle: 0,
        lkey: mr.lkey(),
        rkey: mr.rkey(),
    };
    Ok(Mr::into_raw(ibv, mr))
}

/// `ibv_reg_mr`: peers address the region by its virtual addresses.
///
/// # Safety
/// As `reg`.
pub(crate) unsafe extern "C" fn reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    len: usize,
    access: c_int,
) -> *mut ibv_mr {
    // SAFETY: the caller's promise.
    ptr_or_errno(unsafe { reg(pd, addr, len, addr as u64, access as c_uint) })
}

/// `ibv_reg_mr_iova2`.
///
/// # Safety
/// As `reg`.
pub(crate) unsafe extern "C" fn reg_mr_iova2(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    len: usize,
    iova: u64,
    access: c_uint,
) -> *mut ibv_mr {
    // SAFETY: the caller's promise.
    ptr_or_errno(unsafe { reg(pd, addr, len, iova, access) })
}

/// `ibv_reg_mr_iova` (1.7): as `ibv_reg_mr_iova2` with int flags.
///
/// # Safety
/// As `reg`.
pub(crate) unsafe extern "C" fn reg_mr_iova(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    len: usize,
    iova: u64,
    access: c_int,
) -> *mut ibv_mr {
    // SAFETY: the caller's promise.
    ptr_or_errno(unsafe { reg(pd, addr, len, iova, access as c_uint) })
}

/// `ibv_dereg_mr`: EBUSY while memory windows are bound to it.
///
/// # Safety
/// `mr` is NULL or registered and not used by another thread.
pub(crate) unsafe extern "C" fn dereg_mr(mr: *mut ibv_mr) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { Mr::destroy(mr, MemoryRegion::try_destroy) }
}

/// `ibv_rereg_mr`: rdma-core 44's argument checks (`IBV_REREG_MR_ERR_INPUT`, EINVAL), then
/// the device's answer, which is rxe's (Linux 6.1): not offered, `IBV_REREG_MR_ERR_CMD` with
/// EOPNOTSUPP. The region stays valid and unchanged.
///
/// # Safety
/// Any arguments (none is dereferenced).
pub(crate) unsafe extern "C" fn rereg_mr(
    mr: *mut ibv_mr,
    flags: c_int,
    _pd: *mut ibv_pd,
    addr: *mut c_void,
    len: usize,
    access: c_int,
) -> c_int {
    const CHANGE_TRANSLATION: c_int = 1;
    const CHANGE_ACCESS: c_int = 4;
    const FLAGS_SUPPORTED: c_int = 0xf;
    const ERR_INPUT: c_int = -1;
    const ERR_CMD: c_int = -4;
    let bad_input = mr.is_null()
        || flags & !FLAGS_SUPPORTED != 0
        || (flags & CHANGE_TRANSLATION != 0 && (len == 0 || addr.is_null()))
        || (access != 0 && flags & CHANGE_ACCESS == 0);
    if bad_input {
        set_errno(libc::EINVAL);
        return ERR_INPUT;
    }
    set_errno(libc::EOPNOTSUPP);
    ERR_CMD
}
