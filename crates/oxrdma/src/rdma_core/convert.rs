//! oxrdma's work requests, completions and QP attributes in rdma-core's C form (the C
//! library, `oxrdma-ibverbs`, converts the other way).

use crate::error::{Error, Result};
use oxrdma_core::{RecvWr, SendData, SendFlags, SendWr, Sge, WcOpcode, WcStatus};
use oxrdma_core::{WorkCompletion, WrOpcode};
use oxrdma_verbs_abi::*;
use smallvec::SmallVec;

/// A completion as oxrdma's (a UD receive's source GID is in its buffer's GRH area, not
/// here: `src_gid` stays None).
pub(crate) fn work_completion(wc: &ibv_wc) -> Result<WorkCompletion> {
    let bad = |what| Error::RdmaCore {
        verb: what,
        errno: rustix::io::Errno::PROTO.raw_os_error(),
    };
    let status = WcStatus::from_ibv(wc.status).ok_or(bad("ibv_poll_cq: unknown status"))?;
    // A failed completion's opcode is undefined (verbs.h): the status is what counts.
    let opcode = WcOpcode::from_ibv(wc.opcode);
    let opcode = match (status, opcode) {
        (_, Some(o)) => o,
        (WcStatus::Success, None) => return Err(bad("ibv_poll_cq: unknown opcode")),
        (_, None) => WcOpcode::Send,
    };
    Ok(WorkCompletion {
        wr_id: wc.wr_id,
        status,
        opcode,
        byte_len: wc.byte_len,
        // The header's imm_data holds the wire's bytes (big-endian).
        imm: (wc.wc_flags & IBV_WC_WITH_IMM != 0).then(|| u32::from_be(wc.imm_data)),
        qp_num: wc.qp_num,
        src_qp: wc.src_qp,
        src_gid: None,
        invalidated_rkey: (wc.wc_flags & IBV_WC_WITH_INV != 0).then_some(wc.imm_data),
    })
}

/// The SGEs of a WR in C form (up to four without allocating).
pub(crate) type Sges = SmallVec<[ibv_sge; 4]>;

fn sges(list: &[Sge]) -> Sges {
    list.iter()
        .map(|s| ibv_sge {
            addr: s.addr,
            length: s.length,
            lkey: s.lkey,
        })
        .collect()
}

/// `w` as an `ibv_send_wr` whose SGE list is `sges` (filled here; it must stay put until
/// the post returns). `ah` is the address handle of a UD send's destination; `window` a
/// BIND_MW's window and region in C form. Inline data is pointed at in `w` itself (the
/// provider copies it at post time).
pub(crate) fn send_wr(
    w: &SendWr,
    sge_store: &mut Sges,
    ah: *mut ibv_ah,
    window: Option<ibv_send_wr_bind_mw>,
) -> Result<ibv_send_wr> {
    if (w.opcode == WrOpcode::BindMw) != window.is_some() {
        return Err(oxrdma_core::VerbsError::InvalidArgument("a BIND_MW names its window").into());
    }
    let mut flags = w.flags;
    *sge_store = match &w.data {
        SendData::Sges(list) => sges(list),
        SendData::Inline(bytes) => {
            flags = flags | SendFlags::INLINE;
            let mut one = Sges::new();
            if !bytes.is_empty() {
                one.push(ibv_sge {
                    addr: bytes.as_ptr() as u64,
                    length: u32::try_from(bytes.len()).map_err(|_| {
                        oxrdma_core::VerbsError::InvalidArgument("inline data too long")
                    })?,
                    lkey: 0,
                });
            }
            one
        }
    };
    let wr = if w.opcode.is_atomic() {
        ibv_send_wr_wr {
            atomic: ibv_send_wr_atomic {
                remote_addr: w.remote_addr,
                compare_add: w.compare_add,
                swap: w.swap,
                rkey: w.rkey,
            },
        }
    } else if let Some(ud) = w.ud.filter(|_| !ah.is_null()) {
        ibv_send_wr_wr {
            ud: ibv_send_wr_ud {
                ah,
                remote_qpn: ud.remote_qpn,
                remote_qkey: ud.remote_qkey,
            },
        }
    } else {
        ibv_send_wr_wr {
            rdma: ibv_send_wr_rdma {
                remote_addr: w.remote_addr,
                rkey: w.rkey,
            },
        }
    };
    let imm_data = match w.opcode {
        WrOpcode::SendWithImm | WrOpcode::RdmaWriteWithImm => w.imm.to_be(),
        WrOpcode::SendWithInv | WrOpcode::LocalInv => w.invalidate_rkey,
        _ => 0,
    };
    let bind_mw = match window {
        Some(bind_mw) => ibv_send_wr_bind_mw_or_tso { bind_mw },
        None => ibv_send_wr_bind_mw_or_tso {
            tso: ibv_send_wr_tso {
                hdr: std::ptr::null_mut(),
                hdr_sz: 0,
                mss: 0,
            },
        },
    };
    Ok(ibv_send_wr {
        wr_id: w.wr_id,
        next: std::ptr::null_mut(),
        sg_list: sge_store.as_mut_ptr(),
        num_sge: sge_store.len() as i32,
        opcode: w.opcode as u32,
        send_flags: flags.0,
        imm_data,
        wr,
        qp_type: ibv_send_wr_qp_type { remote_srqn: 0 },
        bind_mw,
    })
}

