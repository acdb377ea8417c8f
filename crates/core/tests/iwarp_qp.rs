//! The iWARP data path (`oxrdma_core::iwarp::qp`) between two QPs over a byte stream cut
//! at random places: every operation, random workloads checked byte for byte and
//! completion for completion, and every TERMINATE the RFCs call for. Seeds are printed
//! on failure.

use oxrdma_core::iwarp::qp::{Buffers, Qp, QpConfig, State};
use oxrdma_core::{
    RecvWr, SendData, SendFlags, SendWr, Sge, WcOpcode, WcStatus, WorkCompletion, WrOpcode,
};

/// A region's bytes before anything moved: a pattern of its key.
fn pattern(key: u32) -> Vec<u8> {
    (0..LEN).map(|i| (i * 7 + key as usize) as u8).collect()
}

/// A seeded xorshift: the stream's cuts and the workloads.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// Two QPs joined by a stream each way, each direction cut at random places.
struct Pair {
    a: Qp,
    b: Qp,
    ma: Buffers,
    mb: Buffers,
    ab: Vec<u8>,
    ba: Vec<u8>,
    rng: Rng,
    done_a: Vec<WorkCompletion>,
    done_b: Vec<WorkCompletion>,
    /// Deliver everything sent at each step (no cuts).
    whole: bool,
}

fn config(qpn: u32, crc: bool, max_fpdu: usize) -> QpConfig {
    QpConfig {
        qpn,
        max_fpdu,
        crc,
        ord: 4,
        ird: 4,
        sq_sig_all: false,
    }
}

impl Pair {
    fn new(seed: u64) -> Pair {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let crc = rng.below(2) == 0;
        let max_fpdu = 64 + rng.below(3000) as usize;
        Pair {
            a: Qp::new(config(0xa, crc, max_fpdu)),
            b: Qp::new(config(0xb, crc, max_fpdu)),
            ma: Buffers::default(),
            mb: Buffers::default(),
            ab: Vec::new(),
            ba: Vec::new(),
            rng,
            done_a: Vec::new(),
            done_b: Vec::new(),
            whole: false,
        }
    }

    /// Moves bytes both ways, in random pieces, until nothing moves.
    fn run(&mut self) {
        for _ in 0..1_000_000 {
            let cut = |rng: &mut Rng, len: usize, whole: bool| {
                if whole {
                    len
                } else {
                    rng.below(len as u64 + 1) as usize
                }
            };
            let max = if self.whole {
                usize::MAX
            } else {
                1 + self.rng.below(20_000) as usize
            };
            self.a.transmit(&self.ma, &mut self.ab, max);
            let max = if self.whole {
                usize::MAX
            } else {
                1 + self.rng.below(20_000) as usize
            };
            self.b.transmit(&self.mb, &mut self.ba, max);
            let n = cut(&mut self.rng, self.ab.len(), self.whole).min(self.b.room());
            let took = self.b.receive(&self.ab[..n], &mut self.mb);
            self.ab.drain(..took);
            let n = cut(&mut self.rng, self.ba.len(), self.whole).min(self.a.room());
            let took = self.a.receive(&self.ba[..n], &mut self.ma);
            self.ba.drain(..took);
            while let Some(wc) = self.a.poll_cq() {
                self.done_a.push(wc);
            }
            while let Some(wc) = self.b.poll_cq() {
                self.done_b.push(wc);
            }
            let idle = self.ab.is_empty()
                && self.ba.is_empty()
                && !self.a.wants_to_send()
                && !self.b.wants_to_send();
            if idle {
                return;
            }
        }
        panic!("the pair never went idle");
    }
}

fn sge(key: u32, base: u64, off: u64, len: u32) -> Sge {
    Sge {
        addr: base + off,
        length: len,
        lkey: key,
    }
}

fn wr(wr_id: u64, opcode: WrOpcode, sges: Vec<Sge>) -> SendWr {
    SendWr {
        flags: SendFlags::SIGNALED,
        ..SendWr::new(wr_id, opcode, SendData::Sges(sges.into()))
    }
}

