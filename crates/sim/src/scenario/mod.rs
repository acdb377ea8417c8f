//! Random RDMA workloads over the simulated network, and the invariants checked after each
//! run (`check.rs`): every WR completes exactly once, successful ones moved exactly the
//! right bytes, atomics are linearizable, and errors appear only where the scenario forces
//! them.

mod check;
mod config;
mod model;
mod post;

pub use config::{Expect, Report, ScenarioConfig};

use crate::world::World;
use check::check;
use model::{pick_len, pick_opcode, Counter, Op, RecvPlan, Side};
use oxrdma_core::{
    Access, AddressVector, Gid, Mtu, Nanos, QpAttr, QpCap, QpInitAttr, QpState, QpType,
    SharedBuffer, WrOpcode,
};
use post::{collect, post_recvs, post_sends};
use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::HashMap;
use std::sync::Arc;

/// Runs one scenario and checks its invariants.
pub fn run(cfg: &ScenarioConfig) -> Report {
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed ^ 0x005e_ed0f_0ad5);
    let mut world = World::new(cfg.nodes, cfg.net.clone(), cfg.seed);
    world.per_packet = cfg.per_packet;
    world.tx_slots = cfg.tx_slots;
    for n in &mut world.nodes {
        n.engine.set_send_runs(!cfg.per_packet);
    }
    let mut report = Report::default();
    let (pds, counters) = setup_nodes(&mut world, &mut rng);
    let mut sides = create_sides(cfg, &mut world, &pds, &mut rng);
    let cas_cells = plan_workload(cfg, &mut sides, &mut rng);
    register_buffers(&mut world, &mut sides, &pds, &cas_cells, &mut rng);
    connect_pairs(cfg, &mut world, &sides, &mut rng);
    drive(
        cfg,
        &mut world,
        &mut sides,
        &counters,
        &mut report.violations,
    );
    report.elapsed = sides.iter().map(|s| s.last_done).max().unwrap_or(0);
    teardown(&mut world, &mut sides, &mut report.violations);
    check(cfg, &sides, &cas_cells, &counters, &mut report);
    report.net = world.net.stats;
    report.world = world.stats;
    report.world.rx_run = world.nodes.iter().map(|n| n.engine.stats().rx_run).sum();
    report.world.tx_run = world.nodes.iter().map(|n| n.engine.stats().tx_run).sum();
    report
}

/// Per node: a protection domain and the FETCH_ADD counter every QP on it shares.
fn setup_nodes(world: &mut World, rng: &mut ChaCha8Rng) -> (Vec<u32>, Vec<Counter>) {
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

    (pds, counters)
}

