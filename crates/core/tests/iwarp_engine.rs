//! iWARP QPs in the engine: two engines' QPs set up by MPA's exchange, their streams cut at
//! random places, moving registered memory (the device's regions, PDs and CQs) with
//! WRITE, READ and SEND posted as on any QP; what the rings refuse at once; how the QP
//! ends (a peer's bad STag, the QP's own access rights, ERR, a closed stream) with every
//! work request completed once. Seeds are printed on failure.

use oxrdma_core::iwarp::{Setup, SetupConfig, SetupEvent};
use oxrdma_core::{
    Access, AsyncEvent, DeviceAttr, Engine, EngineConfig, EventType, Gid, IwarpStream,
    MemoryRegion, Mtu, QpAttr, QpCap, QpInitAttr, QpState, QpType, RecvWr, SendData, SendFlags,
    SendWr, Sge, SharedBuffer, VerbsError, WcOpcode, WcStatus, WorkCompletion, WrOpcode,
};
use std::net::Ipv4Addr;
use std::sync::Arc;

const LEN: usize = 1 << 20;
const DEPTH: u32 = 8;
const SRQ_DEPTH: u32 = 16;

/// One device with one iWARP QP in INIT, a region of `LEN` bytes open to everything, and
/// a CQ each way.
struct Side {
    e: Engine,
    qpn: u32,
    scq: u32,
    rcq: u32,
    mr: MemoryRegion,
    buf: Arc<SharedBuffer>,
    /// The shared receive queue its QP receives from, if any.
    srq: Option<u32>,
}

fn side(n: u8, qp_access: Access) -> Side {
    side_on(n, qp_access, false)
}

/// [`side`], its QP on a shared receive queue of `SRQ_DEPTH` receives if `on_srq`.
fn side_on(n: u8, qp_access: Access, on_srq: bool) -> Side {
    let config = EngineConfig {
        gids: vec![Gid::from(Ipv4Addr::new(10, 0, 0, n))],
        max_mtu: Mtu::Mtu4096,
        attr: DeviceAttr::default(),
        selective_repeat: true,
        slot: None,
        peer_limits: Default::default(),
    };
    let mut e = Engine::new(config, [n; 32]);
    let pd = e.alloc_pd().unwrap();
    let (scq, rcq) = (e.create_cq(64).unwrap(), e.create_cq(64).unwrap());
    let buf = Arc::new(SharedBuffer::new(LEN).unwrap());
    let pattern: Vec<u8> = (0..LEN).map(|i| (i * 7 + usize::from(n)) as u8).collect();
    assert!(buf.write(0, &pattern));
    let mr = e.reg_mr(pd, buf.clone(), None, Access::ALL).unwrap();
    let srq = on_srq.then(|| e.create_srq(pd, SRQ_DEPTH, 2, 0).unwrap());
    let init = QpInitAttr {
        qp_type: QpType::Rc,
        send_cq: scq,
        recv_cq: rcq,
        cap: QpCap {
            max_send_wr: DEPTH,
            max_recv_wr: DEPTH,
            max_send_sge: 2,
            max_recv_sge: 2,
            max_inline_data: 64,
        },
        sq_sig_all: false,
        srq,
    };
    let qpn = e.create_iwarp_qp(pd, &init).unwrap();
    e.modify_qp(
        qpn,
        &QpAttr {
            qp_state: Some(QpState::Init),
            qp_access_flags: Some(qp_access),
            ..Default::default()
        },
    )
    .unwrap();
    Side {
        e,
        qpn,
        scq,
        rcq,
        mr,
        buf,
        srq,
    }
}

impl Side {
    fn sge(&self, off: u64, len: u32) -> Sge {
        Sge {
            addr: self.mr.iova + off,
            length: len,
            lkey: self.mr.lkey,
        }
    }

    fn bytes(&self, off: usize, len: usize) -> Vec<u8> {
        let mut v = vec![0; len];
        assert!(self.buf.read(off, &mut v));
        v
    }

    fn post(&mut self, wr: SendWr) -> Result<(), VerbsError> {
        self.e.post_send(self.qpn, wr)
    }

