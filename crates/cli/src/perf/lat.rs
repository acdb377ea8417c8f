//! Latency tests, one message in flight on the first QP. Write and send are ping-pongs
//! (each side answers the other's message; half the round trip is reported); read and
//! atomic time one WR from post to completion while the server's CPU stays out of it.
//! Write waits as ib_write_lat does: each WRITE signaled and its completion polled, then
//! the last byte of the peer's WRITE awaited in memory without calling in.

use super::ctl::parse_word;
use super::report::{bar, LatResult};
use super::side::{Side, STALL};
use super::{PerfArgs, Verb};
use anyhow::bail;
use oxrdma::{RecvWr, SendData, SendFlags, SendWr, WcOpcode, WrOpcode};
use std::time::Instant;

/// Receives kept posted for send-lat.
const RECVS: u32 = 16;

/// What a side waits for between its own sends.
enum Wait {
    /// The last byte of the landing area (second half of the slot) to become `v`.
    Byte(u8),
    /// A receive completion.
    Recv,
    /// The completion of our own WR.
    Own,
}

/// Polls until `what` happens; `Ok(false)` if the peer said `done` instead (only looked
/// for when `ctl_too`).
fn wait(side: &mut Side, size: usize, what: Wait, ctl_too: bool) -> anyhow::Result<bool> {
    let landing = side.slot / 2;
    let mut wcs = Vec::new();
    let mut last = Instant::now();
    let mut spins = 0u32;
    loop {
        if let Wait::Byte(v) = what {
            // The target of a WRITE leaves the device alone while it waits, as
            // ib_write_lat's does: the bytes must land without its CPU calling in.
            let mut b = [0u8];
            side.mr.read(landing + size - 1, &mut b)?;
            if b[0] == v {
                return Ok(true);
            }
        } else {
            side.poll(&mut wcs)?;
        }
        for w in &wcs {
            match (&what, w.opcode) {
                (Wait::Recv, WcOpcode::Recv) => {
                    post_recv(side)?;
                    return Ok(true);
                }
                (Wait::Own, op) if op != WcOpcode::Recv => return Ok(true),
                _ => {}
            }
        }
        if !wcs.is_empty() {
            last = Instant::now();
        }
        spins += 1;
        if spins.is_multiple_of(1024) {
            if ctl_too {
                if let Some(l) = side.ctl.try_recv()? {
                    parse_word(&l, "done")?;
                    return Ok(false);
                }
            }
            if last.elapsed() > STALL {
                bail!("no answer from the peer for {} s", STALL.as_secs());
            }
        }
    }
}

fn post_recv(side: &Side) -> anyhow::Result<()> {
    side.qps[0].post_recv(RecvWr {
        wr_id: 0,
        sges: vec![side.mr.sge(side.slot / 2, side.slot / 2)?].into(),
    })?;
    Ok(())
}

/// Sends message `i` (its last byte `i as u8`) to the peer's landing area or receive queue.
fn ping(side: &Side, args: &PerfArgs, size: usize, i: u64) -> anyhow::Result<()> {
    side.mr.write(size - 1, &[i as u8])?;
    let data = if size <= args.inline_size as usize {
        let mut d = oxrdma::InlineData::from_elem(0, size);
        side.mr.read(0, &mut d)?;
        SendData::Inline(d)
    } else {
        SendData::Sges(vec![side.mr.sge(0, size)?].into())
    };
    let mut wr = SendWr::new(i, args.opcode(), data);
    // Signal one in 16 sends so the send queue drains without a completion per message;
    // every WRITE is signaled and waited for, as ib_write_lat does.
    wr.flags = if i.is_multiple_of(16) || args.verb == Verb::Write {
        SendFlags::SIGNALED
    } else {
        SendFlags::empty()
    };
    (wr.remote_addr, wr.rkey) = (
        side.peers[0].addr + (side.slot / 2) as u64,
        side.peers[0].rkey,
    );
    wr.ud = side.ud(0);
    side.qps[0].post_send(wr)?;
    Ok(())
}

