//! What the API tests share.

use oxrdma::{
    Access, CompletionChannel, CompletionQueue, ConnectOptions, Context, MemoryRegion, QpCap,
    QpType, QueuePair, WorkCompletion,
};
use std::time::{Duration, Instant};

/// The next `n` completions of `cq`, polled for (at most 20 s).
#[allow(dead_code)]
pub fn wait(cq: &CompletionQueue, n: usize) -> Vec<WorkCompletion> {
    let mut wcs = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while wcs.len() < n {
        assert!(Instant::now() < deadline, "{} of {n}: {wcs:?}", wcs.len());
        let want = n - wcs.len();
        cq.poll(&mut wcs, want).unwrap();
    }
    wcs
}

/// The next event on `ch` (within 10 s).
#[allow(dead_code)]
pub fn next_event(ch: &oxrdma::cm::EventChannel) -> oxrdma::cm::CmEvent {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(e) = ch.try_event() {
            return e;
        }
        assert!(Instant::now() < deadline, "no CM event in 10 s");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// One end of an RC connection between two devices: its context, a completion channel, a
/// CQ (send and receive), the QP and a 4 KiB region with every access.
#[allow(dead_code)] // Not every test file uses every field.
pub struct Side {
    pub ctx: Context,
    pub ch: CompletionChannel,
    pub cq: CompletionQueue,
    pub qp: QueuePair,
    pub mr: MemoryRegion,
}

/// Two devices, on `ip_a` and `ip_b`, with an RC QP each, connected.
#[allow(dead_code)]
pub fn pair(ip_a: &str, ip_b: &str) -> (Side, Side) {
    let a = Context::open(ip_a.parse().unwrap()).unwrap();
    let b = Context::open(ip_b.parse().unwrap()).unwrap();
    let (pa, pb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (ca, cb) = (a.create_cq(64).unwrap(), b.create_cq(64).unwrap());
    let qa = pa
        .create_qp(&ca, &ca, QpType::Rc, QpCap::default())
        .unwrap();
    let qb = pb
        .create_qp(&cb, &cb, QpType::Rc, QpCap::default())
        .unwrap();
    qa.connect(&qb.endpoint(), &ConnectOptions::default())
        .unwrap();
    qb.connect(&qa.endpoint(), &ConnectOptions::default())
        .unwrap();
    let (ma, mb) = (
        pa.register(4096, Access::ALL).unwrap(),
        pb.register(4096, Access::ALL).unwrap(),
    );
    let side = |ctx: Context, cq, qp, mr| Side {
        ch: ctx.create_comp_channel().unwrap(),
        ctx,
        cq,
        qp,
        mr,
    };
    (side(a, ca, qa, ma), side(b, cb, qb, mb))
}
