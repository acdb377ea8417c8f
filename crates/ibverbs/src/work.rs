//! Work requests and completions between their C form and oxrdma's.

use crate::abi::*;
use crate::errno::errno_of;
use crate::object::Obj;
use oxrdma::{
    AddressHandle, MemoryRegion, MemoryWindow, MwBind, RecvWr, SendData, SendFlags, SendWr, Sge,
    UdDest, WcOpcode, WcStatus, WorkCompletion, WrOpcode,
};
use oxrdma::{InlineData, SgeList};
use std::ffi::c_int;

/// The `sl` of a completion: for a UD receive over IPv4, 2, which mlx5 devices report there
/// for RoCE (the network header type; IPv6 is 0 here, as on rxe); 0 otherwise. UCX's UD
/// transport reads it to know where in the 40-byte GRH area the destination address lies
/// (an IPv4 header's at bytes 36..39, else a GID at 24..39) and drops what does not name
/// one of the device's GIDs: with 0 it dropped every IPv4 datagram.
pub(crate) fn wc_sl(w: &WorkCompletion) -> u8 {
    match w.src_gid.map(|g| g.ip()) {
        Some(std::net::IpAddr::V4(_)) => 2,
        _ => 0,
    }
}

/// Writes `w` as an `ibv_wc`.
///
/// # Safety
/// `out` is writable.
pub(crate) unsafe fn write_wc(out: *mut ibv_wc, w: &WorkCompletion) {
    let mut flags = 0;
    let mut imm = 0;
    if let Some(i) = w.imm {
        flags |= IBV_WC_WITH_IMM;
        // The header's imm_data is the wire's bytes (big-endian).
        imm = i.to_be();
    }
    if let Some(k) = w.invalidated_rkey {
        flags |= IBV_WC_WITH_INV;
        imm = k;
    }
    // rxe flags every successful receive with IBV_WC_GRH (each RoCEv2 packet carries the IP
    // header a GRH maps to), RC and UC too; only UD puts the 40 bytes in the buffer.
    let received = matches!(w.opcode, WcOpcode::Recv | WcOpcode::RecvRdmaWithImm);
    if w.src_gid.is_some() || (received && w.status == WcStatus::Success) {
        flags |= IBV_WC_GRH;
    }
    let wc = ibv_wc {
        wr_id: w.wr_id,
        status: w.status as u32,
        opcode: w.opcode as u32,
        vendor_err: 0,
        byte_len: w.byte_len,
        imm_data: imm,
        qp_num: w.qp_num,
        src_qp: w.src_qp,
        wc_flags: flags,
        pkey_index: 0,
        slid: 0,
        sl: wc_sl(w),
        dlid_path_bits: 0,
    };
    // SAFETY: the caller's promise.
    unsafe { out.write(wc) };
}

/// The SGEs of a C work request.
///
/// # Safety
/// `sg_list` has `num_sge` readable entries (or `num_sge` is 0).
unsafe fn sges(sg_list: *const ibv_sge, num_sge: c_int) -> Result<SgeList, c_int> {
    if num_sge < 0 || (num_sge > 0 && sg_list.is_null()) {
        return Err(libc::EINVAL);
    }
    if num_sge == 0 {
        return Ok(SgeList::new());
    }
    // SAFETY: the caller's promise.
    let list = unsafe { std::slice::from_raw_parts(sg_list, num_sge as usize) };
    Ok(list
        .iter()
        .map(|s| Sge {
            addr: s.addr,
            length: s.length,
            lkey: s.lkey,
        })
        .collect())
}

/// Inline data bigger than this is refused before it is copied (the QP's own limit,
/// far smaller, is checked when the WR is posted).
const INLINE_COPY_LIMIT: u64 = 1 << 16;