    fn recv(&mut self, wr_id: u64, off: u64, len: u32) {
        let sges = vec![self.sge(off, len)].into();
        self.e.post_recv(self.qpn, RecvWr { wr_id, sges }).unwrap();
    }

    fn wcs(&mut self, cq: u32) -> Vec<WorkCompletion> {
        self.e.poll_cq(cq, 1000).unwrap()
    }
}

/// A send WR of `len` bytes at `off` of `from`'s region to `off_to` of `to`'s.
fn wr(from: &Side, to: &Side, id: u64, op: WrOpcode, off: u64, len: u32, off_to: u64) -> SendWr {
    let mut w = SendWr::new(id, op, SendData::Sges(vec![from.sge(off, len)].into()));
    (w.remote_addr, w.rkey) = (to.mr.iova + off_to, to.mr.rkey);
    w.flags = SendFlags::SIGNALED;
    w
}

/// A seeded xorshift: where the streams are cut.
struct Rng(u64);
impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}

/// Two sides joined by MPA's exchange, and the bytes on each stream not yet read.
struct Pair {
    a: Side,
    b: Side,
    ab: Vec<u8>,
    ba: Vec<u8>,
    rng: Rng,
    seed: u64,
}

fn pair(seed: u64, access_b: Access) -> Pair {
    pair_with(seed, side(2, access_b))
}

/// [`pair`] with `b` made by the caller.
fn pair_with(seed: u64, mut b: Side) -> Pair {
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let crc = rng.below(2) == 0;
    let mut a = side(1, Access::REMOTE);
    let (mut ia, req) = Setup::initiator(SetupConfig {
        crc,
        ..Default::default()
    })
    .unwrap();
    let mut rb = Setup::responder(SetupConfig::default());
    let (ev, used) = rb.feed(&req).unwrap();
    assert!(matches!(ev, SetupEvent::Request { .. }) && used == req.len());
    let (rep, nb) = rb.accept().unwrap();
    let (ev, _) = ia.feed(&rep).unwrap();
    let SetupEvent::Established(na) = ev else {
        panic!("seed {seed}: {ev:?}");
    };
    let max_fpdu = 64 + rng.below(3000) as usize;
    for (s, negotiated, initiator) in [(&mut a, na, true), (&mut b, nb, false)] {
        let stream = IwarpStream {
            negotiated,
            initiator,
            max_fpdu,
        };
        s.e.iwarp_established(s.qpn, &stream).unwrap();
        assert_eq!(s.e.qp_state(s.qpn).unwrap(), QpState::Rts);
    }
    Pair {
        a,
        b,
        ab: Vec::new(),
        ba: Vec::new(),
        rng,
        seed,
    }
}

impl Pair {
    /// Moves bytes both ways, each stream read in random pieces, until nothing moves.
    fn run(&mut self) {
        for _ in 0..100_000 {
            let (a, b, rng) = (&mut self.a, &mut self.b, &mut self.rng);
            let moved = step(a, b, &mut self.ab, rng) | step(b, a, &mut self.ba, rng);
            if !moved {
                return;
            }
        }
        panic!("seed {}: the streams never went quiet", self.seed);
    }
}

/// `from` sends what it has (up to a random amount) onto `pending`, and `to` reads a
/// random part of it; whether anything moved.
fn step(from: &mut Side, to: &mut Side, pending: &mut Vec<u8>, rng: &mut Rng) -> bool {
    let before = pending.len();
    let max = 1 + rng.below(1 << 16) as usize;
    from.e.iwarp_transmit(from.qpn, pending, max).unwrap();
    let mut moved = pending.len() > before;
    if !pending.is_empty() {
        let cut = 1 + rng.below(pending.len() as u64) as usize;
        let took = to.e.iwarp_receive(to.qpn, &pending[..cut]).unwrap();
        pending.drain(..took);
        moved |= took > 0;
    }
    moved
}