// Each side: key 1 its source (local), 2 a target peers WRITE (remote write), 3 a READ's
// sink (local), 4 what peers READ (remote read), 5 receive buffers.
const BASE: u64 = 0x10_0000;
const LEN: usize = 64 * 1024;

fn side(m: &mut Buffers) {
    m.add(1, BASE, pattern(1), false, false);
    m.add(2, BASE * 2, pattern(2), true, false);
    m.add(3, BASE * 3, pattern(3), false, false);
    m.add(4, BASE * 4, pattern(4), false, true);
    m.add(5, BASE * 5, pattern(5), false, false);
}

/// Random WRITEs, READs and SENDs both ways at once; the memory each moved is checked
/// against a model that applies each direction's operations in order, and every WR
/// completes once, successfully.
#[test]
fn random_workloads_over_a_cut_stream() {
    for seed in 0..40u64 {
        let mut p = Pair::new(seed);
        side(&mut p.ma);
        side(&mut p.mb);
        // What each side's target and sink should hold at the end.
        let mut want_a2 = p.ma.bytes(2).to_vec();
        let mut want_b2 = p.mb.bytes(2).to_vec();
        let mut want_a3 = p.ma.bytes(3).to_vec();
        let mut want_b3 = p.mb.bytes(3).to_vec();
        let mut sends: Vec<(bool, u64, Vec<u8>)> = Vec::new();
        let (mut posted_a, mut posted_b) = (0u64, 0u64);
        let mut next_recv = [0u64; 2];
        for i in 0..30u64 {
            let from_a = p.rng.below(2) == 0;
            let long = p.rng.below(4) == 0;
            let len = p.rng.below(if long { 20_000 } else { 300 });
            let src_off = p.rng.below(LEN as u64 - len);
            let dst_off = p.rng.below(LEN as u64 - len);
            let (me, peer) = if from_a {
                (&p.ma, &p.mb)
            } else {
                (&p.mb, &p.ma)
            };
            let id = i + 1;
            let w = match p.rng.below(3) {
                0 => {
                    let src =
                        me.bytes(1).to_vec()[src_off as usize..(src_off + len) as usize].to_vec();
                    let want = if from_a { &mut want_b2 } else { &mut want_a2 };
                    want[dst_off as usize..(dst_off + len) as usize].copy_from_slice(&src);
                    let mut w = wr(
                        id,
                        WrOpcode::RdmaWrite,
                        vec![sge(1, BASE, src_off, len as u32)],
                    );
                    (w.remote_addr, w.rkey) = (BASE * 2 + dst_off, 2);
                    w
                }
                1 => {
                    let src =
                        peer.bytes(4).to_vec()[src_off as usize..(src_off + len) as usize].to_vec();
                    let want = if from_a { &mut want_a3 } else { &mut want_b3 };
                    want[dst_off as usize..(dst_off + len) as usize].copy_from_slice(&src);
                    let mut w = wr(
                        id,
                        WrOpcode::RdmaRead,
                        vec![sge(3, BASE * 3, dst_off, len as u32)],
                    );
                    (w.remote_addr, w.rkey) = (BASE * 4 + src_off, 4);
                    w
                }
                _ => {
                    let len = len.min(4096);
                    let src =
                        me.bytes(1).to_vec()[src_off as usize..(src_off + len) as usize].to_vec();
                    // The peer's next receive: its own 4 KiB slot of key 5.
                    let k = usize::from(!from_a);
                    let slot = next_recv[k];
                    next_recv[k] += 1;
                    let recv = RecvWr {
                        wr_id: 1000 + slot,
                        sges: vec![sge(5, BASE * 5, slot * 4096, 4096)].into(),
                    };
                    if from_a {
                        p.b.post_recv(recv);
                    } else {
                        p.a.post_recv(recv);
                    }
                    sends.push((from_a, slot, src));
                    wr(id, WrOpcode::Send, vec![sge(1, BASE, src_off, len as u32)])
                }
            };
            if from_a {
                p.a.post_send(w).unwrap();
                posted_a += 1;
            } else {
                p.b.post_send(w).unwrap();
                posted_b += 1;
            }
            if p.rng.below(3) == 0 {
                p.run();
            }
        }
        p.run();
        let ctx = format!("seed {seed}");
        same(p.ma.bytes(2), &want_a2, &format!("{ctx}: WRITEs into a"));
        same(p.mb.bytes(2), &want_b2, &format!("{ctx}: WRITEs into b"));
        same(p.ma.bytes(3), &want_a3, &format!("{ctx}: READs by a"));
        same(p.mb.bytes(3), &want_b3, &format!("{ctx}: READs by b"));
        for (from_a, slot, data) in &sends {
            let at = (*slot * 4096) as usize;
            let got = if *from_a {
                p.mb.bytes(5).to_vec()
            } else {
                p.ma.bytes(5).to_vec()
            };
            same(
                &got[at..at + data.len()],
                data,
                &format!("{ctx}: SEND into slot {slot}"),
            );
            let done = if *from_a { &p.done_b } else { &p.done_a };
            let wc = done
                .iter()
                .find(|w| w.wr_id == 1000 + slot)
                .expect("the receive completed");
            assert_eq!(
                (wc.status, wc.opcode, wc.byte_len),
                (WcStatus::Success, WcOpcode::Recv, data.len() as u32),
                "{ctx}"
            );
        }
        for (done, posted) in [(&p.done_a, posted_a), (&p.done_b, posted_b)] {
            let sent: Vec<_> = done.iter().filter(|w| w.wr_id < 1000).collect();
            assert_eq!(sent.len() as u64, posted, "{ctx}: every WR once");
            assert!(
                sent.iter().all(|w| w.status == WcStatus::Success),
                "{ctx}: {sent:?}"
            );
            let mut ids: Vec<_> = sent.iter().map(|w| w.wr_id).collect();
            ids.sort();
            ids.dedup();
            assert_eq!(ids.len() as u64, posted, "{ctx}: no WR twice");
        }
        assert_eq!(p.a.state(), State::Rts, "{ctx}");
        assert_eq!(p.b.state(), State::Rts, "{ctx}");
    }
}