/// The bytes an inline WR's SGEs point at, copied now (`IBV_SEND_INLINE`: the buffer
/// need not be registered and may be reused as soon as the post returns).
///
/// # Safety
/// Each SGE's `addr` has `length` readable bytes.
pub(crate) unsafe fn inline_bytes(list: &[Sge]) -> Result<InlineData, c_int> {
    let total: u64 = list.iter().map(|s| u64::from(s.length)).sum();
    if total > INLINE_COPY_LIMIT {
        return Err(libc::EINVAL);
    }
    // Up to 64 bytes stay in the WR: no allocation.
    let mut v = InlineData::with_capacity(total as usize);
    for s in list.iter().filter(|s| s.length > 0) {
        // SAFETY: the caller's promise.
        let b = unsafe { std::slice::from_raw_parts(s.addr as *const u8, s.length as usize) };
        v.extend_from_slice(b);
    }
    Ok(v)
}

pub(crate) fn wr_opcode(op: u32) -> Result<WrOpcode, c_int> {
    Ok(match op {
        0 => WrOpcode::RdmaWrite,
        1 => WrOpcode::RdmaWriteWithImm,
        2 => WrOpcode::Send,
        3 => WrOpcode::SendWithImm,
        4 => WrOpcode::RdmaRead,
        5 => WrOpcode::AtomicCmpAndSwp,
        6 => WrOpcode::AtomicFetchAndAdd,
        7 => WrOpcode::LocalInv,
        8 => WrOpcode::BindMw,
        9 => WrOpcode::SendWithInv,
        // TSO, atomic write, flush and driver opcodes.
        _ => return Err(libc::EINVAL),
    })
}

/// One C send WR as oxrdma's (the `next` link is the caller's to follow).
///
/// # Safety
/// `w` is a readable WR whose SGE list, inline bytes, address handle, window and region
/// pointers are what the program's verbs gave it (or NULL where unused).
pub(crate) unsafe fn send_wr(w: &ibv_send_wr, ud: bool) -> Result<SendWr, c_int> {
    let opcode = wr_opcode(w.opcode)?;
    let flags = SendFlags(w.send_flags);
    // SAFETY: the caller's promise.
    let list = unsafe { sges(w.sg_list, w.num_sge) }?;
    let data = if flags.contains(SendFlags::INLINE) && !opcode.is_read_or_atomic() {
        // SAFETY: the caller's promise.
        SendData::Inline(unsafe { inline_bytes(&list) }?)
    } else {
        SendData::Sges(list)
    };
    let mut out = SendWr::new(w.wr_id, opcode, data);
    out.flags = flags;
    match opcode {
        WrOpcode::SendWithImm | WrOpcode::RdmaWriteWithImm => out.imm = u32::from_be(w.imm_data),
        WrOpcode::SendWithInv | WrOpcode::LocalInv => out.invalidate_rkey = w.imm_data,
        _ => {}
    }
    if opcode.is_atomic() {
        // SAFETY: the union's `atomic` member is the live one for atomics.
        let a = unsafe { w.wr.atomic };
        out.remote_addr = a.remote_addr;
        out.rkey = a.rkey;
        out.compare_add = a.compare_add;
        out.swap = a.swap;
    } else if matches!(
        opcode,
        WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm | WrOpcode::RdmaRead
    ) {
        // SAFETY: `rdma` is the live member for RDMA operations.
        let r = unsafe { w.wr.rdma };
        out.remote_addr = r.remote_addr;
        out.rkey = r.rkey;
    }
    if ud {
        // SAFETY: `ud` is the live member on a UD QP.
        let u = unsafe { w.wr.ud };
        // SAFETY: the program's AH pointer (caller's promise).
        out.ud = Some(unsafe { ud_dest(u.ah, u.remote_qpn, u.remote_qkey) }?);
    }
    if opcode == WrOpcode::BindMw {
        // SAFETY: `bind_mw` is the live member for BIND_MW.
        let b = unsafe { w.bind_mw.bind_mw };
        // SAFETY: the program's window and region pointers (caller's promise).
        out.bind = Some(unsafe { mw_bind(b.mw, b.rkey, &b.bind_info) }?);
    }
    Ok(out)
}

