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

/// CPU time of every thread of this process so far (ns on CPU,
/// `/proc/self/task/*/schedstat`).
#[allow(dead_code)]
pub fn process_cpu() -> Duration {
    let mut ns = 0u64;
    for t in std::fs::read_dir("/proc/self/task").unwrap() {
        let path = t.unwrap().path().join("schedstat");
        if let Ok(s) = std::fs::read_to_string(path) {
            ns += s.split_whitespace().next().unwrap().parse::<u64>().unwrap();
        }
    }
    Duration::from_nanos(ns)
}

/// A seed from the clock, printed (a failure names it).
#[allow(dead_code)]
pub fn clock_seed() -> u64 {
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    println!("seed {seed}");
    seed
}

/// Sends `rounds` 8-byte SENDs on `qp` (its completions on `cq`), each after a pause
/// drawn from `seed` (mostly within a waiter's spin, one in eight long enough that it
/// sleeps) and only once the receiver has taken the one before (`taken` passes it): each
/// SEND meets a receiver on its way into a wait, before its arm, between arm and sleep,
/// or asleep.
#[allow(dead_code)]
pub fn send_racing(
    qp: &QueuePair,
    cq: &CompletionQueue,
    rounds: u64,
    seed: u64,
    taken: &std::sync::atomic::AtomicU64,
) {
    let mut x = seed | 1;
    for i in 0..rounds {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let pause = if x.is_multiple_of(8) {
            200 + x % 1800
        } else {
            x % 60
        };
        let t = Instant::now();
        while t.elapsed() < Duration::from_micros(pause) {
            std::hint::spin_loop();
        }
        qp.post_send(oxrdma::SendWr::send_inline(i, &i.to_le_bytes()))
            .unwrap();
        cq.wait_one(Duration::from_secs(10))
            .unwrap()
            .result()
            .unwrap();
        while taken.load(std::sync::atomic::Ordering::Acquire) <= i {
            std::hint::spin_loop();
        }
    }
}

/// An RC packet as a test's hand-written peer sends it to QP `qpn`: a request asks for an
/// ACK, an ACK or response (an AETH) does not. The ICRC stays zero: a loopback source is
/// not checked (SECURITY.md).
#[allow(dead_code)]
pub fn packet(
    opcode: oxrdma_wire::Opcode,
    qpn: u32,
    psn: u32,
    ext: oxrdma_wire::ExtHeaders,
    payload: &[u8],
) -> Vec<u8> {
    let p = oxrdma_wire::PacketRepr {
        bth: oxrdma_wire::BthRepr {
            opcode,
            solicited: false,
            migreq: false,
            pkey: 0xffff,
            fecn: false,
            becn: false,
            dest_qpn: qpn,
            ack_req: ext.aeth.is_none(),
            psn: oxrdma_wire::Psn::new(psn),
            selective_repeat: false,
        },
        ext,
        payload,
    };
    let mut buf = vec![0u8; p.buffer_len()];
    p.emit(&mut buf).expect("the buffer fits the packet");
    buf
}
