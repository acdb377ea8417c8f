//! What awaiting costs: an 8 B SEND ping-pong between two QPs of this host, each side in a
//! thread of its own, waiting for its completions three ways in turn: busy polling (the
//! baseline), `CompletionQueue::wait_one` (spin, then sleep on the CQ's channel) and
//! `aio::AsyncCq` on a current-thread tokio runtime per side. Prints the median round trip
//! of each way over several runs and its ratio to polling in the same run.
//!
//!     cargo run --release -p oxrdma --features tokio --example async_latency [ROUNDS] [RUNS]

use oxrdma::aio::AsyncCq;
use oxrdma::{
    Access, CompletionQueue, ConnectOptions, Context, MemoryRegion, QpCap, QpType, QueuePair,
    RecvWr, SendWr, WorkCompletion,
};
use std::time::{Duration, Instant};

/// How a side waits for its next completion.
#[derive(Clone, Copy, Debug)]
enum Way {
    Poll,
    Wait,
    Await,
}

/// One side: its QP, CQ and the region its receives land in.
struct Side {
    qp: QueuePair,
    cq: CompletionQueue,
    mr: MemoryRegion,
}

fn side(ctx: &Context) -> oxrdma::Result<Side> {
    let pd = ctx.alloc_pd()?;
    let mr = pd.register(64, Access::LOCAL_WRITE)?;
    let cq = ctx.create_cq(64)?;
    let qp = pd.create_qp(&cq, &cq, QpType::Rc, QpCap::default())?;
    Ok(Side { qp, cq, mr })
}

/// A fresh connected pair, 16 receives posted on each side.
fn pair(ca: &Context, cb: &Context) -> oxrdma::Result<(Side, Side)> {
    let (a, b) = (side(ca)?, side(cb)?);
    a.qp.connect(&b.qp.endpoint(), &ConnectOptions::default())?;
    b.qp.connect(&a.qp.endpoint(), &ConnectOptions::default())?;
    for i in 0..16 {
        for s in [&a, &b] {
            Recv {
                qp: &s.qp,
                mr: &s.mr,
            }
            .recv(i)?;
        }
    }
    Ok((a, b))
}

/// What a side posts to while its CQ is lent to the waiting.
struct Recv<'a> {
    qp: &'a QueuePair,
    mr: &'a MemoryRegion,
}

impl Recv<'_> {
    fn recv(&self, id: u64) -> oxrdma::Result<()> {
        let sges = vec![self.mr.sge(0, 8)?].into();
        self.qp.post_recv(RecvWr { wr_id: id, sges })
    }
}

/// Runs `rounds` ping-pongs (`a` sends first) with each side waiting `way`; the mean
/// round trip.
fn run(a: Side, b: Side, way: Way, rounds: u64) -> Duration {
    let serve = move |s: Side, ping: bool| {
        let Side { qp, cq, mr } = s;
        let s = Recv { qp: &qp, mr: &mr };
        let mut next = wait_with(cq, way);
        for i in 0..rounds {
            if ping {
                s.qp.post_send(SendWr::send_inline(i, &i.to_le_bytes()))
                    .unwrap();
            }
            // A receive and a send completion each round, in either order.
            for _ in 0..2 {
                let wc = next().result().unwrap();
                if wc.opcode == oxrdma::WcOpcode::Recv {
                    s.recv(i + 16).unwrap();
                    if !ping {
                        s.qp.post_send(SendWr::send_inline(i, &i.to_le_bytes()))
                            .unwrap();
                    }
                }
            }
        }
    };
    let start = Instant::now();
    let pong = std::thread::spawn(move || serve(b, false));
    serve(a, true);
    pong.join().unwrap();
    start.elapsed() / rounds as u32
}

/// The next completion of `cq`, waited for `way`.
fn wait_with(cq: CompletionQueue, way: Way) -> Box<dyn FnMut() -> WorkCompletion> {
    let forever = Duration::from_secs(30);
    match way {
        Way::Poll => Box::new(move || {
            let mut out = Vec::with_capacity(1);
            while cq.poll(&mut out, 1).unwrap() == 0 {
                std::hint::spin_loop();
            }
            out.pop().unwrap()
        }),
        Way::Wait => Box::new(move || cq.wait_one(forever).unwrap()),
        Way::Await => {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let acq = rt.block_on(async { AsyncCq::new(cq) }).unwrap();
            Box::new(move || rt.block_on(acq.next()).unwrap())
        }
    }
}

fn main() -> oxrdma::Result<()> {
    let mut args = std::env::args().skip(1);
    let rounds: u64 = args.next().map_or(20_000, |a| a.parse().expect("ROUNDS"));
    let runs: usize = args.next().map_or(5, |a| a.parse().expect("RUNS"));
    let (ca, cb) = (
        Context::open("127.0.3.20".parse().unwrap())?,
        Context::open("127.0.3.21".parse().unwrap())?,
    );
    let ways = [Way::Poll, Way::Wait, Way::Await];
    let mut times: Vec<Vec<Duration>> = vec![Vec::new(); ways.len()];
    for _ in 0..runs {
        for (k, way) in ways.iter().enumerate() {
            let (a, b) = pair(&ca, &cb)?;
            times[k].push(run(a, b, *way, rounds));
        }
    }
    let median = |v: &mut Vec<Duration>| {
        v.sort();
        v[v.len() / 2]
    };
    let base = median(&mut times[0].clone());
    println!("8 B SEND round trip, {rounds} rounds x {runs} runs, medians:");
    for (k, way) in ways.iter().enumerate() {
        let m = median(&mut times[k]);
        let ratio = m.as_secs_f64() / base.as_secs_f64();
        println!("  {way:?}: {m:.2?} ({ratio:.2}x polling)");
    }
    Ok(())
}
