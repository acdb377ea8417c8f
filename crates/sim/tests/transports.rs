//! UC and UD through two simulated hosts: what each transport promises, and its failure
//! paths (lost packets, wrong Q_Key, no receive posted, oversized datagrams).

use oxrdma_core::{Gid, QpType, SendData, SendWr, UdDest, WcOpcode, WcStatus, WrOpcode};
use oxrdma_sim::{Pair, PairOptions, Tap, TapAction};
use oxrdma_wire::{Opcode, PacketRepr};
use std::cell::RefCell;
use std::rc::Rc;

fn pair(t: QpType) -> Pair {
    Pair::new(&PairOptions {
        qp_type: t,
        mtu: oxrdma_core::Mtu::Mtu1024,
        ..Default::default()
    })
}

/// Records every packet's opcode and PSN, dropping those `drop` picks (by index).
fn tap(
    p: &mut Pair,
    drop: impl Fn(usize, &PacketRepr<'_>) -> bool + 'static,
) -> Rc<RefCell<Vec<(Opcode, u32)>>> {
    let log = Rc::new(RefCell::new(Vec::new()));
    let l = log.clone();
    p.world.tap = Some(Tap(Box::new(move |d| {
        let pkt = PacketRepr::parse(&d.data).expect("valid packets");
        let i = l.borrow().len();
        l.borrow_mut().push((pkt.bth.opcode, pkt.bth.psn.value()));
        if drop(i, &pkt) {
            TapAction::Drop
        } else {
            TapAction::Pass
        }
    })));
    log
}

fn sends(p: &Pair, wr_id: u64, off: usize, len: usize) -> SendWr {
    SendWr::new(
        wr_id,
        WrOpcode::Send,
        SendData::Sges(vec![p.a.sge(off, len)].into()),
    )
}

fn fill(p: &Pair, off: usize, len: usize, seed: u8) -> Vec<u8> {
    let data: Vec<u8> = (0..len)
        .map(|i| (i as u8).wrapping_mul(7).wrapping_add(seed))
        .collect();
    assert!(p.a.buf.write(off, &data));
    data
}

#[test]
fn uc_send_and_write_complete_without_any_ack() {
    let mut p = pair(QpType::Uc);
    let log = tap(&mut p, |_, _| false);
    let msg = fill(&p, 0, 5000, 1);
    p.post_recv(1, 7, vec![p.b.sge(0, 8192)]);
    p.post_send(0, sends(&p, 1, 0, 5000));
    let mut w = SendWr::new(
        2,
        WrOpcode::RdmaWriteWithImm,
        SendData::Sges(vec![p.a.sge(0, 3000)].into()),
    );
    (w.remote_addr, w.rkey, w.imm) = (p.b.addr(10_000), p.b.mr.rkey, 0xfeed);
    p.post_recv(1, 8, vec![]);
    p.post_send(0, w);
    p.run();
    let a: Vec<_> = p.wcs(0).iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(a, vec![(1, WcStatus::Success), (2, WcStatus::Success)]);
    let b = p.wcs(1);
    assert_eq!(b.len(), 2, "{b:?}");
    assert_eq!(
        (b[0].wr_id, b[0].byte_len, b[0].opcode),
        (7, 5000, WcOpcode::Recv)
    );
    assert_eq!(
        (b[1].wr_id, b[1].imm, b[1].opcode),
        (8, Some(0xfeed), WcOpcode::RecvRdmaWithImm)
    );
    assert_eq!(p.b.read(0, 5000), msg);
    assert_eq!(p.b.read(10_000, 3000), msg[..3000]);
    let log = log.borrow();
    assert!(
        log.iter().all(|(op, _)| (0x20..=0x2b).contains(&op.0)),
        "only UC requests: {log:?}"
    );
}

#[test]
fn uc_a_lost_packet_drops_its_whole_message_and_only_that() {
    let mut p = pair(QpType::Uc);
    // The second packet of the first SEND (three packets) is lost.
    let _log = tap(&mut p, |i, _| i == 1);
    let first = fill(&p, 0, 3000, 1);
    let second = fill(&p, 4096, 2500, 9);
    for id in [10, 11] {
        p.post_recv(1, id, vec![p.b.sge(id as usize % 10 * 4096, 4096)]);
    }
    p.post_send(0, sends(&p, 1, 0, 3000));
    p.post_send(0, sends(&p, 2, 4096, 2500));
    p.run();
    // The requester cannot know: both complete.
    let a: Vec<_> = p.wcs(0).iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(a, vec![(1, WcStatus::Success), (2, WcStatus::Success)]);
    // The responder delivers the second message only, into the first receive WQE (the one
    // the lost message had started to fill went back to the head of the queue).
    let b = p.wcs(1);
    assert_eq!(b.len(), 1, "{b:?}");
    assert_eq!(
        (b[0].wr_id, b[0].status, b[0].byte_len),
        (10, WcStatus::Success, 2500)
    );
    assert_eq!(p.b.read(0, 2500), second);
    assert_ne!(p.b.read(0, 3000), first);
    assert_eq!(
        p.world.nodes[1]
            .engine
            .stats()
            .rx_drops
            .get(oxrdma_core::RxDrop::UcIncomplete),
        1,
        "the third packet"
    );
}

#[test]
fn uc_without_a_receive_drops_the_message_silently() {
    let mut p = pair(QpType::Uc);
    p.post_send(0, sends(&p, 1, 0, 100));
    p.run();
    assert_eq!(p.wcs(0)[0].status, WcStatus::Success);
    assert!(p.wcs(1).is_empty());
    // The QP is still usable.
    p.post_recv(1, 5, vec![p.b.sge(0, 100)]);
    p.post_send(0, sends(&p, 2, 0, 100));
    p.run();
    assert_eq!(p.wcs(1)[0].wr_id, 5);
}

fn ud_send(p: &Pair, wr_id: u64, len: usize, qkey: u32, imm: Option<u32>) -> SendWr {
    let op = if imm.is_some() {
        WrOpcode::SendWithImm
    } else {
        WrOpcode::Send
    };
    let mut w = SendWr::new(wr_id, op, SendData::Sges(vec![p.a.sge(0, len)].into()));
    w.imm = imm.unwrap_or(0);
    w.ud = Some(UdDest {
        ah: p.a.ah.expect("UD pair has an AH"),
        remote_qpn: p.b.qpn,
        remote_qkey: qkey,
    });
    w
}

#[test]
fn ud_delivers_behind_a_grh_with_source_qpn_and_gid() {
    let mut p = pair(QpType::Ud);
    let msg = fill(&p, 0, 1000, 3);
    p.post_recv(1, 1, vec![p.b.sge(0, 40 + 1024)]);
    p.post_send(0, ud_send(&p, 9, 1000, 0x1111_1111, Some(77)));
    p.run();
    assert_eq!(p.wcs(0)[0].status, WcStatus::Success);
    let b = p.wcs(1);
    assert_eq!(b.len(), 1);
    let w = b[0];
    assert_eq!(
        (w.status, w.byte_len, w.imm),
        (WcStatus::Success, 1040, Some(77))
    );
    assert_eq!(w.src_qp, p.a.qpn);
    let a_ip = p.world.nodes[0].ip;
    assert_eq!(w.src_gid, Some(Gid::from(a_ip)));
    // IPv4: twenty zero bytes, then the IPv4 header naming both ends.
    let grh = p.b.read(0, 40);
    assert!(grh[..20].iter().all(|&b| b == 0));
    assert_eq!(grh[20] >> 4, 4);
    assert_eq!(grh[32..36], a_ip.octets());
    assert_eq!(p.b.read(40, 1000), msg);
}

#[test]
fn ud_q_key_rules() {
    let mut p = pair(QpType::Ud);
    p.post_recv(1, 1, vec![p.b.sge(0, 2048)]);
    // A wrong Q_Key: dropped by the receiver, complete at the sender.
    p.post_send(0, ud_send(&p, 1, 10, 0x2222_2222, None));
    p.run();
    assert_eq!(p.wcs(0)[0].status, WcStatus::Success);
    assert!(p.wcs(1).is_empty());
    assert_eq!(
        p.world.nodes[1]
            .engine
            .stats()
            .rx_drops
            .get(oxrdma_core::RxDrop::QkeyMismatch),
        1
    );
    // Bit 31 set: the sender's own Q_Key (the same here) goes on the wire.
    p.post_send(0, ud_send(&p, 2, 10, 0x8000_0000, None));
    p.run();
    assert_eq!(p.wcs(1).len(), 1);
}

#[test]
fn ud_messages_longer_than_the_mtu_are_refused_at_post() {
    let mut p = pair(QpType::Ud);
    let mtu = p.world.nodes[0].engine.config().max_mtu.bytes();
    let w = ud_send(&p, 1, mtu + 1, 0x1111_1111, None);
    let e = p.world.nodes[0].engine.post_send(p.a.qpn, w).unwrap_err();
    assert!(e.to_string().contains("MTU"), "{e}");
    // No destination at all is refused too; READs are not UD operations.
    let mut w = ud_send(&p, 2, 8, 0x1111_1111, None);
    w.ud = None;
    let qpn = p.a.qpn;
    assert!(p.world.nodes[0].engine.post_send(qpn, w).is_err());
    let mut w = ud_send(&p, 3, 8, 0x1111_1111, None);
    w.opcode = WrOpcode::RdmaRead;
    assert!(p.world.nodes[0].engine.post_send(qpn, w).is_err());
    // A full MTU goes.
    p.post_recv(1, 1, vec![p.b.sge(0, 40 + mtu)]);
    p.post_send(0, ud_send(&p, 4, mtu, 0x1111_1111, None));
    p.run();
    assert_eq!(p.wcs(1)[0].byte_len as usize, 40 + mtu);
    p.run();
}

#[test]
fn ud_without_a_receive_is_dropped_and_a_short_buffer_fails_the_receive() {
    let mut p = pair(QpType::Ud);
    p.post_send(0, ud_send(&p, 1, 100, 0x1111_1111, None));
    p.run();
    assert!(p.wcs(1).is_empty());
    p.post_recv(1, 2, vec![p.b.sge(0, 60)]);
    p.post_send(0, ud_send(&p, 2, 100, 0x1111_1111, None));
    p.run();
    let b = p.wcs(1);
    assert_eq!((b[0].wr_id, b[0].status), (2, WcStatus::LocQpOpErr));
}

#[test]
fn ud_send_through_a_destroyed_address_handle_is_a_local_qp_error() {
    let mut p = pair(QpType::Ud);
    p.post_recv(1, 1, vec![p.b.sge(0, 2048)]);
    let w = ud_send(&p, 5, 10, 0x1111_1111, None);
    // The AH goes away after the post is accepted and before the engine takes the WR (as
    // when the program destroys it with the WR outstanding): rxe fails it the same way.
    let e = &mut p.world.nodes[0].engine;
    let post = e.qp_post(p.a.qpn).unwrap();
    post.post_send(w).unwrap();
    e.destroy_ah(p.a.ah.unwrap()).unwrap();
    p.run();
    let wcs = p.wcs(0);
    assert_eq!(
        wcs.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        vec![(5, WcStatus::LocQpOpErr)]
    );
    assert_eq!(post.state(), oxrdma_core::QpState::Err);
    assert!(p.wcs(1).is_empty(), "nothing was sent");
}

#[test]
fn the_send_queue_depth_counts_every_wr_until_it_completes() {
    let mut p = Pair::new(&PairOptions {
        qp_type: QpType::Rc,
        cap: oxrdma_core::QpCap {
            max_send_wr: 4,
            ..Default::default()
        },
        ..Default::default()
    });
    let write = |p: &Pair, id| {
        let mut w = SendWr::new(
            id,
            WrOpcode::RdmaWrite,
            SendData::Sges(vec![p.a.sge(0, 8)].into()),
        );
        (w.remote_addr, w.rkey) = (p.b.addr(0), p.b.mr.rkey);
        w
    };
    let qpn = p.a.qpn;
    for id in 0..4 {
        let w = write(&p, id);
        p.world.nodes[0].engine.post_send(qpn, w).unwrap();
    }
    let w = write(&p, 4);
    let e = p.world.nodes[0].engine.post_send(qpn, w).unwrap_err();
    assert!(e.to_string().contains("full"), "{e}");
    p.run();
    assert_eq!(p.wcs(0).len(), 4);
    // Every slot is free again: four more fit, a fifth does not.
    for id in 10..14 {
        let w = write(&p, id);
        p.world.nodes[0].engine.post_send(qpn, w).unwrap();
    }
    let w = write(&p, 14);
    assert!(p.world.nodes[0].engine.post_send(qpn, w).is_err());
}
