//! Random RDMA workloads over the simulated network, and the invariants checked after each
//! run: every WR completes exactly once, successful ones moved exactly the right bytes (the
//! whole memory image is compared, so stray writes show too), atomics are linearizable, and
//! errors appear only where the scenario forces them.

use crate::net::{NetConfig, NetStats};
use crate::world::{World, WorldStats};
use oxrdma_core::{
    Access, AddressVector, Gid, MemoryRegion, Mtu, Nanos, QpAttr, QpCap, QpInitAttr, QpState,
    QpType, RecvWr, SendData, SendFlags, SendWr, Sge, SharedBuffer, VerbsError, WcOpcode, WcStatus,
    WorkCompletion, WrOpcode,
};
use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::HashMap;
use std::sync::Arc;

/// Which errors a run may legitimately end with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// Every WR succeeds.
    Clean,
    /// A QP may fail with RETRY_EXC_ERR (then flush); heavy loss can exhaust retry_cnt.
    RetryErrorsAllowed,
    /// At least one QP must fail with RETRY_EXC_ERR (a partition outlasts the retry budget).
    RetryErrorsRequired,
}

/// One simulation run.
#[derive(Debug, Clone)]
pub struct ScenarioConfig {
    pub seed: u64,
    pub nodes: usize,
    pub qp_pairs: usize,
    /// Send WRs posted by each QP of each pair.
    pub wrs_per_qp: usize,
    /// Largest message; most are much smaller.
    pub max_len: usize,
    pub max_sge: usize,
    pub net: NetConfig,
    /// Post receives slowly, so senders meet RNR NAKs.
    pub late_recv: bool,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub expect: Expect,
    /// Give up (and report a hang) after this much virtual time.
    pub time_limit: Nanos,
    /// Only RDMA WRITEs of `max_len` bytes (for throughput measurements).
    pub write_only: bool,
}

impl ScenarioConfig {
    /// A small mixed workload on a clean network.
    pub fn new(seed: u64) -> Self {
        ScenarioConfig {
            seed,
            nodes: 2,
            qp_pairs: 4,
            wrs_per_qp: 24,
            max_len: 64 << 10,
            max_sge: 4,
            net: NetConfig::default(),
            late_recv: false,
            timeout: 12,
            retry_cnt: 7,
            expect: Expect::Clean,
            time_limit: 600_000_000_000,
            write_only: false,
        }
    }
}

/// What a run did and what went wrong.
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub violations: Vec<String>,
    pub send_wrs: usize,
    pub succeeded: usize,
    pub failed: usize,
    /// Payload bytes of successful WRs.
    pub bytes: u64,
    /// Virtual time from start until the last WR completed.
    pub elapsed: Nanos,
    pub net: NetStats,
    pub world: WorldStats,
}

impl Report {
    /// Goodput in Gb/s of virtual time.
    pub fn gbps(&self) -> f64 {
        if self.elapsed == 0 {
            0.0
        } else {
            self.bytes as f64 * 8.0 / self.elapsed as f64
        }
    }
}

/// A local memory range: offset into the side's buffer, length.
type Piece = (usize, usize);

#[derive(Debug)]
struct Op {
    opcode: WrOpcode,
    len: usize,
    /// Local source (SEND/WRITE) or landing area (READ, atomic result).
    local: Vec<Piece>,
    /// Offset in the peer's buffer (WRITE target, READ source, CAS cell).
    remote: usize,
    imm: u32,
    signaled: bool,
    fence: bool,
    inline: bool,
    compare_add: u64,
    swap: u64,
    /// Index of the peer receive WQE this op consumes.
    recv: Option<usize>,
}

#[derive(Debug)]
struct RecvPlan {
    pieces: Vec<Piece>,
}

#[derive(Debug)]
struct Side {
    node: usize,
    peer: usize,
    qpn: u32,
    send_cq: u32,
    recv_cq: u32,
    mr: Option<MemoryRegion>,
    buf: Option<Arc<SharedBuffer>>,
    image: Vec<u8>,
    size: usize,
    ops: Vec<Op>,
    recvs: Vec<RecvPlan>,
    next_post: usize,
    next_recv: usize,
    sends: HashMap<u64, Vec<WorkCompletion>>,
    recv_wcs: HashMap<u64, Vec<WorkCompletion>>,
    send_order: Vec<u64>,
    mtu: Mtu,
    sq_psn: u32,
    rd_atomic: u8,
    last_done: Nanos,
}

