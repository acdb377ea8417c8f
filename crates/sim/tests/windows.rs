//! Memory windows, LOCAL_INV and SEND_WITH_INV through two simulated hosts: a peer reaches
//! exactly what a window opens, while it is bound, and nothing after it is invalidated.

use oxrdma_core::{
    Access, MwBind, MwType, SendData, SendFlags, SendWr, WcOpcode, WcStatus, WrOpcode,
};
use oxrdma_sim::{Pair, PairOptions};

fn pair() -> Pair {
    Pair::new(&PairOptions::default())
}

/// A window on node b over `[4096, 8192)` of its buffer, with `access`.
fn bind_info(p: &Pair, mw: u32, rkey: u32, access: Access) -> MwBind {
    MwBind {
        mw,
        rkey: (rkey & !0xff) | (rkey.wrapping_add(1) & 0xff),
        lkey: p.b.mr.lkey,
        addr: p.b.addr(4096),
        length: 4096,
        access,
    }
}

/// Binds a type 2 window on b's QP with a BIND_MW work request; returns its new rkey.
fn bind_type2(p: &mut Pair, access: Access) -> (u32, u32) {
    let (mw, rkey) = p.world.nodes[1]
        .engine
        .alloc_mw(p.b.pd, MwType::Type2)
        .unwrap();
    let b = bind_info(p, mw, rkey, access);
    let mut wr = SendWr::new(100, WrOpcode::BindMw, SendData::Sges(vec![].into()));
    wr.bind = Some(b);
    p.post_send(1, wr);
    p.run();
    let wcs = p.wcs(1);
    assert_eq!(
        (wcs[0].opcode, wcs[0].status),
        (WcOpcode::BindMw, WcStatus::Success)
    );
    (mw, b.rkey)
}

fn write(p: &Pair, wr_id: u64, off: usize, len: usize, rkey: u32) -> SendWr {
    let mut w = SendWr::new(
        wr_id,
        WrOpcode::RdmaWrite,
        SendData::Sges(vec![p.a.sge(0, len)].into()),
    );
    (w.remote_addr, w.rkey) = (p.b.addr(off), rkey);
    w
}

fn statuses(p: &mut Pair, n: usize) -> Vec<(u64, WcStatus)> {
    p.wcs(n).iter().map(|w| (w.wr_id, w.status)).collect()
}

#[test]
fn a_type2_window_opens_its_range_with_its_rights_only() {
    let mut p = pair();
    let (_, rkey) = bind_type2(&mut p, Access::REMOTE_WRITE);
    assert!(p.a.buf.write(0, &[7u8; 100]));
    p.post_send(0, write(&p, 1, 4096 + 1000, 100, rkey));
    p.run();
    assert_eq!(statuses(&mut p, 0), vec![(1, WcStatus::Success)]);
    assert_eq!(p.b.read(4096 + 1000, 100), vec![7u8; 100]);
    // One byte past the window.
    p.post_send(0, write(&p, 2, 8192 - 50, 51, rkey));
    p.run();
    assert_eq!(statuses(&mut p, 0), vec![(2, WcStatus::RemAccessErr)]);
    assert_eq!(p.b.read(8192 - 50, 51), vec![0u8; 51], "nothing written");
}

#[test]
fn a_window_bound_with_local_write_too_opens_for_remote_writes() {
    // rdma-core's own tests bind with LOCAL_WRITE | REMOTE_WRITE, which rxe accepts: the
    // local bit means nothing on a window (it was refused with MW_BIND_ERR).
    let mut p = pair();
    let (_, rkey) = bind_type2(&mut p, Access::LOCAL_WRITE.union(Access::REMOTE_WRITE));
    assert!(p.a.buf.write(0, &[9u8; 64]));
    p.post_send(0, write(&p, 1, 4096, 64, rkey));
    p.run();
    assert_eq!(statuses(&mut p, 0), vec![(1, WcStatus::Success)]);
    assert_eq!(p.b.read(4096, 64), vec![9u8; 64]);
}

