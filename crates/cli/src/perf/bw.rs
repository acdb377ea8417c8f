//! Bandwidth tests: the client keeps `-t` WRs in flight on every QP; the server is passive
//! for write, read and atomic, and keeps receives posted for send.

use super::report::{bar, BwResult, Progress};
use super::side::{Side, STALL};
use super::{AtomicOp, Conn, PerfArgs, Verb};
use anyhow::bail;
use oxrdma::{RecvWr, SendData, SendFlags, SendWr, WcOpcode, WrOpcode};
use std::time::{Duration, Instant};

/// How long a UC or UD server waits for the messages still missing once the client is
/// done (on a quiet network they are lost, not late).
const LOSS_WAIT: Duration = Duration::from_millis(200);

/// With `-e`: how long one sleep on the completion channel lasts at most (the loop then
/// looks at the clock and the control connection).
const SLEEP: Duration = Duration::from_millis(10);

/// Empty polls between two looks at the clock in the client's loop.
const CLOCK_EVERY: u32 = 64;

/// perftest's cq_mod: one signaled WR in 100 (capped to the depth), every one for
/// messages over 8 KiB. Posting as perftest does makes `oxrdma perf` and perftest on the
/// C library the same test (before, one WR in 64 was signaled whatever the size).
pub(crate) fn signal_every(size: usize, depth: u64) -> u64 {
    if size > 8192 {
        1
    } else {
        depth.min(100)
    }
}

/// The WR the client posts on QP `i`.
fn work_request(
    side: &Side,
    args: &PerfArgs,
    i: usize,
    size: usize,
    inline: &[u8],
) -> oxrdma::Result<SendWr> {
    let sge = SendData::Sges(vec![side.mr.sge(i * side.slot, size)?].into());
    let data = if !inline.is_empty() {
        SendData::Inline(inline.into())
    } else {
        sge
    };
    let opcode = args.opcode();
    let mut wr = SendWr::new(0, opcode, data);
    (wr.remote_addr, wr.rkey) = (side.peers[i].addr, side.peers[i].rkey);
    wr.ud = side.ud(i);
    // FETCH_ADD adds 1 (the server checks the sum); CMP_SWAP swaps 0 for 0, so every one
    // succeeds and the memory stays as it is.
    wr.compare_add = u64::from(opcode == WrOpcode::AtomicFetchAndAdd);
    Ok(wr)
}

/// Whether WRs of this size go inline.
fn inline_bytes(side: &Side, args: &PerfArgs, size: usize) -> oxrdma::Result<Vec<u8>> {
    if matches!(args.verb, Verb::Write | Verb::Send) && size <= args.inline_size as usize {
        let mut v = vec![0u8; size];
        side.mr.read(0, &mut v)?;
        Ok(v)
    } else {
        Ok(Vec::new())
    }
}

