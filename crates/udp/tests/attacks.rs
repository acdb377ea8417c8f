//! ReDMArk's attacks on RoCE (Rothenberger et al., USENIX Security 2021), A1 to A3, against
//! a device on real sockets: the test plays both the victim's legitimate peer and the
//! attacker, writing packets through a raw socket with any source address, inside a network
//! namespace it creates (nothing leaves it). Each attempt is defeated or bounded, its
//! counter moves, and what it cost the victim is printed. The guesses come from a seed,
//! printed. Needs root: without it the tests say SKIPPED, and fail under `OXRDMA_CI`.

mod common;
mod device;
mod forge;

use common::{inside, netns};
use forge::{send_only, send_raw, Host, Shape, MY_PSN, PEER_PSN};
use oxrdma_core::{Counter, QpState, SendData, SendWr, Sge, WcStatus, WorkCompletion, WrOpcode};
use oxrdma_wire::{AethRepr, NakCode, Opcode, PacketRepr, RethRepr, Syndrome};
use rustix::net::{AddressFamily, SocketType};
use std::net::IpAddr;
use std::os::fd::OwnedFd;

const VICTIM: &str = "10.82.0.254";
const PEER: &str = "10.82.0.1";
const ATTACKER: &str = "10.82.0.66";
/// A second victim device, for a second connection.
const VICTIM2: &str = "10.82.0.253";

/// Guesses per attack: enough to show none lands (each would with probability 2^-24).
const GUESSES: u32 = 20_000;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn raw() -> OwnedFd {
    rustix::net::socket(
        AddressFamily::INET,
        SocketType::RAW,
        Some(rustix::net::ipproto::RAW),
    )
    .expect("raw socket")
}

/// A packet from `src` to port 4791, dressed as rxe's.
fn from(src: &str) -> Shape {
    Shape {
        src: ip(src),
        udp_checksum: false,
        corrupt_icrc: false,
        dport: oxrdma_wire::ROCE_V2_PORT,
    }
}

/// The attacker's guesses: xorshift from a printed seed.
struct Guesses(u64);

impl Guesses {
    fn new(test: &str) -> Guesses {
        let seed = std::env::var("OXRDMA_ATTACK_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| (u64::from(std::process::id()) * 0x9e37_79b9) | 1);
        println!("{test}: seed {seed} (OXRDMA_ATTACK_SEED={seed} replays it)");
        Guesses(seed)
    }

    fn next(&mut self) -> u32 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        (x >> 16) as u32
    }

    /// A 24-bit value other than `not` (a guess that would land is 2^-24 likely; the test
    /// leaves it out so that it can assert what a miss does).
    fn psn_not(&mut self, not: u32) -> u32 {
        loop {
            let v = self.next() & 0xff_ffff;
            if v != not {
                return v;
            }
        }
    }
}

/// Drives the victim until its counter `c` reaches `n` (and no longer than 10 s); the
/// completions that came meanwhile.
fn until(h: &mut Host, c: Counter, n: u64) -> Vec<WorkCompletion> {
    let wcs = h.drive_until_for(&|h, _| h.dev_counters()[c] >= n, 10);
    assert_eq!(h.dev_counters()[c], n, "{}: {}", c.name(), h.dev.rx_drops());
    wcs
}

/// [`until`], for an attack that must complete nothing.
fn until_nothing(h: &mut Host, c: Counter, n: u64) {
    let wcs = until(h, c, n);
    assert!(wcs.is_empty(), "the attack completed something: {wcs:?}");
}

/// The QP is in ERR and its posted receives were flushed, nothing else completed.
fn ended(h: &Host, wcs: &[WorkCompletion]) {
    assert_eq!(h.dev.engine.qp_state(h.qpn).unwrap(), QpState::Err);
    assert!(
        wcs.iter().all(|w| w.status == WcStatus::WrFlushErr),
        "{wcs:?}"
    );
}

fn in_namespace(tag: &str, f: impl FnOnce() + Send + 'static) {
    let Some(ns) = netns(
        tag,
        &[
            "10.82.0.254/32",
            "10.82.0.253/32",
            "10.82.0.1/32",
            "10.82.0.66/32",
        ],
    ) else {
        return;
    };
    inside(&ns, f);
}

