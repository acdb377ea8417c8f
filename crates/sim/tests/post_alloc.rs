//! Posting allocates nothing per work request (what `ibv_post_send` does on a NIC: write a
//! WQE into a ring): a WR of up to four SGEs, or of up to 64 bytes inline, lives in the WR
//! itself, and the send ring takes it without a heap allocation of its own, but for a block
//! of slots now and then. Counted by a global allocator that counts this thread's calls.

use oxrdma_core::{QpCap, RecvWr, SendData, SendWr, SgeList, WrOpcode};
use oxrdma_sim::{Pair, PairOptions};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct Counting;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: every call is System's, with the same arguments; counting touches no memory the
// allocator hands out.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: the caller's promise, passed on.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: the caller's promise, passed on.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: the caller's promise, passed on.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocs() -> u64 {
    ALLOCS.with(Cell::get)
}

#[test]
fn posting_allocates_nothing_per_work_request() {
    const N: u64 = 310;
    let p = Pair::new(&PairOptions {
        cap: QpCap {
            max_send_wr: 1024,
            max_recv_wr: 1024,
            max_send_sge: 4,
            max_recv_sge: 4,
            max_inline_data: 64,
        },
        ..PairOptions::default()
    });
    let post = p.world.nodes[0].engine.qp_post(p.a.qpn).unwrap();
    let before = allocs();
    for i in 0..N {
        let data = if i % 2 == 0 {
            SendData::Sges(SgeList::from_slice(&[p.a.sge(0, 8), p.a.sge(64, 8)]))
        } else {
            SendData::Inline([7u8; 8][..].into())
        };
        let mut wr = SendWr::new(i, WrOpcode::RdmaWrite, data);
        (wr.remote_addr, wr.rkey) = (p.b.addr(0), p.b.mr.rkey);
        post.post_send(wr).unwrap();
        post.post_recv(RecvWr {
            wr_id: i,
            sges: SgeList::from_slice(&[p.a.sge(128, 64)]),
        })
        .unwrap();
    }
    let n = allocs() - before;
    // The rings take a block of slots at a time (31 per block): a few dozen at most, never
    // one per WR.
    assert!(
        n <= 2 * N / 16,
        "{n} allocations for {N} send and {N} receive WRs"
    );
}
