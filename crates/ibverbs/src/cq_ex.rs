//! The extended CQ: `ibv_create_cq_ex` and the polling API the header's inline
//! `ibv_start_poll`, `ibv_next_poll`, `ibv_end_poll` and `ibv_wc_read_*` call through the
//! CQ's function pointers. A completion is taken off the CQ by `start_poll`/`next_poll`
//! and read field by field until the next one.

use crate::abi::*;
use crate::cq::{new_cq, CqObj};
use crate::errno::ptr_or_errno;
use std::ffi::{c_int, c_uint, c_void};

/// `enum ibv_cq_init_attr_mask`.
/// `IBV_WC_EX_WITH_*` that rxe offers: byte_len, imm, qp_num, src_qp, slid, sl,
/// dlid_path_bits (no timestamps, VLAN, flow tag or tag matching).
const SUPPORTED_WC_FLAGS: u64 = 0x7f;

/// `verbs_context.create_cq_ex`: as `ibv_create_cq`, with the completion fields the
/// program will read; EOPNOTSUPP for fields or options rxe does not offer.
///
/// # Safety
/// `ctx` is NULL or open; `attr` is NULL or readable, its channel NULL or of `ctx`.
pub(crate) unsafe extern "C" fn create_cq_ex(
    ctx: *mut ibv_context,
    attr: *mut ibv_cq_init_attr_ex,
) -> *mut ibv_cq_ex {
    // SAFETY: the caller's promise.
    let r = match unsafe { attr.as_ref() } {
        None => Err(libc::EINVAL),
        // A parent domain (IBV_CQ_INIT_ATTR_MASK_PD) needs ibv_alloc_parent_domain, which
        // is not offered.
        Some(a) if a.comp_mask & !IBV_CQ_INIT_ATTR_MASK_FLAGS != 0 => Err(libc::EOPNOTSUPP),
        Some(a) if a.wc_flags & !SUPPORTED_WC_FLAGS != 0 => Err(libc::EOPNOTSUPP),
        // SAFETY: the caller's promise. The flags (single-threaded, ignore overrun) ask
        // for nothing this CQ does not already do.
        Some(a) => unsafe {
            new_cq(
                ctx,
                a.cqe,
                a.cq_context,
                a.channel,
                a.comp_vector as c_int,
                Some(set_poll_ops),
            )
        },
    };
    ptr_or_errno(r)
}

/// Every function of the polling API (also those for fields the program did not ask
/// for: they read what there is instead of crashing).
fn set_poll_ops(cq: &mut ibv_cq_ex) {
    cq.start_poll = Some(start_poll);
    cq.next_poll = Some(next_poll);
    cq.end_poll = Some(end_poll);
    cq.read_opcode = Some(read_opcode);
    cq.read_vendor_err = Some(read_vendor_err);
    cq.read_byte_len = Some(read_byte_len);
    cq.read_imm_data = Some(read_imm_data);
    cq.read_qp_num = Some(read_qp_num);
    cq.read_src_qp = Some(read_src_qp);
    cq.read_wc_flags = Some(read_wc_flags);
    cq.read_slid = Some(read_slid);
    cq.read_sl = Some(read_sl);
    cq.read_dlid_path_bits = Some(read_dlid_path_bits);
    cq.read_completion_ts = Some(read_zero);
    cq.read_cvlan = Some(read_zero);
    cq.read_flow_tag = Some(read_zero);
    cq.read_tm_info = Some(read_tm_info);
    cq.read_completion_wallclock_ns = Some(read_zero);
}

