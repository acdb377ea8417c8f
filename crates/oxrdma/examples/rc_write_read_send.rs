//! A complete RC program: two processes' worth of code in two threads. The server exposes a
//! buffer; the client connects over TCP, RDMA WRITEs into it, READs it back, then SENDs a
//! message with immediate data that the server receives.
//!
//!     cargo run --release -p oxrdma --example rc_write_read_send

use oxrdma::{
    exchange, Access, ConnectOptions, Context, PeerInfo, QpCap, QpType, RecvWr, SendData, SendWr,
    WcStatus, WorkCompletion, WrOpcode,
};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

const LEN: usize = 1 << 20;

fn wait(cq: &oxrdma::CompletionQueue, n: usize) -> oxrdma::Result<Vec<WorkCompletion>> {
    let mut wcs = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while wcs.len() < n && Instant::now() < deadline {
        cq.poll(&mut wcs, n)?;
    }
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
    Ok(wcs)
}

fn server(listener: TcpListener) -> oxrdma::Result<()> {
    let ctx = Context::open("127.0.0.41".parse().unwrap())?;
    let pd = ctx.alloc_pd()?;
    let mr = pd.register(
        LEN,
        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
    )?;
    let cq = ctx.create_cq(64)?;
    let qp = pd.create_qp(&cq, &cq, QpType::Rc, QpCap::default())?;
    let (mut stream, _) = listener.accept()?;
    let me = PeerInfo {
        endpoint: qp.endpoint(),
        addr: mr.addr(),
        rkey: mr.rkey(),
        len: LEN as u64,
    };
    let peer = exchange(&mut stream, &me)?;
    qp.connect(&peer.endpoint, &ConnectOptions::default())?;
    // (A SEND arriving before this receive is posted meets an RNR NAK and is retried.)
    qp.post_recv(RecvWr {
        wr_id: 1,
        sges: vec![mr.sge(0, 64)].into(),
    })?;
    let wc = wait(&cq, 1)?;
    let mut msg = vec![0u8; wc[0].byte_len as usize];
    mr.read(0, &mut msg);
    println!(
        "server: received {:?} with immediate {:#x}",
        String::from_utf8_lossy(&msg),
        wc[0].imm.unwrap_or(0)
    );
    Ok(())
}

fn client(port: u16) -> oxrdma::Result<()> {
    let ctx = Context::open("127.0.0.42".parse().unwrap())?;
    let pd = ctx.alloc_pd()?;
    let mr = pd.register(2 * LEN, Access::LOCAL_WRITE)?;
    let cq = ctx.create_cq(64)?;
    let qp = pd.create_qp(&cq, &cq, QpType::Rc, QpCap::default())?;
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    let me = PeerInfo {
        endpoint: qp.endpoint(),
        addr: mr.addr(),
        rkey: mr.rkey(),
        len: 0,
    };
    let peer = exchange(&mut stream, &me)?;
    qp.connect(&peer.endpoint, &ConnectOptions::default())?;

    let data: Vec<u8> = (0..LEN).map(|i| (i * 31 % 251) as u8).collect();
    mr.write(0, &data);
    let start = Instant::now();
    let mut w = SendWr::new(
        1,
        WrOpcode::RdmaWrite,
        SendData::Sges(vec![mr.sge(0, LEN)].into()),
    );
    (w.remote_addr, w.rkey) = (peer.addr, peer.rkey);
    qp.post_send(w)?;
    let mut r = SendWr::new(
        2,
        WrOpcode::RdmaRead,
        SendData::Sges(vec![mr.sge(LEN, LEN)].into()),
    );
    (r.remote_addr, r.rkey) = (peer.addr, peer.rkey);
    qp.post_send(r)?;
    wait(&cq, 2)?;
    let mut back = vec![0u8; LEN];
    mr.read(LEN, &mut back);
    assert_eq!(back, data);
    println!("client: wrote and read back 1 MiB in {:?}", start.elapsed());
    let mut s = SendWr::new(
        3,
        WrOpcode::SendWithImm,
        SendData::Inline(b"hello, RDMA"[..].into()),
    );
    s.imm = 0x1234;
    qp.post_send(s)?;
    wait(&cq, 1)?;
    Ok(())
}

fn main() -> oxrdma::Result<()> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let port = listener.local_addr()?.port();
    let srv = std::thread::spawn(move || server(listener));
    let client = client(port);
    let server = srv.join().expect("server thread");
    server.and(client)
}
