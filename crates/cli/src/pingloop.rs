//! The ping-pong loop rdma-core's example programs share (ibv_rc_pingpong and
//! ibv_ud_pingpong): each side alternates one SEND with one receive, the client sending
//! first, and keeps `rx_depth` receives posted.

use anyhow::bail;
use oxrdma::{CompletionQueue, WcStatus, WorkCompletion};
use std::time::{Duration, Instant};

/// How one program runs the loop.
#[derive(Debug)]
pub struct PingLoop<'a> {
    pub iters: u64,
    /// Receives already posted when the loop starts; refilled to this many.
    pub rx_depth: u32,
    pub send_wrid: u64,
    pub recv_wrid: u64,
    /// The client sends first.
    pub client: bool,
    /// Give up after this long without a completion, saying `stall_why`.
    pub stall: Duration,
    pub stall_why: &'a str,
}

impl PingLoop<'_> {
    /// Runs the loop; `check_recv` vets every receive completion. Returns the seconds taken
    /// (timed from after the client's first send, as the tools do).
    pub fn run(
        &self,
        cq: &CompletionQueue,
        post_send: &dyn Fn() -> oxrdma::Result<()>,
        post_recv: &dyn Fn() -> oxrdma::Result<()>,
        check_recv: &dyn Fn(&WorkCompletion) -> anyhow::Result<()>,
    ) -> anyhow::Result<f64> {
        let (n, send, recv) = (self.iters, self.send_wrid, self.recv_wrid);
        let mut pending = recv;
        if self.client {
            post_send()?;
            pending |= send;
        }
        let start = Instant::now();
        let (mut scnt, mut rcnt, mut routs) = (0u64, 0u64, self.rx_depth);
        let mut wcs = Vec::new();
        let mut last_progress = Instant::now();
        while rcnt < n || scnt < n {
            wcs.clear();
            cq.poll(&mut wcs, 2)?;
            if wcs.is_empty() {
                if last_progress.elapsed() > self.stall {
                    bail!(
                        "no progress for {} s (sent {scnt}, received {rcnt}){}",
                        self.stall.as_secs(),
                        self.stall_why
                    );
                }
                continue;
            }
            last_progress = Instant::now();
            for wc in &wcs {
                if wc.status != WcStatus::Success {
                    // Which message it was matters: the last SEND's ACK can be lost after
                    // the peer (done with its receives) has exited, and nothing can
                    // retrieve it then.
                    bail!(
                        "work completion for wr_id {} failed: {} (sent {scnt} of {n}, received {rcnt} of {n})",
                        wc.wr_id,
                        wc.status
                    );
                }
                if wc.wr_id == send {
                    scnt += 1;
                } else if wc.wr_id == recv {
                    check_recv(wc)?;
                    routs -= 1;
                    if routs <= 1 {
                        while routs < self.rx_depth {
                            post_recv()?;
                            routs += 1;
                        }
                    }
                    rcnt += 1;
                } else {
                    bail!("completion for unknown wr_id {}", wc.wr_id);
                }
                pending &= !wc.wr_id;
                if scnt < n && pending == 0 {
                    post_send()?;
                    pending = recv | send;
                }
            }
        }
        Ok(start.elapsed().as_secs_f64())
    }
}
