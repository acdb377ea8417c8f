//! UD datagrams: two unconnected QPs, each message addressed on its own (an address
//! handle for the peer's GID, its QP number and Q_Key). The receiver learns who sent
//! each datagram from its completion and answers it, with no connection at all.
//!
//!     cargo run --release -p oxrdma --example ud_datagrams

use oxrdma::{Access, Context, QpCap, QpType, RecvWr, SendWr};
use std::time::Duration;

const QKEY: u32 = 0x1111_1111;
/// A UD receive buffer begins with 40 bytes of GRH (here: the sender's IP header).
const GRH: usize = 40;
const WAIT: Duration = Duration::from_secs(10);

fn main() -> oxrdma::Result<()> {
    let (a, b) = (
        Context::open("127.0.0.49".parse().unwrap())?,
        Context::open("127.0.0.50".parse().unwrap())?,
    );
    let (pa, pb) = (a.alloc_pd()?, b.alloc_pd()?);
    let (ma, mb) = (
        pa.register(4096, Access::LOCAL_WRITE)?,
        pb.register(4096, Access::LOCAL_WRITE)?,
    );
    let (ca, cb) = (a.create_cq(16)?, b.create_cq(16)?);
    let qa = pa.create_qp(&ca, &ca, QpType::Ud, QpCap::default())?;
    let qb = pb.create_qp(&cb, &cb, QpType::Ud, QpCap::default())?;
    qa.ready_ud(QKEY)?;
    qb.ready_ud(QKEY)?;
    for (qp, mr) in [(&qa, &ma), (&qb, &mb)] {
        qp.post_recv(RecvWr {
            wr_id: 1,
            sges: vec![mr.sge(1024, GRH + 1024)?].into(),
        })?;
    }

    // a → b: b's GID and QP number, as b would have published them.
    let to_b = pa.create_ah(b.gid())?;
    ma.write(0, b"anyone there?")?;
    qa.post_send(SendWr::send(1, [ma.sge(0, 13)?]).to(to_b.dest(qb.qpn(), QKEY)))?;
    ca.wait_one(WAIT)?.result()?;
    let got = cb.wait_one(WAIT)?.result()?;
    let mut msg = vec![0u8; got.byte_len as usize - GRH];
    mb.read(1024 + GRH, &mut msg)?;
    println!(
        "b: {:?} from QP {:#x} at {:?}",
        String::from_utf8_lossy(&msg),
        got.src_qp,
        got.src_gid
    );

    // b answers whoever it was, from the completion alone.
    let sender = got
        .src_gid
        .ok_or_else(|| oxrdma::Error::BadPeer("no source GID".into()))?;
    let back = pb.create_ah(sender)?;
    mb.write(0, b"here!")?;
    qb.post_send(SendWr::send(2, [mb.sge(0, 5)?]).to(back.dest(got.src_qp, QKEY)))?;
    cb.wait_one(WAIT)?.result()?;
    let got = ca.wait_one(WAIT)?.result()?;
    let mut msg = vec![0u8; got.byte_len as usize - GRH];
    ma.read(1024 + GRH, &mut msg)?;
    println!("a: {:?}", String::from_utf8_lossy(&msg));
    Ok(())
}