/// A type 2 window's bind as oxrdma's.
///
/// # Safety
/// `mw` and `info.mr` are NULL or the program's window and region.
pub(crate) unsafe fn mw_bind(
    mw: *mut ibv_mw,
    rkey: u32,
    info: &ibv_mw_bind_info,
) -> Result<MwBind, c_int> {
    // SAFETY: the caller's promise.
    let mw = unsafe { Obj::<ibv_mw, MemoryWindow>::get(mw) }.ok_or(libc::EINVAL)?;
    // SAFETY: as above.
    let mr = unsafe { Obj::<ibv_mr, MemoryRegion>::get(info.mr) };
    Ok(MwBind {
        mw: mw.ox().handle(),
        rkey,
        lkey: mr.map_or(0, |m| m.ox().lkey()),
        addr: info.addr,
        length: info.length,
        access: oxrdma::Access::from_bits_retain(info.mw_access_flags),
    })
}

/// The address handle behind a program's `ibv_ah *`, as a UD destination.
///
/// # Safety
/// `ah` is NULL or an address handle the program created.
pub(crate) unsafe fn ud_dest(
    ah: *mut ibv_ah,
    remote_qpn: u32,
    remote_qkey: u32,
) -> Result<UdDest, c_int> {
    // SAFETY: the caller's promise.
    let ah = unsafe { Obj::<ibv_ah, AddressHandle>::get(ah) }.ok_or(libc::EINVAL)?;
    Ok(UdDest {
        ah: ah.ox().id(),
        remote_qpn,
        remote_qkey,
    })
}

/// One C receive WR as oxrdma's.
///
/// # Safety
/// `w` is readable and its SGE list has `num_sge` readable entries.
unsafe fn recv_wr(w: &ibv_recv_wr) -> Result<RecvWr, c_int> {
    Ok(RecvWr {
        wr_id: w.wr_id,
        // SAFETY: the caller's promise.
        sges: unsafe { sges(w.sg_list, w.num_sge) }?,
    })
}

/// A C work request list: each WR names the next.
pub(crate) trait Linked {
    fn next(&self) -> *mut Self;
}

impl Linked for ibv_send_wr {
    fn next(&self) -> *mut Self {
        self.next
    }
}

impl Linked for ibv_recv_wr {
    fn next(&self) -> *mut Self {
        self.next
    }
}

/// Walks a C WR list, handing each WR to `post`; on the first failure points `bad` at
/// that WR and returns its errno (the WRs before it are posted, those after are not).
///
/// # Safety
/// `first` is NULL or a readable list; `bad` is NULL or writable.
pub(crate) unsafe fn post_list<W: Linked>(
    first: *mut W,
    bad: *mut *mut W,
    mut post: impl FnMut(&W) -> Result<(), c_int>,
) -> c_int {
    let mut w = first;
    // SAFETY: the caller's promise: each `w` is NULL or readable.
    while let Some(r) = unsafe { w.as_ref() } {
        if let Err(e) = post(r) {
            if !bad.is_null() {
                // SAFETY: writable (caller's promise, not NULL).
                unsafe { *bad = w };
            }
            return e;
        }
        w = r.next();
    }
    0
}

/// `post_list` for receive WRs (a QP's or an SRQ's), each converted and given to `post`.
///
/// # Safety
/// As `post_list`, and each WR's SGE list is readable.
pub(crate) unsafe fn post_recv_list(
    first: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
    mut post: impl FnMut(RecvWr) -> oxrdma::Result<()>,
) -> c_int {
    let post_one = |w: &ibv_recv_wr| {
        // SAFETY: the caller's promise.
        let w = unsafe { recv_wr(w) }?;
        post(w).map_err(|e| errno_of(&e))
    };
    // SAFETY: the caller's promise.
    unsafe { post_list(first, bad, post_one) }
}
