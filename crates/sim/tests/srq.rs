//! Shared receive queues through simulated hosts: two RC QPs and a UD QP drawing from one
//! SRQ, the limit event once per arming, and the rules around them.

use oxrdma_core::{
    Access, AddressVector, AsyncEvent, EventType, Gid, QpAttr, QpCap, QpInitAttr, QpState, QpType,
    RecvWr, SendData, SendWr, Sge, SharedBuffer, UdDest, WcStatus, WrOpcode,
};
use oxrdma_sim::pair::{connect_attrs, PairOptions};
use oxrdma_sim::{NetConfig, World};
use std::sync::Arc;

struct Setup {
    world: World,
    srq: u32,
    /// (sender QPN on node 0, receiver QPN on node 1) per RC pair.
    rc: Vec<(u32, u32)>,
    cq: [u32; 2],
    sge: [Sge; 2],
}

fn setup() -> Setup {
    let mut world = World::new(2, NetConfig::default(), 7);
    let mut pds = [0; 2];
    let mut cq = [0; 2];
    let mut sge = [Sge {
        addr: 0,
        length: 0,
        lkey: 0,
    }; 2];
    for n in 0..2 {
        let e = &mut world.nodes[n].engine;
        pds[n] = e.alloc_pd().unwrap();
        cq[n] = e.create_cq(256).unwrap();
        let buf = Arc::new(SharedBuffer::new(1 << 16).unwrap());
        let mr = e.reg_mr(pds[n], buf, None, Access::ALL).unwrap();
        sge[n] = Sge {
            addr: mr.iova,
            length: 64,
            lkey: mr.lkey,
        };
    }
    let srq = world.nodes[1].engine.create_srq(pds[1], 32, 1, 0).unwrap();
    let mut rc = Vec::new();
    let o = PairOptions::default();
    for _ in 0..2 {
        let mut qpn = [0; 2];
        for n in 0..2 {
            let init = QpInitAttr {
                qp_type: QpType::Rc,
                send_cq: cq[n],
                recv_cq: cq[n],
                cap: QpCap::default(),
                sq_sig_all: true,
                srq: (n == 1).then_some(srq),
            };
            qpn[n] = world.nodes[n].engine.create_qp(pds[n], &init).unwrap();
        }
        let gid = |w: &World, n: usize| Gid::from(w.nodes[n].ip);
        let (g0, g1) = (gid(&world, 0), gid(&world, 1));
        for attr in connect_attrs(&o, g1, qpn[1], 100, 200) {
            world.nodes[0].engine.modify_qp(qpn[0], &attr).unwrap();
        }
        for attr in connect_attrs(&o, g0, qpn[0], 200, 100) {
            world.nodes[1].engine.modify_qp(qpn[1], &attr).unwrap();
        }
        rc.push((qpn[0], qpn[1]));
    }
    Setup {
        world,
        srq,
        rc,
        cq,
        sge,
    }
}

impl Setup {
    fn post_srq(&mut self, ids: std::ops::Range<u64>) {
        for wr_id in ids {
            let wr = RecvWr {
                wr_id,
                sges: vec![self.sge[1]].into(),
            };
            self.world.nodes[1]
                .engine
                .post_srq_recv(self.srq, wr)
                .unwrap();
        }
    }
    fn send(&mut self, pair: usize, wr_id: u64) {
        let wr = SendWr::new(
            wr_id,
            WrOpcode::Send,
            SendData::Sges(vec![self.sge[0]].into()),
        );
        let qpn = self.rc[pair].0;
        self.world.nodes[0].engine.post_send(qpn, wr).unwrap();
        let limit = self.world.now + 10_000_000_000;
        self.world.run_until_idle(limit);
    }
    fn limit_events(&mut self) -> usize {
        std::iter::from_fn(|| self.world.nodes[1].engine.poll_event())
            .filter(|e| {
                *e == AsyncEvent::Srq {
                    srq: self.srq,
                    event: EventType::SrqLimitReached,
                }
            })
            .count()
    }
    fn recvs(&mut self) -> Vec<(u64, u32, WcStatus)> {
        let e = &mut self.world.nodes[1].engine;
        e.poll_cq(self.cq[1], 256)
            .unwrap()
            .iter()
            .map(|w| (w.wr_id, w.qp_num, w.status))
            .collect()
    }
}

#[test]
fn two_qps_share_the_queue_in_posting_order() {
    let mut s = setup();
    s.post_srq(0..4);
    for (i, pair) in [0, 1, 1, 0].into_iter().enumerate() {
        s.send(pair, i as u64);
    }
    let got = s.recvs();
    let want: Vec<_> = [0, 1, 1, 0]
        .iter()
        .enumerate()
        .map(|(i, &p)| (i as u64, s.rc[p].1, WcStatus::Success))
        .collect();
    assert_eq!(got, want);
    assert_eq!(s.world.nodes[1].engine.query_srq(s.srq).unwrap().posted, 0);
}