/// WRITE, READ and SEND through the engines, the streams cut at random: the bytes land
/// where they were sent, each completion on its own CQ, and the rings' slots come back
/// (posting the full depth again and again).
#[test]
fn write_read_and_send_move_registered_memory() {
    for seed in 1..=20u64 {
        let mut p = pair(seed, Access::REMOTE);
        let len = 1 + p.rng.below(200_000) as u32;
        let (w, r) = (&p.a, &p.b);
        let write = wr(w, r, 1, WrOpcode::RdmaWrite, 10, len, 300_000);
        let read = wr(w, r, 2, WrOpcode::RdmaRead, 600_000, len, 20);
        p.a.post(write).unwrap();
        p.a.post(read).unwrap();
        p.b.recv(7, 900_000, 100_000);
        let send = wr(&p.a, &p.b, 3, WrOpcode::Send, 5, 1234, 0);
        p.a.post(send).unwrap();
        p.run();
        let s = p.seed;
        let ids: Vec<_> =
            p.a.wcs(p.a.scq)
                .iter()
                .map(|c| (c.wr_id, c.status))
                .collect();
        assert_eq!(
            ids,
            [1, 2, 3].map(|i| (i, WcStatus::Success)),
            "seed {s}: the requester's completions, in order"
        );
        let got = p.b.wcs(p.b.rcq);
        assert_eq!(got.len(), 1, "seed {s}");
        assert_eq!(
            (got[0].wr_id, got[0].opcode, got[0].byte_len, got[0].status),
            (7, WcOpcode::Recv, 1234, WcStatus::Success),
            "seed {s}"
        );
        let l = len as usize;
        assert_eq!(p.b.bytes(300_000, l), p.a.bytes(10, l), "seed {s}: WRITE");
        assert_eq!(p.a.bytes(600_000, l), p.b.bytes(20, l), "seed {s}: READ");
        assert_eq!(
            p.b.bytes(900_000, 1234),
            p.a.bytes(5, 1234),
            "seed {s}: SEND"
        );
        assert!(p.a.wcs(p.a.rcq).is_empty() && p.b.wcs(p.b.scq).is_empty());

        // The full depth, unsignaled but the last, three times: each slot came back.
        for round in 0..3u64 {
            for i in 0..u64::from(DEPTH) {
                let mut w = wr(&p.a, &p.b, 100 + i, WrOpcode::RdmaWrite, i * 8, 8, i * 8);
                if i + 1 < u64::from(DEPTH) {
                    w.flags = SendFlags::empty();
                }
                p.a.post(w)
                    .unwrap_or_else(|e| panic!("seed {s} round {round} WR {i}: {e}"));
            }
            p.run();
            let wcs = p.a.wcs(p.a.scq);
            assert_eq!(wcs.len(), 1, "seed {s}: only the signaled one");
            assert_eq!(wcs[0].wr_id, 100 + u64::from(DEPTH) - 1);
        }
    }
}

/// What iWARP cannot carry is refused when posted, never queued to fail later; RTS comes
/// only from the stream's setup.
#[test]
fn what_rdmap_cannot_carry_is_refused_at_post() {
    let mut s = side(1, Access::REMOTE);
    let init_to_rts = QpAttr {
        qp_state: Some(QpState::Rts),
        ..Default::default()
    };
    assert!(matches!(
        s.e.modify_qp(s.qpn, &init_to_rts),
        Err(VerbsError::BadState { .. })
    ));
    let mut p = pair(7, Access::REMOTE);
    for op in [
        WrOpcode::RdmaWriteWithImm,
        WrOpcode::SendWithImm,
        WrOpcode::AtomicCmpAndSwp,
        WrOpcode::AtomicFetchAndAdd,
        WrOpcode::LocalInv,
    ] {
        let w = wr(&p.a, &p.b, 1, op, 0, 8, 0);
        assert!(
            matches!(p.a.post(w), Err(VerbsError::InvalidArgument(_))),
            "{op:?}"
        );
    }
    let mut read = wr(&p.a, &p.b, 1, WrOpcode::RdmaRead, 0, 8, 0);
    read.data = SendData::Sges(vec![p.a.sge(0, 8), p.a.sge(64, 8)].into());
    assert!(matches!(
        p.a.post(read),
        Err(VerbsError::InvalidArgument(_))
    ));
    p.run();
    assert!(p.a.wcs(p.a.scq).is_empty(), "nothing was queued");
    // And a UD or UC QP is not iWARP's.
    let init = QpInitAttr {
        qp_type: QpType::Ud,
        send_cq: s.scq,
        recv_cq: s.rcq,
        cap: QpCap::default(),
        sq_sig_all: false,
        srq: None,
    };
    assert!(s.e.create_iwarp_qp(1, &init).is_err());
}