/// `w` as an `ibv_recv_wr` whose SGE list is `sge_store` (filled here).
pub(crate) fn recv_wr(w: &RecvWr, sge_store: &mut Sges) -> ibv_recv_wr {
    *sge_store = sges(&w.sges);
    ibv_recv_wr {
        wr_id: w.wr_id,
        next: std::ptr::null_mut(),
        sg_list: sge_store.as_mut_ptr(),
        num_sge: sge_store.len() as i32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oxrdma_core::RemoteBuf;

    #[test]
    fn a_write_with_immediate_carries_its_target_and_big_endian_immediate() {
        let remote = RemoteBuf::new(0x1000, 0x77, 64).unwrap();
        let local = Sge {
            addr: 0x2000,
            length: 16,
            lkey: 5,
        };
        let w = SendWr::write(9, [local], remote)
            .unwrap()
            .with_imm(0x0102_0304)
            .unwrap();
        let mut store = Sges::new();
        let c = send_wr(&w, &mut store, std::ptr::null_mut(), None).unwrap();
        assert_eq!((c.wr_id, c.opcode, c.num_sge), (9, 1, 1));
        assert_eq!(c.imm_data, 0x0102_0304u32.to_be());
        assert_eq!(
            (store[0].addr, store[0].length, store[0].lkey),
            (0x2000, 16, 5)
        );
        assert_eq!(c.sg_list, store.as_mut_ptr());
        // SAFETY: `rdma` is the member written for a WRITE.
        let r = unsafe { c.wr.rdma };
        assert_eq!((r.remote_addr, r.rkey), (0x1000, 0x77));
    }

    #[test]
    fn inline_data_is_pointed_at_and_flagged() {
        let w = SendWr::send_inline(3, b"hello");
        let mut store = Sges::new();
        let c = send_wr(&w, &mut store, std::ptr::null_mut(), None).unwrap();
        assert_ne!(c.send_flags & SendFlags::INLINE.0, 0);
        assert_eq!(store.len(), 1);
        assert_eq!(store[0].length, 5);
        let SendData::Inline(bytes) = &w.data else {
            panic!("send_inline makes inline data");
        };
        assert_eq!(store[0].addr, bytes.as_ptr() as u64);
    }

    #[test]
    fn a_completion_keeps_its_status_and_immediate() {
        let wc = ibv_wc {
            wr_id: 4,
            status: WcStatus::RemAccessErr as u32,
            opcode: 0xff,
            ..Default::default()
        };
        let got = work_completion(&wc).unwrap();
        assert_eq!((got.wr_id, got.status), (4, WcStatus::RemAccessErr));
        let wc = ibv_wc {
            status: 0,
            opcode: WcOpcode::RecvRdmaWithImm as u32,
            wc_flags: IBV_WC_WITH_IMM,
            imm_data: 7u32.to_be(),
            byte_len: 12,
            ..Default::default()
        };
        let got = work_completion(&wc).unwrap();
        assert_eq!((got.imm, got.byte_len), (Some(7), 12));
        let junk = ibv_wc {
            status: 99,
            ..Default::default()
        };
        assert!(work_completion(&junk).is_err());
    }
}
