//! ib_write_lat's ping-pong by memory polling (PERFTEST-OOB.md §5): each side WRITEs
//! `size` bytes whose last byte is its send counter into the peer's half, and waits for
//! the peer's counter in the last byte of its own half. The server writes first.

use super::msg::Keys;
use super::res::Res;
use crate::perf::report::LatResult;
use crate::perf::side::STALL;
use crate::perf::PerfArgs;
use anyhow::bail;
use oxrdma::{SendData, SendFlags, SendWr, WrOpcode};
use std::time::Instant;

/// Spins until the byte at `off` of our region is `want`.
fn wait_byte(res: &Res, off: usize, want: u8) -> anyhow::Result<()> {
    let start = Instant::now();
    let mut b = [0u8];
    for spin in 0u64.. {
        res.mr.read(off, &mut b)?;
        if b[0] == want {
            return Ok(());
        }
        if spin % 1024 == 1023 {
            if start.elapsed() > STALL {
                bail!(
                    "message {want} (mod 256) from the peer did not arrive within {} s",
                    STALL.as_secs()
                );
            }
            std::thread::yield_now();
        }
    }
    unreachable!()
}

/// Waits for the completion of our one outstanding WRITE.
fn wait_completion(res: &Res) -> anyhow::Result<()> {
    let start = Instant::now();
    let mut wcs = Vec::new();
    loop {
        res.poll(&mut wcs)?;
        if !wcs.is_empty() {
            return Ok(());
        }
        if start.elapsed() > STALL {
            bail!("our WRITE did not complete within {} s", STALL.as_secs());
        }
        std::thread::yield_now();
    }
}

/// Runs the `iters` exchanges; latency is half the time between our consecutive WRITEs.
pub fn run(
    res: &Res,
    args: &PerfArgs,
    size: usize,
    peer: &Keys,
    server: bool,
) -> anyhow::Result<LatResult> {
    let iters = args.iters;
    let poll_at = res.half + size - 1;
    let (mut sent, mut seen, mut completed) = (0u64, 0u64, 0u64);
    let mut posts = Vec::with_capacity(iters as usize);
    while sent < iters || seen < iters || completed < iters {
        // The server skips the first wait: it starts the ping-pong.
        if seen < iters && !(server && sent == 0) {
            seen += 1;
            wait_byte(res, poll_at, seen as u8)?;
        }
        if sent < iters {
            sent += 1;
            res.mr.write(size - 1, &[sent as u8])?;
            let mut wr = SendWr::new(
                sent,
                WrOpcode::RdmaWrite,
                SendData::Sges(vec![res.mr.sge(0, size)?].into()),
            );
            (wr.remote_addr, wr.rkey) = (peer.vaddr, peer.rkey);
            wr.flags = SendFlags::SIGNALED;
            posts.push(Instant::now());
            res.qp.post_send(wr)?;
        }
        if completed < iters {
            wait_completion(res)?;
            completed += 1;
        }
    }
    let mut samples: Vec<f64> = posts
        .windows(2)
        .map(|w| (w[1] - w[0]).as_nanos() as f64 / 2000.0)
        .collect();
    if samples.is_empty() {
        samples.push(0.0);
    }
    let mut r = LatResult::from_samples(args.name(), size, samples);
    r.iterations = iters;
    Ok(r)
}