/// A WRITE to an STag the peer does not have: the peer TERMINATEs, both QPs end in ERR
/// with a fatal event, nothing is placed, and every WR still outstanding on either side
/// completes flushed, once.
#[test]
fn a_bad_stag_terminates_and_everything_flushes_once() {
    let mut p = pair(3, Access::REMOTE);
    p.b.recv(1, 0, 64);
    p.b.recv(2, 64, 64);
    let before = p.b.bytes(0, 4096);
    let mut w = wr(&p.a, &p.b, 10, WrOpcode::RdmaWrite, 0, 4096, 0);
    w.rkey ^= 0x55;
    p.a.post(w).unwrap();
    p.a.recv(20, 0, 64);
    p.run();
    assert_eq!(p.b.bytes(0, 4096), before, "nothing placed");
    for s in [&mut p.a, &mut p.b] {
        assert_eq!(s.e.qp_state(s.qpn).unwrap(), QpState::Err);
        let fatal = std::iter::from_fn(|| s.e.poll_event()).any(|e| {
            e == AsyncEvent::Qp {
                qpn: s.qpn,
                event: EventType::QpFatal,
            }
        });
        assert!(fatal, "a fatal event on {:#x}", s.qpn);
    }
    // Counted where an operator looks: b refused a bad STag (as a RoCE responder counts a
    // bad rkey) and said so; a heard it.
    let (ca, cb) = (p.a.e.counters(), p.b.e.counters());
    use oxrdma_core::Counter::{
        BadRkey, IwarpFpdusRcvd, IwarpFpdusSent, IwarpTerminateRcvd, IwarpTerminateSent,
        RespRemoteAccessErrors,
    };
    assert_eq!(
        (
            cb[IwarpTerminateSent],
            cb[BadRkey],
            cb[RespRemoteAccessErrors]
        ),
        (1, 1, 1)
    );
    assert_eq!((ca[IwarpTerminateRcvd], ca[IwarpTerminateSent]), (1, 0));
    assert!(ca[IwarpFpdusSent] >= 2 && cb[IwarpFpdusRcvd] >= 2, "{ca:?}");
    assert_eq!(p.b.e.qp_counters(p.b.qpn).unwrap()[BadRkey], 1);
    // The WRITE left before the TERMINATE came back: it completed; the receives flushed.
    let a: Vec<_> =
        p.a.wcs(p.a.scq)
            .iter()
            .map(|c| (c.wr_id, c.status))
            .collect();
    assert_eq!(a, [(10, WcStatus::Success)]);
    let ra: Vec<_> =
        p.a.wcs(p.a.rcq)
            .iter()
            .map(|c| (c.wr_id, c.status))
            .collect();
    assert_eq!(ra, [(20, WcStatus::WrFlushErr)]);
    let rb: Vec<_> =
        p.b.wcs(p.b.rcq)
            .iter()
            .map(|c| (c.wr_id, c.status))
            .collect();
    assert_eq!(rb, [(1, WcStatus::WrFlushErr), (2, WcStatus::WrFlushErr)]);
    // Posted after: flushed at once, once.
    let w = wr(&p.a, &p.b, 11, WrOpcode::Send, 0, 8, 0);
    p.a.post(w).unwrap();
    p.b.recv(3, 0, 8);
    p.run();
    assert_eq!(p.a.wcs(p.a.scq)[0].status, WcStatus::WrFlushErr);
    assert_eq!(p.b.wcs(p.b.rcq)[0].wr_id, 3);
    assert!(p.a.wcs(p.a.scq).is_empty() && p.b.wcs(p.b.rcq).is_empty());
}

