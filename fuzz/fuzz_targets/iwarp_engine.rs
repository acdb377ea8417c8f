//! Any bytes as the stream an engine's iWARP QP reads (`Engine::iwarp_receive`), with the
//! device's own registered memory behind it: whatever comes, nothing panics, nothing is
//! written outside the one region a peer may write, every posted work request completes
//! exactly once by the time the stream has ended, and the ring's slots all come back.
#![no_main]

use libfuzzer_sys::fuzz_target;
use oxrdma_core::iwarp::{Negotiated, Rtr};
use oxrdma_core::{
    Access, DeviceAttr, Engine, EngineConfig, Gid, IwarpStream, Mtu, QpAttr, QpCap, QpInitAttr,
    QpState, QpType, RecvWr, SendData, SendFlags, SendWr, SharedBuffer, Sge, WrOpcode,
};
use std::collections::HashSet;
use std::sync::Arc;

fuzz_target!(|data: &[u8]| {
    let Some((&first, stream)) = data.split_first() else {
        return;
    };
    let mut e = Engine::new(
        EngineConfig {
            gids: vec![Gid::from(std::net::Ipv4Addr::new(10, 0, 0, 1))],
            max_mtu: Mtu::Mtu4096,
            attr: DeviceAttr::default(),
            selective_repeat: false,
            slot: None,
            peer_limits: Default::default(),
        },
        [7; 32],
    );
    let pd = e.alloc_pd().unwrap();
    let cq = e.create_cq(64).unwrap();
    // A region peers may write and read, and one that is local only, with a guard
    // pattern around both in one buffer each.
    let open = Arc::new(SharedBuffer::new(4096).unwrap());
    let local = Arc::new(SharedBuffer::new(4096).unwrap());
    assert!(local.write(0, &[0xa5; 4096]));
    let mo = e.reg_mr(pd, open.clone(), Some(0x1000), Access::ALL).unwrap();
    let ml = e.reg_mr(pd, local.clone(), Some(0x9000), Access::LOCAL_WRITE).unwrap();
    let init = QpInitAttr {
        qp_type: QpType::Rc,
        send_cq: cq,
        recv_cq: cq,
        cap: QpCap {
            max_send_wr: 4,
            max_recv_wr: 4,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
        sq_sig_all: true,
        srq: None,
    };
    let qpn = e.create_iwarp_qp(pd, &init).unwrap();
    let to_init = QpAttr {
        qp_state: Some(QpState::Init),
        qp_access_flags: Some(Access::REMOTE),
        ..Default::default()
    };
    e.modify_qp(qpn, &to_init).unwrap();
    let negotiated = Negotiated {
        crc: first & 1 == 1,
        ird: 2,
        ord: 2,
        rtr: (first & 2 == 2).then_some(Rtr::Write),
        peer_private_data: Vec::new(),
    };
    let s = IwarpStream {
        negotiated,
        initiator: first & 4 == 4,
        max_fpdu: 64 + usize::from(first) * 8,
    };
    e.iwarp_established(qpn, &s).unwrap();
    // A receive into the open region, and a READ into it waiting for its response.
    let sge = |lkey, addr| vec![Sge { addr, length: 512, lkey }].into();
    e.post_recv(qpn, RecvWr { wr_id: 10, sges: sge(mo.lkey, 0x1000) }).unwrap();
    let mut read = SendWr::new(20, WrOpcode::RdmaRead, SendData::Sges(sge(mo.lkey, 0x1200)));
    read.flags = SendFlags::SIGNALED;
    (read.remote_addr, read.rkey) = (0x5000, 7);
    e.post_send(qpn, read).unwrap();
    let mut out = Vec::new();
    e.iwarp_transmit(qpn, &mut out, 1 << 16).unwrap();
    let step = usize::from(first >> 3) + 1;
    for piece in stream.chunks(step) {
        let took = e.iwarp_receive(qpn, piece).unwrap();
        assert!(took <= piece.len());
        e.iwarp_transmit(qpn, &mut out, 1 << 16).unwrap();
    }
    e.iwarp_stream_closed(qpn).unwrap();
    assert_eq!(e.qp_state(qpn).unwrap(), QpState::Err);
    let mut seen = HashSet::new();
    for wc in e.poll_cq(cq, 64).unwrap() {
        assert!(seen.insert(wc.wr_id), "work request {} completed twice", wc.wr_id);
    }
    assert_eq!(seen, HashSet::from([10, 20]), "each work request completes once");
    let mut b = [0u8; 4096];
    assert!(local.read(0, &mut b));
    assert!(b.iter().all(|&x| x == 0xa5), "the local-only region was written");
    // Every slot is free again: the full depth posts.
    let _ = ml;
    for i in 0..4 {
        e.post_recv(qpn, RecvWr { wr_id: 30 + i, sges: sge(mo.lkey, 0x1000) }).unwrap();
    }
});
