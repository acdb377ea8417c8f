// Two devices on this host, an RC QP on each: RDMA WRITE into b's memory, then READ it back.
// Run it: cargo run --release -p oxrdma --example quickstart
use oxrdma::{Access, ConnectOptions, Context, QpCap, QpType, SendWr};
use std::time::Duration;

fn main() -> oxrdma::Result<()> {
    let a = Context::open("127.0.3.1".parse().unwrap())?;
    let b = Context::open("127.0.3.2".parse().unwrap())?;
    let (pa, pb) = (a.alloc_pd()?, b.alloc_pd()?);
    let ma = pa.register(4096, Access::LOCAL_WRITE)?;
    let remote_rw = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
    let mb = pb.register(4096, remote_rw)?;
    let (ca, cb) = (a.create_cq(16)?, b.create_cq(16)?);
    let qa = pa.create_qp(&ca, &ca, QpType::Rc, QpCap::default())?;
    let qb = pb.create_qp(&cb, &cb, QpType::Rc, QpCap::default())?;
    // What each side tells the other (GID, QPN, PSN; b also its buffer). Between two
    // processes it goes over TCP (`Endpoint::exchange`). `connect` does RESET to RTS.
    let (ea, eb) = (qa.endpoint(), qb.endpoint().with_buffer(mb.remote()));
    qa.connect(&eb, &ConnectOptions::default())?;
    qb.connect(&ea, &ConnectOptions::default())?;
    // WRITE 20 bytes into b's memory, then READ them back; b's CPU takes no part.
    let wait = Duration::from_secs(10);
    ma.write(0, b"hello, remote memory")?;
    qa.post_send(SendWr::write(1, [ma.sge(0, 20)?], eb.buffers[0])?)?;
    ca.wait_one(wait)?.result()?;
    qa.post_send(SendWr::read(2, [ma.sge(100, 20)?], eb.buffers[0])?)?;
    ca.wait_one(wait)?.result()?;
    let mut back = [0u8; 20];
    ma.read(100, &mut back)?;
    println!("read back: {}", String::from_utf8_lossy(&back));
    Ok(())
}