/// `got` is `want`, or the first byte where they differ is named.
fn same(got: &[u8], want: &[u8], what: &str) {
    if let Some(i) = (0..got.len().max(want.len())).find(|&i| got.get(i) != want.get(i)) {
        panic!(
            "{what}: byte {i} is {:?}, not {:?}",
            got.get(i),
            want.get(i)
        );
    }
}

/// The TERMINATE `b` sent and `a` received, as (layer, type, code).
fn terminated(p: &Pair) -> (u8, u8, u8) {
    let State::Terminated { sent: Some(t), .. } = p.b.state() else {
        panic!("b did not terminate: {:?}", p.b.state());
    };
    let State::Terminated {
        received: Some(r), ..
    } = p.a.state()
    else {
        panic!("a did not hear the TERMINATE: {:?}", p.a.state());
    };
    assert_eq!(t, r, "what b sent is what a read");
    (t.layer, t.etype, t.ecode)
}

/// A WRITE `a` posts to `stag` at `addr`, and the TERMINATE it draws.
fn bad_write(stag: u32, addr: u64, len: u32, seed: u64) -> Pair {
    let mut p = Pair::new(seed);
    side(&mut p.ma);
    side(&mut p.mb);
    let mut w = wr(1, WrOpcode::RdmaWrite, vec![sge(1, BASE, 0, len)]);
    (w.remote_addr, w.rkey) = (addr, stag);
    p.a.post_send(w).unwrap();
    p.run();
    p
}

