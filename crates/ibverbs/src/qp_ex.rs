//! The extended QP: `ibv_create_qp_ex`, `ibv_qp_to_qp_ex`, and the extended send API the
//! header's inline `ibv_wr_*` call through the QP's function pointers. Between
//! `ibv_wr_start` and `ibv_wr_complete` each `ibv_wr_<operation>` begins a work request
//! (with the QP's `wr_id` and `wr_flags` as the program set them) and the `ibv_wr_set_*`
//! calls fill in the latest one; `ibv_wr_complete` posts them all or, on an error, none.

use crate::abi::*;
use crate::errno::{errno_of, ptr_or_errno};
use crate::qp::{new_qp, qp_of, Batch, QpObj};
use crate::work::{inline_bytes, mw_bind, ud_dest};
use oxrdma::{QpType, SendData, SendFlags, SendWr, Sge, SgeList, WrOpcode};
use std::ffi::{c_int, c_void};
use std::sync::MutexGuard;

/// `enum ibv_qp_create_send_ops_flags` each QP type offers (rxe's, without atomic write
/// and flush, which oxrdma does not have).
const RC_SEND_OPS: u64 = 0x3ff;
const UC_SEND_OPS: u64 = 0x1 | 0x2 | 0x4 | 0x8 | 0x100 | 0x200;
const UD_SEND_OPS: u64 = 0x4 | 0x8;

/// `verbs_context.create_qp_ex`: as `ibv_create_qp` (the PD named in the attributes), and
/// with send_ops_flags the extended send API. EOPNOTSUPP for what rxe refuses: other
/// attributes, creation flags, operations the QP type lacks.
///
/// # Safety
/// `attr` is NULL or readable and writable, its PD, CQs and SRQ NULL or created.
pub(crate) unsafe extern "C" fn create_qp_ex(
    _ctx: *mut ibv_context,
    attr: *mut ibv_qp_init_attr_ex,
) -> *mut ibv_qp {
    // SAFETY: the caller's promise.
    ptr_or_errno(unsafe { attr.as_mut() }.ok_or(libc::EINVAL).and_then(|a| {
        check_init_attr(a)?;
        let pd = a.pd;
        // SAFETY: `ibv_qp_init_attr_ex` begins with `ibv_qp_init_attr`'s members.
        let base = unsafe { &mut *std::ptr::from_mut(a).cast::<ibv_qp_init_attr>() };
        // SAFETY: the caller's promise.
        unsafe { new_qp(pd, base, Some(set_send_ops)) }
    }))
}

fn check_init_attr(a: &ibv_qp_init_attr_ex) -> Result<(), c_int> {
    let known =
        IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    if a.comp_mask & !known != 0 {
        return Err(libc::EOPNOTSUPP);
    }
    if a.comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS != 0 && a.create_flags != 0 {
        return Err(libc::EOPNOTSUPP);
    }
    if a.comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS != 0 {
        let offered = match a.qp_type {
            2 => RC_SEND_OPS,
            3 => UC_SEND_OPS,
            4 => UD_SEND_OPS,
            _ => 0,
        };
        if offered == 0 || a.send_ops_flags & !offered != 0 {
            return Err(libc::EOPNOTSUPP);
        }
    }
    // Without a PD only an XRC target QP could be made: no XRC.
    if a.comp_mask & IBV_QP_INIT_ATTR_PD == 0 {
        return Err(libc::EINVAL);
    }
    Ok(())
}

