//! A complete RC program: two processes' worth of code in two threads. The server offers a
//! buffer in its endpoint; the client connects over TCP (the endpoints cross as bytes),
//! RDMA WRITEs into the buffer, READs it back, then SENDs a message with immediate data
//! that the server receives.
//!
//!     cargo run --release -p oxrdma --example rc_write_read_send

use oxrdma::{Access, ConnectOptions, Context, QpCap, QpType, RecvWr, SendWr};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

const LEN: usize = 1 << 20;
const WAIT: Duration = Duration::from_secs(10);

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
    let peer = qp
        .endpoint()
        .with_buffer(mr.remote())
        .exchange(&mut stream)?;
    qp.connect(&peer, &ConnectOptions::default())?;
    // (A SEND arriving before this receive is posted meets an RNR NAK and is retried.)
    qp.post_recv(RecvWr {
        wr_id: 1,
        sges: vec![mr.sge(0, 64)?].into(),
    })?;
    let wc = cq.wait_one(WAIT)?.result()?;
    let mut msg = vec![0u8; wc.byte_len as usize];
    mr.read(0, &mut msg)?;
    println!(
        "server: received {:?} with immediate {:#x}",
        String::from_utf8_lossy(&msg),
        wc.imm.unwrap_or(0)
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
    let peer = qp.endpoint().exchange(&mut stream)?;
    qp.connect(&peer, &ConnectOptions::default())?;
    let remote = peer.buffers[0];

    let data: Vec<u8> = (0..LEN).map(|i| (i * 31 % 251) as u8).collect();
    mr.write(0, &data)?;
    let start = Instant::now();
    qp.post_send(SendWr::write(1, [mr.sge(0, LEN)?], remote)?)?;
    qp.post_send(SendWr::read(2, [mr.sge(LEN, LEN)?], remote)?)?;
    for _ in 0..2 {
        cq.wait_one(WAIT)?.result()?;
    }
    let mut back = vec![0u8; LEN];
    mr.read(LEN, &mut back)?;
    assert_eq!(back, data);
    println!("client: wrote and read back 1 MiB in {:?}", start.elapsed());
    qp.post_send(SendWr::send_inline(3, b"hello, RDMA").with_imm(0x1234)?)?;
    cq.wait_one(WAIT)?.result()?;
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
