//! The API's concurrent paths at once: 4 threads post WRITEs and READs on 4 QPs, 2 threads
//! poll the 2 CQs those QPs complete to, and one thread registers, fills and deregisters
//! memory regions all along, while the engine threads of both devices run. Every work
//! request must complete exactly once, successfully, and the bytes must be right.
//!
//! Run it under AddressSanitizer too (README, "Memory safety").

use oxrdma::{
    Access, CompletionQueue, ConnectOptions, Context, QpCap, QpType, SendData, SendWr, WcStatus,
    WrOpcode,
};
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const QPS: usize = 4;
const WRS: u64 = 400;
/// Work requests a poster keeps outstanding.
const DEPTH: u64 = 32;
const CHUNK: usize = 4096;

#[test]
fn posting_polling_and_registering_from_seven_threads() {
    let a = Context::open("127.0.0.31".parse().unwrap()).unwrap();
    let b = Context::open("127.0.0.32".parse().unwrap()).unwrap();
    let (pa, pb) = (Arc::new(a.alloc_pd().unwrap()), b.alloc_pd().unwrap());
    // Per QP: a source chunk and a READ-back chunk on a, a target chunk on b.
    let ma = Arc::new(pa.register(2 * QPS * CHUNK, Access::ALL).unwrap());
    let mb = pb.register(QPS * CHUNK, Access::ALL).unwrap();
    let cqs: Vec<Arc<CompletionQueue>> = (0..2)
        .map(|_| Arc::new(a.create_cq(1024).unwrap()))
        .collect();
    let cq_b = b.create_cq(1024).unwrap();
    let qps: Vec<_> = (0..QPS)
        .map(|q| {
            let cq = &cqs[q % 2];
            let qa = pa.create_qp(cq, cq, QpType::Rc, QpCap::default()).unwrap();
            let qb = pb
                .create_qp(&cq_b, &cq_b, QpType::Rc, QpCap::default())
                .unwrap();
            qa.connect(&qb.endpoint(), &ConnectOptions::default())
                .unwrap();
            qb.connect(&qa.endpoint(), &ConnectOptions::default())
                .unwrap();
            (Arc::new(qa), qb)
        })
        .collect();
    let (addr, rkey) = (mb.addr(), mb.rkey());
    let done: Arc<Vec<AtomicU64>> = Arc::new((0..QPS).map(|_| AtomicU64::new(0)).collect());
    let stop = Arc::new(AtomicBool::new(false));

    let posters: Vec<_> = (0..QPS)
        .map(|q| {
            let (qp, ma, done) = (qps[q].0.clone(), ma.clone(), done.clone());
            std::thread::spawn(move || {
                let src = q * CHUNK;
                ma.write(src, &[q as u8 + 1; CHUNK]).unwrap();
                let deadline = Instant::now() + Duration::from_secs(60);
                for i in 0..WRS {
                    while i - done[q].load(Ordering::Acquire) >= DEPTH {
                        assert!(Instant::now() < deadline, "QP {q} stalled at WR {i}");
                        std::thread::yield_now();
                    }
                    // Even: WRITE our chunk to b; odd: READ it back into our second half.
                    let (op, local) = if i % 2 == 0 {
                        (WrOpcode::RdmaWrite, src)
                    } else {
                        (WrOpcode::RdmaRead, QPS * CHUNK + src)
                    };
                    let sges = vec![ma.sge(local, CHUNK).unwrap()];
                    let mut w = SendWr::new((q as u64) << 32 | i, op, SendData::Sges(sges.into()));
                    (w.remote_addr, w.rkey) = (addr + (q * CHUNK) as u64, rkey);
                    qp.post_send(w).unwrap();
                }
            })
        })
        .collect();

    let pollers: Vec<_> = (0..2)
        .map(|c| {
            let (cq, done) = (cqs[c].clone(), done.clone());
            std::thread::spawn(move || {
                let want = WRS as usize * QPS / 2;
                let mut seen = Vec::new();
                let deadline = Instant::now() + Duration::from_secs(60);
                let mut wcs = Vec::new();
                while seen.len() < want {
                    assert!(
                        Instant::now() < deadline,
                        "CQ {c}: {} of {want}",
                        seen.len()
                    );
                    wcs.clear();
                    cq.poll(&mut wcs, 16).unwrap();
                    for wc in &wcs {
                        assert_eq!(wc.status, WcStatus::Success, "wr_id {:#x}", wc.wr_id);
                        done[(wc.wr_id >> 32) as usize].fetch_add(1, Ordering::Release);
                        seen.push(wc.wr_id);
                    }
                }
                seen
            })
        })
        .collect();

    let registrar = {
        let (pa, stop) = (pa.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Acquire) {
                let mr = pa.register(64 << 10, Access::ALL).unwrap();
                mr.write(0, &[n as u8; 64 << 10]).unwrap();
                let mut back = [0u8; 16];
                mr.read(1000, &mut back).unwrap();
                assert_eq!(back, [n as u8; 16]);
                drop(mr);
                n += 1;
            }
            n
        })
    };

    posters.into_iter().for_each(|t| t.join().unwrap());
    let mut all = Vec::new();
    for p in pollers {
        all.extend(p.join().unwrap());
    }
    stop.store(true, Ordering::Release);
    let registered = registrar.join().unwrap();

    // Every WR exactly once.
    let unique: HashSet<u64> = all.iter().copied().collect();
    assert_eq!(all.len(), QPS * WRS as usize, "completions");
    assert_eq!(unique.len(), all.len(), "a WR completed twice");
    for q in 0..QPS as u64 {
        for i in 0..WRS {
            assert!(
                unique.contains(&(q << 32 | i)),
                "QP {q} WR {i} never completed"
            );
        }
    }
    // The bytes: b holds each QP's chunk, and a read it back.
    for q in 0..QPS {
        let mut got = vec![0u8; CHUNK];
        mb.read(q * CHUNK, &mut got).unwrap();
        assert!(got.iter().all(|&x| x == q as u8 + 1), "b's chunk of QP {q}");
        ma.read(QPS * CHUNK + q * CHUNK, &mut got).unwrap();
        assert!(
            got.iter().all(|&x| x == q as u8 + 1),
            "a's READ-back of QP {q}"
        );
    }
    assert!(registered > 0, "the registering thread never ran");
    drop(qps);
}
