//! The Rust API's rdma-core backend (issue 59) on this repository's own `libibverbs.so.1`:
//! a program written against `oxrdma` opens device `oxr0` through the C ABI, as it would
//! open `mlx5_0` or `rxe0`, and talks to an engine device of the same process. Every
//! operation crosses between the two backends in both directions, so each side's
//! conversions (work requests, completions, QP attributes, address handles) are checked
//! against the other's.
//!
//! One test function: the library to load and its device are named through the
//! environment, which is set once, before anything reads it.

use oxrdma::{
    Access, Backend, ConnectOptions, Context, Error, QpCap, QpState, QpType, RecvWr, SendWr,
    WcOpcode, WcStatus,
};
use std::time::Duration;

const HW_IP: &str = "127.0.3.10";
const ENGINE_IP: &str = "127.0.3.11";
const WAIT: Duration = Duration::from_secs(10);

/// The C library this test binary was built with.
fn our_libibverbs() -> std::path::PathBuf {
    std::env::current_exe()
        .unwrap()
        .with_file_name("liboxrdma_ibverbs.so")
}

#[test]
fn the_rust_api_runs_on_rdma_core_against_the_engine() {
    let lib = our_libibverbs();
    assert!(lib.exists(), "{} is not built", lib.display());
    // SAFETY (of the test's logic, not memory): the only test of this binary, so no
    // other thread reads the environment meanwhile.
    std::env::set_var("OXRDMA_LIBIBVERBS", &lib);
    std::env::set_var("OXRDMA_DEVICES", format!("oxr0={HW_IP}"));
    // Built beside it by the rdmacm package's own test (`cargo test --workspace`).
    let rdmacm = lib.with_file_name("liboxrdma_rdmacm.so");
    assert!(
        rdmacm.exists(),
        "{} is not built: run the workspace's tests",
        rdmacm.display()
    );
    std::env::set_var("OXRDMA_LIBRDMACM", &rdmacm);

    assert_eq!(oxrdma::rdma_core::devices().unwrap(), ["oxr0"]);
    let hw = Context::open_rdma_core("oxr0").unwrap();
    let sw = Context::open_engine(ENGINE_IP.parse().unwrap()).unwrap();
    assert_eq!(hw.backend(), Backend::RdmaCore);
    assert_eq!(sw.backend(), Backend::Engine);
    assert_eq!(hw.gid().ip().to_string(), HW_IP);
    assert!(hw.attr().max_qp > 0 && hw.attr().max_mr_size > 0);
    assert!(matches!(
        Context::open_rdma_core("mlx5_0"),
        Err(Error::NoRdmaCore(_))
    ));

    rc_both_ways(&hw, &sw);
    ud_both_ways(&hw, &sw);
    awaited(&hw, &sw);
    cm_both_ways(&hw, &sw);
    cm_events_both_ways(&hw, &sw);
    ud_cm_both_ways(&hw, &sw);
    rstream_both_ways(&hw, &sw);
    rstream_awaited(&hw, &sw);
    srq_channel_and_events(&hw, &sw);
    memory_windows(&hw, &sw);
    refusals(&hw);
}

/// Connects two RC QPs to each other.
fn join(a: &oxrdma::QueuePair, b: &oxrdma::QueuePair) {
    a.connect(&b.endpoint(), &ConnectOptions::default())
        .unwrap();
    b.connect(&a.endpoint(), &ConnectOptions::default())
        .unwrap();
}