/// Every function of the extended send API (operations the QP type lacks fail at
/// `ibv_wr_complete` with EINVAL instead of crashing the program on a NULL pointer).
fn set_send_ops(q: &mut ibv_qp_ex) {
    q.wr_atomic_cmp_swp = Some(wr_atomic_cmp_swp);
    q.wr_atomic_fetch_add = Some(wr_atomic_fetch_add);
    q.wr_bind_mw = Some(wr_bind_mw);
    q.wr_local_inv = Some(wr_local_inv);
    q.wr_rdma_read = Some(wr_rdma_read);
    q.wr_rdma_write = Some(wr_rdma_write);
    q.wr_rdma_write_imm = Some(wr_rdma_write_imm);
    q.wr_send = Some(wr_send);
    q.wr_send_imm = Some(wr_send_imm);
    q.wr_send_inv = Some(wr_send_inv);
    q.wr_set_ud_addr = Some(wr_set_ud_addr);
    q.wr_set_inline_data = Some(wr_set_inline_data);
    q.wr_set_inline_data_list = Some(wr_set_inline_data_list);
    q.wr_set_sge = Some(wr_set_sge);
    q.wr_set_sge_list = Some(wr_set_sge_list);
    q.wr_start = Some(wr_start);
    q.wr_complete = Some(wr_complete);
    q.wr_abort = Some(wr_abort);
}

/// `ibv_qp_to_qp_ex`: the QP's `ibv_qp_ex` if `ibv_create_qp_ex` made it, else NULL.
///
/// # Safety
/// `qp` is NULL or created.
pub(crate) unsafe extern "C" fn qp_to_qp_ex(qp: *mut ibv_qp) -> *mut ibv_qp_ex {
    // SAFETY: the caller's promise.
    match unsafe { qp_of(qp) } {
        // SAFETY: `ibv()` is the live QP's struct.
        Some(q) if q.ox().ex.is_some() => unsafe { &raw mut (*q.ibv()).ex },
        _ => std::ptr::null_mut(),
    }
}

/// The QP behind `qp` and its batch, locked, if it has the extended send API.
///
/// # Safety
/// `qp` is NULL or a QP this library created.
unsafe fn batch<'a>(qp: *mut ibv_qp_ex) -> Option<(&'a QpObj, MutexGuard<'a, Batch>)> {
    // SAFETY: the caller's promise.
    let q = unsafe { QpObj::get(qp.cast()) }?;
    let b = q.ox().ex.as_ref()?;
    Some((q, b.lock().unwrap_or_else(|p| p.into_inner())))
}

/// Begins a WR of `opcode` with the QP's `wr_id` and `wr_flags`, then lets `f` set its
/// operation's fields.
///
/// # Safety
/// As `batch`.
unsafe fn begin(qp: *mut ibv_qp_ex, opcode: WrOpcode, f: impl FnOnce(&mut SendWr)) {
    // SAFETY: the caller's promise.
    let Some((_, mut b)) = (unsafe { batch(qp) }) else {
        return;
    };
    // SAFETY: `qp` is the live QP's struct; the program set these before this call.
    let (wr_id, flags) = unsafe { ((*qp).wr_id, (*qp).wr_flags) };
    let mut wr = SendWr::new(wr_id, opcode, SendData::Sges(Default::default()));
    wr.flags = SendFlags(flags);
    f(&mut wr);
    b.wrs.push(wr);
}

/// Lets `f` fill in the latest WR (EINVAL at completion if there is none, or if `f`
/// refuses).
///
/// # Safety
/// As `batch`.
unsafe fn fill(qp: *mut ibv_qp_ex, f: impl FnOnce(&mut SendWr, &QpObj) -> Result<(), c_int>) {
    // SAFETY: the caller's promise.
    let Some((q, mut b)) = (unsafe { batch(qp) }) else {
        return;
    };
    if b.err != 0 {
        return;
    }
    let r = match b.wrs.last_mut() {
        Some(wr) => f(wr, q),
        None => Err(libc::EINVAL),
    };
    if let Err(e) = r {
        b.err = e;
    }
}

/// Writes the `ibv_wr_<operation>` functions: name, opcode, arguments, and how they
/// set the WR.
macro_rules! operations {
    ($($name:ident($($a:ident: $t:ty),*) => $op:ident, |$w:ident| $body:expr;)*) => {$(
        /// # Safety
        /// `qp` is NULL or created by `ibv_create_qp_ex`.
        unsafe extern "C" fn $name(qp: *mut ibv_qp_ex $(, $a: $t)*) {
            // SAFETY: the caller's promise.
            unsafe { begin(qp, WrOpcode::$op, |$w| $body) }
        }
    )*};
}