#[test]
fn a_window_without_read_rights_refuses_a_read() {
    let mut p = pair();
    let (_, rkey) = bind_type2(&mut p, Access::REMOTE_WRITE);
    let mut r = SendWr::new(
        1,
        WrOpcode::RdmaRead,
        SendData::Sges(vec![p.a.sge(0, 64)].into()),
    );
    (r.remote_addr, r.rkey) = (p.b.addr(4096), rkey);
    p.post_send(0, r);
    p.run();
    assert_eq!(statuses(&mut p, 0), vec![(1, WcStatus::RemAccessErr)]);
}

#[test]
fn an_invalidated_window_is_a_remote_access_error() {
    let mut p = pair();
    let (_, rkey) = bind_type2(&mut p, Access::REMOTE_WRITE);
    let mut inv = SendWr::new(5, WrOpcode::LocalInv, SendData::Sges(vec![].into()));
    inv.invalidate_rkey = rkey;
    p.post_send(1, inv);
    p.run();
    let wcs = p.wcs(1);
    assert_eq!(
        (wcs[0].opcode, wcs[0].status),
        (WcOpcode::LocalInv, WcStatus::Success)
    );
    p.post_send(0, write(&p, 1, 4096, 10, rkey));
    p.run();
    assert_eq!(statuses(&mut p, 0), vec![(1, WcStatus::RemAccessErr)]);
}

#[test]
fn send_with_invalidate_closes_the_window_at_the_responder() {
    let mut p = pair();
    let (_, rkey) = bind_type2(&mut p, Access::REMOTE_WRITE);
    p.post_recv(1, 9, vec![p.b.sge(0, 4096)]);
    // Three packets: SEND_FIRST, SEND_MIDDLE, SEND_LAST_WITH_INVALIDATE.
    let mut s = SendWr::new(
        1,
        WrOpcode::SendWithInv,
        SendData::Sges(vec![p.a.sge(0, 3000)].into()),
    );
    s.invalidate_rkey = rkey;
    p.post_send(0, s);
    p.run();
    assert_eq!(statuses(&mut p, 0), vec![(1, WcStatus::Success)]);
    let got = p.wcs(1);
    assert_eq!(
        (got[0].wr_id, got[0].byte_len, got[0].invalidated_rkey),
        (9, 3000, Some(rkey))
    );
    p.post_send(0, write(&p, 2, 4096, 10, rkey));
    p.run();
    assert_eq!(statuses(&mut p, 0), vec![(2, WcStatus::RemAccessErr)]);
}

#[test]
fn send_with_invalidate_of_a_key_that_is_no_window_is_an_invalid_request() {
    let mut p = pair();
    p.post_recv(1, 9, vec![p.b.sge(0, 4096)]);
    let mut s = SendWr::new(
        1,
        WrOpcode::SendWithInv,
        SendData::Sges(vec![p.a.sge(0, 10)].into()),
    );
    s.invalidate_rkey = p.b.mr.rkey; // a region, not a type 2 window
    p.post_send(0, s);
    p.run();
    assert_eq!(statuses(&mut p, 0), vec![(1, WcStatus::RemInvReqErr)]);
    assert_eq!(statuses(&mut p, 1), vec![(9, WcStatus::WrFlushErr)]);
}