#[test]
fn refused_writes_end_the_stream_with_the_rfcs_codes() {
    for seed in 0..4 {
        // DDP, tagged buffer error, invalid STag.
        let p = bad_write(99, BASE, 100, seed);
        assert_eq!(terminated(&p), (1, 1, 0), "seed {seed}");
        // DDP, tagged buffer error, base or bounds violation.
        let p = bad_write(2, BASE * 2 + LEN as u64 - 10, 100, seed);
        assert_eq!(terminated(&p), (1, 1, 1), "seed {seed}");
        // RDMAP, remote protection error, access rights violation.
        let mut p = bad_write(4, BASE * 4, 100, seed);
        assert_eq!(terminated(&p), (0, 1, 2), "seed {seed}");
        // Nothing was placed, and what is posted after flushes.
        assert_eq!(p.mb.bytes(4).to_vec()[..100], pattern(4)[..100]);
        p.a.post_send(wr(2, WrOpcode::Send, vec![])).unwrap();
        let wc = p.a.poll_cq().expect("a flushed completion");
        assert_eq!(
            (wc.wr_id, wc.status),
            (2, WcStatus::WrFlushErr),
            "seed {seed}"
        );
    }
}

#[test]
fn a_refused_read_fails_with_remote_access_error() {
    let mut p = Pair::new(7);
    side(&mut p.ma);
    side(&mut p.mb);
    // Key 2 is writable, not readable.
    let mut w = wr(1, WrOpcode::RdmaRead, vec![sge(3, BASE * 3, 0, 64)]);
    (w.remote_addr, w.rkey) = (BASE * 2, 2);
    p.a.post_send(w).unwrap();
    p.run();
    assert_eq!(terminated(&p), (0, 1, 2));
    assert_eq!(p.done_a[0].wr_id, 1);
    assert_eq!(p.done_a[0].status, WcStatus::RemAccessErr);
}

#[test]
fn sends_without_room_end_the_stream() {
    // No receive posted: DDP, untagged buffer error, no buffer.
    let mut p = Pair::new(3);
    side(&mut p.ma);
    side(&mut p.mb);
    p.a.post_send(wr(1, WrOpcode::Send, vec![sge(1, BASE, 0, 10)]))
        .unwrap();
    p.run();
    assert_eq!(terminated(&p), (1, 2, 2));
    // A receive too small: DDP, untagged buffer error, message too long.
    let mut p = Pair::new(4);
    side(&mut p.ma);
    side(&mut p.mb);
    p.b.post_recv(RecvWr {
        wr_id: 5,
        sges: vec![sge(5, BASE * 5, 0, 16)].into(),
    });
    p.a.post_send(wr(1, WrOpcode::Send, vec![sge(1, BASE, 0, 100)]))
        .unwrap();
    p.run();
    assert_eq!(terminated(&p), (1, 2, 5));
    assert!(p
        .done_b
        .iter()
        .any(|w| w.wr_id == 5 && w.status == WcStatus::WrFlushErr));
}

#[test]
fn a_send_with_invalidate_closes_the_buffer() {
    let mut p = Pair::new(11);
    side(&mut p.ma);
    side(&mut p.mb);
    p.b.post_recv(RecvWr {
        wr_id: 5,
        sges: vec![sge(5, BASE * 5, 0, 64)].into(),
    });
    let mut s = wr(1, WrOpcode::SendWithInv, vec![sge(1, BASE, 0, 8)]);
    s.invalidate_rkey = 2;
    p.a.post_send(s).unwrap();
    p.run();
    let wc = p.done_b.iter().find(|w| w.wr_id == 5).unwrap();
    assert_eq!(
        (wc.status, wc.invalidated_rkey),
        (WcStatus::Success, Some(2))
    );
    // The invalidated STag no longer takes WRITEs.
    let mut w = wr(2, WrOpcode::RdmaWrite, vec![sge(1, BASE, 0, 8)]);
    (w.remote_addr, w.rkey) = (BASE * 2, 2);
    p.a.post_send(w).unwrap();
    p.run();
    assert_eq!(terminated(&p), (1, 1, 0));
}