#[test]
fn a1_blind_injection_needs_the_peer_s_address_the_qpn_and_the_psn() {
    in_namespace("a1", || {
        let mut g = Guesses::new("A1");
        let mut h = Host::open(ip(VICTIM), ip(PEER));
        let raw = raw();
        // From the attacker's own address, even with the right QPN: not the peer.
        for _ in 0..GUESSES {
            let psn = g.next() & 0xff_ffff;
            send_raw(
                &raw,
                from(ATTACKER),
                ip(VICTIM),
                &send_only(h.qpn, psn, b"evil"),
            );
        }
        until_nothing(&mut h, Counter::WrongPeer, u64::from(GUESSES));
        // The peer's address forged, the QPN guessed: no QP there (one in 2^24 would hit).
        for _ in 0..GUESSES {
            let qpn = loop {
                let q = g.next() & 0xff_ffff;
                if q != h.qpn {
                    break q;
                }
            };
            send_raw(
                &raw,
                from(PEER),
                ip(VICTIM),
                &send_only(qpn, PEER_PSN, b"evil"),
            );
        }
        until_nothing(&mut h, Counter::UnknownQp, u64::from(GUESSES));
        // The QPN known too (learnt elsewhere): every PSN but the expected one misses.
        let acks_before = h.dev_counters()[Counter::SentAck];
        for _ in 0..GUESSES {
            let psn = g.psn_not(PEER_PSN);
            send_raw(
                &raw,
                from(PEER),
                ip(VICTIM),
                &send_only(h.qpn, psn, b"evil"),
            );
        }
        let total = u64::from(GUESSES);
        let wcs = h.drive_until_for(
            &|h, _| {
                let c = h.dev_counters();
                c[Counter::OutOfSeqRequest] + c[Counter::DuplicateRequest] >= total
            },
            10,
        );
        assert!(wcs.is_empty(), "a guessed PSN was executed: {wcs:?}");
        // Its replies go out.
        for _ in 0..50 {
            h.dev.poll().unwrap();
            h.dev.wait(std::time::Duration::from_millis(1)).unwrap();
        }
        let c = h.dev_counters();
        let (ahead, behind) = (c[Counter::OutOfSeqRequest], c[Counter::DuplicateRequest]);
        assert_eq!(ahead + behind, total);
        // What the misses cost the victim: one PSN-sequence NAK for the whole gap, and the
        // ACKs the guesses behind the expected PSN asked for (queued ones coalesce).
        let naks = c[Counter::SentSeqNak];
        let acks = c[Counter::SentAck] - acks_before;
        println!(
            "A1: {GUESSES} packets from the attacker's address: all dropped (drop_wrong_peer); \
             {GUESSES} with the peer's address forged and the QPN guessed: all dropped \
             (drop_unknown_qp); {GUESSES} with the QPN known and the PSN guessed: none \
             executed ({ahead} ahead, {behind} behind), costing the victim {naks} NAK and \
             {acks} ACK packets (NAK included) to its real peer. A guess lands with probability 2^-24 with the QPN \
             known (16.8 million packets on average), 2^-48 without."
        );
        assert_eq!(naks, 1, "one NAK per gap");
        assert!(acks <= behind, "at most an ACK per guess behind");
        // The connection is whole: the real peer's next message lands.
        send_raw(
            &raw,
            from(PEER),
            ip(VICTIM),
            &send_only(h.qpn, PEER_PSN, b"real"),
        );
        let wc = h.recv_one();
        assert_eq!((wc.status, wc.byte_len), (WcStatus::Success, 4));
        assert_eq!(h.dev.engine.qp_state(h.qpn).unwrap(), QpState::Rts);
    });
}

/// A NAK (`code`) for our request at `psn`, as the peer would send it.
fn nak(dest_qpn: u32, psn: u32, code: NakCode) -> PacketRepr<'static> {
    let mut p = send_only(dest_qpn, psn, &[]);
    p.bth.opcode = Opcode::RC_ACKNOWLEDGE;
    p.bth.ack_req = false;
    p.ext.aeth = Some(AethRepr {
        syndrome: Syndrome::Nak(code),
        msn: 0,
    });
    p
}

/// An RDMA WRITE of `payload` to `va` with `rkey`, at `psn`.
fn write_only(dest_qpn: u32, psn: u32, rkey: u32, va: u64, payload: &[u8]) -> PacketRepr<'_> {
    let mut p = send_only(dest_qpn, psn, payload);
    p.bth.opcode = Opcode::RC_RDMA_WRITE_ONLY;
    p.ext.reth = Some(RethRepr {
        virtual_address: va,
        rkey,
        dma_length: payload.len() as u32,
    });
    p
}

