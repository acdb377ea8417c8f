//! Two engines' iWARP QPs over real TCP connections on loopback, each driven by its own
//! `Streams`: MPA's exchange (accepted and rejected), WRITE, READ and SEND of registered
//! memory checked byte for byte, a peer that goes away mid-operation, and a peer that
//! sends garbage after MPA.

mod common;

use oxrdma_core::iwarp::SetupConfig;
use oxrdma_core::{
    Access, Engine, MemoryRegion, QpCap, QpState, RecvWr, SendData, SendFlags, SendWr, Sge,
    SharedBuffer, WcStatus, WorkCompletion, WrOpcode,
};
use oxrdma_tcp::{mpa, MpaError, Request, Streams};
use oxrdma_wire::iwarp::ddp::RdmapOpcode;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::time::{Duration, Instant};

const LEN: usize = 8 << 20;
const SECS: Duration = Duration::from_secs(5);

/// A device with one iWARP QP in INIT, a region of `LEN` bytes, a CQ each way, and the
/// streams that drive it.
struct Side {
    e: Engine,
    streams: Streams,
    qpn: u32,
    scq: u32,
    rcq: u32,
    mr: MemoryRegion,
    buf: Arc<SharedBuffer>,
}

fn side(n: u8) -> Side {
    let mut e = common::engine(n);
    let pd = e.alloc_pd().unwrap();
    let (scq, rcq) = (e.create_cq(256).unwrap(), e.create_cq(256).unwrap());
    let buf = Arc::new(SharedBuffer::new(LEN).unwrap());
    let pattern: Vec<u8> = (0..LEN).map(|i| (i * 13 + usize::from(n)) as u8).collect();
    assert!(buf.write(0, &pattern));
    let mr = e.reg_mr(pd, buf.clone(), None, Access::ALL).unwrap();
    let cap = QpCap {
        max_send_wr: 64,
        max_recv_wr: 64,
        max_send_sge: 2,
        max_recv_sge: 2,
        max_inline_data: 64,
    };
    let qpn = common::qp_in_init(&mut e, pd, scq, rcq, cap);
    Side {
        e,
        streams: Streams::new().unwrap(),
        qpn,
        scq,
        rcq,
        mr,
        buf,
    }
}

impl Side {
    fn sge(&self, off: u64, len: u32) -> Sge {
        Sge {
            addr: self.mr.iova + off,
            length: len,
            lkey: self.mr.lkey,
        }
    }

    fn bytes(&self, off: usize, len: usize) -> Vec<u8> {
        let mut v = vec![0; len];
        assert!(self.buf.read(off, &mut v));
        v
    }

    /// The QP's stream is up: the QP is told, and its streams drive it.
    fn attach(&mut self, est: mpa::Established) {
        self.e.iwarp_established(self.qpn, &est.stream()).unwrap();
        self.streams.attach(self.qpn, est.sock, &est.early).unwrap();
    }

    fn wcs(&mut self, cq: u32) -> Vec<WorkCompletion> {
        self.e.poll_cq(cq, 1000).unwrap()
    }
}

/// A listener on loopback, and a thread that takes one connection's request and answers
/// it with `answer`.
fn serve<T: Send + 'static>(
    answer: impl FnOnce(Request) -> T + Send + 'static,
) -> (std::net::SocketAddr, std::thread::JoinHandle<T>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let t = std::thread::spawn(move || {
        let (sock, _) = l.accept().unwrap();
        answer(Request::read(sock, SetupConfig::default(), SECS).unwrap())
    });
    (addr, t)
}

/// Two sides connected: `a` initiated, `b` accepted.
fn connected() -> (Side, Side) {
    let (mut a, mut b) = (side(1), side(2));
    let (addr, t) = serve(|r| r.accept().unwrap());
    a.attach(mpa::connect(addr, SetupConfig::default(), SECS).unwrap());
    b.attach(t.join().unwrap());
    (a, b)
}

/// Drives both sides until `done` holds (10 s at most).
fn run(a: &mut Side, b: &mut Side, mut done: impl FnMut(&mut Side, &mut Side) -> bool) {
    let end = Instant::now() + Duration::from_secs(10);
    while !done(a, b) {
        assert!(Instant::now() < end, "nothing finished in 10 s");
        let moved = a.streams.poll(&mut a.e) + b.streams.poll(&mut b.e);
        if moved == 0 {
            std::thread::yield_now();
        }
    }
}

fn wr(from: &Side, to: &Side, id: u64, op: WrOpcode, off: u64, len: u32, off_to: u64) -> SendWr {
    let mut w = SendWr::new(id, op, SendData::Sges(vec![from.sge(off, len)].into()));
    (w.remote_addr, w.rkey) = (to.mr.iova + off_to, to.mr.rkey);
    w.flags = SendFlags::SIGNALED;
    w
}

