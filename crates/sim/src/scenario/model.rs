//! The model a run is checked against: each QP's planned work and buffer image, and the
//! random choices that make the workload.

use oxrdma_core::{MemoryRegion, Mtu, Nanos, SharedBuffer, WorkCompletion, WrOpcode};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use std::collections::HashMap;
use std::sync::Arc;

/// A local memory range: offset into the side's buffer, length.
pub(super) type Piece = (usize, usize);

#[derive(Debug)]
pub(super) struct Op {
    pub(super) opcode: WrOpcode,
    pub(super) len: usize,
    /// Local source (SEND/WRITE) or landing area (READ, atomic result).
    pub(super) local: Vec<Piece>,
    /// Offset in the peer's buffer (WRITE target, READ source, CAS cell).
    pub(super) remote: usize,
    pub(super) imm: u32,
    pub(super) signaled: bool,
    pub(super) fence: bool,
    pub(super) inline: bool,
    pub(super) compare_add: u64,
    pub(super) swap: u64,
    /// Index of the peer receive WQE this op consumes.
    pub(super) recv: Option<usize>,
}

#[derive(Debug)]
pub(super) struct RecvPlan {
    pub(super) pieces: Vec<Piece>,
}

#[derive(Debug)]
pub(super) struct Side {
    pub(super) node: usize,
    pub(super) peer: usize,
    pub(super) qpn: u32,
    pub(super) send_cq: u32,
    pub(super) recv_cq: u32,
    pub(super) mr: Option<MemoryRegion>,
    pub(super) buf: Option<Arc<SharedBuffer>>,
    pub(super) image: Vec<u8>,
    pub(super) size: usize,
    pub(super) ops: Vec<Op>,
    pub(super) recvs: Vec<RecvPlan>,
    pub(super) next_post: usize,
    pub(super) next_recv: usize,
    pub(super) sends: HashMap<u64, Vec<WorkCompletion>>,
    pub(super) recv_wcs: HashMap<u64, Vec<WorkCompletion>>,
    pub(super) send_order: Vec<u64>,
    pub(super) mtu: Mtu,
    pub(super) sq_psn: u32,
    pub(super) rd_atomic: u8,
    pub(super) last_done: Nanos,
}

impl Side {
    pub(super) fn alloc(&mut self, len: usize, rng: &mut ChaCha8Rng) -> usize {
        // Random gaps between areas so scatter/gather lands at odd offsets.
        let gap = rng.random_range(0..8usize);
        let at = (self.size + gap + 7) & !7;
        self.size = at + len;
        at
    }
    pub(super) fn pieces(
        &mut self,
        len: usize,
        max_sge: usize,
        rng: &mut ChaCha8Rng,
    ) -> Vec<Piece> {
        if len == 0 {
            return Vec::new();
        }
        let k = rng.random_range(1..=max_sge.min(len));
        let mut cuts: Vec<usize> = (0..k - 1).map(|_| rng.random_range(1..len)).collect();
        cuts.sort_unstable();
        cuts.dedup();
        let mut out = Vec::new();
        let mut prev = 0;
        for c in cuts.into_iter().chain([len]) {
            let n = c - prev;
            out.push((self.alloc(n, rng), n));
            prev = c;
        }
        out
    }
}

pub(super) const RECV_TAG: u64 = 1 << 63;

pub(super) fn pick_len(rng: &mut ChaCha8Rng, max: usize) -> usize {
    match rng.random_range(0..20) {
        0 => 0,
        1..=9 => rng.random_range(1..=256.min(max)),
        10..=17 => rng.random_range(1..=16_384.min(max)),
        _ => rng.random_range(0..=max),
    }
}

pub(super) fn pick_opcode(rng: &mut ChaCha8Rng) -> WrOpcode {
    match rng.random_range(0..14) {
        0..=2 => WrOpcode::Send,
        3 => WrOpcode::SendWithImm,
        4..=6 => WrOpcode::RdmaWrite,
        7 => WrOpcode::RdmaWriteWithImm,
        8..=10 => WrOpcode::RdmaRead,
        11 => WrOpcode::AtomicCmpAndSwp,
        _ => WrOpcode::AtomicFetchAndAdd,
    }
}

pub(super) fn concat(image: &[u8], pieces: &[Piece]) -> Vec<u8> {
    pieces
        .iter()
        .flat_map(|&(o, n)| image[o..o + n].iter().copied())
        .collect()
}

pub(super) fn apply(image: &mut [u8], pieces: &[Piece], data: &[u8]) {
    let mut at = 0;
    for &(o, n) in pieces {
        let take = n.min(data.len() - at);
        image[o..o + take].copy_from_slice(&data[at..at + take]);
        at += take;
    }
}

/// Per node: the shared FETCH_ADD counter.
pub(super) struct Counter {
    pub(super) buf: Arc<SharedBuffer>,
    pub(super) mr: MemoryRegion,
    pub(super) initial: u64,
}