/// WRITE, READ, SEND, WRITE with immediate and both atomics, each way; a bad rkey.
fn rc_both_ways(hw: &Context, sw: &Context) {
    let all =
        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC;
    let (ph, ps) = (hw.alloc_pd().unwrap(), sw.alloc_pd().unwrap());
    let (mh, ms) = (
        ph.register(8192, all).unwrap(),
        ps.register(8192, all).unwrap(),
    );
    let (ch, cs) = (hw.create_cq(64).unwrap(), sw.create_cq(64).unwrap());
    let qh = ph
        .create_qp(&ch, &ch, QpType::Rc, QpCap::default())
        .unwrap();
    let qs = ps
        .create_qp(&cs, &cs, QpType::Rc, QpCap::default())
        .unwrap();
    assert_eq!(qh.state().unwrap(), QpState::Reset);
    let (attr, cap, signal_all) = qh.query().unwrap();
    assert_eq!((attr.qp_state, attr.ah_attr), (Some(QpState::Reset), None));
    assert!(cap.max_send_wr >= QpCap::default().max_send_wr && !signal_all);
    let eh = qh.endpoint().with_buffer(mh.remote());
    let es = qs.endpoint().with_buffer(ms.remote());
    assert_eq!(eh.gid, hw.gid());
    // Through the byte form, as two programs would exchange them.
    let eh = oxrdma::Endpoint::from_bytes(&eh.to_bytes()).unwrap();
    qh.connect(&es, &ConnectOptions::default()).unwrap();
    qs.connect(&eh, &ConnectOptions::default()).unwrap();
    // Every attribute as the provider keeps it, the path included.
    let (attr, _, _) = qh.query().unwrap();
    assert_eq!(attr.qp_state, Some(QpState::Rts));
    assert_eq!(attr.dest_qp_num, Some(qs.qpn()));
    assert_eq!(attr.ah_attr.map(|a| a.dgid), Some(sw.gid()));
    assert_eq!(attr.sq_psn, Some(eh.psn));
    assert_eq!(qh.state().unwrap(), QpState::Rts);

    // rdma-core WRITEs into the engine, then READs it back elsewhere.
    mh.write(0, b"from rdma-core to the engine").unwrap();
    qh.post_send(
        SendWr::write(
            1,
            [mh.sge(0, 28).unwrap()],
            es.buffers[0].slice(100..128).unwrap(),
        )
        .unwrap(),
    )
    .unwrap();
    let wc = ch.wait_one(WAIT).unwrap().result().unwrap();
    assert_eq!((wc.wr_id, wc.opcode), (1, WcOpcode::RdmaWrite));
    let mut got = [0u8; 28];
    ms.read(100, &mut got).unwrap();
    assert_eq!(&got, b"from rdma-core to the engine");
    qh.post_send(
        SendWr::read(
            2,
            [mh.sge(1000, 28).unwrap()],
            es.buffers[0].slice(100..128).unwrap(),
        )
        .unwrap(),
    )
    .unwrap();
    let wc = ch.wait_one(WAIT).unwrap().result().unwrap();
    assert_eq!(
        (wc.wr_id, wc.opcode, wc.byte_len),
        (2, WcOpcode::RdmaRead, 28)
    );
    mh.read(1000, &mut got).unwrap();
    assert_eq!(&got, b"from rdma-core to the engine");

    // The engine WRITEs into rdma-core's memory with an immediate: a receive there.
    qh.post_recv(RecvWr {
        wr_id: 3,
        sges: vec![mh.sge(4096, 64).unwrap()].into(),
    })
    .unwrap();
    ms.write(200, b"engine to rdma-core").unwrap();
    let w = SendWr::write(
        4,
        [ms.sge(200, 19).unwrap()],
        eh.buffers[0].slice(2000..2019).unwrap(),
    )
    .unwrap()
    .with_imm(0xfeed_f00d)
    .unwrap();
    qs.post_send(w).unwrap();
    cs.wait_one(WAIT).unwrap().result().unwrap();
    let wc = ch.wait_one(WAIT).unwrap().result().unwrap();
    assert_eq!(
        (wc.wr_id, wc.opcode, wc.imm),
        (3, WcOpcode::RecvRdmaWithImm, Some(0xfeed_f00d))
    );
    assert_eq!(wc.qp_num, qh.qpn());
    let mut got = [0u8; 19];
    mh.read(2000, &mut got).unwrap();
    assert_eq!(&got, b"engine to rdma-core");

    // SENDs each way, one inline, one from registered memory.
    qs.post_recv(RecvWr {
        wr_id: 5,
        sges: vec![ms.sge(4096, 64).unwrap()].into(),
    })
    .unwrap();
    qh.post_send(SendWr::send_inline(6, b"inline from rdma-core"))
        .unwrap();
    assert_eq!(ch.wait_one(WAIT).unwrap().result().unwrap().wr_id, 6);
    let wc = cs.wait_one(WAIT).unwrap().result().unwrap();
    assert_eq!((wc.wr_id, wc.byte_len, wc.src_qp), (5, 21, qh.qpn()));
    qh.post_recv(RecvWr {
        wr_id: 7,
        sges: vec![mh.sge(5000, 64).unwrap()].into(),
    })
    .unwrap();
    ms.write(300, b"a SEND from the engine").unwrap();
    qs.post_send(SendWr::send(8, [ms.sge(300, 22).unwrap()]))
        .unwrap();
    cs.wait_one(WAIT).unwrap().result().unwrap();
    let wc = ch.wait_one(WAIT).unwrap().result().unwrap();
    assert_eq!((wc.wr_id, wc.opcode, wc.byte_len), (7, WcOpcode::Recv, 22));
    let mut got = [0u8; 22];
    mh.read(5000, &mut got).unwrap();
    assert_eq!(&got, b"a SEND from the engine");

    // Atomics each way on an 8-byte word.
    ms.write(512, &40u64.to_ne_bytes()).unwrap();
    let word_s = es.buffers[0].slice(512..520).unwrap();
    qh.post_send(SendWr::atomic_fetch_add(9, mh.sge(6000, 8).unwrap(), word_s, 2).unwrap())
        .unwrap();
    ch.wait_one(WAIT).unwrap().result().unwrap();
    let mut old = [0u8; 8];
    mh.read(6000, &mut old).unwrap();
    assert_eq!(u64::from_ne_bytes(old), 40);
    ms.read(512, &mut old).unwrap();
    assert_eq!(u64::from_ne_bytes(old), 42);
    mh.write(520, &7u64.to_ne_bytes()).unwrap();
    let word_h = eh.buffers[0].slice(520..528).unwrap();
    qs.post_send(SendWr::atomic_cas(10, ms.sge(600, 8).unwrap(), word_h, 7, 99).unwrap())
        .unwrap();
    cs.wait_one(WAIT).unwrap().result().unwrap();
    mh.read(520, &mut old).unwrap();
    assert_eq!(u64::from_ne_bytes(old), 99);

    // A READ with a wrong rkey completes in error on the rdma-core side.
    let good = es.buffers[0];
    let bad = oxrdma::RemoteBuf::new(good.addr(), good.rkey() ^ 0x5a5a, good.len()).unwrap();
    qh.post_send(SendWr::read(11, [mh.sge(0, 8).unwrap()], bad).unwrap())
        .unwrap();
    let err = ch.wait_one(WAIT).unwrap().result().unwrap_err();
    assert_eq!((err.wr_id, err.status), (11, WcStatus::RemAccessErr));
    assert_eq!(qh.state().unwrap(), QpState::Err);

    // The PD is busy while its region and QP live, then goes.
    let (ph, e) = ph.try_destroy().unwrap_err();
    assert!(
        matches!(e, Error::Verbs(oxrdma::VerbsError::Busy(_))),
        "{e}"
    );
    drop((qh, mh));
    ph.try_destroy().map_err(|(_, e)| e).unwrap();
}