#[test]
fn the_limit_event_fires_once_per_arming() {
    let mut s = setup();
    s.post_srq(0..10);
    s.world.nodes[1].engine.arm_srq(s.srq, 4).unwrap();
    for i in 0..6 {
        s.send(i % 2, i as u64); // 4 left: not below the limit yet
    }
    assert_eq!(s.limit_events(), 0);
    s.send(0, 6); // 3 left
    assert_eq!(s.limit_events(), 1);
    assert_eq!(
        s.world.nodes[1].engine.query_srq(s.srq).unwrap().srq_limit,
        0,
        "disarmed"
    );
    s.send(1, 7);
    s.send(0, 8);
    assert_eq!(s.limit_events(), 0, "once per arming");
    // Armed above what is posted: refused, as rxe does.
    assert!(s.world.nodes[1].engine.arm_srq(s.srq, 5).is_err());
    s.post_srq(10..15); // 6 posted
    s.world.nodes[1].engine.arm_srq(s.srq, 3).unwrap();
    for i in 9..13 {
        s.send(1, i); // 2 left after the fourth
    }
    assert_eq!(s.limit_events(), 1);
    assert_eq!(s.recvs().len(), 13);
}

#[test]
fn srq_rules_and_last_wqe_reached() {
    let mut s = setup();
    let (_, rqpn) = s.rc[0];
    let e = &mut s.world.nodes[1].engine;
    // A QP on an SRQ has no receive queue of its own.
    let wr = RecvWr {
        wr_id: 1,
        sges: vec![].into(),
    };
    assert!(e.post_recv(rqpn, wr).is_err());
    // The SRQ cannot go while QPs use it; limits are checked.
    assert!(e.destroy_srq(s.srq).is_err());
    assert!(e.create_srq(1, 0, 1, 0).is_err());
    assert!(e.create_srq(1, 1 << 30, 1, 0).is_err());
    let too_many_sges = RecvWr {
        wr_id: 2,
        sges: vec![s.sge[1]; 2].into(),
    };
    assert!(e.post_srq_recv(s.srq, too_many_sges).is_err());
    // A QP on an SRQ that fails says it will take no more from it.
    let err = QpAttr {
        qp_state: Some(QpState::Err),
        ..Default::default()
    };
    e.modify_qp(rqpn, &err).unwrap();
    let ev: Vec<_> = std::iter::from_fn(|| e.poll_event()).collect();
    assert!(
        ev.contains(&AsyncEvent::Qp {
            qpn: rqpn,
            event: EventType::QpLastWqeReached
        }),
        "{ev:?}"
    );
}

#[test]
fn a_ud_qp_receives_from_an_srq() {
    let mut s = setup();
    let e = &mut s.world.nodes[1].engine;
    let ud = |srq| QpInitAttr {
        qp_type: QpType::Ud,
        send_cq: s.cq[1],
        recv_cq: s.cq[1],
        cap: QpCap::default(),
        sq_sig_all: true,
        srq,
    };
    let rq = e.create_qp(1, &ud(Some(s.srq))).unwrap();
    let o = PairOptions {
        qp_type: QpType::Ud,
        ..Default::default()
    };
    for a in connect_attrs(&o, Gid::default(), 0, 0, 1) {
        e.modify_qp(rq, &a).unwrap();
    }
    let e0 = &mut s.world.nodes[0].engine;
    let sq = e0
        .create_qp(
            1,
            &QpInitAttr {
                send_cq: s.cq[0],
                recv_cq: s.cq[0],
                srq: None,
                ..ud(None)
            },
        )
        .unwrap();
    for a in connect_attrs(&o, Gid::default(), 0, 0, 1) {
        e0.modify_qp(sq, &a).unwrap();
    }
    let dgid = Gid::from(s.world.nodes[1].ip);
    let ah = s.world.nodes[0]
        .engine
        .create_ah(1, AddressVector::to(dgid))
        .unwrap();
    s.post_srq(0..1);
    let mut wr = SendWr::new(5, WrOpcode::Send, SendData::Sges(vec![s.sge[0]].into()));
    wr.ud = Some(UdDest {
        ah,
        remote_qpn: rq,
        remote_qkey: o.qkey,
    });
    s.world.nodes[0].engine.post_send(sq, wr).unwrap();
    let limit = s.world.now + 1_000_000_000;
    s.world.run_until_idle(limit);
    let got = s.recvs();
    assert_eq!(
        got,
        vec![(0, rq, WcStatus::LocQpOpErr)],
        "64-byte buffer < 40 + 64"
    );
}
