//! The connection manager against any sequence of MADs and user calls: each input is a
//! script of steps (a MAD from one of two peers, shaped from the input so that comm IDs,
//! attributes and service IDs often match real ones; or a user call: connect, accept,
//! reject, establish, disconnect, destroy; or time passing). Nothing may panic, the CM
//! must hold no more connections than the calls and the backlog allow, and once enough
//! time passes with no new input it must hold none but what the user still owns.
#![no_main]

use libfuzzer_sys::fuzz_target;
use oxrdma_core::cm::{AcceptParams, Cm, CmConfig, CmEventKind, CmId, CmTransport, ConnectParams};
use oxrdma_core::{Gid, Mtu};
use oxrdma_wire::cm::attr;
use oxrdma_wire::mad::MAD_LEN;

const SID: u64 = 0x0106_1c06;
const BACKLOG: usize = 4;

fuzz_target!(|data: &[u8]| {
    let me = Gid::from(std::net::Ipv4Addr::new(10, 0, 0, 1));
    let peers = [
        Gid::from(std::net::Ipv4Addr::new(10, 0, 0, 2)),
        Gid::from(std::net::Ipv4Addr::new(10, 0, 0, 3)),
    ];
    let mut cm = Cm::new(CmConfig::new(me), 0x5eed);
    cm.listen(SID, BACKLOG).unwrap();
    let mut now = 0u64;
    let mut ids: Vec<CmId> = Vec::new();
    let mut calls = 0usize;
    let mut rest = data;
    while let Some((&op, tail)) = rest.split_first() {
        rest = tail;
        match op % 8 {
            // A MAD: a header and message bytes from the input, nudged towards real ones.
            0..=2 => {
                let mut mad = [0u8; MAD_LEN];
                let n = rest.len().min(MAD_LEN);
                mad[..n].copy_from_slice(&rest[..n]);
                rest = &rest[n..];
                mad[..4].copy_from_slice(&[1, 7, 2, 3]);
                let a = [attr::REQ, attr::REP, attr::RTU, attr::REJ, attr::DREQ, attr::DREP, attr::MRA, attr::SIDR_REQ];
                mad[16..18].copy_from_slice(&a[usize::from(op) % a.len()].to_be_bytes());
                if op % 2 == 0 {
                    mad[32..40].copy_from_slice(&SID.to_be_bytes());
                }
                // Name one of our connections as the receiver, often.
                if let Some(id) = ids.get(usize::from(mad[30]) % (ids.len() + 1)) {
                    mad[28..32].copy_from_slice(&id.0.to_be_bytes());
                }
                let _ = cm.handle_mad(now, peers[usize::from(op) % 2], &mad);
            }
            3 => {
                calls += 1;
                let p = ConnectParams {
                    dest: peers[usize::from(op) % 2],
                    source: me,
                    service_id: SID,
                    transport: CmTransport::Rc,
                    qpn: 0x11,
                    starting_psn: 1,
                    responder_resources: 1,
                    initiator_depth: 1,
                    flow_control: false,
                    retry_count: 7,
                    rnr_retry_count: 7,
                    srq: false,
                    path_mtu: Mtu::Mtu1024,
                    flow_label: 0,
                    traffic_class: 0,
                    hop_limit: 64,
                    ack_timeout: 19,
                    private_data: vec![],
                };
                if let Ok(id) = cm.connect(now, &p) {
                    ids.push(id);
                }
            }
            4 => {
                let Some(&id) = ids.get(usize::from(rest.first().copied().unwrap_or(0)) % (ids.len() + 1)) else {
                    continue;
                };
                let a = AcceptParams {
                    qpn: 0x22,
                    starting_psn: 2,
                    responder_resources: 1,
                    initiator_depth: 1,
                    flow_control: false,
                    rnr_retry_count: 7,
                    srq: false,
                    private_data: vec![],
                };
                match rest.first().copied().unwrap_or(0) % 6 {
                    0 => drop(cm.accept(now, id, &a)),
                    1 => drop(cm.reject(id, b"no")),
                    2 => drop(cm.establish(id)),
                    3 => drop(cm.disconnect(now, id)),
                    4 => drop(cm.notify_established(id)),
                    _ => {
                        cm.destroy(now, id);
                        ids.retain(|i| *i != id);
                    }
                }
            }
            // Time passes: up to a minute and a half.
            _ => {
                now += u64::from(rest.first().copied().unwrap_or(1)) * 350_000_000;
                cm.handle_timeout(now);
            }
        }
        while let Some(e) = cm.poll_event() {
            if let CmEventKind::ConnectRequest { .. } | CmEventKind::SidrRequest { .. } = e.kind {
                ids.push(e.id);
            }
        }
        while cm.poll_mad().is_some() {}
        // Bounded: what the user asked for, the backlog, and timewait.
        assert!(cm.connections() <= calls + ids.len() + BACKLOG + 64, "{} connections", cm.connections());
    }
    // Long after, with every id destroyed, nothing is left.
    for id in std::mem::take(&mut ids) {
        cm.destroy(now, id);
    }
    // Enough: a peer's REQ sets the timeouts, up to 4.096 us x 2^31 (2.3 hours, as on
    // Linux), so 16 tries of a MAD and then a timewait take up to 17 x 8,389 s.
    for _ in 0..200 {
        now += 1_000_000_000_000;
        cm.handle_timeout(now);
    }
    assert_eq!(cm.connections(), 0, "connections left behind");
    assert_eq!(cm.poll_timeout(), None);
});