#[test]
fn a2_one_forged_packet_ends_a_qp_only_at_the_exact_psn() {
    in_namespace("a2", || {
        let mut g = Guesses::new("A2");
        let mut h = Host::open(ip(VICTIM), ip(PEER));
        let raw = raw();
        // The victim has a SEND out, not yet acknowledged.
        let sge = Sge {
            addr: h.iova + 8 * 1024,
            length: 64,
            lkey: h.lkey,
        };
        let wr = SendWr::new(7, WrOpcode::Send, SendData::Sges(vec![sge].into()));
        h.dev.engine.post_send(h.qpn, wr).unwrap();
        h.dev.poll().unwrap();
        // Forged NAKs (remote access error) at guessed PSNs: outside what is outstanding.
        for _ in 0..GUESSES {
            let psn = g.psn_not(MY_PSN);
            let p = nak(h.qpn, psn, NakCode::RemoteAccessError);
            send_raw(&raw, from(PEER), ip(VICTIM), &p);
        }
        until_nothing(&mut h, Counter::StaleResponse, u64::from(GUESSES));
        // Forged requests that would fail their checks, at guessed PSNs: never executed.
        for _ in 0..GUESSES {
            let psn = g.psn_not(PEER_PSN);
            let p = write_only(h.qpn, psn, g.next(), 0, b"evil");
            send_raw(&raw, from(PEER), ip(VICTIM), &p);
        }
        let total = u64::from(GUESSES);
        h.drive_until_for(
            &|h, _| {
                let c = h.dev_counters();
                c[Counter::OutOfSeqRequest] + c[Counter::DuplicateRequest] >= total
            },
            10,
        );
        let c = h.dev_counters();
        assert_eq!(c[Counter::RespRemoteAccessErrors], 0);
        assert_eq!(h.dev.engine.qp_state(h.qpn).unwrap(), QpState::Rts);
        // The real ACK completes the SEND.
        let real = forge::ack(h.qpn, MY_PSN, 1);
        send_raw(&raw, from(PEER), ip(VICTIM), &real);
        let wc = h.recv_one();
        assert_eq!((wc.wr_id, wc.status), (7, WcStatus::Success));
        println!(
            "A2: {GUESSES} forged NAKs and {GUESSES} forged failing requests at guessed \
             PSNs: none took effect (drop_stale_response, out_of_seq_request + \
             duplicate_request); the QP stayed in RTS and its SEND completed."
        );
        // What the PSN guards: one forged failing request at the expected PSN (an on-path
        // attacker sees it) ends the QP, as on any RoCE NIC.
        let p = write_only(h.qpn, PEER_PSN, h.rkey ^ 1, h.iova, b"evil");
        send_raw(&raw, from(PEER), ip(VICTIM), &p);
        let wcs = until(&mut h, Counter::BadRkey, 1);
        ended(&h, &wcs);
    });
}

#[test]
fn a3_a_wrong_guess_of_a_key_or_an_address_costs_the_guesser_its_connection() {
    in_namespace("a3", || {
        let mut g = Guesses::new("A3");
        let raw = raw();
        // A connected peer (the test) guesses an rkey at the right PSN.
        let mut h = Host::open(ip(VICTIM), ip(PEER));
        let guess = loop {
            let k = g.next();
            if k != h.rkey {
                break k;
            }
        };
        let p = write_only(h.qpn, PEER_PSN, guess, h.iova, b"evil");
        send_raw(&raw, from(PEER), ip(VICTIM), &p);
        let wcs = until(&mut h, Counter::BadRkey, 1);
        ended(&h, &wcs);
        assert_eq!(h.dev_counters()[Counter::RespRemoteAccessErrors], 1);
        // The right key, an address past the region.
        let mut h2 = Host::open(ip(VICTIM2), ip(PEER));
        let past = h2.iova + h2.buf.len() as u64;
        let p = write_only(h2.qpn, PEER_PSN, h2.rkey, past, b"evil");
        send_raw(&raw, from(PEER), ip(VICTIM2), &p);
        let wcs = until(&mut h2, Counter::OutOfBounds, 1);
        ended(&h2, &wcs);
        // Nothing was written anywhere in either region.
        let mut bytes = vec![0u8; h.buf.len()];
        assert!(h.buf.read(0, &mut bytes));
        assert!(bytes.iter().all(|&b| b == 0));
        println!(
            "A3: a wrong rkey (resp_bad_rkey) and an address outside the region \
             (resp_out_of_bounds) were each NAKed and ended the guesser's QP: one guess per \
             connection, against 32-bit random keys (2^31 connections on average)."
        );
    });
}