impl Side {
    fn alloc(&mut self, len: usize, rng: &mut ChaCha8Rng) -> usize {
        // Random gaps between areas so scatter/gather lands at odd offsets.
        let gap = rng.random_range(0..8usize);
        let at = (self.size + gap + 7) & !7;
        self.size = at + len;
        at
    }
    fn pieces(&mut self, len: usize, max_sge: usize, rng: &mut ChaCha8Rng) -> Vec<Piece> {
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

const RECV_TAG: u64 = 1 << 63;

fn pick_len(rng: &mut ChaCha8Rng, max: usize) -> usize {
    match rng.random_range(0..20) {
        0 => 0,
        1..=9 => rng.random_range(1..=256.min(max)),
        10..=17 => rng.random_range(1..=16_384.min(max)),
        _ => rng.random_range(0..=max),
    }
}

fn pick_opcode(rng: &mut ChaCha8Rng) -> WrOpcode {
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

fn concat(image: &[u8], pieces: &[Piece]) -> Vec<u8> {
    pieces
        .iter()
        .flat_map(|&(o, n)| image[o..o + n].iter().copied())
        .collect()
}

fn apply(image: &mut [u8], pieces: &[Piece], data: &[u8]) {
    let mut at = 0;
    for &(o, n) in pieces {
        let take = n.min(data.len() - at);
        image[o..o + take].copy_from_slice(&data[at..at + take]);
        at += take;
    }
}

/// Per node: the shared FETCH_ADD counter.
struct Counter {
    buf: Arc<SharedBuffer>,
    mr: MemoryRegion,
    initial: u64,
}

/// Runs one scenario and checks its invariants.
pub fn run(cfg: &ScenarioConfig) -> Report {
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed ^ 0x005e_ed0f_0ad5);
    let mut world = World::new(cfg.nodes, cfg.net.clone(), cfg.seed);
    let mut report = Report::default();
    let v = &mut report.violations;

    // Protection domains, CQs and the per-node FETCH_ADD counter.
    let mut pds = Vec::new();
    let mut counters = Vec::new();
    for n in &mut world.nodes {
        let pd = n.engine.alloc_pd().expect("pd");
        let buf = Arc::new(SharedBuffer::new(8).expect("alloc"));
        let initial = u64::from(rng.next_u32());
        buf.write(0, &initial.to_ne_bytes());
        let access = Access::LOCAL_WRITE | Access::REMOTE_ATOMIC;
        let mr = n.engine.reg_mr(pd, buf.clone(), None, access).expect("mr");
        pds.push(pd);
        counters.push(Counter { buf, mr, initial });
    }

    // Queue pairs: pair p joins sides 2p and 2p+1 on two different random nodes.
    let mut sides: Vec<Side> = Vec::new();
    for _ in 0..cfg.qp_pairs {
        let a = rng.random_range(0..cfg.nodes);
        let b = (a + rng.random_range(1..cfg.nodes.max(2))) % cfg.nodes.max(1);
        let mtu = Mtu::from_ibv(rng.random_range(1..=5)).expect("mtu");
        let rd_atomic = rng.random_range(1..=8u8);
        for (node, peer) in [(a, sides.len() + 1), (b, sides.len())] {
            let e = &mut world.nodes[node].engine;
            let send_cq = e.create_cq(4096).expect("cq");
            let recv_cq = e.create_cq(4096).expect("cq");
            let cap = QpCap {
                max_send_wr: 32,
                max_recv_wr: cfg.wrs_per_qp as u32 + 1,
                max_send_sge: cfg.max_sge as u32,
                max_recv_sge: cfg.max_sge as u32,
                max_inline_data: 64,
            };
            let init = QpInitAttr {
                qp_type: QpType::Rc,
                send_cq,
                recv_cq,
                cap,
                sq_sig_all: false,
                srq: None,
            };
            let qpn = e.create_qp(pds[node], &init).expect("qp");
            // Some QPs start just before the 2^24 PSN wrap.
            let sq_psn = if rng.random_bool(0.3) {
                (1 << 24) - rng.random_range(1..200u32)
            } else {
                e.random_psn()
            };
            sides.push(Side {
                node,
                peer,
                qpn,
                send_cq,
                recv_cq,
                mr: None,
                buf: None,
                image: Vec::new(),
                size: 0,
                ops: Vec::new(),
                recvs: Vec::new(),
                next_post: 0,
                next_recv: 0,
                sends: HashMap::new(),
                recv_wcs: HashMap::new(),
                send_order: Vec::new(),
                mtu,
                sq_psn,
                rd_atomic,
                last_done: 0,
            });
        }
    }

    // The workload, laid out in each side's buffer. CAS cells: (side, offset in the peer's
    // buffer, initial value).
    let mut cas_cells: Vec<(usize, usize, u64)> = Vec::new();
    for s in 0..sides.len() {
        let peer = sides[s].peer;
        let cas_cell = sides[peer].alloc(8, &mut rng);
        let mut cas_value = rng.next_u64();
        // The CAS chain starts from the cell's initial contents, set below.
        let cas_start = cas_value;
        for i in 0..cfg.wrs_per_qp {
            let opcode = if cfg.write_only {
                WrOpcode::RdmaWrite
            } else {
                pick_opcode(&mut rng)
            };
            let len = match opcode {
                _ if cfg.write_only => cfg.max_len,
                WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd => 8,
                _ => pick_len(&mut rng, cfg.max_len),
            };
            let inline = matches!(
                opcode,
                WrOpcode::Send | WrOpcode::RdmaWrite | WrOpcode::SendWithImm
            ) && len <= 64
                && rng.random_bool(0.3);
            let local = if opcode.is_atomic() {
                let at = sides[s].alloc(8, &mut rng);
                vec![(at, 8)]
            } else {
                sides[s].pieces(len, cfg.max_sge, &mut rng)
            };
            let (mut remote, mut compare_add, mut swap, mut recv) = (0, 0, 0, None);
            match opcode {
                WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm | WrOpcode::RdmaRead => {
                    remote = sides[peer].alloc(len, &mut rng);
                }
                WrOpcode::AtomicCmpAndSwp => {
                    remote = cas_cell;
                    compare_add = cas_value;
                    swap = rng.next_u64();
                    cas_value = swap;
                }
                WrOpcode::AtomicFetchAndAdd => compare_add = rng.random_range(1..=1000),
                _ => {}
            }
            if matches!(
                opcode,
                WrOpcode::Send | WrOpcode::SendWithImm | WrOpcode::RdmaWriteWithImm
            ) {
                let cap_len = if opcode == WrOpcode::RdmaWriteWithImm {
                    0
                } else {
                    len + rng.random_range(0..64)
                };
                let pieces = sides[peer].pieces(cap_len, cfg.max_sge, &mut rng);
                recv = Some(sides[peer].recvs.len());
                sides[peer].recvs.push(RecvPlan { pieces });
            }
            let last = i + 1 == cfg.wrs_per_qp;
            sides[s].ops.push(Op {
                opcode,
                len,
                local,
                remote,
                imm: rng.next_u32(),
                signaled: last || rng.random_bool(0.7),
                fence: rng.random_bool(0.05),
                inline,
                compare_add,
                swap,
                recv,
            });
        }
        cas_cells.push((s, cas_cell, cas_start));
    }

    // Buffers: random contents, then registered.
    for s in &mut sides {
        let size = s.size.max(8);
        let mut image = vec![0u8; size];
        rng.fill_bytes(&mut image);
        let buf = Arc::new(SharedBuffer::new(size).expect("alloc"));
        s.image = image;
        s.buf = Some(buf);
    }
    for &(s, cell, start) in &cas_cells {
        let peer = sides[s].peer;
        sides[peer].image[cell..cell + 8].copy_from_slice(&start.to_ne_bytes());
    }
    for s in &mut sides {
        let buf = s.buf.clone().expect("buffer");
        buf.write(0, &s.image);
        let e = &mut world.nodes[s.node].engine;
        let mr = e.reg_mr(pds[s.node], buf, None, Access::ALL).expect("mr");
        s.mr = Some(mr);
    }

    // Connect every pair.
    for i in 0..sides.len() {
        let (me, peer) = (&sides[i], &sides[sides[i].peer]);
        let peer_gid = Gid::from(world.nodes[peer.node].ip);
        let e = &mut world.nodes[me.node].engine;
        let steps = [
            QpAttr {
                qp_state: Some(QpState::Init),
                pkey_index: Some(0),
                port_num: Some(1),
                qp_access_flags: Some(Access::ALL),
                ..Default::default()
            },
            QpAttr {
                qp_state: Some(QpState::Rtr),
                ah_attr: Some(AddressVector { dgid: peer_gid }),
                path_mtu: Some(me.mtu),
                dest_qp_num: Some(peer.qpn),
                rq_psn: Some(peer.sq_psn),
                max_dest_rd_atomic: Some(me.rd_atomic),
                min_rnr_timer: Some(rng.random_range(1..=14)),
                ..Default::default()
            },
            QpAttr {
                qp_state: Some(QpState::Rts),
                sq_psn: Some(me.sq_psn),
                timeout: Some(cfg.timeout),
                retry_cnt: Some(cfg.retry_cnt),
                rnr_retry: Some(7),
                max_rd_atomic: Some(me.rd_atomic),
                ..Default::default()
            },
        ];
        for a in &steps {
            e.modify_qp(me.qpn, a).expect("modify_qp");
        }
    }

    // Run: post what fits, step the world, collect completions.
    let recv_interval: Nanos = 200_000;
    let mut next_recv_time: Nanos = if cfg.late_recv { recv_interval } else { 0 };
    if !cfg.late_recv {
        for s in 0..sides.len() {
            post_recvs(&mut world, &mut sides, s, usize::MAX, v);
        }
    }
    loop {
        for s in 0..sides.len() {
            post_sends(&mut world, &mut sides, s, &counters, v);
        }
        let recvs_pending = sides.iter().any(|s| s.next_recv < s.recvs.len());
        let limit = if cfg.late_recv && recvs_pending {
            next_recv_time
        } else {
            cfg.time_limit
        };
        let progressed = world.step(limit);
        collect(&mut world, &mut sides, v);
        if !progressed {
            if cfg.late_recv && recvs_pending && world.now < cfg.time_limit {
                world.now = world.now.max(next_recv_time);
                for s in 0..sides.len() {
                    post_recvs(&mut world, &mut sides, s, 2, v);
                }
                next_recv_time = world.now + recv_interval;
                continue;
            }
            let all_posted = sides.iter().all(|s| s.next_post == s.ops.len());
            if all_posted || world.now >= cfg.time_limit {
                break;
            }
        }
        if world.now >= cfg.time_limit {
            break;
        }
    }
    if world.now >= cfg.time_limit {
        v.push(format!(
            "hang: still busy after {} ns of virtual time",
            cfg.time_limit
        ));
    }
    report.elapsed = sides.iter().map(|s| s.last_done).max().unwrap_or(0);
    // Teardown: ERR flushes whatever is left, so every WR must now have completed.
    for s in &sides {
        let err = QpAttr {
            qp_state: Some(QpState::Err),
            ..Default::default()
        };
        world.nodes[s.node]
            .engine
            .modify_qp(s.qpn, &err)
            .expect("to ERR");
    }
    collect(&mut world, &mut sides, v);
    check(cfg, &sides, &cas_cells, &counters, &mut report);
    report.net = world.net.stats;
    report.world = world.stats;
    report
}

fn post_recvs(world: &mut World, sides: &mut [Side], s: usize, max: usize, v: &mut Vec<String>) {
    let side = &mut sides[s];
    let mr = side.mr.as_ref().expect("mr");
    let mut posted = 0;
    while side.next_recv < side.recvs.len() && posted < max {
        let k = side.next_recv;
        let sges = side.recvs[k]
            .pieces
            .iter()
            .map(|&(o, n)| Sge {
                addr: mr.iova + o as u64,
                length: n as u32,
                lkey: mr.lkey,
            })
            .collect();
        let wr = RecvWr {
            wr_id: RECV_TAG | k as u64,
            sges,
        };
        match world.nodes[side.node].engine.post_recv(side.qpn, wr) {
            Ok(()) => {
                side.next_recv += 1;
                posted += 1;
            }
            Err(e) => {
                v.push(format!("qp {:#x}: post_recv {k} failed: {e}", side.qpn));
                return;
            }
        }
    }
}

fn post_sends(
    world: &mut World,
    sides: &mut [Side],
    s: usize,
    counters: &[Counter],
    v: &mut Vec<String>,
) {
    let peer = sides[s].peer;
    let (peer_iova, peer_rkey, peer_node) = {
        let p = &sides[peer];
        let mr = p.mr.as_ref().expect("mr");
        (mr.iova, mr.rkey, p.node)
    };
    let side = &mut sides[s];
    let mr = side.mr.clone().expect("mr");
    while side.next_post < side.ops.len() {
        let i = side.next_post;
        let op = &side.ops[i];
        let data = if op.inline {
            SendData::Inline(concat(&side.image, &op.local))
        } else {
            SendData::Sges(
                op.local
                    .iter()
                    .map(|&(o, n)| Sge {
                        addr: mr.iova + o as u64,
                        length: n as u32,
                        lkey: mr.lkey,
                    })
                    .collect(),
            )
        };
        let mut wr = SendWr::new(i as u64, op.opcode, data);
        wr.flags = SendFlags::empty();
        if op.signaled {
            wr.flags = wr.flags | SendFlags::SIGNALED;
        }
        if op.fence {
            wr.flags = wr.flags | SendFlags::FENCE;
        }
        wr.imm = op.imm;
        wr.rkey = peer_rkey;
        wr.remote_addr = peer_iova + op.remote as u64;
        wr.compare_add = op.compare_add;
        wr.swap = op.swap;
        if op.opcode == WrOpcode::AtomicFetchAndAdd {
            let c = &counters[peer_node].mr;
            wr.rkey = c.rkey;
            wr.remote_addr = c.iova;
        }
        match world.nodes[side.node].engine.post_send(side.qpn, wr) {
            Ok(()) => side.next_post += 1,
            Err(VerbsError::Exhausted(_)) => return,
            Err(e) => {
                v.push(format!("qp {:#x}: post_send {i} failed: {e}", side.qpn));
                side.next_post = side.ops.len();
                return;
            }
        }
    }
}

fn collect(world: &mut World, sides: &mut [Side], v: &mut Vec<String>) {
    let now = world.now;
    for (i, n) in world.nodes.iter_mut().enumerate() {
        // Nothing in a run should raise an asynchronous error.
        while let Some(e) = n.engine.poll_event() {
            v.push(format!("node {i}: async event {e:?} at {now} ns"));
        }
    }
    for s in sides {
        let e = &mut world.nodes[s.node].engine;
        for wc in e.poll_cq(s.send_cq, usize::MAX).expect("cq") {
            s.send_order.push(wc.wr_id);
            s.sends.entry(wc.wr_id).or_default().push(wc);
            s.last_done = now;
        }
        for wc in e.poll_cq(s.recv_cq, usize::MAX).expect("cq") {
            s.recv_wcs.entry(wc.wr_id).or_default().push(wc);
        }
    }
}

fn expected_wc_opcode(op: WrOpcode) -> WcOpcode {
    op.wc_opcode()
}

/// The invariants.
fn check(
    cfg: &ScenarioConfig,
    sides: &[Side],
    cas_cells: &[(usize, usize, u64)],
    counters: &[Counter],
    report: &mut Report,
) {
    let mut images: Vec<Vec<u8>> = sides.iter().map(|s| s.image.clone()).collect();
    let mut care: Vec<Vec<bool>> = sides.iter().map(|s| vec![true; s.image.len()]).collect();
    let mut faa: Vec<Vec<(u64, u64)>> = vec![Vec::new(); counters.len()];
    let mut faa_clean = vec![true; counters.len()];
    let mut retry_errors = 0;
    let v = &mut report.violations;
    let dont_care = |care: &mut Vec<bool>, pieces: &[Piece]| {
        for &(o, n) in pieces {
            care[o..o + n].iter_mut().for_each(|c| *c = false);
        }
    };
    for (si, s) in sides.iter().enumerate() {
        let q = s.qpn;
        // Completion order follows posting order.
        if s.send_order.windows(2).any(|w| w[0] >= w[1]) {
            v.push(format!(
                "qp {q:#x}: send completions out of order: {:?}",
                s.send_order
            ));
        }
        let mut first_error: Option<(usize, WcStatus)> = None;
        for (i, op) in s.ops.iter().enumerate() {
            report.send_wrs += 1;
            let wcs = s.sends.get(&(i as u64)).map(Vec::as_slice).unwrap_or(&[]);
            if wcs.len() > 1 {
                v.push(format!("qp {q:#x}: WR {i} completed {} times", wcs.len()));
            }
            let status = match wcs.first() {
                Some(wc) => {
                    if wc.status == WcStatus::Success && !op.signaled {
                        v.push(format!(
                            "qp {q:#x}: unsignaled WR {i} produced a completion"
                        ));
                    }
                    if wc.status == WcStatus::Success && wc.opcode != expected_wc_opcode(op.opcode)
                    {
                        v.push(format!("qp {q:#x}: WR {i} completed as {:?}", wc.opcode));
                    }
                    if wc.qp_num != q {
                        v.push(format!(
                            "qp {q:#x}: WR {i} completion names QP {:#x}",
                            wc.qp_num
                        ));
                    }
                    wc.status
                }
                None if op.signaled => {
                    v.push(format!(
                        "qp {q:#x}: WR {i} ({:?}) never completed",
                        op.opcode
                    ));
                    continue;
                }
                None => WcStatus::Success,
            };
            let peer = s.peer;
            let remote_piece = [(op.remote, op.len)];
            if status != WcStatus::Success {
                report.failed += 1;
                match first_error {
                    None => {
                        first_error = Some((i, status));
                        let allowed =
                            cfg.expect != Expect::Clean && status == WcStatus::RetryExcErr;
                        if !allowed {
                            v.push(format!(
                                "qp {q:#x}: WR {i} ({:?}) failed: {status:?}",
                                op.opcode
                            ));
                        }
                        if status == WcStatus::RetryExcErr {
                            retry_errors += 1;
                        }
                    }
                    Some(_) if status != WcStatus::WrFlushErr => {
                        v.push(format!(
                            "qp {q:#x}: WR {i} failed with {status:?} after an earlier error"
                        ));
                    }
                    Some(_) => {}
                }
                // Whatever it was doing may have partly happened.
                match op.opcode {
                    WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm => {
                        dont_care(&mut care[peer], &remote_piece)
                    }
                    WrOpcode::RdmaRead => dont_care(&mut care[si], &op.local),
                    WrOpcode::AtomicFetchAndAdd => faa_clean[sides[peer].node] = false,
                    _ => {}
                }
                continue;
            }
            if let Some((e, st)) = first_error {
                v.push(format!(
                    "qp {q:#x}: WR {i} succeeded after WR {e} failed with {st:?}"
                ));
            }
            report.succeeded += 1;
            report.bytes += op.len as u64;
            if let Some(wc) = wcs.first() {
                if matches!(op.opcode, WrOpcode::RdmaRead) && wc.byte_len as usize != op.len {
                    v.push(format!(
                        "qp {q:#x}: READ {i} byte_len {} != {}",
                        wc.byte_len, op.len
                    ));
                }
            }
            match op.opcode {
                WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm => {
                    let data = concat(&sides[si].image, &op.local);
                    apply(&mut images[peer], &remote_piece, &data);
                }
                WrOpcode::RdmaRead => {
                    let data = concat(&sides[peer].image, &remote_piece);
                    apply(&mut images[si], &op.local, &data);
                }
                WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd => {
                    let mut got = [0u8; 8];
                    s.buf.as_ref().expect("buf").read(op.local[0].0, &mut got);
                    let orig = u64::from_ne_bytes(got);
                    if op.opcode == WrOpcode::AtomicCmpAndSwp && orig != op.compare_add {
                        v.push(format!(
                            "qp {q:#x}: CAS {i} returned {orig:#x}, expected {:#x}",
                            op.compare_add
                        ));
                    }
                    if op.opcode == WrOpcode::AtomicFetchAndAdd {
                        faa[sides[peer].node].push((orig, op.compare_add));
                    }
                    dont_care(&mut care[si], &op.local);
                }
                _ => {}
            }
        }
        if let Some((_, _)) = first_error {
            for &(cs, cell, _) in cas_cells {
                if cs == si {
                    dont_care(&mut care[s.peer], &[(cell, 8)]);
                }
            }
        }
    }
    // Receives: exactly one completion each; successful ones carry the right message.
    for (si, s) in sides.iter().enumerate() {
        let q = s.qpn;
        let peer = &sides[s.peer];
        let consumers: Vec<&Op> = {
            let mut c: Vec<(usize, &Op)> = peer
                .ops
                .iter()
                .filter_map(|o| o.recv.map(|k| (k, o)))
                .collect();
            c.sort_by_key(|(k, _)| *k);
            c.into_iter().map(|(_, o)| o).collect()
        };
        let mut seen_failure = false;
        for (k, plan) in s.recvs.iter().enumerate() {
            let wcs = s
                .recv_wcs
                .get(&(RECV_TAG | k as u64))
                .map(Vec::as_slice)
                .unwrap_or(&[]);
            if wcs.len() != 1 {
                v.push(format!(
                    "qp {q:#x}: receive {k} completed {} times",
                    wcs.len()
                ));
                continue;
            }
            let wc = wcs[0];
            let op = consumers[k];
            if wc.status != WcStatus::Success {
                seen_failure = true;
                if cfg.expect == Expect::Clean || wc.status != WcStatus::WrFlushErr {
                    v.push(format!("qp {q:#x}: receive {k} failed: {:?}", wc.status));
                }
                dont_care(&mut care[si], &plan.pieces);
                continue;
            }
            if seen_failure {
                v.push(format!(
                    "qp {q:#x}: receive {k} succeeded after an earlier one failed"
                ));
            }
            let with_imm = matches!(
                op.opcode,
                WrOpcode::SendWithImm | WrOpcode::RdmaWriteWithImm
            );
            let want_op = if op.opcode == WrOpcode::RdmaWriteWithImm {
                WcOpcode::RecvRdmaWithImm
            } else {
                WcOpcode::Recv
            };
            if wc.byte_len as usize != op.len
                || wc.opcode != want_op
                || wc.imm != with_imm.then_some(op.imm)
            {
                v.push(format!(
                    "qp {q:#x}: receive {k}: got {:?} len {} imm {:?}, expected {want_op:?} len {} imm {:?}",
                    wc.opcode, wc.byte_len, wc.imm, op.len, with_imm.then_some(op.imm)
                ));
            }
            if wc.src_qp != peer.qpn {
                v.push(format!("qp {q:#x}: receive {k}: src_qp {:#x}", wc.src_qp));
            }
            if op.opcode != WrOpcode::RdmaWriteWithImm {
                let data = concat(&peer.image, &op.local);
                apply(&mut images[si], &plan.pieces, &data);
            }
        }
    }
    // CAS cells of clean chains end at the last swap value.
    for &(cs, cell, start) in cas_cells {
        let s = &sides[cs];
        let last = s
            .ops
            .iter()
            .rev()
            .find(|o| o.opcode == WrOpcode::AtomicCmpAndSwp)
            .map_or(start, |o| o.swap);
        if care[s.peer][cell] {
            images[s.peer][cell..cell + 8].copy_from_slice(&last.to_ne_bytes());
        }
    }
    // The whole memory image of every side.
    for (si, s) in sides.iter().enumerate() {
        let mut actual = vec![0u8; s.image.len()];
        s.buf.as_ref().expect("buf").read(0, &mut actual);
        if let Some(at) = (0..actual.len()).find(|&i| care[si][i] && actual[i] != images[si][i]) {
            v.push(format!(
                "qp {:#x}: memory differs from the expected image at offset {at} (got {:#04x}, want {:#04x})",
                s.qpn, actual[at], images[si][at]
            ));
        }
    }
    // FETCH_ADD: the originals chain from the initial value with no gap and no repeat.
    for (n, c) in counters.iter().enumerate() {
        let mut ops = faa[n].clone();
        ops.sort_unstable();
        if ops.windows(2).any(|w| w[0].0 == w[1].0) {
            v.push(format!("node {n}: two FETCH_ADDs returned the same value"));
        }
        let mut got = [0u8; 8];
        c.buf.read(0, &mut got);
        let fin = u64::from_ne_bytes(got);
        if faa_clean[n] {
            let mut expect = c.initial;
            for &(orig, add) in &ops {
                if orig != expect {
                    v.push(format!(
                        "node {n}: FETCH_ADD returned {orig}, expected {expect}"
                    ));
                    break;
                }
                expect += add;
            }
            if fin != expect {
                v.push(format!("node {n}: counter is {fin}, expected {expect}"));
            }
        } else if fin < c.initial + ops.iter().map(|o| o.1).sum::<u64>() {
            v.push(format!("node {n}: counter {fin} lost successful adds"));
        }
    }
    if cfg.expect == Expect::RetryErrorsRequired && retry_errors == 0 {
        v.push(
            "the partition outlasted the retry budget but no WR failed with RETRY_EXC_ERR".into(),
        );
    }
}