/// Takes the next completion of `cq` as the current one: 0, or ENOENT if there is none.
///
/// # Safety
/// `cq` is NULL or a CQ this library created.
unsafe fn advance(cq: *mut ibv_cq_ex) -> c_int {
    // SAFETY: the caller's promise.
    let Some(c) = (unsafe { CqObj::get(cq) }) else {
        return libc::EINVAL;
    };
    let mut wc = None;
    let _ = c.ox().ox().poll_each(1, |w| {
        let mut out = std::mem::MaybeUninit::<ibv_wc>::uninit();
        // SAFETY: `out` is writable, and fully written by `write_wc`.
        wc = Some(unsafe {
            crate::work::write_wc(out.as_mut_ptr(), &w);
            out.assume_init()
        });
    });
    let found = wc.is_some();
    if let Some(w) = wc {
        // SAFETY: `ibv()` is the live CQ's struct; the program reads these two fields
        // after start_poll/next_poll returns, not during.
        unsafe {
            (*c.ibv()).status = w.status;
            (*c.ibv()).wr_id = w.wr_id;
        }
    }
    *c.ox().current.lock().unwrap_or_else(|p| p.into_inner()) = wc;
    if found {
        0
    } else {
        libc::ENOENT
    }
}

/// `ibv_start_poll`: the first completion, or ENOENT (then no `ibv_end_poll`).
///
/// # Safety
/// `cq` is NULL or created by `ibv_create_cq_ex`.
unsafe extern "C" fn start_poll(cq: *mut ibv_cq_ex, _attr: *mut ibv_poll_cq_attr) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { advance(cq) }
}

/// `ibv_next_poll`: the next completion, or ENOENT.
///
/// # Safety
/// As `start_poll`.
unsafe extern "C" fn next_poll(cq: *mut ibv_cq_ex) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { advance(cq) }
}

/// `ibv_end_poll`: the completions read are already off the CQ.
///
/// # Safety
/// As `start_poll`.
unsafe extern "C" fn end_poll(cq: *mut ibv_cq_ex) {
    // SAFETY: the caller's promise.
    if let Some(c) = unsafe { CqObj::get(cq) } {
        *c.ox().current.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }
}

/// `f` of the current completion (zeroes if there is none: reading outside a poll).
///
/// # Safety
/// `cq` is NULL or a CQ this library created.
unsafe fn read<T: Default>(cq: *mut ibv_cq_ex, f: impl FnOnce(&ibv_wc) -> T) -> T {
    // SAFETY: the caller's promise.
    let Some(c) = (unsafe { CqObj::get(cq) }) else {
        return T::default();
    };
    let cur = c.ox().current.lock().unwrap_or_else(|p| p.into_inner());
    cur.as_ref().map(f).unwrap_or_default()
}

/// Writes the `read_*` functions, each an `extern "C"` reading one field.
macro_rules! readers {
    ($($name:ident -> $t:ty = |$w:ident| $e:expr;)*) => {$(
        /// # Safety
        /// `cq` is NULL or created by `ibv_create_cq_ex`.
        unsafe extern "C" fn $name(cq: *mut ibv_cq_ex) -> $t {
            // SAFETY: the caller's promise.
            unsafe { read(cq, |$w| $e) }
        }
    )*};
}

readers! {
    read_opcode -> c_uint = |w| w.opcode;
    read_vendor_err -> u32 = |w| w.vendor_err;
    read_byte_len -> u32 = |w| w.byte_len;
    read_imm_data -> u32 = |w| w.imm_data;
    read_qp_num -> u32 = |w| w.qp_num;
    read_src_qp -> u32 = |w| w.src_qp;
    read_wc_flags -> c_uint = |w| w.wc_flags;
    read_slid -> u32 = |w| u32::from(w.slid);
    read_sl -> u8 = |w| w.sl;
    read_dlid_path_bits -> u8 = |w| w.dlid_path_bits;
}

/// Timestamps, VLAN and flow tag: not offered (creating a CQ that asks for them is
/// EOPNOTSUPP), zero if read anyway.
///
/// # Safety
/// Any `cq` (not touched).
unsafe extern "C" fn read_zero<T: Default>(_cq: *mut ibv_cq_ex) -> T {
    T::default()
}

/// Tag matching: not offered; leaves `info` as it is.
///
/// # Safety
/// Any arguments (none is touched).
unsafe extern "C" fn read_tm_info(_cq: *mut ibv_cq_ex, _info: *mut c_void) {}