#[test]
fn write_read_and_send_over_tcp() {
    let (mut a, mut b) = connected();
    let m = 3 << 20;
    let write = wr(&a, &b, 1, WrOpcode::RdmaWrite, 0, m, 4 << 20);
    let read = wr(&a, &b, 2, WrOpcode::RdmaRead, 4 << 20, m, 100);
    a.e.post_send(a.qpn, write).unwrap();
    a.e.post_send(a.qpn, read).unwrap();
    let sges = vec![b.sge(7 << 20, 1 << 20)].into();
    b.e.post_recv(b.qpn, RecvWr { wr_id: 9, sges }).unwrap();
    let send = wr(&a, &b, 3, WrOpcode::Send, 123, 100_000, 0);
    a.e.post_send(a.qpn, send).unwrap();
    let (mut sent, mut got) = (Vec::new(), Vec::new());
    run(&mut a, &mut b, |a, b| {
        sent.extend(a.wcs(a.scq));
        got.extend(b.wcs(b.rcq));
        sent.len() == 3 && got.len() == 1
    });
    let ids: Vec<_> = sent.iter().map(|c| (c.wr_id, c.status)).collect();
    assert_eq!(ids, [1, 2, 3].map(|i| (i, WcStatus::Success)));
    assert_eq!((got[0].wr_id, got[0].byte_len), (9, 100_000));
    let m = m as usize;
    assert_eq!(b.bytes(4 << 20, m), a.bytes(0, m), "WRITE");
    assert_eq!(a.bytes(4 << 20, m), b.bytes(100, m), "READ");
    assert_eq!(b.bytes(7 << 20, 100_000), a.bytes(123, 100_000), "SEND");
}

#[test]
fn a_rejected_request_says_why() {
    let (addr, t) = serve(|r| {
        assert_eq!(r.private_data, b"hello");
        r.reject(b"not today").unwrap()
    });
    let cfg = SetupConfig {
        private_data: b"hello".to_vec(),
        ..Default::default()
    };
    match mpa::connect(addr, cfg, SECS) {
        Err(MpaError::Rejected { private_data }) => assert_eq!(private_data, b"not today"),
        other => panic!("{other:?}"),
    }
    t.join().unwrap();
}

/// The peer's stream goes away with a READ outstanding: the QP goes to ERR and the READ
/// and the posted receive complete flushed, once.
#[test]
fn a_peer_that_goes_away_flushes_the_qp() {
    let (mut a, mut b) = connected();
    let sges = vec![a.sge(0, 64)].into();
    a.e.post_recv(a.qpn, RecvWr { wr_id: 5, sges }).unwrap();
    let read = wr(&a, &b, 6, WrOpcode::RdmaRead, 0, 1 << 20, 0);
    a.e.post_send(a.qpn, read).unwrap();
    a.streams.poll(&mut a.e);
    b.streams.detach(b.qpn);
    let (mut s, mut r) = (Vec::new(), Vec::new());
    run(&mut a, &mut b, |a, _| {
        s.extend(a.wcs(a.scq));
        r.extend(a.wcs(a.rcq));
        !s.is_empty() && !r.is_empty()
    });
    assert_eq!((s[0].wr_id, s[0].status), (6, WcStatus::WrFlushErr));
    assert_eq!((r[0].wr_id, r[0].status), (5, WcStatus::WrFlushErr));
    assert_eq!(a.e.qp_state(a.qpn).unwrap(), QpState::Err);
    std::thread::sleep(Duration::from_millis(20));
    a.streams.poll(&mut a.e);
    assert!(a.wcs(a.scq).is_empty() && a.wcs(a.rcq).is_empty(), "once");
}

/// Garbage after MPA (an FPDU whose CRC is wrong): the QP answers with a TERMINATE,
/// places nothing, goes to ERR, and closes the connection.
#[test]
fn garbage_after_mpa_is_terminated_and_the_connection_closed() {
    let mut a = side(1);
    let (addr, t) = serve(|r| r.accept().unwrap());
    a.attach(mpa::connect(addr, SetupConfig::default(), SECS).unwrap());
    let mut peer = t.join().unwrap().sock;
    let before = a.bytes(0, 4096);
    // A length of 40, then 40 bytes of junk, pad and a CRC that cannot match: 48 bytes.
    let mut junk = vec![0u8, 40];
    junk.extend((0..46u8).map(|i| i.wrapping_mul(37)));
    peer.write_all(&junk).unwrap();
    peer.set_read_timeout(Some(SECS)).unwrap();
    let end = Instant::now() + SECS;
    let mut got = Vec::new();
    loop {
        a.streams.poll(&mut a.e);
        let mut b = [0u8; 256];
        peer.set_nonblocking(true).unwrap();
        match peer.read(&mut b) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&b[..n]),
            Err(_) => std::thread::sleep(Duration::from_millis(1)),
        }
        assert!(Instant::now() < end, "the connection never closed");
    }
    // The initiator's RTR (a zero-length WRITE), then the TERMINATE.
    let mut reader = oxrdma_core::iwarp::FpduReader::new(true);
    let mut ops = Vec::new();
    let mut at = 0;
    while at < got.len() {
        at += reader.push(&got[at..]);
        while let Some((h, _)) = reader.next_segment().unwrap() {
            ops.push(h.opcode);
        }
    }
    assert_eq!(ops, [RdmapOpcode::Write, RdmapOpcode::Terminate]);
    let c = a.e.counters();
    use oxrdma_core::Counter::{IwarpCrcErr, IwarpTerminateSent};
    assert_eq!((c[IwarpCrcErr], c[IwarpTerminateSent]), (1, 1));
    assert_eq!(a.e.qp_state(a.qpn).unwrap(), QpState::Err);
    assert_eq!(a.bytes(0, 4096), before);
}