#[test]
fn a_corrupted_fpdu_ends_the_stream_at_the_lower_layer() {
    let mut p = Pair::new(1);
    side(&mut p.ma);
    side(&mut p.mb);
    let mut a = Qp::new(config(1, true, 1460));
    let mut w = wr(1, WrOpcode::RdmaWrite, vec![sge(1, BASE, 0, 500)]);
    (w.remote_addr, w.rkey) = (BASE * 2, 2);
    a.post_send(w).unwrap();
    let mut bytes = Vec::new();
    a.transmit(&p.ma, &mut bytes, 1 << 20);
    bytes[100] ^= 1;
    let mut b = Qp::new(config(2, true, 1460));
    b.receive(&bytes, &mut p.mb);
    let State::Terminated { sent: Some(t), .. } = b.state() else {
        panic!("no TERMINATE: {:?}", b.state());
    };
    assert_eq!((t.layer, t.ecode), (2, 2), "MPA CRC error");
    assert_eq!(
        p.mb.bytes(2).to_vec()[..500],
        pattern(2)[..500],
        "nothing placed"
    );
}

#[test]
fn reads_beyond_the_ird_wait_for_the_ord() {
    // ORD 1 against IRD 1: three READs go one at a time and all complete (everything a
    // side sends arrives at once, so a second request sent early would meet a full IRD).
    let mut p = Pair::new(5);
    p.whole = true;
    p.a = Qp::new(QpConfig {
        ord: 1,
        ird: 1,
        ..config(1, true, 1460)
    });
    p.b = Qp::new(QpConfig {
        ord: 1,
        ird: 1,
        ..config(2, true, 1460)
    });
    side(&mut p.ma);
    side(&mut p.mb);
    for i in 0..3u64 {
        let mut w = wr(
            i,
            WrOpcode::RdmaRead,
            vec![sge(3, BASE * 3, i * 5000, 5000)],
        );
        (w.remote_addr, w.rkey) = (BASE * 4 + i * 5000, 4);
        p.a.post_send(w).unwrap();
    }
    p.run();
    assert_eq!(p.done_a.len(), 3);
    assert!(p
        .done_a
        .iter()
        .all(|w| w.status == WcStatus::Success && w.opcode == WcOpcode::RdmaRead));
    assert_eq!(
        p.ma.bytes(3).to_vec()[..15000],
        p.mb.bytes(4).to_vec()[..15000]
    );
    assert_eq!(p.b.state(), State::Rts);
}

#[test]
fn what_iwarp_lacks_is_refused_at_post() {
    let mut q = Qp::new(config(1, true, 1460));
    for op in [
        WrOpcode::AtomicCmpAndSwp,
        WrOpcode::AtomicFetchAndAdd,
        WrOpcode::RdmaWriteWithImm,
    ] {
        assert!(q.post_send(wr(1, op, vec![])).is_err(), "{op:?}");
    }
    let two = vec![sge(3, BASE * 3, 0, 8), sge(3, BASE * 3, 64, 8)];
    assert!(q.post_send(wr(1, WrOpcode::RdmaRead, two)).is_err());
}