pub fn client(side: &mut Side, args: &PerfArgs, size: usize) -> anyhow::Result<BwResult> {
    let q = side.qps.len();
    let depth = u64::from(args.tx_depth);
    let signal_every = signal_every(size, depth);
    let timed = args.duration;
    let mut target = vec![
        if timed.is_some() {
            u64::MAX
        } else {
            args.iters
        };
        q
    ];
    let (mut posted, mut done) = (vec![0u64; q], vec![0u64; q]);
    let inline = inline_bytes(side, args, size)?;
    let templates: Vec<SendWr> = (0..q)
        .map(|i| work_request(side, args, i, size, &inline))
        .collect::<oxrdma::Result<_>>()?;
    let pb = match timed {
        Some(d) => bar(args.progress, d.as_secs(), "seconds"),
        None => bar(args.progress, args.iters * q as u64, &format!("{size} B")),
    };
    let mut prog = Progress::default();
    let mut wcs = Vec::new();
    let cpu0 = super::cpu::side(&side.ctx);
    let start = Instant::now();
    let mut last = start;
    let mut stopping = false;
    let mut empty = 0u32;
    loop {
        if let (Some(d), false) = (timed, stopping) {
            // The clock once in CLOCK_EVERY empty polls (it was 5 % of the client's CPU).
            if empty.is_multiple_of(CLOCK_EVERY) && start.elapsed() >= d {
                // One last (signaled) WR per QP, so every QP's tail is seen to complete.
                stopping = true;
                for i in 0..q {
                    target[i] = posted[i] + 1;
                }
            }
        }
        for i in 0..q {
            while posted[i] < target[i] && posted[i] - done[i] < depth {
                let mut wr = templates[i].clone();
                wr.wr_id = posted[i];
                let signaled = (posted[i] + 1) % signal_every == 0 || posted[i] + 1 == target[i];
                wr.flags = if signaled {
                    SendFlags::SIGNALED
                } else {
                    SendFlags::empty()
                };
                side.qps[i].post_send(wr)?;
                posted[i] += 1;
            }
        }
        side.poll_or_sleep(&mut wcs, SLEEP)?;
        for w in &wcs {
            let i = side.qp_index(w)?;
            done[i] = w.wr_id + 1;
        }
        if wcs.is_empty() {
            empty = empty.wrapping_add(1);
            if !empty.is_multiple_of(CLOCK_EVERY) && !side.sleeps() {
                continue;
            }
        }
        let now = Instant::now();
        if !wcs.is_empty() {
            last = now;
            let sum: u64 = done.iter().sum();
            prog.sample(now - start, sum);
            pb.set_position(match timed {
                Some(_) => (now - start).as_secs(),
                None => sum,
            });
        } else if now - last > STALL {
            let sum: u64 = done.iter().sum();
            bail!("no completion for {} s ({sum} WRs done)", STALL.as_secs());
        }
        if done.iter().zip(&target).all(|(d, t)| d == t) {
            break;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let cpu = cpu0.zip(super::cpu::side(&side.ctx)).map(|(a, b)| b - a);
    pb.finish_and_clear();
    let total: u64 = done.iter().sum();
    side.ctl.send(&format!("done {total}"))?;
    let seen = side.ctl.expect("ok")?;
    let server_cpu = side.ctl.expect("cpu")?;
    let mut r = bw_result(args, &prog, size, total, seen, secs)?;
    if args.conn == Conn::Rc {
        let qps = side.qps.iter().filter_map(|q| q.transport().ok());
        r.transport = Some(super::report::Transport::of(qps));
    }
    if args.cpu_util {
        let bytes = size as f64 * r.iterations as f64;
        r.cpu_client_ms_per_gb = cpu.map(|c| super::cpu::ms_per_gb(c, bytes));
        r.cpu_server_ms_per_gb = (server_cpu > 0)
            .then(|| super::cpu::ms_per_gb(Duration::from_nanos(server_cpu), bytes));
    }
    Ok(r)
}

/// The result of a client's run once the server said it saw `seen` of its `total` WRs.
fn bw_result(
    args: &PerfArgs,
    prog: &Progress,
    size: usize,
    total: u64,
    seen: u64,
    secs: f64,
) -> anyhow::Result<BwResult> {
    let expect = match (args.verb, args.atomic) {
        (Verb::Send, _) | (Verb::Atomic, AtomicOp::FetchAndAdd) => total,
        _ => 0,
    };
    if args.verb == Verb::Send && args.conn != Conn::Rc && seen < total {
        // UC and UD do not retransmit: what arrived is what counts.
        eprintln!(
            "{} of {total} {size} B messages lost ({} does not retransmit)",
            total - seen,
            args.conn.label()
        );
        return Ok(prog.bw(args.name(), size, seen, secs));
    }
    if seen != expect {
        bail!("the server saw {seen} messages of the {total} this side completed");
    }
    Ok(prog.bw(args.name(), size, total, secs))
}

/// The sum of the 8-byte counters at the start of every QP's slot (FETCH_ADD targets).
fn counters(side: &Side) -> u64 {
    (0..side.qps.len())
        .filter_map(|i| side.mr.atomic_u64(i * side.slot))
        .map(|a| a.load(std::sync::atomic::Ordering::Acquire))
        .fold(0, u64::wrapping_add)
}

/// The server's part of one size: returns once the client says it is done.
pub fn server(side: &mut Side, args: &PerfArgs, _size: usize) -> anyhow::Result<()> {
    let cpu0 = super::cpu::side(&side.ctx);
    serve(side, args)?;
    // Then this side's CPU time (0: unknown), for --cpu-util.
    let cpu = cpu0
        .zip(super::cpu::side(&side.ctx))
        .map_or(0, |(a, b)| (b - a).as_nanos());
    side.ctl.send(&format!("cpu {cpu}"))
}

fn serve(side: &mut Side, args: &PerfArgs) -> anyhow::Result<()> {
    match args.verb {
        Verb::Send => serve_receives(side, args),
        Verb::Atomic => {
            let before = counters(side);
            side.ctl.send("go 0")?;
            side.ctl.expect("done")?;
            let added = match args.atomic {
                AtomicOp::FetchAndAdd => counters(side).wrapping_sub(before),
                AtomicOp::CmpAndSwap => 0,
            };
            side.ctl.send(&format!("ok {added}"))
        }
        // WRITE and READ need nothing from the server's CPU: the engine thread answers.
        Verb::Write | Verb::Read => {
            side.ctl.send("go 0")?;
            side.ctl.expect("done")?;
            side.ctl.send("ok 0")
        }
    }
}

/// Keeps `-r` receives (each a whole slot, so any size fits) posted on every QP and counts
/// the messages that land until the client's count is reached.
fn serve_receives(side: &mut Side, args: &PerfArgs) -> anyhow::Result<()> {
    let post = |side: &Side, i: usize| {
        side.qps[i].post_recv(RecvWr {
            wr_id: i as u64,
            sges: vec![side.mr.sge(i * side.slot, side.slot)?].into(),
        })
    };
    if !side.recvs_posted {
        for i in 0..side.qps.len() {
            for _ in 0..args.rx_depth {
                post(side, i)?;
            }
        }
        side.recvs_posted = true;
    }
    side.ctl.send("go 0")?;
    let (mut got, mut want) = (0u64, None);
    let mut wcs = Vec::new();
    let mut last = Instant::now();
    let mut spins = 0u32;
    // A poll found messages since the clock was last read.
    let mut found = false;
    let lossy = args.conn != Conn::Rc;
    while want.is_none_or(|w| got < w) {
        if lossy && want.is_some() && last.elapsed() > LOSS_WAIT {
            // UC and UD lose messages for good: the rest are not coming.
            break;
        }
        side.poll_or_sleep(&mut wcs, SLEEP)?;
        for w in &wcs {
            if w.opcode == WcOpcode::Recv {
                got += 1;
                post(side, w.wr_id as usize)?;
            }
        }
        spins += 1;
        // The clock once in CLOCK_EVERY polls, as the client reads it: a read per poll was
        // 2 % of this busy-polling thread.
        if !wcs.is_empty() {
            found = true;
        }
        if spins.is_multiple_of(CLOCK_EVERY) || side.sleeps() {
            let now = Instant::now();
            if std::mem::take(&mut found) {
                last = now;
            } else if now - last > STALL {
                bail!("no message for {} s ({got} received)", STALL.as_secs());
            }
        }
        if want.is_none() && (spins.is_multiple_of(256) || side.sleeps()) {
            if let Some(l) = side.ctl.try_recv()? {
                want = Some(super::ctl::parse_word(&l, "done")?);
            }
        }
    }
    side.ctl.send(&format!("ok {got}"))
}