operations! {
    wr_atomic_cmp_swp(rkey: u32, addr: u64, compare: u64, swap: u64) => AtomicCmpAndSwp,
        |w| { (w.rkey, w.remote_addr, w.compare_add, w.swap) = (rkey, addr, compare, swap) };
    wr_atomic_fetch_add(rkey: u32, addr: u64, add: u64) => AtomicFetchAndAdd,
        |w| { (w.rkey, w.remote_addr, w.compare_add) = (rkey, addr, add) };
    wr_local_inv(rkey: u32) => LocalInv, |w| w.invalidate_rkey = rkey;
    wr_rdma_read(rkey: u32, addr: u64) => RdmaRead, |w| (w.rkey, w.remote_addr) = (rkey, addr);
    wr_rdma_write(rkey: u32, addr: u64) => RdmaWrite, |w| (w.rkey, w.remote_addr) = (rkey, addr);
    wr_rdma_write_imm(rkey: u32, addr: u64, imm: u32) => RdmaWriteWithImm,
        |w| { (w.rkey, w.remote_addr, w.imm) = (rkey, addr, u32::from_be(imm)) };
    wr_send() => Send, |_w| ();
    // The immediate is the wire's bytes (big-endian), as in `ibv_send_wr`.
    wr_send_imm(imm: u32) => SendWithImm, |w| w.imm = u32::from_be(imm);
    wr_send_inv(rkey: u32) => SendWithInv, |w| w.invalidate_rkey = rkey;
}

/// `ibv_wr_bind_mw`: binds a type 2 window (a bad window or region fails the batch).
///
/// # Safety
/// `qp` is NULL or created by `ibv_create_qp_ex`; `mw` and `info` as the program got them.
unsafe extern "C" fn wr_bind_mw(
    qp: *mut ibv_qp_ex,
    mw: *mut ibv_mw,
    rkey: u32,
    info: *const ibv_mw_bind_info,
) {
    // SAFETY: the caller's promise.
    unsafe { begin(qp, WrOpcode::BindMw, |_| ()) };
    // SAFETY: the caller's promise.
    unsafe {
        fill(qp, |w, _| {
            let info = info.as_ref().ok_or(libc::EINVAL)?;
            w.bind = Some(mw_bind(mw, rkey, info)?);
            Ok(())
        })
    }
}

/// `ibv_wr_set_ud_addr`.
///
/// # Safety
/// `qp` is NULL or created by `ibv_create_qp_ex`; `ah` NULL or the program's.
unsafe extern "C" fn wr_set_ud_addr(qp: *mut ibv_qp_ex, ah: *mut ibv_ah, qpn: u32, qkey: u32) {
    // SAFETY: the caller's promise.
    unsafe {
        fill(qp, |w, _| {
            w.ud = Some(ud_dest(ah, qpn, qkey)?);
            Ok(())
        })
    }
}

/// `ibv_wr_set_sge`: one SGE (none if `length` is 0).
///
/// # Safety
/// `qp` is NULL or created by `ibv_create_qp_ex`.
unsafe extern "C" fn wr_set_sge(qp: *mut ibv_qp_ex, lkey: u32, addr: u64, length: u32) {
    let mut sges = SgeList::new();
    if length != 0 {
        sges.push(Sge { addr, length, lkey });
    }
    // SAFETY: the caller's promise.
    unsafe { set_data(qp, SendData::Sges(sges)) }
}

/// `ibv_wr_set_sge_list`.
///
/// # Safety
/// `qp` is NULL or created by `ibv_create_qp_ex`; `list` has `n` readable entries.
unsafe extern "C" fn wr_set_sge_list(qp: *mut ibv_qp_ex, n: usize, list: *const ibv_sge) {
    let sges: SgeList = match n {
        0 => SgeList::new(),
        // SAFETY: the caller's promise.
        _ if !list.is_null() => unsafe { std::slice::from_raw_parts(list, n) }
            .iter()
            .map(|s| Sge {
                addr: s.addr,
                length: s.length,
                lkey: s.lkey,
            })
            .collect(),
        // SAFETY: the caller's promise.
        _ => return unsafe { fill(qp, |_, _| Err(libc::EINVAL)) },
    };
    // SAFETY: the caller's promise.
    unsafe { set_data(qp, SendData::Sges(sges)) }
}