/// A responder that reads nothing its peer sent before its reply went (Linux siw's race:
/// bytes that came meanwhile wait until more come): the initiator, hearing nothing back,
/// sends its RTR again (5 ms after, then 50 ms), and stops once the responder speaks.
#[test]
fn an_initiator_not_heard_sends_its_rtr_again() {
    let mut a = side(7);
    let (addr, t) = serve(|r| r.accept().unwrap());
    a.attach(mpa::connect(addr, SetupConfig::default(), SECS).unwrap());
    let b = t.join().unwrap();
    let mut sock = b.sock;
    sock.set_nonblocking(true).unwrap();
    let mut heard = b.early.clone();
    let end = Instant::now() + Duration::from_millis(200);
    let mut buf = [0u8; 4096];
    while Instant::now() < end {
        a.streams.poll(&mut a.e);
        if let Ok(n) = sock.read(&mut buf) {
            heard.extend_from_slice(&buf[..n]);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    // The RTR (2 bytes of length, the 14 of a tagged DDP header, no payload, 4 of CRC)
    // three times: sent, then again at 5 and 55 ms.
    let rtr = heard.len().min(20);
    assert!(heard.len() >= 3 * 20, "{} bytes came", heard.len());
    assert!(
        heard.chunks(20).all(|c| c == &heard[..rtr]),
        "all RTRs: {heard:02x?}"
    );
    // The responder speaks (a zero-length WRITE, as an RTR would be): no more RTRs.
    sock.write_all(&heard[..rtr]).unwrap();
    let quiet = Instant::now() + Duration::from_millis(700);
    let mut after = 0;
    while Instant::now() < quiet {
        a.streams.poll(&mut a.e);
        if let Ok(n) = sock.read(&mut buf) {
            after += n;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(after, 0, "an RTR after the responder spoke");
}

/// A QP destroyed right after its WRITEs completed (the program closes, or exits), while
/// its peer reads slowly: a WRITE completes once its FPDUs are handed to the driver, so
/// the driver sends them all before it closes the connection, and the peer places every
/// completed WRITE whole.
#[test]
fn a_qp_destroyed_after_its_writes_completed_still_sends_them_whole() {
    destroy_with_writes_in_flight(false);
}

/// The same, with bytes from the peer that the destroyed QP's side never read (an rsockets
/// peer's last credit update): a socket closed so answers with a reset, which threw away the
/// end of the last WRITE (siw's rstream client waited for it for ever).
#[test]
fn a_qp_destroyed_with_its_peers_bytes_unread_still_sends_its_writes_whole() {
    destroy_with_writes_in_flight(true);
}

fn destroy_with_writes_in_flight(peer_speaks_last: bool) {
    let (mut a, mut b) = connected();
    let (n, len) = (60u64, 128u32 << 10);
    for i in 0..n {
        let w = wr(
            &a,
            &b,
            i,
            WrOpcode::RdmaWrite,
            i * u64::from(len),
            len,
            i * u64::from(len),
        );
        a.e.post_send(a.qpn, w).unwrap();
    }
    // Only a moves, until its socket is full: b does not read yet.
    let mut done = Vec::new();
    let mut idle_since = Instant::now();
    while idle_since.elapsed() < Duration::from_millis(300) {
        if a.streams.poll(&mut a.e) > 0 {
            idle_since = Instant::now();
        }
        done.extend(a.wcs(a.scq));
    }
    assert!(
        !done.is_empty() && (done.len() as u64) < n,
        "{} of {n} WRITEs completed before the socket filled",
        done.len()
    );
    assert!(done.iter().all(|c| c.status == WcStatus::Success));
    if peer_speaks_last {
        // b WRITEs 8 bytes to a, which a's side never reads before its QP is destroyed.
        let w = wr(&b, &a, 1000, WrOpcode::RdmaWrite, 0, 8, 0);
        b.e.post_send(b.qpn, w).unwrap();
        let end = Instant::now() + SECS;
        while b.wcs(b.scq).is_empty() {
            assert!(Instant::now() < end, "b's WRITE did not complete");
            b.streams.poll(&mut b.e);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let reader = std::thread::spawn(move || {
        // b reads what comes, from another thread, while a's detach waits to write,
        // until its stream ends.
        let end = Instant::now() + Duration::from_secs(10);
        while Instant::now() < end && b.e.qp_state(b.qpn).unwrap() == QpState::Rts {
            b.streams.poll(&mut b.e);
        }
        b
    });
    a.streams.detach(a.qpn);
    let b = reader.join().unwrap();
    for c in &done {
        let (at, l) = (c.wr_id as usize * len as usize, len as usize);
        assert!(
            b.bytes(at, l) == a.bytes(at, l),
            "completed WRITE {} cut short",
            c.wr_id
        );
    }
}
