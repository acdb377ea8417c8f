//! rsockets from Rust: an echo server and a client, two devices of this host in two
//! threads. The client connects by address (the RDMA CM finds the listener), writes lines
//! with `std::io::Write` and reads each echo back with `std::io::Read`; the bytes go as
//! RDMA WRITEs into the peer's receive buffer, on the wire as rdma-core's rsockets.
//!
//!     cargo run --release -p oxrdma --example rsocket_echo

use oxrdma::rsocket::{RListener, RStream};
use oxrdma::Context;
use std::io::{Read, Write};

fn main() -> std::io::Result<()> {
    let server_ctx = Context::open("127.0.0.43".parse().unwrap())?;
    let client_ctx = Context::open("127.0.0.44".parse().unwrap())?;
    let listener = RListener::bind(&server_ctx, "0.0.0.0:7999".parse().unwrap())?;
    let server = std::thread::spawn(move || -> std::io::Result<u64> {
        let mut s = listener.accept()?;
        let mut buf = [0u8; 4096];
        let mut echoed = 0;
        loop {
            let n = s.read(&mut buf)?;
            if n == 0 {
                return Ok(echoed); // the client closed
            }
            s.write_all(&buf[..n])?;
            echoed += n as u64;
        }
    });
    let mut c = RStream::connect(&client_ctx, "127.0.0.1:7999".parse().unwrap())?;
    for i in 0..5 {
        let line = format!("line {i} over rsockets\n");
        c.write_all(line.as_bytes())?;
        let mut back = vec![0u8; line.len()];
        c.read_exact(&mut back)?;
        assert_eq!(back, line.as_bytes());
        print!("echoed: {}", String::from_utf8_lossy(&back));
    }
    drop(c);
    let n = server.join().expect("server thread")?;
    println!("the server echoed {n} bytes");
    Ok(())
}