/// `ibv_wr_set_inline_data`: the bytes are copied now (the buffer is the program's again
/// when this returns); more than max_inline_data is ENOSPC, as on rxe.
///
/// # Safety
/// `qp` is NULL or created by `ibv_create_qp_ex`; `addr` has `length` readable bytes.
unsafe extern "C" fn wr_set_inline_data(qp: *mut ibv_qp_ex, addr: *mut c_void, length: usize) {
    let one = ibv_data_buf { addr, length };
    // SAFETY: the caller's promise.
    unsafe { wr_set_inline_data_list(qp, 1, &one) }
}

/// `ibv_wr_set_inline_data_list`: as `ibv_wr_set_inline_data`, the buffers one after the
/// other.
///
/// # Safety
/// `qp` is NULL or created by `ibv_create_qp_ex`; `list` has `n` readable entries, each
/// with `length` readable bytes.
unsafe extern "C" fn wr_set_inline_data_list(
    qp: *mut ibv_qp_ex,
    n: usize,
    list: *const ibv_data_buf,
) {
    // SAFETY: the caller's promise.
    unsafe {
        fill(qp, |w, q| {
            let bufs = match n {
                0 => &[][..],
                _ if list.is_null() => return Err(libc::EINVAL),
                _ => std::slice::from_raw_parts(list, n),
            };
            let total: usize = bufs.iter().map(|b| b.length).sum();
            if total > q.ox().cap().max_inline_data as usize {
                return Err(libc::ENOSPC);
            }
            let sges: SgeList = bufs
                .iter()
                .map(|b| Sge {
                    addr: b.addr as u64,
                    length: b.length as u32,
                    lkey: 0,
                })
                .collect();
            w.data = SendData::Inline(inline_bytes(&sges)?);
            Ok(())
        })
    }
}

/// Sets the latest WR's data.
///
/// # Safety
/// `qp` is NULL or created by `ibv_create_qp_ex`.
unsafe fn set_data(qp: *mut ibv_qp_ex, data: SendData) {
    // SAFETY: the caller's promise.
    unsafe {
        fill(qp, |w, _| {
            w.data = data;
            Ok(())
        })
    }
}

/// `ibv_wr_start`: a new batch.
///
/// # Safety
/// `qp` is NULL or created by `ibv_create_qp_ex`.
unsafe extern "C" fn wr_start(qp: *mut ibv_qp_ex) {
    // SAFETY: the caller's promise.
    if let Some((_, mut b)) = unsafe { batch(qp) } {
        *b = Batch::default();
    }
}

/// `ibv_wr_abort`: the batch is dropped, nothing posted.
///
/// # Safety
/// As `wr_start`.
unsafe extern "C" fn wr_abort(qp: *mut ibv_qp_ex) {
    // SAFETY: the caller's promise.
    unsafe { wr_start(qp) }
}

/// `ibv_wr_complete`: posts the batch, all or nothing: 0, the first error met while
/// building it, or why posting failed (EINVAL in a state that cannot send or for an
/// operation the QP type lacks, ENOMEM when the send queue has no room for them all).
///
/// # Safety
/// As `wr_start`.
unsafe extern "C" fn wr_complete(qp: *mut ibv_qp_ex) -> c_int {
    // SAFETY: the caller's promise.
    let Some((q, mut b)) = (unsafe { batch(qp) }) else {
        return libc::EINVAL;
    };
    let Batch { wrs, err } = std::mem::take(&mut *b);
    drop(b);
    if err != 0 {
        return err;
    }
    // A UD send without its address is refused by the posting checks; other QPs take
    // none.
    if q.ox().qp_type() != QpType::Ud && wrs.iter().any(|w| w.ud.is_some()) {
        return libc::EINVAL;
    }
    match q.ox().post_send_batch(wrs) {
        Ok(()) => 0,
        Err(e) => errno_of(&e),
    }
}
