//! iWARP's data path between two peers on virtual time (`oxrdma_sim::iwarp`): each
//! direction's byte stream is cut into random pieces that arrive after random delays.
//! Seeded workloads of every operation both ways at once; every byte and every completion
//! checked. The seed is printed on failure.

use oxrdma_core::iwarp::qp::{Buffers, Qp, QpConfig, State};
use oxrdma_core::{RecvWr, SendData, SendFlags, SendWr, Sge, WcOpcode, WcStatus, WrOpcode};
use oxrdma_sim::iwarp::{Link, StreamConfig};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const BASE: u64 = 0x10_0000;
const LEN: usize = 32 * 1024;

/// Key 1 a source, 2 WRITE target, 3 READ sink, 4 READ source, 5 receives, 6 a buffer the
/// peer's SEND with Invalidate closes.
fn memory(seed: u64) -> Buffers {
    let mut m = Buffers::default();
    for (key, w, r) in [
        (1, false, false),
        (2, true, false),
        (3, false, false),
        (4, false, true),
        (5, false, false),
        (6, true, false),
    ] {
        let bytes = (0..LEN)
            .map(|i| (i as u64 * 13 + key * 7 + seed) as u8)
            .collect();
        m.add(key as u32, BASE * key, bytes, w, r);
    }
    m
}

fn sge(key: u64, off: u64, len: u64) -> Sge {
    Sge {
        addr: BASE * key + off,
        length: len as u32,
        lkey: key as u32,
    }
}

fn wr(id: u64, op: WrOpcode, sges: Vec<Sge>) -> SendWr {
    SendWr {
        flags: SendFlags::SIGNALED,
        ..SendWr::new(id, op, SendData::Sges(sges.into()))
    }
}

#[test]
fn every_operation_over_delayed_cut_streams() {
    for seed in 0..24u64 {
        let ctx = format!("seed {seed}");
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let crc = rng.random_bool(0.5);
        let max_fpdu = rng.random_range(100..2000);
        let cfg = |qpn| QpConfig {
            qpn,
            max_fpdu,
            crc,
            ord: 2,
            ird: 2,
            sq_sig_all: false,
        };
        let stream = StreamConfig {
            max_piece: rng.random_range(1..4000),
            delay: (1_000, rng.random_range(1_000..500_000)),
        };
        let mut link = Link::new(
            (Qp::new(cfg(1)), memory(seed)),
            (Qp::new(cfg(2)), memory(seed + 100)),
            stream,
            seed,
        );
        // What the model says each peer's keys 2, 3 and 5 hold at the end.
        let mut want: Vec<[Vec<u8>; 3]> = (0..2)
            .map(|i| [2, 3, 5].map(|k| link.peers[i].mem.bytes(k).to_vec()))
            .collect();
        let mut posted = [0usize; 2];
        let mut recv_slot = [0u64; 2];
        let mut invalidated = [false; 2];
        for id in 1..=40u64 {
            let from = rng.random_range(0..2usize);
            let to = 1 - from;
            let len = rng.random_range(0..3000u64);
            let src = rng.random_range(0..LEN as u64 - len);
            let dst = rng.random_range(0..LEN as u64 - len);
            let op = rng.random_range(0..4);
            let w = match op {
                0 => {
                    let bytes =
                        link.peers[from].mem.bytes(1)[src as usize..(src + len) as usize].to_vec();
                    want[to][0][dst as usize..(dst + len) as usize].copy_from_slice(&bytes);
                    let mut w = wr(id, WrOpcode::RdmaWrite, vec![sge(1, src, len)]);
                    (w.remote_addr, w.rkey) = (BASE * 2 + dst, 2);
                    w
                }
                1 => {
                    let bytes =
                        link.peers[to].mem.bytes(4)[src as usize..(src + len) as usize].to_vec();
                    want[from][1][dst as usize..(dst + len) as usize].copy_from_slice(&bytes);
                    let mut w = wr(id, WrOpcode::RdmaRead, vec![sge(3, dst, len)]);
                    (w.remote_addr, w.rkey) = (BASE * 4 + src, 4);
                    w
                }
                _ => {
                    // A SEND into the peer's next 1 KiB receive slot; one in three (the
                    // first each way) closes the peer's key 6.
                    let len = len.min(1024);
                    let slot = recv_slot[to];
                    recv_slot[to] += 1;
                    assert!(slot < (LEN / 1024) as u64, "{ctx}: out of receive slots");
                    link.peers[to].qp.post_recv(RecvWr {
                        wr_id: 1000 + slot,
                        sges: vec![sge(5, slot * 1024, 1024)].into(),
                    });
                    let bytes =
                        link.peers[from].mem.bytes(1)[src as usize..(src + len) as usize].to_vec();
                    let at = (slot * 1024) as usize;
                    want[to][2][at..at + len as usize].copy_from_slice(&bytes);
                    let inv = op == 3 && !invalidated[to];
                    invalidated[to] |= inv;
                    let mut w = wr(
                        id,
                        if inv {
                            WrOpcode::SendWithInv
                        } else {
                            WrOpcode::Send
                        },
                        vec![sge(1, src, len)],
                    );
                    w.invalidate_rkey = 6;
                    w
                }
            };
            link.peers[from].qp.post_send(w).unwrap();
            posted[from] += 1;
            if rng.random_bool(0.3) {
                assert!(link.run(u64::MAX), "{ctx}");
            }
        }
        assert!(link.run(u64::MAX), "{ctx}");
        for i in 0..2 {
            let p = &link.peers[i];
            assert_eq!(p.qp.state(), State::Rts, "{ctx}: peer {i}");
            for (k, key) in [2u32, 3, 5].iter().enumerate() {
                let got = p.mem.bytes(*key);
                if let Some(at) = (0..LEN).find(|&j| got[j] != want[i][k][j]) {
                    panic!("{ctx}: peer {i} key {key}: byte {at} differs");
                }
            }
            let sends: Vec<_> = p.done.iter().filter(|w| w.wr_id < 1000).collect();
            assert_eq!(sends.len(), posted[i], "{ctx}: peer {i}: every WR once");
            assert!(
                sends.iter().all(|w| w.status == WcStatus::Success),
                "{ctx}: {sends:?}"
            );
            let recvs: Vec<_> = p.done.iter().filter(|w| w.wr_id >= 1000).collect();
            assert_eq!(
                recvs.len() as u64,
                recv_slot[i],
                "{ctx}: peer {i}: every receive once"
            );
            assert!(
                recvs
                    .iter()
                    .all(|w| w.status == WcStatus::Success && w.opcode == WcOpcode::Recv),
                "{ctx}"
            );
            let inv = recvs
                .iter()
                .filter(|w| w.invalidated_rkey == Some(6))
                .count();
            assert_eq!(
                inv,
                usize::from(invalidated[i]),
                "{ctx}: peer {i}: key 6 closed once"
            );
        }
    }
}
