//! Posting the planned work as the QPs have room, and collecting what completes.

use super::model::{concat, Counter, Side, RECV_TAG};
use crate::world::World;
use oxrdma_core::{RecvWr, SendData, SendFlags, SendWr, Sge, VerbsError, WrOpcode};

pub(super) fn post_recvs(
    world: &mut World,
    sides: &mut [Side],
    s: usize,
    max: usize,
    v: &mut Vec<String>,
) {
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

pub(super) fn post_sends(
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
            SendData::Inline(concat(&side.image, &op.local).into())
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

pub(super) fn collect(world: &mut World, sides: &mut [Side], v: &mut Vec<String>) {
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