/// Datagrams each way through address handles; the receiver's 40-byte GRH area.
fn ud_both_ways(hw: &Context, sw: &Context) {
    let (ph, ps) = (hw.alloc_pd().unwrap(), sw.alloc_pd().unwrap());
    let (mh, ms) = (
        ph.register(4096, Access::LOCAL_WRITE).unwrap(),
        ps.register(4096, Access::LOCAL_WRITE).unwrap(),
    );
    let (ch, cs) = (hw.create_cq(16).unwrap(), sw.create_cq(16).unwrap());
    let qh = ph
        .create_qp(&ch, &ch, QpType::Ud, QpCap::default())
        .unwrap();
    let qs = ps
        .create_qp(&cs, &cs, QpType::Ud, QpCap::default())
        .unwrap();
    qh.ready_ud(0x1111).unwrap();
    qs.ready_ud(0x1111).unwrap();
    qh.post_recv(RecvWr {
        wr_id: 1,
        sges: vec![mh.sge(0, 40 + 256).unwrap()].into(),
    })
    .unwrap();
    qs.post_recv(RecvWr {
        wr_id: 2,
        sges: vec![ms.sge(0, 40 + 256).unwrap()].into(),
    })
    .unwrap();
    let to_sw = ph.create_ah(sw.gid()).unwrap();
    let to_hw = ps.create_ah(hw.gid()).unwrap();
    qh.post_send(
        SendWr::send_inline(3, b"datagram to the engine").to(to_sw.dest(qs.qpn(), 0x1111)),
    )
    .unwrap();
    qs.post_send(SendWr::send_inline(4, b"datagram to rdma-core").to(to_hw.dest(qh.qpn(), 0x1111)))
        .unwrap();
    // Each CQ holds its send's completion and its receive's, in either order.
    let both = |cq: &oxrdma::CompletionQueue| {
        let mut wcs = cq.wait_for(2, WAIT).unwrap();
        wcs.sort_by_key(|w| w.opcode == WcOpcode::Recv);
        assert_eq!(wcs[0].opcode, WcOpcode::Send);
        wcs[0].result().unwrap();
        wcs[1].result().unwrap()
    };
    let (at_hw, at_sw) = (both(&ch), both(&cs));
    assert_eq!(
        (at_sw.wr_id, at_sw.byte_len, at_sw.src_qp),
        (2, 40 + 22, qh.qpn())
    );
    assert_eq!(
        (at_hw.wr_id, at_hw.byte_len, at_hw.src_qp),
        (1, 40 + 21, qs.qpn())
    );
    let mut text = [0u8; 21];
    mh.read(40, &mut text).unwrap();
    assert_eq!(&text, b"datagram to rdma-core");
    // An address handle that is gone cannot be named.
    let id = to_sw.id();
    to_sw.try_destroy().map_err(|(_, e)| e).unwrap();
    let stale = SendWr::send_inline(5, b"x").to(oxrdma::UdDest {
        ah: id,
        remote_qpn: qs.qpn(),
        remote_qkey: 0x1111,
    });
    assert!(qh.post_send(stale).is_err());
}