/// MPA's exchange, then the QPs on the same streams: the initiator's RTR (a zero-length
/// WRITE to STag 0) goes first and places nothing (also when sent again, until the
/// responder is heard), the responder sends nothing before it came, and then the data
/// path runs both ways.
#[test]
fn after_mpa_the_rtr_then_data() {
    use oxrdma_core::iwarp::{Setup, SetupConfig, SetupEvent};
    for seed in 0..8u64 {
        let ctx = format!("seed {seed}");
        let (mut init, request) = Setup::initiator(SetupConfig::default()).unwrap();
        let mut resp = Setup::responder(SetupConfig::default());
        let (shown, _) = resp.feed(&request).unwrap();
        assert!(matches!(shown, SetupEvent::Request { .. }), "{ctx}");
        let (reply, nb) = resp.accept().unwrap();
        let (ev, n) = init.feed(&reply).unwrap();
        assert_eq!(n, reply.len(), "{ctx}");
        let SetupEvent::Established(na) = ev else {
            panic!("{ctx}: {ev:?}");
        };
        assert!(na.rtr.is_some(), "{ctx}: peer to peer by default");
        let mut p = Pair::new(seed);
        side(&mut p.ma);
        side(&mut p.mb);
        p.a = Qp::after_setup(QpConfig::negotiated(1, 1460, &na, false), &na, true).unwrap();
        p.b = Qp::after_setup(QpConfig::negotiated(2, 1460, &nb, false), &nb, false).unwrap();
        // b has something to send but holds it until a's RTR came.
        let mut w = wr(7, WrOpcode::RdmaWrite, vec![sge(1, BASE, 0, 64)]);
        (w.remote_addr, w.rkey) = (BASE * 2, 2);
        p.b.post_send(w).unwrap();
        let mut early = Vec::new();
        p.b.transmit(&p.mb, &mut early, usize::MAX);
        assert!(
            early.is_empty() && !p.b.wants_to_send(),
            "{ctx}: b spoke first"
        );
        p.b.post_recv(RecvWr {
            wr_id: 8,
            sges: vec![sge(5, BASE * 5, 0, 64)].into(),
        });
        // a has not heard b: asked to, it sends its RTR again (for siw, whose responder
        // may miss FPDUs that came while it sent its reply), ahead of anything else.
        let mut first = Vec::new();
        p.a.transmit(&p.ma, &mut first, usize::MAX);
        assert!(p.a.nudge(), "{ctx}");
        let mut again = Vec::new();
        p.a.transmit(&p.ma, &mut again, usize::MAX);
        assert_eq!(first, again, "{ctx}: the RTR again");
        p.ab.extend_from_slice(&first);
        p.ab.extend_from_slice(&again);
        p.a.post_send(wr(9, WrOpcode::Send, vec![sge(1, BASE, 0, 20)]))
            .unwrap();
        p.run();
        assert!(!p.a.nudge(), "{ctx}: a heard b, and sends no RTR again");
        assert!(!p.b.nudge(), "{ctx}: a responder never does");
        assert_eq!(
            (p.a.state(), p.b.state()),
            (State::Rts, State::Rts),
            "{ctx}"
        );
        same(
            &p.ma.bytes(2).to_vec()[..64],
            &p.mb.bytes(1).to_vec()[..64],
            &format!("{ctx}: b's WRITE"),
        );
        same(
            &p.mb.bytes(5).to_vec()[..20],
            &p.ma.bytes(1).to_vec()[..20],
            &format!("{ctx}: a's SEND"),
        );
        assert!(
            p.done_b.iter().any(|w| w.wr_id == 8 && w.byte_len == 20),
            "{ctx}"
        );
    }
}