/// The QP's own `qp_access_flags` bound what a peer may do, whatever the region allows:
/// a QP that allows READ alone TERMINATEs a WRITE and answers a READ.
#[test]
fn the_qps_access_flags_bound_remote_access() {
    let mut p = pair(5, Access::REMOTE_READ);
    let read = wr(&p.a, &p.b, 1, WrOpcode::RdmaRead, 0, 100, 4096);
    p.a.post(read).unwrap();
    p.run();
    assert_eq!(p.a.wcs(p.a.scq)[0].status, WcStatus::Success);
    assert_eq!(p.a.bytes(0, 100), p.b.bytes(4096, 100));
    let before = p.b.bytes(4096, 100);
    let write = wr(&p.a, &p.b, 2, WrOpcode::RdmaWrite, 0, 100, 4096);
    p.a.post(write).unwrap();
    p.run();
    assert_eq!(p.b.bytes(4096, 100), before, "nothing placed");
    assert_eq!(p.b.e.qp_state(p.b.qpn).unwrap(), QpState::Err);
}

/// Receives posted in INIT wait in their ring; ERR flushes them (and what is posted
/// after), a stream that closes under a running QP puts it in ERR with its WRs flushed
/// (those still in the rings too),
/// and RESET then INIT makes the QP new again.
#[test]
fn err_and_a_closed_stream_flush_and_reset_starts_over() {
    let mut s = side(1, Access::REMOTE);
    s.recv(1, 0, 8);
    s.recv(2, 0, 8);
    let to = |state| QpAttr {
        qp_state: Some(state),
        ..Default::default()
    };
    s.e.modify_qp(s.qpn, &to(QpState::Err)).unwrap();
    s.recv(3, 0, 8);
    let ids: Vec<_> = s.wcs(s.rcq).iter().map(|c| (c.wr_id, c.status)).collect();
    assert_eq!(ids, [1, 2, 3].map(|i| (i, WcStatus::WrFlushErr)));

    let mut p = pair(9, Access::REMOTE);
    p.a.recv(4, 0, 8);
    let w = wr(&p.a, &p.b, 5, WrOpcode::RdmaRead, 0, 8, 0);
    p.a.post(w).unwrap();
    // The READ request leaves; the stream closes before its response comes.
    let mut out = Vec::new();
    p.a.e.iwarp_transmit(p.a.qpn, &mut out, 1 << 16).unwrap();
    assert!(!out.is_empty());
    // A receive posted since, which nothing took from its ring (a receive rings no
    // doorbell while the QP runs), flushes too.
    p.a.recv(6, 0, 8);
    p.a.e.iwarp_stream_closed(p.a.qpn).unwrap();
    assert_eq!(p.a.e.qp_state(p.a.qpn).unwrap(), QpState::Err);
    let c = p.a.e.counters();
    use oxrdma_core::Counter::{IwarpClosedMidFpdu, IwarpStreamClosed};
    assert_eq!((c[IwarpStreamClosed], c[IwarpClosedMidFpdu]), (1, 0));
    let send: Vec<_> =
        p.a.wcs(p.a.scq)
            .iter()
            .map(|c| (c.wr_id, c.status))
            .collect();
    let recv: Vec<_> =
        p.a.wcs(p.a.rcq)
            .iter()
            .map(|c| (c.wr_id, c.status))
            .collect();
    assert_eq!(
        (send, recv),
        (
            vec![(5, WcStatus::WrFlushErr)],
            vec![(4, WcStatus::WrFlushErr), (6, WcStatus::WrFlushErr)]
        )
    );
    // RESET, then INIT: in INIT again, receives wait, and the full depth can be posted.
    p.a.e.modify_qp(p.a.qpn, &to(QpState::Reset)).unwrap();
    p.a.e.modify_qp(p.a.qpn, &to(QpState::Init)).unwrap();
    for i in 0..u64::from(DEPTH) {
        p.a.recv(i, 0, 8);
    }
    assert!(p.a.wcs(p.a.rcq).is_empty());
}

