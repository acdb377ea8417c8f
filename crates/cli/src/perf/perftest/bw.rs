//! The traffic of perftest's bandwidth tests (PERFTEST-OOB.md §4, §5): the client streams
//! WRs at perftest's stepped addresses; a send server keeps receives posted and counts.

use super::res::{inc, Res};
use crate::perf::bw::signal_every;
use crate::perf::report::{bar, BwResult, Progress};
use crate::perf::side::STALL;
use crate::perf::{Conn, PerfArgs};
use anyhow::bail;
use oxrdma::{RecvWr, SendData, SendFlags, SendWr, WcOpcode, WrOpcode};
use std::time::Instant;

/// How long a UC or UD send_bw server waits for more once messages stop coming: the
/// missing ones are lost, not late.
const LOSS_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// Where perftest puts message `k` inside a half: consecutive slots of INC(size) that wrap
/// after one cycle buffer, or always the start when a message is over half a cycle.
pub fn offset(k: u64, size: usize, cycle: usize, cache: usize) -> usize {
    if size > cycle / 2 {
        return 0;
    }
    let step = inc(size, cache);
    (k % (cycle / step) as u64) as usize * step
}

/// What the client needs from the handshake besides its own resources.
pub struct Target {
    pub vaddr: u64,
    pub rkey: u32,
    pub cycle: usize,
    pub cache: usize,
}

/// Posts `iters` WRs with up to `depth` in flight and returns the measured bandwidth.
pub fn client(res: &Res, args: &PerfArgs, size: usize, t: &Target) -> anyhow::Result<BwResult> {
    let iters = args.iters;
    let depth = u64::from(args.tx_depth).min(iters);
    let every = signal_every(size, depth);
    let op = args.opcode();
    let pb = bar(args.progress, iters, &format!("{size} B"));
    let (mut posted, mut done) = (0u64, 0u64);
    let mut prog = Progress::default();
    let mut wcs = Vec::new();
    let start = Instant::now();
    let mut last = start;
    while done < iters {
        while posted < iters && posted - done < depth {
            let off = offset(posted, size, t.cycle, t.cache);
            let mut wr = SendWr::new(
                posted,
                op,
                SendData::Sges(vec![res.mr.sge(off, size)?].into()),
            );
            if op != WrOpcode::Send {
                (wr.remote_addr, wr.rkey) = (t.vaddr + off as u64, t.rkey);
            }
            wr.ud = res.ud();
            // FETCH_AND_ADD adds 1; CMP_AND_SWAP compares with 0 and swaps in 0.
            wr.compare_add = u64::from(op == WrOpcode::AtomicFetchAndAdd);
            let signaled = (posted + 1) % every == 0 || posted + 1 == iters;
            wr.flags = if signaled {
                SendFlags::SIGNALED
            } else {
                SendFlags::empty()
            };
            res.qp.post_send(wr)?;
            posted += 1;
        }
        res.poll(&mut wcs)?;
        // RC completes in order: a signaled WR vouches for every WR before it.
        if let Some(w) = wcs.iter().map(|w| w.wr_id).max() {
            done = done.max(w + 1);
        }
        let now = Instant::now();
        if !wcs.is_empty() {
            last = now;
            prog.sample(now - start, done);
            pb.set_position(done);
        } else if now - last > STALL {
            bail!(
                "no completion for {} s ({done} of {iters} WRs done)",
                STALL.as_secs()
            );
        }
    }
    pb.finish_and_clear();
    Ok(prog.bw(args.name(), size, iters, start.elapsed().as_secs_f64()))
}

/// The send_bw server before HS4: `min(rx_depth, iters)` receives of `size` bytes into the
/// second half. Returns how many were posted.
pub fn post_receives(res: &Res, args: &PerfArgs, size: usize) -> anyhow::Result<u64> {
    let n = u64::from(args.rx_depth).min(args.iters);
    for k in 0..n {
        post_recv(res, size, k)?;
    }
    Ok(n)
}

fn post_recv(res: &Res, size: usize, k: u64) -> anyhow::Result<()> {
    res.qp.post_recv(RecvWr {
        wr_id: k,
        sges: vec![res.mr.sge(res.half, res.recv_len(size))?].into(),
    })?;
    Ok(())
}

/// The send_bw server after HS4: counts `iters` messages of exactly `size` bytes,
/// re-posting receives until `iters` have been posted in all. Over UC and UD, which lose
/// messages for good, it stops when none has come for a while (as perftest's check-alive
/// does) and reports what arrived.
pub fn serve_sends(
    res: &Res,
    args: &PerfArgs,
    size: usize,
    mut posted: u64,
) -> anyhow::Result<BwResult> {
    let iters = args.iters;
    let mut got = 0u64;
    let mut prog = Progress::default();
    let mut wcs = Vec::new();
    let mut start = None;
    let mut last = Instant::now();
    let lossy = res.conn != Conn::Rc;
    while got < iters {
        if lossy && start.is_some() && last.elapsed() > LOSS_WAIT {
            eprintln!(
                "{} of {iters} messages lost ({} does not retransmit)",
                iters - got,
                res.conn.label()
            );
            break;
        }
        res.poll(&mut wcs)?;
        for w in wcs.iter().filter(|w| w.opcode == WcOpcode::Recv) {
            if w.byte_len as usize != res.recv_len(size) {
                bail!(
                    "a message of {} B arrived; this side runs -s {size}",
                    (w.byte_len as usize).saturating_sub(res.recv_len(size) - size)
                );
            }
            got += 1;
            if posted < iters {
                post_recv(res, size, posted)?;
                posted += 1;
            }
        }
        let now = Instant::now();
        if !wcs.is_empty() {
            let t0 = *start.get_or_insert(now);
            last = now;
            prog.sample(now - t0, got);
        } else if now - last > STALL {
            bail!(
                "no message for {} s ({got} of {iters} received)",
                STALL.as_secs()
            );
        }
    }
    let secs = start.map_or(0.0, |t| t.elapsed().as_secs_f64()).max(1e-9);
    Ok(prog.bw(args.name(), size, got, secs))
}

/// The sum of the 64 counters a FETCH_AND_ADD client steps through in our second half.
pub fn fetch_add_total(res: &Res, cycle: usize, cache: usize) -> u64 {
    let step = inc(8, cache);
    (0..cycle / step)
        .filter_map(|k| res.mr.atomic_u64(res.half + k * step))
        .map(|a| a.load(std::sync::atomic::Ordering::Acquire))
        .fold(0, u64::wrapping_add)
}
