//! The engine the fuzz targets aim packets at: one QP of the transport the first input
//! byte picks (with an SRQ and a bound type 2 memory window on some runs, and work of its
//! own in flight), its region at iova 0 so fuzzed RETHs can hit it.

use oxrdma_core::{
    Access, AddressVector, DeviceAttr, Engine, EngineConfig, Gid, Mtu, MwBind, MwType, QpAttr,
    QpCap, QpInitAttr, QpState, QpType, RecvWr, SendData, SendWr, SharedBuffer, Sge, WrOpcode,
};
use oxrdma_core::secure::{derive, End, QpKeys, Suite};
use std::net::Ipv4Addr;
use std::sync::Arc;

/// The engine, its QP and CQ, and the region's memory.
pub struct Target {
    pub e: Engine,
    pub qpn: u32,
    pub cq: u32,
    /// Not every target reads it.
    #[allow(dead_code)]
    pub buf: Arc<SharedBuffer>,
}

/// The peer every packet comes from.
pub fn peer() -> Gid {
    Gid::from(Ipv4Addr::new(10, 0, 0, 2))
}

pub fn connect(t: QpType, peer: Gid) -> Vec<QpAttr> {
    let init = QpAttr {
        qp_state: Some(QpState::Init),
        pkey_index: Some(0),
        port_num: Some(1),
        qp_access_flags: (t != QpType::Ud).then_some(Access::ALL),
        qkey: (t == QpType::Ud).then_some(0x1111_1111),
        ..Default::default()
    };
    let rc = t == QpType::Rc;
    let rtr = if t == QpType::Ud {
        QpAttr { qp_state: Some(QpState::Rtr), ..Default::default() }
    } else {
        QpAttr {
            qp_state: Some(QpState::Rtr),
            ah_attr: Some(AddressVector { dgid: peer, ..Default::default() }),
            path_mtu: Some(Mtu::Mtu256),
            dest_qp_num: Some(0x22),
            rq_psn: Some(0),
            max_dest_rd_atomic: rc.then_some(4),
            min_rnr_timer: rc.then_some(1),
            ..Default::default()
        }
    };
    let rts = QpAttr {
        qp_state: Some(QpState::Rts),
        sq_psn: Some(0),
        timeout: rc.then_some(8),
        retry_cnt: rc.then_some(3),
        rnr_retry: rc.then_some(3),
        max_rd_atomic: rc.then_some(4),
        ..Default::default()
    };
    vec![init, rtr, rts]
}

/// The keys of the target's QP and of its peer under `suite`, when the QP is secure.
#[allow(dead_code)] // Not every target is secure.
pub fn secure_keys(qpn: u32, suite: Suite) -> (QpKeys, QpKeys) {
    let ours = End { gid: Gid::from(Ipv4Addr::new(10, 0, 0, 1)), qpn, psn: 0 };
    let theirs = End { gid: peer(), qpn: 0x22, psn: 0 };
    let k = |a: &End, b: &End| derive(suite, b"fuzz", a, b);
    (k(&ours, &theirs), k(&theirs, &ours))
}

/// A fresh target for input byte `kind` (always the same for the same byte).
#[allow(dead_code)] // Not every target uses it.
pub fn target(kind: u8) -> Target {
    target_with(kind, None)
}

/// [`target`], its QP secure under `secure`'s suite (`secure_keys`) if given and RC.
pub fn target_with(kind: u8, secure: Option<Suite>) -> Target {
    let t = [QpType::Rc, QpType::Uc, QpType::Ud][usize::from(kind % 3)];
    let peer = peer();
    let cfg = EngineConfig {
        gids: vec![Gid::from(Ipv4Addr::new(10, 0, 0, 1))],
        max_mtu: Mtu::Mtu4096,
        attr: DeviceAttr::default(),
        selective_repeat: true,
        slot: None,
        peer_limits: Default::default(),
    };
    let mut e = Engine::new(cfg, [7; 32]);
    let pd = e.alloc_pd().unwrap();
    let cq = e.create_cq(64).unwrap();
    let srq = (kind & 4 != 0 && t != QpType::Uc).then(|| e.create_srq(pd, 8, 1, 0).unwrap());
    let init = QpInitAttr {
        qp_type: t,
        send_cq: cq,
        recv_cq: cq,
        cap: QpCap::default(),
        sq_sig_all: true,
        srq,
    };
    let qpn = e.create_qp(pd, &init).unwrap();
    let buf = Arc::new(SharedBuffer::new(8192).unwrap());
    // iova 0 so fuzzed RETHs can hit the region.
    let mr = e.reg_mr(pd, buf.clone(), Some(0), Access::ALL).unwrap();
    for (i, a) in connect(t, peer).iter().enumerate() {
        if let (1, Some(suite), QpType::Rc) = (i, secure, t) {
            e.secure_qp(qpn, &secure_keys(qpn, suite).0).unwrap();
        }
        e.modify_qp(qpn, a).unwrap();
    }
    for i in 0..2 {
        let wr = RecvWr { wr_id: i, sges: vec![Sge { addr: 1024 * i, length: 1024, lkey: mr.lkey }].into() };
        match srq {
            Some(s) => e.post_srq_recv(s, wr).unwrap(),
            None => e.post_recv(qpn, wr).unwrap(),
        }
    }
    if let Some(s) = srq {
        e.arm_srq(s, 1).unwrap();
    }
    if t != QpType::Ud && kind & 8 != 0 {
        // A type 2 window over [2048, 4096) with a guessable rkey.
        let (mw, rkey) = e.alloc_mw(pd, MwType::Type2).unwrap();
        let mut b = SendWr::new(8, WrOpcode::BindMw, SendData::Sges(vec![].into()));
        b.bind = Some(MwBind {
            mw,
            rkey: (rkey & !0xff) | 1,
            lkey: mr.lkey,
            addr: 2048,
            length: 2048,
            access: Access::REMOTE_WRITE.union(Access::REMOTE_READ),
        });
        e.post_send(qpn, b).unwrap();
    }
    if t == QpType::Rc {
        let mut rd = SendWr::new(9, WrOpcode::RdmaRead, SendData::Sges(vec![Sge { addr: 4096, length: 600, lkey: mr.lkey }].into()));
        rd.rkey = 1;
        e.post_send(qpn, rd).unwrap();
    }
    Target { e, qpn, cq, buf }
}