#[test]
fn rebinding_a_type1_window_retires_its_old_rkey() {
    let mut p = pair();
    let e = &mut p.world.nodes[1].engine;
    let (mw, rkey0) = e.alloc_mw(p.b.pd, MwType::Type1).unwrap();
    let b1 = bind_info(&p, mw, rkey0, Access::REMOTE_WRITE);
    let bqpn = p.b.qpn;
    let e = &mut p.world.nodes[1].engine;
    e.bind_mw(bqpn, 50, true, b1).unwrap();
    let b2 = MwBind {
        rkey: (b1.rkey & !0xff) | (b1.rkey.wrapping_add(1) & 0xff),
        ..b1
    };
    e.bind_mw(bqpn, 51, true, b2).unwrap();
    p.run();
    let wcs = p.wcs(1);
    assert_eq!(
        wcs.iter()
            .map(|w| (w.wr_id, w.opcode, w.status))
            .collect::<Vec<_>>(),
        vec![
            (50, WcOpcode::BindMw, WcStatus::Success),
            (51, WcOpcode::BindMw, WcStatus::Success)
        ]
    );
    assert_eq!(p.world.nodes[1].engine.mw_rkey(mw).unwrap(), b2.rkey);
    p.post_send(0, write(&p, 1, 4096, 10, b2.rkey));
    p.post_send(0, write(&p, 2, 4096, 10, b1.rkey));
    p.run();
    assert_eq!(
        statuses(&mut p, 0),
        vec![(1, WcStatus::Success), (2, WcStatus::RemAccessErr)]
    );
}

#[test]
fn bind_rules() {
    // A region registered without MW_BIND cannot carry a window: MW_BIND_ERR, QP in error.
    let mut p = pair();
    let e = &mut p.world.nodes[1].engine;
    let buf = std::sync::Arc::new(oxrdma_core::SharedBuffer::new(8192).unwrap());
    let plain = e
        .reg_mr(
            p.b.pd,
            buf,
            None,
            Access::LOCAL_WRITE.union(Access::REMOTE_WRITE),
        )
        .unwrap();
    let (mw, rkey) = e.alloc_mw(p.b.pd, MwType::Type2).unwrap();
    let mut b = bind_info(&p, mw, rkey, Access::REMOTE_WRITE);
    (b.lkey, b.addr) = (plain.lkey, plain.iova);
    let mut wr = SendWr::new(1, WrOpcode::BindMw, SendData::Sges(vec![].into()));
    wr.bind = Some(b);
    wr.flags = SendFlags::empty(); // errors complete even unsignaled
    p.post_send(1, wr);
    p.run();
    assert_eq!(statuses(&mut p, 1), vec![(1, WcStatus::MwBindErr)]);

    // A new rkey whose index part differs from the window's.
    let mut p = pair();
    let (mw, rkey) = p.world.nodes[1]
        .engine
        .alloc_mw(p.b.pd, MwType::Type2)
        .unwrap();
    let mut b = bind_info(&p, mw, rkey, Access::REMOTE_WRITE);
    b.rkey ^= 0x100;
    let mut wr = SendWr::new(2, WrOpcode::BindMw, SendData::Sges(vec![].into()));
    wr.bind = Some(b);
    p.post_send(1, wr);
    p.run();
    assert_eq!(statuses(&mut p, 1), vec![(2, WcStatus::MwBindErr)]);

    // A bound type 2 window must be invalidated before binding again; a region with
    // windows bound cannot be deregistered; LOCAL_INV does not apply to type 1 windows.
    let mut p = pair();
    let (mw, rkey) = bind_type2(&mut p, Access::REMOTE_READ);
    let lkey = p.b.mr.lkey;
    assert!(p.world.nodes[1].engine.dereg_mr(lkey).is_err());
    let mut wr = SendWr::new(3, WrOpcode::BindMw, SendData::Sges(vec![].into()));
    wr.bind = Some(bind_info(&p, mw, rkey, Access::REMOTE_READ));
    p.post_send(1, wr);
    p.run();
    assert_eq!(statuses(&mut p, 1), vec![(3, WcStatus::MwBindErr)]);
    let mut p = pair();
    let (t1, rkey1) = p.world.nodes[1]
        .engine
        .alloc_mw(p.b.pd, MwType::Type1)
        .unwrap();
    let _ = t1;
    let mut inv = SendWr::new(4, WrOpcode::LocalInv, SendData::Sges(vec![].into()));
    inv.invalidate_rkey = rkey1;
    p.post_send(1, inv);
    p.run();
    assert_eq!(statuses(&mut p, 1), vec![(4, WcStatus::LocQpOpErr)]);
}
