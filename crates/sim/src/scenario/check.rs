//! The invariants checked after each run: every WR completes exactly once, successful ones
//! moved exactly the right bytes (the whole memory image is compared, so stray writes show
//! too), atomics are linearizable, and errors appear only where the scenario forces them.

use super::config::{Expect, Report, ScenarioConfig};
use super::model::{apply, concat, Counter, Op, Piece, Side, RECV_TAG};
use oxrdma_core::{WcOpcode, WcStatus, WrOpcode};

pub(super) fn expected_wc_opcode(op: WrOpcode) -> WcOpcode {
    op.wc_opcode()
}

/// What the run should have left in memory, built up while the completions are checked.
struct Expected {
    /// Each side's buffer as it should be.
    images: Vec<Vec<u8>>,
    /// Bytes whose final value is known (a failed WR may have partly written others).
    care: Vec<Vec<bool>>,
    /// Per node: (original value returned, value added) of every successful FETCH_ADD.
    faa: Vec<Vec<(u64, u64)>>,
    /// Per node: no FETCH_ADD on its counter failed (so the chain must be exact).
    faa_clean: Vec<bool>,
    retry_errors: usize,
}

/// Marks `pieces` of a buffer as unknown.
fn dont_care(care: &mut [bool], pieces: &[Piece]) {
    for &(o, n) in pieces {
        care[o..o + n].iter_mut().for_each(|c| *c = false);
    }
}

/// The invariants.
pub(super) fn check(
    cfg: &ScenarioConfig,
    sides: &[Side],
    cas_cells: &[(usize, usize, u64)],
    counters: &[Counter],
    report: &mut Report,
) {
    let mut e = Expected {
        images: sides.iter().map(|s| s.image.clone()).collect(),
        care: sides.iter().map(|s| vec![true; s.image.len()]).collect(),
        faa: vec![Vec::new(); counters.len()],
        faa_clean: vec![true; counters.len()],
        retry_errors: 0,
    };
    check_sends(cfg, sides, cas_cells, report, &mut e);
    let v = &mut report.violations;
    check_receives(cfg, sides, v, &mut e);
    settle_cas_cells(sides, cas_cells, &mut e);
    check_memory(sides, &e, v);
    check_fetch_add(counters, &e, v);
    if cfg.expect == Expect::RetryErrorsRequired && e.retry_errors == 0 {
        v.push(
            "the partition outlasted the retry budget but no WR failed with RETRY_EXC_ERR".into(),
        );
    }
}

/// Send WRs: each completes once (errors only where allowed, and nothing succeeds after
/// an error), in order, with the right opcode; what succeeded is applied to the images.
fn check_sends(
    cfg: &ScenarioConfig,
    sides: &[Side],
    cas_cells: &[(usize, usize, u64)],
    report: &mut Report,
    e: &mut Expected,
) {
    let v = &mut report.violations;
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
                            e.retry_errors += 1;
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
                        dont_care(&mut e.care[peer], &remote_piece)
                    }
                    // A READ's or atomic's local buffer is undefined after an error (a
                    // response placed before an earlier WR failed may be there).
                    WrOpcode::RdmaRead | WrOpcode::AtomicCmpAndSwp => {
                        dont_care(&mut e.care[si], &op.local)
                    }
                    WrOpcode::AtomicFetchAndAdd => {
                        dont_care(&mut e.care[si], &op.local);
                        e.faa_clean[sides[peer].node] = false;
                    }
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
                    apply(&mut e.images[peer], &remote_piece, &data);
                }
                WrOpcode::RdmaRead => {
                    let data = concat(&sides[peer].image, &remote_piece);
                    apply(&mut e.images[si], &op.local, &data);
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
                        e.faa[sides[peer].node].push((orig, op.compare_add));
                    }
                    dont_care(&mut e.care[si], &op.local);
                }
                _ => {}
            }
        }
        if let Some((_, _)) = first_error {
            for &(cs, cell, _) in cas_cells {
                if cs == si {
                    dont_care(&mut e.care[s.peer], &[(cell, 8)]);
                }
            }
        }
    }
}

/// Receives: exactly one completion each; successful ones carry the right message.
fn check_receives(cfg: &ScenarioConfig, sides: &[Side], v: &mut Vec<String>, e: &mut Expected) {
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
                dont_care(&mut e.care[si], &plan.pieces);
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
                apply(&mut e.images[si], &plan.pieces, &data);
            }
        }
    }
}

/// CAS cells of clean chains end at the last swap value.
fn settle_cas_cells(sides: &[Side], cas_cells: &[(usize, usize, u64)], e: &mut Expected) {
    for &(cs, cell, start) in cas_cells {
        let s = &sides[cs];
        let last = s
            .ops
            .iter()
            .rev()
            .find(|o| o.opcode == WrOpcode::AtomicCmpAndSwp)
            .map_or(start, |o| o.swap);
        if e.care[s.peer][cell] {
            e.images[s.peer][cell..cell + 8].copy_from_slice(&last.to_ne_bytes());
        }
    }
}

/// The whole memory image of every side.
fn check_memory(sides: &[Side], e: &Expected, v: &mut Vec<String>) {
    for (si, s) in sides.iter().enumerate() {
        let mut actual = vec![0u8; s.image.len()];
        s.buf.as_ref().expect("buf").read(0, &mut actual);
        if let Some(at) = (0..actual.len()).find(|&i| e.care[si][i] && actual[i] != e.images[si][i])
        {
            v.push(format!(
                "qp {:#x}: memory differs from the expected image at offset {at} (got {:#04x}, want {:#04x})",
                s.qpn, actual[at], e.images[si][at]
            ));
        }
    }
}

/// FETCH_ADD: the originals chain from the initial value with no gap and no repeat.
fn check_fetch_add(counters: &[Counter], e: &Expected, v: &mut Vec<String>) {
    for (n, c) in counters.iter().enumerate() {
        let mut ops = e.faa[n].clone();
        ops.sort_unstable();
        if ops.windows(2).any(|w| w[0].0 == w[1].0) {
            v.push(format!("node {n}: two FETCH_ADDs returned the same value"));
        }
        let mut got = [0u8; 8];
        c.buf.read(0, &mut got);
        let fin = u64::from_ne_bytes(got);
        if e.faa_clean[n] {
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
}
