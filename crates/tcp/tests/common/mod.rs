//! What the TCP driver's tests set up alike: an engine on a loopback address and iWARP
//! QPs in INIT on it.

use oxrdma_core::{
    Access, DeviceAttr, Engine, EngineConfig, Gid, Mtu, QpAttr, QpCap, QpInitAttr, QpState, QpType,
};
use std::net::Ipv4Addr;

/// An engine on 127.0.0.`n`, seeded with `n`.
pub fn engine(n: u8) -> Engine {
    let config = EngineConfig {
        gids: vec![Gid::from(Ipv4Addr::new(127, 0, 0, n))],
        max_mtu: Mtu::Mtu4096,
        attr: DeviceAttr::default(),
        selective_repeat: true,
        slot: None,
        peer_limits: Default::default(),
    };
    Engine::new(config, [n; 32])
}

/// An RC iWARP QP of PD `pd` with `cap`, in INIT with remote access.
pub fn qp_in_init(e: &mut Engine, pd: u32, send_cq: u32, recv_cq: u32, cap: QpCap) -> u32 {
    let init = QpInitAttr {
        qp_type: QpType::Rc,
        send_cq,
        recv_cq,
        cap,
        sq_sig_all: false,
        srq: None,
    };
    let qpn = e.create_iwarp_qp(pd, &init).unwrap();
    let attr = QpAttr {
        qp_state: Some(QpState::Init),
        qp_access_flags: Some(Access::REMOTE),
        ..Default::default()
    };
    e.modify_qp(qpn, &attr).unwrap();
    qpn
}