/// The stream ends under running QPs: a peer that stopped in the middle of an FPDU is
/// told apart from a clean close, and every WR still waiting flushes.
#[test]
fn a_stream_that_stops_mid_fpdu_ends_the_qp() {
    let mut mem = Buffers::default();
    side(&mut mem);
    let mut a = Qp::new(config(1, true, 1460));
    let mut w = wr(1, WrOpcode::RdmaWrite, vec![sge(1, BASE, 0, 3000)]);
    (w.remote_addr, w.rkey) = (BASE * 2, 2);
    a.post_send(w).unwrap();
    let mut bytes = Vec::new();
    a.transmit(&mem, &mut bytes, usize::MAX);
    assert!(bytes.len() > 2000);
    // b takes the first FPDU and part of the second, then the stream ends.
    let mut peer = Buffers::default();
    side(&mut peer);
    let mut b = Qp::new(config(2, true, 1460));
    b.post_recv(RecvWr {
        wr_id: 9,
        sges: vec![sge(5, BASE * 5, 0, 64)].into(),
    });
    b.receive(&bytes[..1700], &mut peer);
    assert_eq!(b.state(), State::Rts);
    b.stream_closed();
    assert_eq!(b.state(), State::Closed { mid_fpdu: true });
    let wc = b.poll_cq().expect("the receive flushed");
    assert_eq!((wc.wr_id, wc.status), (9, WcStatus::WrFlushErr));
    // The whole first segment was placed; nothing of the cut one.
    same(
        &peer.bytes(2)[..1440],
        &pattern(1)[..1440],
        "the first FPDU",
    );
    same(
        &peer.bytes(2)[1440..3000],
        &pattern(2)[1440..3000],
        "the cut FPDU",
    );
    // A clean close, a READ still waiting: it flushes.
    let mut r = wr(2, WrOpcode::RdmaRead, vec![sge(3, BASE * 3, 0, 64)]);
    (r.remote_addr, r.rkey) = (BASE * 4, 4);
    a.post_send(r).unwrap();
    a.transmit(&mem, &mut Vec::new(), usize::MAX);
    while a.poll_cq().is_some_and(|w| w.wr_id == 1) {}
    a.stream_closed();
    assert_eq!(a.state(), State::Closed { mid_fpdu: false });
    let wc = a.poll_cq().expect("the READ flushed");
    assert_eq!((wc.wr_id, wc.status), (2, WcStatus::WrFlushErr));
    // Posted after the end: flushed at once.
    a.post_send(wr(3, WrOpcode::Send, vec![])).unwrap();
    assert_eq!(
        a.poll_cq().map(|w| (w.wr_id, w.status)),
        Some((3, WcStatus::WrFlushErr))
    );
}

/// Without peer-to-peer mode (a revision 1 peer, or siw's initiator, which asks for no
/// RTR) the responder still sends nothing before the initiator's first FPDU: RFC 5044 has
/// the initiator speak first, and siw refuses bytes that follow the MPA reply unread.
#[test]
fn a_responder_without_rtr_waits_for_the_initiator() {
    use oxrdma_core::iwarp::{Setup, SetupConfig, SetupEvent};
    let plain = SetupConfig {
        enhanced: false,
        ..SetupConfig::default()
    };
    let (mut init, request) = Setup::initiator(plain.clone()).unwrap();
    let mut resp = Setup::responder(plain);
    resp.feed(&request).unwrap();
    let (reply, nb) = resp.accept().unwrap();
    let SetupEvent::Established(na) = init.feed(&reply).unwrap().0 else {
        panic!("no connection");
    };
    assert!(na.rtr.is_none() && nb.rtr.is_none());
    let mut p = Pair::new(3);
    side(&mut p.ma);
    side(&mut p.mb);
    p.a = Qp::after_setup(QpConfig::negotiated(1, 1460, &na, false), &na, true).unwrap();
    p.b = Qp::after_setup(QpConfig::negotiated(2, 1460, &nb, false), &nb, false).unwrap();
    p.b.post_send(wr(7, WrOpcode::Send, vec![sge(2, BASE * 2, 0, 16)]))
        .unwrap();
    let mut early = Vec::new();
    p.b.transmit(&p.mb, &mut early, usize::MAX);
    assert!(early.is_empty(), "the responder spoke first");
    p.a.post_recv(RecvWr {
        wr_id: 1,
        sges: vec![sge(1, BASE, 0, 64)].into(),
    });
    p.b.post_recv(RecvWr {
        wr_id: 2,
        sges: vec![sge(2, BASE * 2, 0, 64)].into(),
    });
    p.a.post_send(wr(8, WrOpcode::Send, vec![sge(1, BASE, 0, 16)]))
        .unwrap();
    p.run();
    assert!(p.done_a.iter().any(|w| w.wr_id == 1 && w.byte_len == 16));
    assert!(p.done_b.iter().any(|w| w.wr_id == 2 && w.byte_len == 16));
}
