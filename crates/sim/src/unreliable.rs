//! Random UC and UD workloads over the simulated network, and the promises checked after
//! each run:
//!
//! - every send WR completes exactly once, successfully, in order (nothing waits for the
//!   peer, so nothing can fail);
//! - every message delivered is intact and delivered once, in the order sent; a lost one is
//!   absent, never partial: receive WQEs complete in posting order with no gaps (a WQE a
//!   dropped UC message had started is reused);
//! - UD: the completion names the true sender (QPN and GID), and a datagram with the wrong
//!   Q_Key is never delivered;
//! - without loss or corruption everything is delivered (UC: without reordering either), so
//!   the checks can fail.

use crate::net::NetConfig;
use crate::pair::{connect_attrs, PairOptions};
use crate::world::World;
use oxrdma_core::{
    Access, AddressVector, Gid, MemoryRegion, Mtu, QpCap, QpInitAttr, QpType, RecvWr, SendData,
    SendFlags, SendWr, Sge, SharedBuffer, UdDest, WcOpcode, WcStatus, WorkCompletion, WrOpcode,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::Arc;

/// What to run.
#[derive(Debug, Clone)]
pub struct UnreliableConfig {
    pub seed: u64,
    /// `Uc` or `Ud`.
    pub qp_type: QpType,
    pub nodes: usize,
    /// UC: connected pairs; UD: QPs.
    pub qps: usize,
    pub msgs_per_qp: usize,
    /// Largest UC message (UD messages are at most one MTU).
    pub max_len: usize,
    pub net: NetConfig,
    /// UD: share of datagrams sent with a wrong Q_Key.
    pub wrong_qkey: f64,
}

impl UnreliableConfig {
    pub fn new(seed: u64, qp_type: QpType) -> Self {
        UnreliableConfig {
            seed,
            qp_type,
            nodes: 3,
            qps: 4,
            msgs_per_qp: 24,
            max_len: 16 << 10,
            net: NetConfig::default(),
            wrong_qkey: 0.1,
        }
    }
}

#[derive(Debug, Default)]
pub struct UnreliableReport {
    pub violations: Vec<String>,
    /// Messages that could have been delivered (right Q_Key), and those that were.
    pub deliverable: u64,
    pub delivered: u64,
}

const QKEY: u32 = 0x0bad_cafe;

/// One QP of the run and what it sent and expects.
struct Side {
    node: usize,
    pd: u32,
    qpn: u32,
    cq: u32,
    mr: MemoryRegion,
    buf: Arc<SharedBuffer>,
    /// Bytes per receive slot (receive `i` lands at `i * slot`); writes land after them.
    slot: usize,
    recvs: usize,
    /// UD: address handles to every node.
    ahs: Vec<u32>,
}

/// The bytes of message `id` (an id in the first 8 bytes, then a pattern from it).
fn content(id: u64, len: usize) -> Vec<u8> {
    let mut v: Vec<u8> = (0..len)
        .map(|i| (id as usize).wrapping_mul(31).wrapping_add(i * 7) as u8)
        .collect();
    v[..8].copy_from_slice(&id.to_le_bytes());
    v
}

fn side(
    world: &mut World,
    node: usize,
    t: QpType,
    recvs: usize,
    slot: usize,
    extra: usize,
) -> Side {
    let e = &mut world.nodes[node].engine;
    let pd = e.alloc_pd().expect("pd");
    let cq = e.create_cq(8192).expect("cq");
    let cap = QpCap {
        max_send_wr: 4096,
        max_recv_wr: recvs as u32 + 1,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let init = QpInitAttr {
        qp_type: t,
        send_cq: cq,
        recv_cq: cq,
        cap,
        sq_sig_all: true,
        srq: None,
    };
    let qpn = e.create_qp(pd, &init).expect("qp");
    let buf = Arc::new(SharedBuffer::new(recvs * slot + extra + 8).expect("buffer"));
    let mr = e.reg_mr(pd, buf.clone(), None, Access::ALL).expect("mr");
    Side {
        node,
        pd,
        qpn,
        cq,
        mr,
        buf,
        slot,
        recvs,
        ahs: Vec::new(),
    }
}

fn sge(s: &Side, off: usize, len: usize) -> Sge {
    Sge {
        addr: s.mr.iova + off as u64,
        length: len as u32,
        lkey: s.mr.lkey,
    }
}

fn post_recvs(world: &mut World, s: &Side) {
    for i in 0..s.recvs {
        let wr = RecvWr {
            wr_id: i as u64,
            sges: vec![sge(s, i * s.slot, s.slot)].into(),
        };
        world.nodes[s.node]
            .engine
            .post_recv(s.qpn, wr)
            .expect("post_recv");
    }
}

fn take(world: &mut World, s: &Side) -> Vec<WorkCompletion> {
    world.nodes[s.node]
        .engine
        .poll_cq(s.cq, usize::MAX)
        .expect("cq")
}

/// Runs one workload and checks it.
pub fn run_unreliable(cfg: &UnreliableConfig) -> UnreliableReport {
    match cfg.qp_type {
        QpType::Uc => run_uc(cfg),
        QpType::Ud => run_ud(cfg),
        QpType::Rc => panic!("RC has its own scenario"),
    }
}

/// Sender completions: all successful, each WR once, in posting order.
fn check_sends(wcs: &[WorkCompletion], n: usize, who: &str, v: &mut Vec<String>) {
    let ids: Vec<u64> = wcs
        .iter()
        .filter(|w| w.opcode != WcOpcode::Recv && w.opcode != WcOpcode::RecvRdmaWithImm)
        .map(|w| w.wr_id)
        .collect();
    if ids != (0..n as u64).collect::<Vec<_>>() {
        v.push(format!("{who}: send completions {ids:?}, want 0..{n}"));
    }
    if let Some(w) = wcs.iter().find(|w| w.status != WcStatus::Success) {
        v.push(format!("{who}: completion with an error: {w:?}"));
    }
}

fn run_uc(cfg: &UnreliableConfig) -> UnreliableReport {
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed ^ 0x0c0c);
    let mut world = World::new(cfg.nodes.max(2), cfg.net.clone(), cfg.seed);
    let mut r = UnreliableReport::default();
    let n = cfg.msgs_per_qp;
    let mut pairs = Vec::new();
    for p in 0..cfg.qps {
        let a = rng.random_range(0..world.nodes.len());
        let b = (a + rng.random_range(1..world.nodes.len())) % world.nodes.len();
        let mtu = Mtu::from_ibv(rng.random_range(1..=5)).expect("mtu");
        let lens: Vec<usize> = (0..n)
            .map(|_| rng.random_range(8..=cfg.max_len.max(8)))
            .collect();
        let ops: Vec<WrOpcode> = (0..n)
            .map(|_| {
                if rng.random_bool(0.5) {
                    WrOpcode::Send
                } else {
                    WrOpcode::RdmaWriteWithImm
                }
            })
            .collect();
        let total: usize = lens.iter().sum();
        let slot = cfg.max_len.max(8);
        let sa = side(&mut world, a, QpType::Uc, 0, slot, total);
        // The receiver: a slot per receive, then every WRITE's own landing area.
        let sb = side(&mut world, b, QpType::Uc, n, slot, total);
        let o = PairOptions {
            qp_type: QpType::Uc,
            mtu,
            ..Default::default()
        };
        let (ga, gb) = (Gid::from(world.nodes[a].ip), Gid::from(world.nodes[b].ip));
        let (pa, pb) = (
            world.nodes[a].engine.random_psn(),
            world.nodes[b].engine.random_psn(),
        );
        for attr in connect_attrs(&o, gb, sb.qpn, pb, pa) {
            world.nodes[a]
                .engine
                .modify_qp(sa.qpn, &attr)
                .expect("modify");
        }
        for attr in connect_attrs(&o, ga, sa.qpn, pa, pb) {
            world.nodes[b]
                .engine
                .modify_qp(sb.qpn, &attr)
                .expect("modify");
        }
        post_recvs(&mut world, &sb);
        let mut off = 0;
        for (i, (&len, &op)) in lens.iter().zip(&ops).enumerate() {
            let id = (p * n + i) as u64;
            sa.buf.write(off, &content(id, len));
            let mut wr = SendWr::new(
                i as u64,
                op,
                SendData::Sges(vec![sge(&sa, off, len)].into()),
            );
            wr.flags = SendFlags::SIGNALED;
            wr.imm = i as u32;
            wr.remote_addr = sb.mr.iova + (n * slot + off) as u64;
            wr.rkey = sb.mr.rkey;
            world.nodes[a]
                .engine
                .post_send(sa.qpn, wr)
                .expect("post_send");
            off += len;
        }
        pairs.push((sa, sb, lens, ops));
    }
    world.run_until_idle(world.now + 600_000_000_000);
    for (p, (sa, sb, lens, ops)) in pairs.iter().enumerate() {
        let who = format!("UC pair {p}");
        check_sends(&take(&mut world, sa), n, &who, &mut r.violations);
        let wcs = take(&mut world, sb);
        r.deliverable += n as u64;
        let starts: Vec<usize> = lens
            .iter()
            .scan(0, |o, &l| {
                let s = *o;
                *o += l;
                Some(s)
            })
            .collect();
        let mut last: Option<usize> = None;
        for (k, w) in wcs.iter().enumerate() {
            if w.status != WcStatus::Success {
                r.violations.push(format!("{who}: receive error {w:?}"));
                continue;
            }
            if w.wr_id != k as u64 {
                r.violations.push(format!(
                    "{who}: receive WQE {} completed {k}th (a WQE skipped or reused wrongly)",
                    w.wr_id
                ));
            }
            let (m, landed) = match w.opcode {
                WcOpcode::Recv => {
                    let mut id = [0u8; 8];
                    sb.buf.read(w.wr_id as usize * sb.slot, &mut id);
                    let m = (u64::from_le_bytes(id) as usize).wrapping_sub(p * n);
                    (m, w.wr_id as usize * sb.slot)
                }
                _ => {
                    let m = w.imm.unwrap_or(u32::MAX) as usize;
                    (m, n * sb.slot + starts.get(m).copied().unwrap_or(0))
                }
            };
            if m >= n {
                r.violations
                    .push(format!("{who}: a completion for no message: {w:?}"));
                continue;
            }
            let want_op = if ops[m] == WrOpcode::Send {
                WcOpcode::Recv
            } else {
                WcOpcode::RecvRdmaWithImm
            };
            if w.opcode != want_op || (w.opcode == WcOpcode::Recv && w.byte_len as usize != lens[m])
            {
                r.violations
                    .push(format!("{who}: message {m} completed as {w:?}"));
            }
            let mut got = vec![0u8; lens[m]];
            sb.buf.read(landed, &mut got);
            if got != content((p * n + m) as u64, lens[m]) {
                r.violations.push(format!("{who}: message {m} not intact"));
            }
            if last.is_some_and(|l| m <= l) {
                r.violations.push(format!(
                    "{who}: message {m} after {last:?} (order or duplicate)"
                ));
            }
            last = Some(m);
            r.delivered += 1;
        }
    }
    // Reordering costs UC messages too (a packet out of sequence ends its message).
    let clean = cfg.net.loss == 0.0 && cfg.net.corrupt == 0.0 && cfg.net.reorder == 0.0;
    if clean && r.delivered != r.deliverable {
        r.violations.push(format!(
            "clean network, yet {} of {} delivered",
            r.delivered, r.deliverable
        ));
    }
    r
}

fn run_ud(cfg: &UnreliableConfig) -> UnreliableReport {
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed ^ 0x0d0d);
    let mut world = World::new(cfg.nodes.max(2), cfg.net.clone(), cfg.seed);
    let mut r = UnreliableReport::default();
    let nodes = world.nodes.len();
    let mtu = world.nodes[0].engine.config().max_mtu.bytes();
    let q = cfg.qps.max(2);
    let n = cfg.msgs_per_qp;
    // Each QP may receive everything the others send; slots of GRH + MTU.
    let recvs = n * (q - 1);
    let mut sides: Vec<Side> = (0..q)
        .map(|i| side(&mut world, i % nodes, QpType::Ud, recvs, 40 + mtu, n * mtu))
        .collect();
    let o = PairOptions {
        qp_type: QpType::Ud,
        qkey: QKEY,
        ..Default::default()
    };
    for s in &mut sides {
        let e = &mut world.nodes[s.node].engine;
        for attr in connect_attrs(&o, Gid::default(), 0, 0, e.random_psn()) {
            e.modify_qp(s.qpn, &attr).expect("modify");
        }
        s.ahs = (0..nodes)
            .map(|t| {
                let dgid = Gid::from(world.nodes[t].ip);
                world.nodes[s.node]
                    .engine
                    .create_ah(s.pd, AddressVector::to(dgid))
                    .expect("ah")
            })
            .collect();
        post_recvs(&mut world, s);
    }
    // sent[(from, seq)] = (to, len, right Q_Key)
    let mut sent = std::collections::HashMap::new();
    for (from, s) in sides.iter().enumerate() {
        for seq in 0..n {
            let to = (from + rng.random_range(1..q)) % q;
            let len = rng.random_range(8..=mtu);
            let right = !rng.random_bool(cfg.wrong_qkey);
            let id = ((from as u64) << 32) | seq as u64;
            s.buf.write(s.recvs * s.slot + seq * mtu, &content(id, len));
            let mut wr = SendWr::new(
                seq as u64,
                WrOpcode::Send,
                SendData::Sges(vec![sge(s, s.recvs * s.slot + seq * mtu, len)].into()),
            );
            wr.ud = Some(UdDest {
                ah: s.ahs[sides[to].node],
                remote_qpn: sides[to].qpn,
                remote_qkey: if right { QKEY } else { QKEY ^ 1 },
            });
            world.nodes[s.node]
                .engine
                .post_send(s.qpn, wr)
                .expect("post_send");
            sent.insert(id, (to, len, right));
            r.deliverable += u64::from(right);
        }
    }
    world.run_until_idle(world.now + 600_000_000_000);
    let mut seen = std::collections::HashSet::new();
    for (i, s) in sides.iter().enumerate() {
        let who = format!("UD QP {i}");
        let wcs = take(&mut world, s);
        check_sends(&wcs, n, &who, &mut r.violations);
        let recvs: Vec<&WorkCompletion> =
            wcs.iter().filter(|w| w.opcode == WcOpcode::Recv).collect();
        for (k, w) in recvs.iter().enumerate() {
            if w.status != WcStatus::Success || w.wr_id != k as u64 {
                r.violations.push(format!("{who}: receive {k} is {w:?}"));
                continue;
            }
            let at = w.wr_id as usize * s.slot;
            let mut id = [0u8; 8];
            s.buf.read(at + 40, &mut id);
            let id = u64::from_le_bytes(id);
            let Some(&(to, len, right)) = sent.get(&id) else {
                r.violations.push(format!("{who}: a datagram nobody sent"));
                continue;
            };
            let from = (id >> 32) as usize;
            let mut got = vec![0u8; len];
            s.buf.read(at + 40, &mut got);
            let src_gid = Gid::from(world.nodes[sides[from].node].ip);
            if to != i
                || !right
                || w.byte_len as usize != 40 + len
                || got != content(id, len)
                || w.src_qp != sides[from].qpn
                || w.src_gid != Some(src_gid)
            {
                r.violations.push(format!(
                    "{who}: datagram {id:#x} wrong (to {to}, right Q_Key {right}): {w:?}"
                ));
            }
            if !seen.insert(id) {
                r.violations
                    .push(format!("{who}: datagram {id:#x} delivered twice"));
            }
            r.delivered += 1;
        }
    }
    if cfg.net.loss == 0.0 && cfg.net.corrupt == 0.0 && r.delivered != r.deliverable {
        r.violations.push(format!(
            "clean network, yet {} of {} delivered",
            r.delivered, r.deliverable
        ));
    }
    r
}
