//! Whether copying a packet's payload while hashing it (`SharedBuffer::read_hashing`, the
//! fused loop) beats copying it and then hashing it (`read`, then crc32fast), per packet,
//! for the two places a payload is copied:
//!
//! - send: out of a memory region the stream walks through (cold) into a send buffer that
//!   stays in the cache;
//! - receive: out of a receive buffer the kernel just filled (in L2) into a memory region
//!   the stream walks through.
//!
//! Rounds interleave the two ways; it prints each one's median ns per packet and the median
//! of the per-round ratios fused / two passes (below 1: fusing pays).
//!
//!   cargo run --release -p oxrdma-core --example crc_copy [ROUNDS]

use oxrdma_core::SharedBuffer;
use oxrdma_wire::icrc_part::hash_more;
use std::hint::black_box;
use std::time::Instant;

/// Bytes a stream walks through: beyond L2, as a large memory region is.
const WALKED: usize = 8 << 20;
/// Bytes that stay in the cache: a GRO message, a send batch.
const HOT: usize = 64 << 10;
const PACKETS: usize = 200_000;

/// One way of copying `len` bytes from offset `from` of `src` into `dst`, returning the hash.
type Way = fn(&SharedBuffer, usize, &mut [u8]) -> u32;

fn fused(src: &SharedBuffer, from: usize, dst: &mut [u8]) -> u32 {
    src.read_hashing(from, dst, !0).expect("in bounds")
}

fn two_passes(src: &SharedBuffer, from: usize, dst: &mut [u8]) -> u32 {
    assert!(src.read(from, dst));
    hash_more(!0, dst)
}

/// ns per packet of `way`, `len`-byte packets; the source walks when `walk_src`, else the
/// destination does.
fn time(way: Way, len: usize, walk_src: bool, src: &SharedBuffer, dst: &mut [u8]) -> f64 {
    let (src_span, dst_span) = if walk_src {
        (WALKED, HOT)
    } else {
        (HOT, WALKED)
    };
    let start = Instant::now();
    let mut acc = 0;
    for i in 0..PACKETS {
        let s = (i * len) % (src_span - len);
        let d = (i * len) % (dst_span - len);
        acc ^= way(src, s, &mut dst[d..d + len]);
    }
    black_box(acc);
    start.elapsed().as_nanos() as f64 / PACKETS as f64
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .map_or(7, |a| a.parse().expect("ROUNDS: a number"));
    let src = SharedBuffer::new(WALKED).expect("memory");
    let fill: Vec<u8> = (0..WALKED).map(|i| (i * 131 + i / 7) as u8).collect();
    src.write(0, &fill);
    let mut dst = vec![0u8; WALKED];
    println!("packet  copy     fused ns  two passes ns  fused / two passes");
    for len in [1024, 4096] {
        for (name, walk_src) in [("send", true), ("receive", false)] {
            let (mut f, mut t, mut r) = (vec![], vec![], vec![]);
            for _ in 0..rounds {
                let a = time(fused, len, walk_src, &src, &mut dst);
                let b = time(two_passes, len, walk_src, &src, &mut dst);
                f.push(a);
                t.push(b);
                r.push(a / b);
            }
            println!(
                "{len:6}  {name:7}  {:8.1}  {:13.1}  {:.3}",
                median(f),
                median(t),
                median(r)
            );
        }
    }
}
