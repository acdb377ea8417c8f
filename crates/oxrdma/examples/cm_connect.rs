//! The RDMA CM in Rust's shape: a server listens on an address, a client connects to it
//! by address (the CM finds the server's device, as librdmacm does), each side's private
//! data arrives at its length, and the client WRITEs into the memory the server offered.
//!
//!     cargo run --release -p oxrdma --example cm_connect

use oxrdma::cm::{self, Listener};
use oxrdma::{Access, Context, QpCap, QpType, RemoteBuf, SendWr};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(10);

fn main() -> oxrdma::Result<()> {
    let (server_ctx, client_ctx) = (
        Context::open("127.0.0.45".parse().unwrap())?,
        Context::open("127.0.0.46".parse().unwrap())?,
    );
    let listener = Listener::bind(&server_ctx, "0.0.0.0:7998".parse().unwrap())?;

    let server = std::thread::spawn(move || -> oxrdma::Result<()> {
        let pd = server_ctx.alloc_pd()?;
        let mr = pd.register(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
        let cq = server_ctx.create_cq(16)?;
        let qp = pd.create_qp(&cq, &cq, QpType::Rc, QpCap::default())?;
        let req = listener.next_request(WAIT)?;
        println!(
            "server: {:?} asks, saying {:?}",
            req.peer_addr(),
            String::from_utf8_lossy(req.private_data())
        );
        // The answer tells the client where it may write: address, rkey, length.
        let r = mr.remote();
        let mut answer = r.addr().to_be_bytes().to_vec();
        answer.extend_from_slice(&r.rkey().to_be_bytes());
        answer.extend_from_slice(&r.len().to_be_bytes());
        let conn = req.accept(&qp, &answer)?;
        // The client's WRITE lands without this side doing anything; wait until it shows.
        let mut got = [0u8; 15];
        let until = std::time::Instant::now() + WAIT;
        while &got != b"written through" && std::time::Instant::now() < until {
            mr.read(0, &mut got)?;
            std::thread::sleep(Duration::from_millis(1));
        }
        println!(
            "server: my memory now says {:?}",
            String::from_utf8_lossy(&got)
        );
        drop(conn);
        Ok(())
    });

    let pd = client_ctx.alloc_pd()?;
    let mr = pd.register(4096, Access::LOCAL_WRITE)?;
    let cq = client_ctx.create_cq(16)?;
    let qp = pd.create_qp(&cq, &cq, QpType::Rc, QpCap::default())?;
    let conn = cm::connect(
        &client_ctx,
        "127.0.0.1:7998".parse().unwrap(),
        &qp,
        b"hello",
    )?;
    let a = conn.private_data();
    let word = |i: usize, n: usize| {
        a.get(i..i + n)
            .map(|b| b.iter().fold(0u64, |v, &x| v << 8 | u64::from(x)))
    };
    let (Some(addr), Some(rkey), Some(len)) = (word(0, 8), word(8, 4), word(12, 8)) else {
        return Err(oxrdma::Error::BadPeer(
            "the server's answer is short".into(),
        ));
    };
    let remote = RemoteBuf::new(addr, rkey as u32, len)
        .ok_or_else(|| oxrdma::Error::BadPeer("the server's buffer wraps".into()))?;
    mr.write(0, b"written through")?;
    qp.post_send(SendWr::write(1, [mr.sge(0, 15)?], remote)?)?;
    cq.wait_one(WAIT)?.result()?;
    println!("client: wrote 15 bytes into the server's memory");
    server.join().expect("server thread")?;
    Ok(())
}
