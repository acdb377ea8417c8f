//! iWARP between two simulated peers on virtual time: each direction is a byte stream as
//! TCP delivers one (in order, whole), cut into pieces of random size that each arrive
//! after a random delay, never before the piece ahead of them. Both QPs
//! (`oxrdma_core::iwarp::qp`) are driven as their bytes arrive.

use oxrdma_core::iwarp::qp::{Buffers, Qp};
use oxrdma_core::{Nanos, WorkCompletion};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::VecDeque;

/// How a stream cuts and delays what it carries.
#[derive(Debug, Clone, Copy)]
pub struct StreamConfig {
    /// Largest piece (1 byte up to this).
    pub max_piece: usize,
    /// Shortest and longest delay of a piece.
    pub delay: (Nanos, Nanos),
}

impl Default for StreamConfig {
    fn default() -> Self {
        StreamConfig {
            max_piece: 3000,
            delay: (1_000, 200_000),
        }
    }
}

/// One direction: pieces in flight, each with the time it arrives.
#[derive(Debug, Default)]
struct Stream {
    in_flight: VecDeque<(Nanos, Vec<u8>)>,
    last_due: Nanos,
}

/// One end: its QP, its memory, what it completed.
#[derive(Debug)]
pub struct Peer {
    /// The QP.
    pub qp: Qp,
    /// Its registered memory.
    pub mem: Buffers,
    /// Completions taken from the QP so far.
    pub done: Vec<WorkCompletion>,
    /// Arrived bytes the QP has not taken yet.
    pending: Vec<u8>,
}

/// Two peers joined by a stream each way.
#[derive(Debug)]
pub struct Link {
    /// The two ends.
    pub peers: [Peer; 2],
    streams: [Stream; 2],
    cfg: StreamConfig,
    rng: ChaCha8Rng,
    /// Virtual time.
    pub now: Nanos,
}

impl Link {
    /// Peers `a` and `b` (QP and memory each), the streams cut and delayed from `seed`.
    pub fn new(a: (Qp, Buffers), b: (Qp, Buffers), cfg: StreamConfig, seed: u64) -> Link {
        let peer = |(qp, mem)| Peer {
            qp,
            mem,
            done: Vec::new(),
            pending: Vec::new(),
        };
        Link {
            peers: [peer(a), peer(b)],
            streams: [Stream::default(), Stream::default()],
            cfg,
            rng: ChaCha8Rng::seed_from_u64(seed),
            now: 0,
        }
    }

    /// Runs until nothing is in flight or to send, or `until` passes; false if it did.
    pub fn run(&mut self, until: Nanos) -> bool {
        loop {
            for i in 0..2 {
                self.send_from(i);
            }
            for i in 0..2 {
                let p = &mut self.peers[i];
                while let Some(wc) = p.qp.poll_cq() {
                    p.done.push(wc);
                }
            }
            let idle = self.streams.iter().all(|s| s.in_flight.is_empty())
                && self
                    .peers
                    .iter()
                    .all(|p| p.pending.is_empty() && !p.qp.wants_to_send());
            if idle {
                return true;
            }
            let next = self
                .streams
                .iter()
                .filter_map(|s| s.in_flight.front().map(|(t, _)| *t))
                .min();
            match next {
                Some(t) if t > until => return false,
                Some(t) => self.now = self.now.max(t),
                None => {}
            }
            for i in 0..2 {
                self.deliver_to(1 - i, i);
            }
        }
    }

    /// What peer `i` sends now goes into its stream, cut and delayed.
    fn send_from(&mut self, i: usize) {
        let mut out = Vec::new();
        let p = &mut self.peers[i];
        p.qp.transmit(&p.mem, &mut out, 1 << 20);
        let s = &mut self.streams[i];
        let mut at = 0;
        while at < out.len() {
            let n = self
                .rng
                .random_range(1..=self.cfg.max_piece)
                .min(out.len() - at);
            let delay = self.rng.random_range(self.cfg.delay.0..=self.cfg.delay.1);
            // In order: a piece never arrives before the one ahead of it.
            let due = (self.now + delay).max(s.last_due);
            s.last_due = due;
            s.in_flight.push_back((due, out[at..at + n].to_vec()));
            at += n;
        }
    }

    /// What has arrived on stream `from` goes to peer `to`'s QP, as much as it takes.
    fn deliver_to(&mut self, to: usize, from: usize) {
        let s = &mut self.streams[from];
        let p = &mut self.peers[to];
        while let Some((due, _)) = s.in_flight.front() {
            if *due > self.now {
                break;
            }
            if let Some((_, bytes)) = s.in_flight.pop_front() {
                p.pending.extend_from_slice(&bytes);
            }
        }
        let took = p.qp.receive(&p.pending, &mut p.mem);
        p.pending.drain(..took);
    }
}
