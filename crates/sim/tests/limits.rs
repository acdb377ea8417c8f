//! Device limits are enforced where they are crossed: a clear error at creation or post
//! time, and nothing half-made.

use oxrdma_core::{
    Access, AddressVector, AtomicCap, DeviceAttr, Engine, EngineConfig, Gid, MwType, QpCap,
    QpInitAttr, QpType, RecvWr, SendData, SendWr, SharedBuffer, VerbsError, WrOpcode,
};
use std::sync::Arc;

fn tiny() -> Engine {
    let attr = DeviceAttr {
        max_qp: 1,
        max_qp_wr: 4,
        max_sge: 2,
        max_cq: 1,
        max_cqe: 8,
        max_mr: 1,
        max_mr_size: 1 << 20,
        max_pd: 1,
        max_qp_rd_atom: 4,
        max_inline_data: 16,
        max_mw: 1,
        max_srq: 1,
        max_srq_wr: 4,
        max_srq_sge: 1,
        max_ah: 1,
        ..DeviceAttr::default()
    };
    let config = EngineConfig {
        gids: vec![Gid::from(std::net::Ipv4Addr::new(10, 0, 0, 1))],
        max_mtu: oxrdma_core::Mtu::Mtu1024,
        attr,
        selective_repeat: true,
        slot: None,
        peer_limits: Default::default(),
    };
    Engine::new(config, [3; 32])
}

fn exhausted<T: std::fmt::Debug>(r: Result<T, VerbsError>) {
    assert!(matches!(r, Err(VerbsError::Exhausted(_))), "{r:?}");
}

fn invalid<T: std::fmt::Debug>(r: Result<T, VerbsError>) {
    assert!(matches!(r, Err(VerbsError::InvalidArgument(_))), "{r:?}");
}

#[test]
fn every_object_count_is_capped() {
    let mut e = tiny();
    assert_eq!(DeviceAttr::default().atomic_cap, AtomicCap::Hca);
    assert_eq!(DeviceAttr::default().max_qp_rd_atom, 128, "as rxe");
    let pd = e.alloc_pd().unwrap();
    exhausted(e.alloc_pd());
    invalid(e.create_cq(9));
    let cq = e.create_cq(8).unwrap();
    exhausted(e.create_cq(1));
    let buf = || Arc::new(SharedBuffer::new(4096).unwrap());
    invalid(e.reg_mr(
        pd,
        Arc::new(SharedBuffer::new(2 << 20).unwrap()),
        None,
        Access::ALL,
    ));
    let mr = e.reg_mr(pd, buf(), None, Access::ALL).unwrap();
    exhausted(e.reg_mr(pd, buf(), None, Access::ALL));
    e.alloc_mw(pd, MwType::Type2).unwrap();
    exhausted(e.alloc_mw(pd, MwType::Type1));
    let av = AddressVector::to(Gid::from(std::net::Ipv4Addr::new(10, 0, 0, 2)));
    e.create_ah(pd, av).unwrap();
    exhausted(e.create_ah(pd, av));
    invalid(e.create_srq(pd, 5, 1, 0));
    invalid(e.create_srq(pd, 4, 2, 0));
    e.create_srq(pd, 4, 1, 0).unwrap();
    exhausted(e.create_srq(pd, 1, 1, 0));
    let init = |cap| QpInitAttr {
        qp_type: QpType::Rc,
        send_cq: cq,
        recv_cq: cq,
        cap,
        sq_sig_all: false,
        srq: None,
    };
    let cap = QpCap {
        max_send_wr: 4,
        max_recv_wr: 4,
        max_send_sge: 2,
        max_recv_sge: 2,
        max_inline_data: 16,
    };
    for bad in [
        QpCap {
            max_send_wr: 5,
            ..cap
        },
        QpCap {
            max_recv_wr: 5,
            ..cap
        },
        QpCap {
            max_send_sge: 3,
            ..cap
        },
        QpCap {
            max_recv_sge: 3,
            ..cap
        },
        QpCap {
            max_inline_data: 17,
            ..cap
        },
    ] {
        invalid(e.create_qp(pd, &init(bad)));
    }
    let qpn = e.create_qp(pd, &init(cap)).unwrap();
    exhausted(e.create_qp(pd, &init(cap)));
    // max_rd_atomic above the device's is refused when the QP is connected.
    let mut attr = oxrdma_core::QpAttr {
        qp_state: Some(oxrdma_core::QpState::Init),
        pkey_index: Some(0),
        port_num: Some(1),
        qp_access_flags: Some(Access::ALL),
        ..Default::default()
    };
    e.modify_qp(qpn, &attr).unwrap();
    attr = oxrdma_core::QpAttr {
        qp_state: Some(oxrdma_core::QpState::Rtr),
        ah_attr: Some(av),
        path_mtu: Some(oxrdma_core::Mtu::Mtu2048),
        dest_qp_num: Some(5),
        rq_psn: Some(0),
        max_dest_rd_atomic: Some(4),
        min_rnr_timer: Some(1),
        ..Default::default()
    };
    invalid(e.modify_qp(qpn, &attr)); // path MTU above the port's
    attr.path_mtu = Some(oxrdma_core::Mtu::Mtu1024);
    attr.max_dest_rd_atomic = Some(5);
    invalid(e.modify_qp(qpn, &attr));
    attr.max_dest_rd_atomic = Some(4);
    e.modify_qp(qpn, &attr).unwrap();
    // Receives: the queue depth and SGE count.
    let sge = oxrdma_core::Sge {
        addr: mr.iova,
        length: 8,
        lkey: mr.lkey,
    };
    invalid(e.post_recv(
        qpn,
        RecvWr {
            wr_id: 0,
            sges: vec![sge; 3].into(),
        },
    ));
    for i in 0..4 {
        e.post_recv(
            qpn,
            RecvWr {
                wr_id: i,
                sges: vec![sge].into(),
            },
        )
        .unwrap();
    }
    exhausted(e.post_recv(
        qpn,
        RecvWr {
            wr_id: 9,
            sges: vec![sge].into(),
        },
    ));
    // Sends need RTS.
    let w = SendWr::new(1, WrOpcode::Send, SendData::Inline(vec![0; 8].into()));
    assert!(matches!(
        e.post_send(qpn, w),
        Err(VerbsError::BadState { .. })
    ));
}