/// A QP on a shared receive queue (as siw's, and `ib_send_bw --use-srq`): its SENDs take
/// the SRQ's receives in order, each completed on the QP's receive CQ with its number, the
/// limit event fires once, the SRQ cannot go while the QP uses it, and a SEND that finds
/// the SRQ empty ends the QP as an empty receive queue does, leaving later receives in
/// the SRQ for other QPs.
#[test]
fn sends_to_a_qp_on_an_srq_take_its_receives_in_turn() {
    for seed in 1..=10u64 {
        let mut p = pair_with(seed, side_on(2, Access::REMOTE, true));
        let s = p.seed;
        let srq = p.b.srq.expect("b is on an SRQ");
        let sges = vec![p.b.sge(0, 8)].into();
        let own = p.b.e.post_recv(p.b.qpn, RecvWr { wr_id: 99, sges });
        assert!(
            own.is_err(),
            "seed {s}: a QP on an SRQ takes no receive of its own"
        );
        for i in 0..3u64 {
            let sges = vec![p.b.sge(100_000 * (i + 1), 50_000)].into();
            p.b.e
                .post_srq_recv(
                    srq,
                    RecvWr {
                        wr_id: 10 + i,
                        sges,
                    },
                )
                .unwrap();
        }
        p.b.e.arm_srq(srq, 2).unwrap();
        let lens = [1 + p.rng.below(40_000) as u32, 7, 50_000];
        for (i, &len) in lens.iter().enumerate() {
            let at = 1_000 * i as u64;
            let send = wr(&p.a, &p.b, 1 + i as u64, WrOpcode::Send, at, len, 0);
            p.a.post(send).unwrap();
        }
        p.run();
        let got: Vec<_> =
            p.b.wcs(p.b.rcq)
                .iter()
                .map(|c| (c.wr_id, c.status, c.byte_len, c.qp_num))
                .collect();
        let want: Vec<_> = (0..3)
            .map(|i| (10 + i as u64, WcStatus::Success, lens[i], p.b.qpn))
            .collect();
        assert_eq!(got, want, "seed {s}: the SRQ's receives, in order");
        for (i, &len) in lens.iter().enumerate() {
            let (at, l) = (100_000 * (i + 1), len as usize);
            assert_eq!(
                p.b.bytes(at, l),
                p.a.bytes(1_000 * i, l),
                "seed {s}: SEND {i}"
            );
        }
        let limit = std::iter::from_fn(|| p.b.e.poll_event())
            .filter(|e| matches!(e, AsyncEvent::Srq { srq: q, event: EventType::SrqLimitReached } if *q == srq))
            .count();
        assert_eq!(limit, 1, "seed {s}: SRQ_LIMIT_REACHED once");
        assert!(
            p.b.e.destroy_srq(srq).is_err(),
            "seed {s}: destroyed under its QP"
        );
        assert_eq!(p.b.e.query_srq(srq).unwrap().posted, 0);

        // Nothing left in the SRQ: the next SEND ends both QPs, and every WR completes once.
        let send = wr(&p.a, &p.b, 4, WrOpcode::Send, 0, 64, 0);
        p.a.post(send).unwrap();
        p.run();
        assert_eq!(p.b.e.qp_state(p.b.qpn).unwrap(), QpState::Err, "seed {s}");
        let a: Vec<_> = p.a.wcs(p.a.scq).iter().map(|c| c.wr_id).collect();
        assert_eq!(a, [1, 2, 3, 4], "seed {s}: each SEND completed once");
        let sges = vec![p.b.sge(0, 8)].into();
        p.b.e
            .post_srq_recv(srq, RecvWr { wr_id: 20, sges })
            .unwrap();
        p.run();
        assert!(
            p.b.wcs(p.b.rcq).is_empty(),
            "seed {s}: the SRQ's receive is not flushed"
        );
        assert_eq!(p.b.e.query_srq(srq).unwrap().posted, 1, "seed {s}");
    }
}