/// An rdma-core CQ's completions awaited on tokio, the sender pausing between messages so
/// that the task sleeps on the CQ's channel each time.
fn awaited(hw: &Context, sw: &Context) {
    let (ph, ps) = (hw.alloc_pd().unwrap(), sw.alloc_pd().unwrap());
    let mh = ph.register(64 * 64, Access::LOCAL_WRITE).unwrap();
    let (ch, cs) = (hw.create_cq(64).unwrap(), sw.create_cq(64).unwrap());
    let qh = ph
        .create_qp(&ch, &ch, QpType::Rc, QpCap::default())
        .unwrap();
    let qs = ps
        .create_qp(&cs, &cs, QpType::Rc, QpCap::default())
        .unwrap();
    join(&qh, &qs);
    const N: u64 = 40;
    for i in 0..N {
        let sges = vec![mh.sge(64 * i as usize, 64).unwrap()].into();
        qh.post_recv(RecvWr { wr_id: i, sges }).unwrap();
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let got = rt.block_on(async {
        let ach = oxrdma::aio::AsyncCq::new(ch).unwrap();
        let sender = std::thread::spawn(move || {
            for i in 0..N {
                std::thread::sleep(Duration::from_millis(2));
                qs.post_send(SendWr::send_inline(i, &i.to_le_bytes()))
                    .unwrap();
                cs.wait_one(WAIT).unwrap().result().unwrap();
            }
        });
        let mut got = Vec::new();
        while got.len() < N as usize {
            let wc = tokio::time::timeout(WAIT, ach.next()).await;
            got.push(
                wc.expect("a completion in time")
                    .unwrap()
                    .result()
                    .unwrap()
                    .wr_id,
            );
        }
        sender.join().unwrap();
        got
    });
    assert_eq!(got, (0..N).collect::<Vec<_>>());
    let mut last = [0u8; 8];
    mh.read(64 * (N as usize - 1), &mut last).unwrap();
    assert_eq!(u64::from_le_bytes(last), N - 1);
}

/// The Rust-shaped RDMA CM on rdma-core (the system's librdmacm, here this repository's)
/// against the engine's, each side listening once; private data both ways at its length,
/// then a WRITE over each connection.
fn cm_both_ways(hw: &Context, sw: &Context) {
    use oxrdma::cm;
    let rc = |ctx: &Context| {
        let pd = ctx.alloc_pd().unwrap();
        let all = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
        let mr = pd.register(4096, all).unwrap();
        let cq = ctx.create_cq(16).unwrap();
        let qp = pd
            .create_qp(&cq, &cq, QpType::Rc, QpCap::default())
            .unwrap();
        (pd, mr, cq, qp)
    };
    for (server, client, port) in [(hw, sw, 7481), (sw, hw, 7482)] {
        let at: std::net::SocketAddr = (server.gid().ip(), port).into();
        let listener = cm::Listener::bind(server, at).unwrap();
        let (_pc, mc, cc, qc) = rc(client);
        let (_ps, ms, cs, qs) = rc(server);
        let remote = qs.endpoint().with_buffer(ms.remote()).to_bytes();
        let dialer = std::thread::scope(|t| {
            let dial = t.spawn(|| cm::connect(client, at, &qc, b"hello from the client").unwrap());
            let req = listener.next_request(WAIT).unwrap();
            assert_eq!(req.private_data(), b"hello from the client");
            let conn = req.accept(&qs, &remote).unwrap();
            let dialed = dial.join().unwrap();
            assert_eq!(conn.private_data(), b"hello from the client");
            (dialed, conn)
        });
        let (dialed, _accepted) = dialer;
        // The server's buffer came in the accept's private data: WRITE into it.
        let target = oxrdma::Endpoint::from_bytes(dialed.private_data())
            .unwrap()
            .buffers[0];
        mc.write(0, b"over the RDMA CM").unwrap();
        qc.post_send(SendWr::write(1, [mc.sge(0, 16).unwrap()], target).unwrap())
            .unwrap();
        cc.wait_one(WAIT).unwrap().result().unwrap();
        let mut got = [0u8; 16];
        ms.read(0, &mut got).unwrap();
        assert_eq!(&got, b"over the RDMA CM", "server {:?}", server.backend());
        assert!(cs.poll(&mut Vec::new(), 1).unwrap() == 0);
    }
    // A rejection from the engine reaches an rdma-core client with its reason's data.
    let at: std::net::SocketAddr = (sw.gid().ip(), 7483).into();
    let listener = cm::Listener::bind(sw, at).unwrap();
    let (_p, _m, _c, qc) = rc(hw);
    std::thread::scope(|t| {
        let dial = t.spawn(|| cm::connect(hw, at, &qc, b"may I").map(drop));
        listener.next_request(WAIT).unwrap().reject(b"no").unwrap();
        match dial.join().unwrap() {
            Err(Error::Rejected { private_data, .. }) => assert_eq!(private_data, b"no"),
            other => panic!("expected a rejection, got {other:?}"),
        }
    });
}

/// An RC QP, its CQ and a region, on `ctx`.
fn rc_qp(
    ctx: &Context,
) -> (
    oxrdma::MemoryRegion,
    oxrdma::CompletionQueue,
    oxrdma::QueuePair,
) {
    let pd = ctx.alloc_pd().unwrap();
    let mr = pd.register(4096, Access::LOCAL_WRITE).unwrap();
    let cq = ctx.create_cq(16).unwrap();
    let qp = pd
        .create_qp(&cq, &cq, QpType::Rc, QpCap::default())
        .unwrap();
    (mr, cq, qp)
}

/// The next event of `ch`, which must be `want`.
fn event(ch: &oxrdma::cm::EventChannel, want: oxrdma::cm::CmEventType) -> oxrdma::cm::CmEvent {
    let e = ch
        .get_event_timeout(WAIT)
        .unwrap()
        .unwrap_or_else(|| panic!("no {want:?} event in {WAIT:?}"));
    assert_eq!(e.event, want, "status {}", e.status);
    e
}

/// A client id of `ctx` in `ps`, its address and route to `at` resolved.
fn routed(
    ch: &oxrdma::cm::EventChannel,
    ctx: &Context,
    ps: oxrdma::cm::PortSpace,
    at: std::net::SocketAddr,
) -> oxrdma::cm::CmId {
    use oxrdma::cm::CmEventType as Ev;
    let id = oxrdma::cm::CmId::new(ch, ctx, ps).unwrap();
    id.resolve_addr(None, at).unwrap();
    event(ch, Ev::AddrResolved);
    id.resolve_route().unwrap();
    event(ch, Ev::RouteResolved);
    id
}

/// librdmacm's event API (`CmId`, `EventChannel`) on rdma-core against the engine's,
/// each side listening: the QPs attached to the ids are moved by them (the client's
/// connected when it sees ESTABLISHED, the server's ready to receive at accept), private
/// data goes both ways, a SEND crosses, and a disconnect reaches the other side. Then a
/// rejection, whose client QP ends in ERR.
fn cm_events_both_ways(hw: &Context, sw: &Context) {
    use oxrdma::cm::{CmEventType as Ev, CmId, ConnParam, EventChannel, PortSpace};
    for (server, client, port) in [(hw, sw, 7491), (sw, hw, 7492)] {
        let at: std::net::SocketAddr = (server.gid().ip(), port).into();
        let (sch, cch) = (
            EventChannel::for_context(server).unwrap(),
            EventChannel::for_context(client).unwrap(),
        );
        assert_eq!(sch.backend(), server.backend());
        let listener = CmId::new(&sch, server, PortSpace::Tcp).unwrap();
        listener.bind_addr(at).unwrap();
        listener.listen(8).unwrap();
        let (mc, cc, qc) = rc_qp(client);
        let (ms, cs, qs) = rc_qp(server);
        let id = routed(&cch, client, PortSpace::Tcp, at);
        id.attach_qp(&qc).unwrap();
        assert_eq!(qc.state().unwrap(), QpState::Init);
        let hello = ConnParam {
            private_data: b"client says hi".to_vec(),
            ..ConnParam::default()
        };
        id.connect(&hello).unwrap();
        let req = event(&sch, Ev::ConnectRequest);
        assert_eq!(req.listen_id, Some(listener.key()));
        assert!(req.conn.private_data.starts_with(b"client says hi"));
        let new = req.new_id.expect("a request's id");
        assert_eq!(new.key(), req.id);
        assert!(new.peer_addr().is_some());
        assert_eq!(
            new.peer_addr(),
            id.local_addr(),
            "the server sees the client's address"
        );
        new.attach_qp(&qs).unwrap();
        let sges = vec![ms.sge(0, 64).unwrap()].into();
        qs.post_recv(RecvWr { wr_id: 5, sges }).unwrap();
        let back = ConnParam {
            private_data: b"server says hello".to_vec(),
            ..req.conn.clone()
        };
        new.accept(&back).unwrap();
        assert_eq!(qs.state().unwrap(), QpState::Rts);
        let up = event(&cch, Ev::Established);
        assert!(up.conn.private_data.starts_with(b"server says hello"));
        assert_eq!(qc.state().unwrap(), QpState::Rts);
        event(&sch, Ev::Established);
        mc.write(0, b"sent over the event API").unwrap();
        qc.post_send(SendWr::send(1, [mc.sge(0, 23).unwrap()]))
            .unwrap();
        cc.wait_one(WAIT).unwrap().result().unwrap();
        let wc = cs.wait_one(WAIT).unwrap().result().unwrap();
        assert_eq!((wc.wr_id, wc.byte_len), (5, 23));
        let mut got = [0u8; 23];
        ms.read(0, &mut got).unwrap();
        assert_eq!(
            &got,
            b"sent over the event API",
            "server {:?}",
            server.backend()
        );
        id.disconnect().unwrap();
        assert_eq!(qc.state().unwrap(), QpState::Err);
        event(&sch, Ev::Disconnected);
        new.disconnect().unwrap();
        event(&cch, Ev::Disconnected);

        // Turned away: the client sees REJECTED with the reason's data; its QP is in ERR.
        let (_m, _c, qc) = rc_qp(client);
        let id = routed(&cch, client, PortSpace::Tcp, at);
        id.attach_qp(&qc).unwrap();
        id.connect(&ConnParam::default()).unwrap();
        let req = event(&sch, Ev::ConnectRequest);
        req.new_id.unwrap().reject(b"not today").unwrap();
        let no = event(&cch, Ev::Rejected);
        assert!(no.conn.private_data.starts_with(b"not today"));
        assert_eq!(qc.state().unwrap(), QpState::Err);

        // A client that moves its own QP with `init_qp_attr` (INIT before the REQ; INIT
        // again, RTR, RTS and the RTU on CONNECT_RESPONSE), the REQ naming its region: the
        // server WRITEs into it, which the attributes must allow.
        let pd = client.alloc_pd().unwrap();
        let rw = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
        let mc = pd.register(64, rw).unwrap();
        let cc = client.create_cq(4).unwrap();
        let qc = pd
            .create_qp(&cc, &cc, QpType::Rc, QpCap::default())
            .unwrap();
        let id = routed(&cch, client, PortSpace::Tcp, at);
        let step = |s: QpState| qc.modify(&id.init_qp_attr(s).unwrap()).unwrap();
        step(QpState::Init);
        let mut data = mc.addr().to_le_bytes().to_vec();
        data.extend(mc.rkey().to_le_bytes());
        id.connect(&ConnParam {
            private_data: data,
            qp_num: qc.qpn(),
            ..ConnParam::default()
        })
        .unwrap();
        let req = event(&sch, Ev::ConnectRequest);
        let (addr, rkey) = (
            u64::from_le_bytes(req.conn.private_data[..8].try_into().unwrap()),
            u32::from_le_bytes(req.conn.private_data[8..12].try_into().unwrap()),
        );
        let new = req.new_id.unwrap();
        let (ms, cs, qs) = rc_qp(server);
        new.attach_qp(&qs).unwrap();
        new.accept(&req.conn).unwrap();
        event(&cch, Ev::ConnectResponse);
        for s in [QpState::Init, QpState::Rtr, QpState::Rts] {
            step(s);
        }
        id.establish().unwrap();
        event(&sch, Ev::Established);
        ms.write(0, b"written by the server").unwrap();
        let target = oxrdma::RemoteBuf::new(addr, rkey, 64).unwrap();
        qs.post_send(SendWr::write(2, [ms.sge(0, 21).unwrap()], target).unwrap())
            .unwrap();
        cs.wait_one(WAIT).unwrap().result().unwrap();
        let mut got = [0u8; 21];
        mc.read(0, &mut got).unwrap();
        assert_eq!(
            &got,
            b"written by the server",
            "client {:?}",
            client.backend()
        );
    }
}

/// UD through the RDMA CM (RDMA_PS_UDP, SIDR) between the backends: the server's id
/// accepts with its UD QP, the client's ESTABLISHED names the peer's QP and Q_Key, and a
/// datagram goes to them.
fn ud_cm_both_ways(hw: &Context, sw: &Context) {
    use oxrdma::cm::{CmEventType as Ev, CmId, ConnParam, EventChannel, PortSpace};
    for (server, client, port) in [(hw, sw, 7493), (sw, hw, 7494)] {
        let at: std::net::SocketAddr = (server.gid().ip(), port).into();
        let (sch, cch) = (
            EventChannel::for_context(server).unwrap(),
            EventChannel::for_context(client).unwrap(),
        );
        let listener = CmId::new(&sch, server, PortSpace::Udp).unwrap();
        listener.bind_addr(at).unwrap();
        listener.listen(8).unwrap();
        let ud = |ctx: &Context| {
            let pd = ctx.alloc_pd().unwrap();
            let mr = pd.register(4096, Access::LOCAL_WRITE).unwrap();
            let cq = ctx.create_cq(16).unwrap();
            let qp = pd
                .create_qp(&cq, &cq, QpType::Ud, QpCap::default())
                .unwrap();
            (pd, mr, cq, qp)
        };
        let (pc, _mc, cc, qc) = ud(client);
        let (_ps, ms, cs, qs) = ud(server);
        let id = routed(&cch, client, PortSpace::Udp, at);
        id.attach_qp(&qc).unwrap();
        assert_eq!(qc.state().unwrap(), QpState::Rts);
        id.connect(&ConnParam {
            private_data: b"ud?".to_vec(),
            ..ConnParam::default()
        })
        .unwrap();
        let req = event(&sch, Ev::ConnectRequest);
        let new = req.new_id.expect("a request's id");
        assert!(req
            .ud
            .expect("UD parameters")
            .private_data
            .starts_with(b"ud?"));
        new.attach_qp(&qs).unwrap();
        let sges = vec![ms.sge(0, 4096).unwrap()].into();
        qs.post_recv(RecvWr { wr_id: 9, sges }).unwrap();
        new.accept(&ConnParam::default()).unwrap();
        let up = event(&cch, Ev::Established).ud.expect("UD parameters");
        assert_eq!(up.qp_num, qs.qpn(), "server {:?}", server.backend());
        assert_eq!(up.qkey, oxrdma::cm::UDP_QKEY);
        let ah = pc
            .create_ah_av(oxrdma::AddressVector {
                dgid: up.dgid,
                sgid_index: client.gid_index_for(up.dgid),
            })
            .unwrap();
        qc.post_send(SendWr::send_inline(3, b"datagram").to(ah.dest(up.qp_num, up.qkey)))
            .unwrap();
        cc.wait_one(WAIT).unwrap().result().unwrap();
        let wc = cs.wait_one(WAIT).unwrap().result().unwrap();
        // 40 bytes of GRH, then the datagram.
        assert_eq!((wc.wr_id, wc.byte_len), (9, 48));
        let mut got = [0u8; 8];
        ms.read(40, &mut got).unwrap();
        assert_eq!(&got, b"datagram");
    }
}

/// rsockets between the backends, each side listening: a stream of 4 MiB in pieces of
/// every size class (more than the receive buffer, so credits go round), echoed back,
/// then an orderly close seen as the end of the stream.
fn rstream_both_ways(hw: &Context, sw: &Context) {
    use oxrdma::rsocket::{RListener, RStream};
    use std::io::{Read, Write};
    let data: Vec<u8> = (0..4u32 << 20).map(|i| (i * 7 + i / 251) as u8).collect();
    for (server, client, port) in [(hw, sw, 7495), (sw, hw, 7496)] {
        let at: std::net::SocketAddr = (server.gid().ip(), port).into();
        let listener = RListener::bind(server, at).unwrap();
        std::thread::scope(|t| {
            let echo = t.spawn(|| {
                let mut s = listener.accept().unwrap();
                let mut buf = vec![0u8; 70_000];
                let mut n = 0;
                loop {
                    let got = s.read(&mut buf).unwrap();
                    if got == 0 {
                        return n;
                    }
                    s.write_all(&buf[..got]).unwrap();
                    n += got;
                }
            });
            let mut c = RStream::connect(client, at).unwrap();
            assert_eq!(c.peer_addr().map(|a| a.ip()), Some(server.gid().ip()));
            let mut back = vec![0u8; data.len()];
            std::thread::scope(|u| {
                let (c1, c2, data) = (&c, &c, &data);
                let w = u.spawn(move || {
                    let mut at = 0;
                    for size in [1usize, 7, 64, 1000, 4096, 65_536, 300_000].iter().cycle() {
                        if at == data.len() {
                            break;
                        }
                        let end = (at + size).min(data.len());
                        let mut w = c1;
                        w.write_all(&data[at..end]).unwrap();
                        at = end;
                    }
                    c1.shutdown_std(std::net::Shutdown::Write).unwrap();
                });
                let mut r = c2;
                r.read_exact(&mut back).unwrap();
                w.join().unwrap();
            });
            assert!(back == data, "echo through a {:?} server", server.backend());
            assert_eq!(echo.join().unwrap(), data.len());
            let mut end = [0u8; 1];
            assert_eq!(c.read(&mut end).unwrap(), 0, "the end of the stream");
        });
    }
}

/// An rsocket on rdma-core awaited on tokio (`AsyncRStream`) against an engine server.
fn rstream_awaited(hw: &Context, sw: &Context) {
    use oxrdma::rsocket::{RListener, RStream};
    use std::io::{Read, Write};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let at: std::net::SocketAddr = (sw.gid().ip(), 7497).into();
    let listener = RListener::bind(sw, at).unwrap();
    let echo = std::thread::spawn(move || {
        let mut s = listener.accept().unwrap();
        let mut buf = [0u8; 64];
        for _ in 0..100 {
            s.read_exact(&mut buf).unwrap();
            s.write_all(&buf).unwrap();
        }
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let s = RStream::connect(hw, at).unwrap();
        let mut s = oxrdma::aio::AsyncRStream::new(s).unwrap();
        for i in 0..100u8 {
            let msg = [i; 64];
            s.write_all(&msg).await.unwrap();
            let mut back = [0u8; 64];
            tokio::time::timeout(WAIT, s.read_exact(&mut back))
                .await
                .expect("the echo in time")
                .unwrap();
            assert_eq!(back, msg);
        }
    });
    echo.join().unwrap();
}

/// A shared receive queue on rdma-core feeding two QPs, its limit event read as an
/// asynchronous event, and a completion channel shared by two CQs naming each by its
/// handle; against the engine's QPs.
fn srq_channel_and_events(hw: &Context, sw: &Context) {
    use oxrdma::{AsyncEvent, EventType};
    let (ph, ps) = (hw.alloc_pd().unwrap(), sw.alloc_pd().unwrap());
    let mh = ph.register(4096, Access::LOCAL_WRITE).unwrap();
    let srq = ph.create_srq(16, 1, 0).unwrap();
    assert!(srq.query().unwrap().max_wr >= 16);
    let channel = hw.create_comp_channel().unwrap();
    let mut pairs = Vec::new();
    for _ in 0..2 {
        let ch = hw.create_cq(16).unwrap();
        let cs = sw.create_cq(16).unwrap();
        let qh = ph
            .create_qp_on_srq(&ch, &ch, QpType::Rc, QpCap::default(), Some(&srq))
            .unwrap();
        let qs = ps
            .create_qp(&cs, &cs, QpType::Rc, QpCap::default())
            .unwrap();
        join(&qh, &qs);
        pairs.push((ch, cs, qh, qs));
    }
    for i in 0..4u64 {
        let sges = vec![mh.sge(64 * i as usize, 64).unwrap()].into();
        srq.post_recv(RecvWr { wr_id: i, sges }).unwrap();
    }
    // Below 3 receives left, the SRQ says so once.
    srq.arm(3).unwrap();
    for (i, (ch, cs, qh, qs)) in pairs.iter().enumerate() {
        ch.req_notify(&channel).unwrap();
        qs.post_send(SendWr::send_inline(9, b"to the SRQ")).unwrap();
        cs.wait_one(WAIT).unwrap().result().unwrap();
        // The channel names the CQ that has the completion.
        assert_eq!(channel.get_event().unwrap(), Some(ch.handle()));
        let wc = ch.wait_one(WAIT).unwrap().result().unwrap();
        assert_eq!((wc.wr_id, wc.qp_num, wc.byte_len), (i as u64, qh.qpn(), 10));
    }
    let until = std::time::Instant::now() + WAIT;
    let event = loop {
        if let Some(e) = hw.poll_event() {
            break e;
        }
        assert!(std::time::Instant::now() < until, "no SRQ limit event");
        std::thread::sleep(Duration::from_millis(1));
    };
    assert_eq!(
        event,
        AsyncEvent::Srq {
            srq: srq.id(),
            event: EventType::SrqLimitReached
        }
    );
    drop(pairs);
    srq.try_destroy().unwrap();
}

/// Memory windows on rdma-core opened to an engine peer: type 1 bound with `bind_mw`,
/// type 2 by a BIND_MW work request and closed by a LOCAL_INV, after which the peer's
/// WRITE through it fails.
fn memory_windows(hw: &Context, sw: &Context) {
    use oxrdma::{MwType, RemoteBuf, SendData, WrOpcode};
    let (ph, ps) = (hw.alloc_pd().unwrap(), sw.alloc_pd().unwrap());
    let mh = ph
        .register(8192, Access::LOCAL_WRITE | Access::MW_BIND)
        .unwrap();
    let ms = ps.register(64, Access::LOCAL_WRITE).unwrap();
    let (ch, cs) = (hw.create_cq(16).unwrap(), sw.create_cq(16).unwrap());
    let qh = ph
        .create_qp(&ch, &ch, QpType::Rc, QpCap::default())
        .unwrap();
    let qs = ps
        .create_qp(&cs, &cs, QpType::Rc, QpCap::default())
        .unwrap();
    join(&qh, &qs);
    let write_through = |wr_id: u64, at: u64, rkey: u32| {
        let window = RemoteBuf::new(mh.addr() + at, rkey, 18).unwrap();
        qs.post_send(SendWr::write(wr_id, [ms.sge(0, 18).unwrap()], window).unwrap())
            .unwrap();
        cs.wait_one(WAIT).unwrap()
    };
    ms.write(0, b"through the window").unwrap();

    let mw1 = ph.alloc_mw(MwType::Type1).unwrap();
    let before = mw1.rkey();
    qh.bind_mw(1, true, mh.window(&mw1, 1024, 1024, Access::REMOTE_WRITE))
        .unwrap();
    let wc = ch.wait_one(WAIT).unwrap().result().unwrap();
    assert_eq!(wc.opcode, WcOpcode::BindMw);
    assert_ne!(mw1.rkey(), before, "a bind gives the window a new rkey");
    write_through(2, 1024, mw1.rkey()).result().unwrap();
    let mut got = [0u8; 18];
    mh.read(1024, &mut got).unwrap();
    assert_eq!(&got, b"through the window");

    let mw2 = ph.alloc_mw(MwType::Type2).unwrap();
    let bind = mh.window(&mw2, 4096, 4096, Access::REMOTE_WRITE);
    let mut wr = SendWr::new(3, WrOpcode::BindMw, SendData::Sges(vec![].into()));
    wr.bind = Some(bind);
    qh.post_send(wr).unwrap();
    assert_eq!(
        ch.wait_one(WAIT).unwrap().result().unwrap().opcode,
        WcOpcode::BindMw
    );
    assert_eq!(mw2.rkey(), bind.rkey);
    write_through(4, 5000, mw2.rkey()).result().unwrap();
    mh.read(5000, &mut got).unwrap();
    assert_eq!(&got, b"through the window");
    let mut inv = SendWr::new(5, WrOpcode::LocalInv, SendData::Sges(vec![].into()));
    inv.invalidate_rkey = mw2.rkey();
    qh.post_send(inv).unwrap();
    assert_eq!(
        ch.wait_one(WAIT).unwrap().result().unwrap().opcode,
        WcOpcode::LocalInv
    );
    let wc = write_through(6, 5000, mw2.rkey());
    assert_eq!(
        wc.status,
        WcStatus::RemAccessErr,
        "a WRITE through a closed window"
    );
}

/// What the engine alone offers is refused, with the reason.
fn refusals(hw: &Context) {
    let unsupported = |r: Result<(), Error>| match r {
        Err(Error::Unsupported(_)) => {}
        other => panic!("expected Unsupported, got {other:?}"),
    };
    unsupported(hw.capture_to(std::path::Path::new("/dev/null")));
    let pd = hw.alloc_pd().unwrap();
    let cq = hw.create_cq(4).unwrap();
    // What rdma-core has too: another context of the device, a CQ made deeper.
    let again = hw.open_again().unwrap();
    assert_eq!(
        (again.backend(), again.gid()),
        (Backend::RdmaCore, hw.gid())
    );
    cq.resize(64).unwrap();
    let qp = pd
        .create_qp(&cq, &cq, QpType::Rc, QpCap::default())
        .unwrap();
    unsupported(qp.secure_endpoint().map(drop));
    unsupported(qp.counters().map(drop));
    // A source GID that is not one of the port's RoCE v2 GIDs is named as the reason.
    let av = oxrdma::AddressVector {
        dgid: hw.gid(),
        sgid_index: 5,
    };
    let e = pd.create_ah_av(av).unwrap_err().to_string();
    assert!(e.contains("not a RoCE v2 GID"), "{e}");
    let e = qp
        .modify(&oxrdma::QpAttr {
            qp_state: Some(QpState::Init),
            pkey_index: Some(0),
            port_num: Some(1),
            qp_access_flags: Some(Access::empty()),
            ..Default::default()
        })
        .and_then(|()| {
            qp.modify(&oxrdma::QpAttr {
                qp_state: Some(QpState::Rtr),
                ah_attr: Some(av),
                path_mtu: Some(oxrdma::Mtu::Mtu1024),
                dest_qp_num: Some(1),
                rq_psn: Some(0),
                max_dest_rd_atomic: Some(1),
                min_rnr_timer: Some(12),
                ..Default::default()
            })
        })
        .unwrap_err()
        .to_string();
    assert!(e.contains("not a RoCE v2 GID"), "{e}");
    let ch = oxrdma::cm::EventChannel::new().unwrap();
    unsupported(oxrdma::cm::CmId::new(&ch, hw, oxrdma::cm::PortSpace::Tcp).map(drop));
    let io = std::io::Error::from(Error::Unsupported("x"));
    assert_eq!(io.kind(), std::io::ErrorKind::Unsupported);
}
