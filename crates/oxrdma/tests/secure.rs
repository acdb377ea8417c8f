//! How two QPs agree to be secure through the endpoints they exchange
//! (`QueuePair::secure_endpoint`): secure when both offer a key, plain when one does not
//! (a peer such as rxe, or a plain oxrdma QP: its endpoint carries none), refused when one
//! requires it and the other offers nothing; a pre-shared key in the options secures a
//! pair with or without offers. Each pair moves a WRITE and a SEND, checked.

mod common;
use common::wait;

use oxrdma::{
    Access, ConnectOptions, Context, QpCap, QpType, RecvWr, SendData, SendFlags, SendWr, WcStatus,
    WrOpcode,
};

/// Two QPs on `ip_a` and `ip_b`; `offer` says which make secure endpoints; each connects
/// with `opts`. Returns whether each is secure, or the first connect's error.
fn pair(
    ip_a: &str,
    ip_b: &str,
    offer: [bool; 2],
    opts: [ConnectOptions; 2],
) -> oxrdma::Result<[bool; 2]> {
    pair_of(QpType::Rc, ip_a, ip_b, offer, opts)
}

/// [`pair`] of QPs of type `t`.
fn pair_of(
    t: QpType,
    ip_a: &str,
    ip_b: &str,
    offer: [bool; 2],
    opts: [ConnectOptions; 2],
) -> oxrdma::Result<[bool; 2]> {
    let ctx = [
        Context::open(ip_a.parse().unwrap()).unwrap(),
        Context::open(ip_b.parse().unwrap()).unwrap(),
    ];
    let pd = [ctx[0].alloc_pd().unwrap(), ctx[1].alloc_pd().unwrap()];
    let cq = [ctx[0].create_cq(16).unwrap(), ctx[1].create_cq(16).unwrap()];
    let qp: Vec<_> = (0..2)
        .map(|i| {
            pd[i]
                .create_qp(&cq[i], &cq[i], t, QpCap::default())
                .unwrap()
        })
        .collect();
    let ep: Vec<_> = (0..2)
        .map(|i| {
            if offer[i] {
                qp[i].secure_endpoint().unwrap()
            } else {
                qp[i].endpoint()
            }
        })
        .collect();
    for i in 0..2 {
        qp[i].connect(&ep[1 - i], &opts[i])?;
    }
    let mr = [
        pd[0].register(4096, Access::ALL).unwrap(),
        pd[1].register(4096, Access::ALL).unwrap(),
    ];
    mr[0].write(0, b"sealed or not, it arrives").unwrap();
    qp[1]
        .post_recv(RecvWr {
            wr_id: 7,
            sges: vec![mr[1].sge(2048, 64).unwrap()].into(),
        })
        .unwrap();
    let mut w = SendWr::new(
        1,
        WrOpcode::RdmaWrite,
        SendData::Sges(vec![mr[0].sge(0, 25).unwrap()].into()),
    );
    (w.remote_addr, w.rkey, w.flags) = (mr[1].addr(), mr[1].rkey(), SendFlags::SIGNALED);
    qp[0].post_send(w).unwrap();
    let mut s = SendWr::new(
        2,
        WrOpcode::Send,
        SendData::Sges(vec![mr[0].sge(0, 25).unwrap()].into()),
    );
    s.flags = SendFlags::SIGNALED;
    qp[0].post_send(s).unwrap();
    assert!(wait(&cq[0], 2)
        .iter()
        .all(|w| w.status == WcStatus::Success));
    assert_eq!(wait(&cq[1], 1)[0].status, WcStatus::Success);
    let mut got = [0u8; 25];
    for off in [0, 2048] {
        mr[1].read(off, &mut got).unwrap();
        assert_eq!(&got, b"sealed or not, it arrives");
    }
    Ok([qp[0].is_secure().unwrap(), qp[1].is_secure().unwrap()])
}

#[test]
fn qps_are_secure_when_both_offer_keys_and_plain_when_one_does_not() {
    let o = ConnectOptions::default();
    assert_eq!(
        pair("127.0.0.201", "127.0.0.202", [true, true], [o, o]).unwrap(),
        [true; 2]
    );
    assert_eq!(
        pair("127.0.0.201", "127.0.0.202", [true, false], [o, o]).unwrap(),
        [false; 2]
    );
    assert_eq!(
        pair("127.0.0.201", "127.0.0.202", [false, true], [o, o]).unwrap(),
        [false; 2]
    );
    let chacha = ConnectOptions {
        suite: oxrdma::Suite::ChaCha20Poly1305,
        ..o
    };
    assert_eq!(
        pair("127.0.0.201", "127.0.0.202", [true, true], [chacha, chacha]).unwrap(),
        [true; 2]
    );
}

#[test]
fn a_qp_that_requires_security_refuses_a_peer_that_offers_nothing() {
    let o = ConnectOptions::default();
    let strict = ConnectOptions {
        require_secure: true,
        ..o
    };
    let e = pair("127.0.0.203", "127.0.0.204", [true, false], [strict, o]).unwrap_err();
    assert!(e.to_string().contains("not secure"), "{e}");
}

#[test]
fn a_pre_shared_key_secures_a_pair_with_or_without_offers() {
    let psk = ConnectOptions {
        psk: Some([0x5a; 32]),
        ..ConnectOptions::default()
    };
    assert_eq!(
        pair("127.0.0.205", "127.0.0.206", [false, false], [psk, psk]).unwrap(),
        [true; 2]
    );
    assert_eq!(
        pair("127.0.0.205", "127.0.0.206", [true, true], [psk, psk]).unwrap(),
        [true; 2]
    );
}

#[test]
fn uc_qps_are_secure_too() {
    let o = ConnectOptions::default();
    assert_eq!(
        pair_of(
            QpType::Uc,
            "127.0.0.207",
            "127.0.0.208",
            [true, true],
            [o, o]
        )
        .unwrap(),
        [true; 2]
    );
    assert_eq!(
        pair_of(
            QpType::Uc,
            "127.0.0.207",
            "127.0.0.208",
            [true, false],
            [o, o]
        )
        .unwrap(),
        [false; 2]
    );
}
