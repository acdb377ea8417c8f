//! Arbitrary packets aimed at a connected RC QP (with receives posted and work of its own
//! in flight): the engine must never panic, whatever arrives, and must keep answering.
#![no_main]

use libfuzzer_sys::fuzz_target;
use oxrdma_core::{
    Access, AddressVector, DeviceAttr, Engine, EngineConfig, Gid, Mtu, QpAttr, QpCap,
    QpInitAttr, QpState, QpType, RecvWr, SendData, SendWr, SharedBuffer, Sge, WrOpcode,
    MAX_PACKET,
};
use std::net::Ipv4Addr;
use std::sync::Arc;

fuzz_target!(|data: &[u8]| {
    let peer = Gid::from(Ipv4Addr::new(10, 0, 0, 2));
    let cfg = EngineConfig { gid: Gid::from(Ipv4Addr::new(10, 0, 0, 1)), max_mtu: Mtu::Mtu4096, attr: DeviceAttr::default() };
    let mut e = Engine::new(cfg, [7; 32]);
    let pd = e.alloc_pd().unwrap();
    let cq = e.create_cq(64).unwrap();
    let init = QpInitAttr { qp_type: QpType::Rc, send_cq: cq, recv_cq: cq, cap: QpCap::default(), sq_sig_all: true };
    let qpn = e.create_qp(pd, &init).unwrap();
    let buf = Arc::new(SharedBuffer::new(8192).unwrap());
    // iova 0 so fuzzed RETHs can hit the region.
    let mr = e.reg_mr(pd, buf, Some(0), Access::ALL).unwrap();
    for a in [
        QpAttr { qp_state: Some(QpState::Init), pkey_index: Some(0), port_num: Some(1), qp_access_flags: Some(Access::ALL), ..Default::default() },
        QpAttr { qp_state: Some(QpState::Rtr), ah_attr: Some(AddressVector { dgid: peer }), path_mtu: Some(Mtu::Mtu256), dest_qp_num: Some(0x22), rq_psn: Some(0), max_dest_rd_atomic: Some(4), min_rnr_timer: Some(1), ..Default::default() },
        QpAttr { qp_state: Some(QpState::Rts), sq_psn: Some(0), timeout: Some(8), retry_cnt: Some(3), rnr_retry: Some(3), max_rd_atomic: Some(4), ..Default::default() },
    ] {
        e.modify_qp(qpn, &a).unwrap();
    }
    for i in 0..2 {
        e.post_recv(qpn, RecvWr { wr_id: i, sges: vec![Sge { addr: 1024 * i, length: 1024, lkey: mr.lkey }] }).unwrap();
    }
    let mut rd = SendWr::new(9, WrOpcode::RdmaRead, SendData::Sges(vec![Sge { addr: 4096, length: 600, lkey: mr.lkey }]));
    rd.rkey = 1;
    e.post_send(qpn, rd).unwrap();
    let mut out = vec![0u8; MAX_PACKET];
    let mut now = 0;
    // Input: packets, each a length byte then that many bytes; the BTH's QPN is pointed at
    // our QP so the fuzzer need not guess it.
    let mut rest = data;
    while let Some((&n, tail)) = rest.split_first() {
        let n = usize::from(n).min(tail.len());
        let mut pkt = tail[..n].to_vec();
        rest = &tail[n..];
        if pkt.len() >= 8 {
            pkt[5..8].copy_from_slice(&qpn.to_be_bytes()[1..]);
        }
        e.handle_packet(now, peer, &pkt);
        while e.poll_transmit(now, &mut out).is_some() {}
        now += 50_000;
        e.handle_timeout(now);
        while e.poll_transmit(now, &mut out).is_some() {}
    }
    let _ = e.poll_cq(cq, usize::MAX);
});