/// QP pairs: pair p joins sides 2p and 2p+1 on two different random nodes.
fn create_sides(
    cfg: &ScenarioConfig,
    world: &mut World,
    pds: &[u32],
    rng: &mut ChaCha8Rng,
) -> Vec<Side> {
    // Queue pairs: pair p joins sides 2p and 2p+1 on two different random nodes.
    let mut sides: Vec<Side> = Vec::new();
    // Most QPs speak selective repeat; some do not (as rxe), so pairs of each kind and
    // mixed ones meet (drawn apart from `rng`, which the rest of the scenario follows).
    let mut sr = ChaCha8Rng::seed_from_u64(cfg.seed ^ 0x5e1e_c71e);
    for _ in 0..cfg.qp_pairs {
        let a = rng.random_range(0..cfg.nodes);
        let b = (a + rng.random_range(1..cfg.nodes.max(2))) % cfg.nodes.max(1);
        let mtu = Mtu::from_ibv(rng.random_range(1..=5)).expect("mtu");
        let rd_atomic = rng.random_range(1..=8u8);
        for (node, peer) in [(a, sides.len() + 1), (b, sides.len())] {
            let e = &mut world.nodes[node].engine;
            e.set_selective_repeat(sr.random_bool(cfg.selective_repeat));
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

    sides
}

/// The workload, laid out in each side's buffer. Returns the CAS cells: (side, offset in
/// the peer's buffer, initial value).
fn plan_workload(
    cfg: &ScenarioConfig,
    sides: &mut [Side],
    rng: &mut ChaCha8Rng,
) -> Vec<(usize, usize, u64)> {
    // The workload, laid out in each side's buffer. CAS cells: (side, offset in the peer's
    // buffer, initial value).
    let mut cas_cells: Vec<(usize, usize, u64)> = Vec::new();
    for s in 0..sides.len() {
        let peer = sides[s].peer;
        let cas_cell = sides[peer].alloc(8, rng);
        let mut cas_value = rng.next_u64();
        // The CAS chain starts from the cell's initial contents, set below.
        let cas_start = cas_value;
        for i in 0..cfg.wrs_per_qp {
            let opcode = if cfg.write_only {
                WrOpcode::RdmaWrite
            } else {
                pick_opcode(rng)
            };
            let len = match opcode {
                _ if cfg.write_only => cfg.max_len,
                WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd => 8,
                _ => pick_len(rng, cfg.max_len),
            };
            let inline = matches!(
                opcode,
                WrOpcode::Send | WrOpcode::RdmaWrite | WrOpcode::SendWithImm
            ) && len <= 64
                && rng.random_bool(0.3);
            let local = if opcode.is_atomic() {
                let at = sides[s].alloc(8, rng);
                vec![(at, 8)]
            } else {
                sides[s].pieces(len, cfg.max_sge, rng)
            };
            let (mut remote, mut compare_add, mut swap, mut recv) = (0, 0, 0, None);
            match opcode {
                WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm | WrOpcode::RdmaRead => {
                    remote = sides[peer].alloc(len, rng);
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
                let pieces = sides[peer].pieces(cap_len, cfg.max_sge, rng);
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

    cas_cells
}

/// Buffers: random contents (CAS cells at their chain's start), then registered.
fn register_buffers(
    world: &mut World,
    sides: &mut [Side],
    pds: &[u32],
    cas_cells: &[(usize, usize, u64)],
    rng: &mut ChaCha8Rng,
) {
    // Buffers: random contents, then registered.
    for s in sides.iter_mut() {
        let size = s.size.max(8);
        let mut image = vec![0u8; size];
        rng.fill_bytes(&mut image);
        let buf = Arc::new(SharedBuffer::new(size).expect("alloc"));
        s.image = image;
        s.buf = Some(buf);
    }
    for &(s, cell, start) in cas_cells {
        let peer = sides[s].peer;
        sides[peer].image[cell..cell + 8].copy_from_slice(&start.to_ne_bytes());
    }
    for s in sides.iter_mut() {
        let buf = s.buf.clone().expect("buffer");
        buf.write(0, &s.image);
        let e = &mut world.nodes[s.node].engine;
        let mr = e.reg_mr(pds[s.node], buf, None, Access::ALL).expect("mr");
        s.mr = Some(mr);
    }
}

/// Takes every QP to RTS, aimed at its pair.
fn connect_pairs(cfg: &ScenarioConfig, world: &mut World, sides: &[Side], rng: &mut ChaCha8Rng) {
    // Which pairs are secure, drawn apart from `rng` (which the rest follows).
    let mut sec = ChaCha8Rng::seed_from_u64(cfg.seed ^ 0x5ec0_7e5e);
    let secure: Vec<bool> = (0..sides.len() / 2)
        .map(|_| sec.random_bool(cfg.secure))
        .collect();
    // Connect every pair.
    for i in 0..sides.len() {
        let (me, peer) = (&sides[i], &sides[sides[i].peer]);
        let peer_gid = Gid::from(world.nodes[peer.node].ip);
        let my_gid = Gid::from(world.nodes[me.node].ip);
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
                ah_attr: Some(AddressVector::to(peer_gid)),
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
        for (n, a) in steps.iter().enumerate() {
            let pair = i.min(me.peer) / 2;
            if n == 1 && secure[pair] {
                use oxrdma_core::secure::{derive, End, Suite};
                let suite = Suite::ALL[pair % Suite::ALL.len()];
                let secret = (cfg.seed ^ pair as u64).to_le_bytes();
                let end = |gid, s: &Side| End {
                    gid,
                    qpn: s.qpn,
                    psn: s.sq_psn,
                };
                let keys = derive(suite, &secret, &end(my_gid, me), &end(peer_gid, peer));
                e.secure_qp(me.qpn, &keys).expect("secure_qp");
            }
            e.modify_qp(me.qpn, a).expect("modify_qp");
        }
    }
}

/// Posts what fits, steps the world, collects completions, until everything is posted and
/// the network is quiet (or the time limit, which is a hang).
fn drive(
    cfg: &ScenarioConfig,
    world: &mut World,
    sides: &mut [Side],
    counters: &[Counter],
    v: &mut Vec<String>,
) {
    // Run: post what fits, step the world, collect completions.
    let recv_interval: Nanos = 200_000;
    let mut next_recv_time: Nanos = if cfg.late_recv { recv_interval } else { 0 };
    if !cfg.late_recv {
        for s in 0..sides.len() {
            post_recvs(world, sides, s, usize::MAX, v);
        }
    }
    loop {
        for s in 0..sides.len() {
            post_sends(world, sides, s, counters, v);
        }
        let recvs_pending = sides.iter().any(|s| s.next_recv < s.recvs.len());
        let limit = if cfg.late_recv && recvs_pending {
            next_recv_time
        } else {
            cfg.time_limit
        };
        let progressed = world.step(limit);
        collect(world, sides, v);
        if !progressed {
            if cfg.late_recv && recvs_pending && world.now < cfg.time_limit {
                world.now = world.now.max(next_recv_time);
                for s in 0..sides.len() {
                    post_recvs(world, sides, s, 2, v);
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
}

/// ERR flushes whatever is left, so every WR must now have completed.
fn teardown(world: &mut World, sides: &mut [Side], v: &mut Vec<String>) {
    // Teardown: ERR flushes whatever is left, so every WR must now have completed.
    for s in sides.iter() {
        let err = QpAttr {
            qp_state: Some(QpState::Err),
            ..Default::default()
        };
        world.nodes[s.node]
            .engine
            .modify_qp(s.qpn, &err)
            .expect("to ERR");
    }
    collect(world, sides, v);
}