/// One READ or atomic, signaled.
fn one_sided(side: &Side, args: &PerfArgs, size: usize, i: u64) -> anyhow::Result<()> {
    let opcode = args.opcode();
    let mut wr = SendWr::new(
        i,
        opcode,
        SendData::Sges(vec![side.mr.sge(0, size)?].into()),
    );
    (wr.remote_addr, wr.rkey) = (side.peers[0].addr, side.peers[0].rkey);
    wr.compare_add = u64::from(opcode == WrOpcode::AtomicFetchAndAdd);
    side.qps[0].post_send(wr)?;
    Ok(())
}

/// Clears this side's landing area, so no byte from an earlier size is taken for an answer.
fn clear_landing(side: &Side) -> oxrdma::Result<()> {
    let half = side.slot / 2;
    side.mr.write(half, &vec![0u8; half])
}

pub fn client(side: &mut Side, args: &PerfArgs, size: usize) -> anyhow::Result<LatResult> {
    let pingpong = matches!(args.verb, Verb::Write | Verb::Send);
    let pb = match args.duration {
        Some(d) => bar(args.progress, d.as_secs(), "seconds"),
        None => bar(args.progress, args.iters, &format!("{size} B")),
    };
    let mut samples = Vec::new();
    let start = Instant::now();
    let mut i = 0u64;
    loop {
        let more = match args.duration {
            Some(d) => start.elapsed() < d,
            None => i < args.iters,
        };
        if !more {
            break;
        }
        i += 1;
        let t = Instant::now();
        if pingpong {
            ping(side, args, size, i)?;
            if args.verb == Verb::Write {
                wait(side, size, Wait::Own, false)?;
            }
            let what = match args.verb {
                Verb::Send => Wait::Recv,
                _ => Wait::Byte(i as u8),
            };
            wait(side, size, what, false)?;
            samples.push(t.elapsed().as_nanos() as f64 / 2000.0);
        } else {
            one_sided(side, args, size, i)?;
            wait(side, size, Wait::Own, false)?;
            samples.push(t.elapsed().as_nanos() as f64 / 1000.0);
        }
        if i.is_multiple_of(256) {
            pb.set_position(match args.duration {
                Some(_) => start.elapsed().as_secs(),
                None => i,
            });
        }
    }
    pb.finish_and_clear();
    side.ctl.send(&format!("done {i}"))?;
    let seen = side.ctl.expect("ok")?;
    if pingpong && seen != i {
        bail!("the server answered {seen} of {i} messages");
    }
    Ok(LatResult::from_samples(args.name(), size, samples))
}

/// The server's part of one size. `iters` is 0 when the client runs for a duration.
pub fn server(side: &mut Side, args: &PerfArgs, size: usize, iters: u64) -> anyhow::Result<()> {
    if !matches!(args.verb, Verb::Write | Verb::Send) {
        side.ctl.send("go 0")?;
        side.ctl.expect("done")?;
        return side.ctl.send("ok 0");
    }
    clear_landing(side)?;
    if args.verb == Verb::Send && !side.recvs_posted {
        for _ in 0..RECVS {
            post_recv(side)?;
        }
        side.recvs_posted = true;
    }
    side.ctl.send("go 0")?;
    let mut answered = 0u64;
    loop {
        let i = answered + 1;
        let what = match args.verb {
            Verb::Send => Wait::Recv,
            _ => Wait::Byte(i as u8),
        };
        if !wait(side, size, what, true)? {
            break;
        }
        ping(side, args, size, i)?;
        if args.verb == Verb::Write {
            wait(side, size, Wait::Own, false)?;
        }
        answered = i;
        if iters != 0 && answered == iters {
            side.ctl.expect("done")?;
            break;
        }
    }
    side.ctl.send(&format!("ok {answered}"))
}

/// Prepares the client's side before it asks for a size.
pub fn prepare_client(side: &mut Side, args: &PerfArgs) -> anyhow::Result<()> {
    clear_landing(side)?;
    if args.verb == Verb::Send && !side.recvs_posted {
        for _ in 0..RECVS {
            post_recv(side)?;
        }
        side.recvs_posted = true;
    }
    Ok(())
}
