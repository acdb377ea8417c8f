//! RDMA from async Rust (the `tokio` feature): two tasks ping-pong SENDs between two QPs,
//! each awaiting its completions instead of polling, then an rsocket stream echoes a line
//! through `AsyncRead` and `AsyncWrite`.
//!
//!     cargo run --release -p oxrdma --features tokio --example tokio_pingpong

use oxrdma::aio::{AsyncCq, AsyncRStream};
use oxrdma::rsocket::{RListener, RStream};
use oxrdma::{Access, ConnectOptions, Context, QpCap, QpType, RecvWr, SendWr};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (a, b) = (
        Context::open("127.0.0.47".parse()?)?,
        Context::open("127.0.0.48".parse()?)?,
    );
    let (pa, pb) = (a.alloc_pd()?, b.alloc_pd()?);
    let (ma, mb) = (
        pa.register(64, Access::LOCAL_WRITE)?,
        pb.register(64, Access::LOCAL_WRITE)?,
    );
    let (ca, cb) = (a.create_cq(16)?, b.create_cq(16)?);
    let qa = pa.create_qp(&ca, &ca, QpType::Rc, QpCap::default())?;
    let qb = pb.create_qp(&cb, &cb, QpType::Rc, QpCap::default())?;
    qa.connect(&qb.endpoint(), &ConnectOptions::default())?;
    qb.connect(&qa.endpoint(), &ConnectOptions::default())?;
    let (ca, cb) = (AsyncCq::new(ca)?, AsyncCq::new(cb)?);

    // b answers each ping; a sends the next once the pong is in. Receives are posted
    // ahead, so no SEND finds none (it would wait out an RNR delay).
    let rounds = 1000u64;
    for i in 0..16 {
        qa.post_recv(RecvWr {
            wr_id: i,
            sges: vec![ma.sge(0, 8)?].into(),
        })?;
        qb.post_recv(RecvWr {
            wr_id: i,
            sges: vec![mb.sge(0, 8)?].into(),
        })?;
    }
    let pong = async {
        for i in 0..rounds {
            cb.next().await?.result()?; // the ping
            qb.post_recv(RecvWr {
                wr_id: i + 16,
                sges: vec![mb.sge(0, 8)?].into(),
            })?;
            qb.post_send(SendWr::send_inline(i, &i.to_le_bytes()))?;
            cb.next().await?.result()?; // the pong went
        }
        Ok::<_, oxrdma::Error>(())
    };
    let ping = async {
        let start = std::time::Instant::now();
        for i in 0..rounds {
            qa.post_send(SendWr::send_inline(i, &i.to_le_bytes()))?;
            // The send's completion and the pong, in either order.
            for _ in 0..2 {
                ca.next().await?.result()?;
            }
            qa.post_recv(RecvWr {
                wr_id: i + 16,
                sges: vec![ma.sge(0, 8)?].into(),
            })?;
        }
        println!(
            "{rounds} ping-pongs, awaited: {:?} a round trip",
            start.elapsed() / rounds as u32
        );
        Ok::<_, oxrdma::Error>(())
    };
    let (p, q) = tokio::join!(ping, pong);
    p?;
    q?;

    // An rsocket stream, line by line.
    let listener = RListener::bind(&b, "0.0.0.0:7997".parse()?)?;
    let server = std::thread::spawn(move || listener.accept());
    let client = AsyncRStream::new(RStream::connect(&a, "127.0.0.1:7997".parse()?)?)?;
    let server = AsyncRStream::new(server.join().expect("accept thread")?)?;
    let (mut client, mut server) = (BufReader::new(client), server);
    client
        .get_mut()
        .write_all(b"a line over rsockets\n")
        .await?;
    let mut echo = BufReader::new(&mut server);
    let mut line = String::new();
    echo.read_line(&mut line).await?;
    server.write_all(line.as_bytes()).await?;
    let mut back = String::new();
    client.read_line(&mut back).await?;
    print!("echoed: {back}");
    Ok(())
}
