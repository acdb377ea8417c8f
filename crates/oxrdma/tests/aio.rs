//! `async` RDMA on tokio (the `tokio` feature): completions awaited one by one and in a
//! race with a sender that pauses at random (no wakeup lost), CM events awaited, and an
//! rsocket stream driven by `AsyncRead`/`AsyncWrite`. Over real UDP on loopback
//! (127.0.0.231-238).
#![cfg(feature = "tokio")]

mod common;

use common::pair;
use oxrdma::aio::{AsyncCq, AsyncEventChannel, AsyncRStream};
use oxrdma::cm::{CmEventType, CmId, EventChannel, PortSpace};
use oxrdma::rsocket::{RListener, RStream};
use oxrdma::{Context, RecvWr, SendWr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn made_outside_a_runtime_is_an_error_not_a_panic() {
    let (a, _b) = pair("127.0.0.229", "127.0.0.230");
    let e = AsyncCq::new(a.cq).unwrap_err();
    assert!(e.to_string().contains("tokio runtime"), "{e}");
}

#[test]
fn completions_are_awaited() {
    let (a, b) = pair("127.0.0.231", "127.0.0.232");
    let remote = b.mr.remote();
    let rt = runtime();
    let _in = rt.enter();
    let cq = AsyncCq::new(a.cq).unwrap();
    rt.block_on(async {
        for i in 0..200u64 {
            a.mr.write(0, &i.to_le_bytes()).unwrap();
            let w = SendWr::write(i, [a.mr.sge(0, 8).unwrap()], remote).unwrap();
            a.qp.post_send(w).unwrap();
            let wc = tokio::time::timeout(Duration::from_secs(10), cq.next())
                .await
                .expect("a completion within 10 s")
                .unwrap();
            assert_eq!(wc.result().unwrap().wr_id, i);
            let mut v = [0u8; 8];
            b.mr.read(0, &mut v).unwrap();
            assert_eq!(u64::from_le_bytes(v), i);
        }
    });
}

#[test]
fn an_awaiting_task_loses_no_wakeup_to_a_racing_sender() {
    let seed = common::clock_seed();
    let (a, b) = pair("127.0.0.233", "127.0.0.234");
    let rounds = 2000u64;
    let recv = |i| {
        b.qp.post_recv(RecvWr {
            wr_id: i,
            sges: vec![b.mr.sge(0, 8).unwrap()].into(),
        })
        .unwrap()
    };
    (0..16).for_each(recv);
    let taken = AtomicU64::new(0);
    let rt = runtime();
    let _in = rt.enter();
    let cq = AsyncCq::new(b.cq).unwrap();
    std::thread::scope(|s| {
        s.spawn(|| common::send_racing(&a.qp, &a.cq, rounds, seed, &taken));
        rt.block_on(async {
            for i in 0..rounds {
                let wc = tokio::time::timeout(Duration::from_secs(5), cq.next())
                    .await
                    .unwrap_or_else(|_| panic!("seed {seed}: round {i} never woke"))
                    .unwrap();
                assert_eq!(wc.wr_id, i, "seed {seed}");
                recv(i + 16);
                taken.store(i + 1, Ordering::Release);
            }
        });
    });
}

#[test]
fn cm_events_are_awaited() {
    let c = Context::open("127.0.0.235".parse().unwrap()).unwrap();
    runtime().block_on(async {
        let ch = AsyncEventChannel::new(EventChannel::new().unwrap()).unwrap();
        let id = CmId::new(ch.channel(), &c, PortSpace::Tcp).unwrap();
        id.resolve_addr(None, "127.0.0.1:47235".parse().unwrap())
            .unwrap();
        let e = ch.next().await.unwrap();
        assert_eq!(e.event, CmEventType::AddrResolved);
        id.resolve_route().unwrap();
        assert_eq!(ch.next().await.unwrap().event, CmEventType::RouteResolved);
        // Nobody listens: the rejection comes as an event too.
        id.connect(&Default::default()).unwrap();
        let e = tokio::time::timeout(Duration::from_secs(10), ch.next())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(e.event, CmEventType::Rejected, "status {}", e.status);
    });
}

#[test]
fn an_rsocket_stream_is_async_read_and_write() {
    let (cs, cc) = (
        Context::open("127.0.0.236".parse().unwrap()).unwrap(),
        Context::open("127.0.0.237".parse().unwrap()).unwrap(),
    );
    let listener = RListener::bind(&cs, "0.0.0.0:47236".parse().unwrap()).unwrap();
    let data: Vec<u8> = (0..(1u32 << 20)).map(|i| (i * 7 % 253) as u8).collect();
    std::thread::scope(|s| {
        s.spawn(|| {
            let rt = runtime();
            let _in = rt.enter();
            let srv = AsyncRStream::new(listener.accept().unwrap()).unwrap();
            rt.block_on(async {
                let (mut srv, mut buf) = (srv, vec![0u8; 64 << 10]);
                // Echo until the client shuts its side.
                loop {
                    let n = srv.read(&mut buf).await.unwrap();
                    if n == 0 {
                        break;
                    }
                    srv.write_all(&buf[..n]).await.unwrap();
                }
                srv.shutdown().await.unwrap();
            });
        });
        let rt = runtime();
        let _in = rt.enter();
        let c = RStream::connect(&cc, "127.0.0.1:47236".parse().unwrap()).unwrap();
        let c = AsyncRStream::new(c).unwrap();
        rt.block_on(async {
            let (mut rd, mut wr) = tokio::io::split(c);
            let send = async {
                wr.write_all(&data).await.unwrap();
                wr.shutdown().await.unwrap();
            };
            let recv = async {
                let mut back = Vec::new();
                rd.read_to_end(&mut back).await.unwrap();
                back
            };
            let ((), back) =
                tokio::time::timeout(Duration::from_secs(30), async { tokio::join!(send, recv) })
                    .await
                    .expect("1 MiB echoed within 30 s");
            assert_eq!(back.len(), data.len());
            assert!(back == data, "the echo differs");
        });
    });
}
