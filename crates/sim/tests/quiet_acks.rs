//! A QP that has lost nothing lately asks for fewer ACKs: by the cadence once in 256
//! packets instead of 64, and not at each signaled message with another queued behind it.
//! Once something is lost, it asks at the usual pace again.

use oxrdma_core::{SendData, SendFlags, SendWr, WcStatus, WrOpcode};
use oxrdma_sim::{Pair, PairOptions, Tap, TapAction};
use oxrdma_wire::{Opcode, PacketRepr};
use std::cell::RefCell;
use std::rc::Rc;

/// 64 KiB WRITEs, each signaled, as perftest posts them.
const WRS: u64 = 100;
const LEN: usize = 64 << 10;
/// Packets after which a QP that lost nothing is quiet (the engine's `QUIET_AFTER`).
const QUIET_AFTER: usize = 2048;

/// Posts `WRS` signaled WRITEs from a to b at once (distinct bytes in each 64 KiB slot of
/// a 1 MiB buffer) and runs; the packet `drop_at` (PSNs from the first) is lost once.
/// Returns the PSN (from the first) and AckReq bit of each request packet a sent, in
/// order, and checks that every WR completed once, in order, and every byte landed.
fn stream(drop_at: Option<u32>) -> Vec<(u32, bool)> {
    let mut p = Pair::new(&PairOptions::default());
    let slots = p.a.buf.len() / LEN;
    let bytes: Vec<u8> = (0..p.a.buf.len())
        .map(|i| (i * 7 + i / LEN) as u8)
        .collect();
    p.a.buf.write(0, &bytes);
    let (first, asks, dropped) = (
        p.a.sq_psn,
        Rc::new(RefCell::new(Vec::new())),
        Rc::new(RefCell::new(false)),
    );
    let (log, once) = (asks.clone(), dropped.clone());
    p.world.tap = Some(Tap(Box::new(move |d| {
        let pkt = PacketRepr::parse(&d.data).expect("engine sends valid packets");
        if pkt.bth.opcode != Opcode::RC_RDMA_WRITE_ONLY {
            return TapAction::Pass;
        }
        let at = pkt.bth.psn.value().wrapping_sub(first) & 0xff_ffff;
        log.borrow_mut().push((at, pkt.bth.ack_req));
        if drop_at == Some(at) && !std::mem::replace(&mut *once.borrow_mut(), true) {
            return TapAction::Drop;
        }
        TapAction::Pass
    })));
    for i in 0..WRS {
        let off = (i as usize % slots) * LEN;
        let mut wr = SendWr::new(
            i,
            WrOpcode::RdmaWrite,
            SendData::Sges(vec![p.a.sge(off, LEN)].into()),
        );
        (wr.remote_addr, wr.rkey, wr.flags) = (p.b.addr(off), p.b.mr.rkey, SendFlags::SIGNALED);
        p.post_send(0, wr);
    }
    p.run();
    assert_eq!(
        *dropped.borrow(),
        drop_at.is_some(),
        "the packet to lose was sent"
    );
    let wcs = p.wcs(0);
    let ids: Vec<u64> = wcs.iter().map(|w| w.wr_id).collect();
    assert_eq!(
        ids,
        (0..WRS).collect::<Vec<_>>(),
        "every WR completed once, in order"
    );
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success));
    assert!(p.b.read(0, bytes.len()) == bytes, "every byte landed");
    let asks = asks.borrow().clone();
    asks
}

/// How many of `asks[range]` ask for an ACK.
fn asking(asks: &[(u32, bool)], range: std::ops::Range<usize>) -> usize {
    asks[range].iter().filter(|a| a.1).count()
}

#[test]
fn a_quiet_stream_of_signaled_writes_asks_once_in_four_messages() {
    let asks = stream(None);
    let packets = WRS as usize * LEN / 1024;
    assert_eq!(asks.len(), packets, "nothing sent again");
    // Before it is quiet: at the end of every signaled message.
    assert_eq!(asking(&asks, 0..QUIET_AFTER), QUIET_AFTER / 64);
    // Then once in four messages, the window's edge now and then besides.
    let late = asking(&asks, QUIET_AFTER..packets);
    let quiet_messages = (packets - QUIET_AFTER) / 64;
    assert!(
        late <= quiet_messages / 3,
        "{late} of {quiet_messages} quiet messages asked"
    );
    // The last WR has nothing behind it: it asks, or its completion would wait for a probe.
    assert!(asks[packets - 1].1, "the last packet asks");
}

#[test]
fn a_loss_ends_the_quiet() {
    // Lost well into the quiet part of the stream.
    let lost = 4000;
    let asks = stream(Some(lost));
    let packets = WRS as usize * LEN / 1024;
    assert_eq!(
        asks.len(),
        packets + 1,
        "the lost packet, and it alone, went again"
    );
    // The packet sent again asks, and from then on every message's end asks again: no
    // stretch of 64 packets without an ask, until the quiet comes back.
    let resent = asks.iter().rposition(|a| a.0 == lost).expect("sent again");
    assert!(
        resent > lost as usize && asks[resent].1,
        "the packet sent again asks"
    );
    let after: Vec<bool> = asks[resent..(resent + QUIET_AFTER).min(packets)]
        .iter()
        .map(|a| a.1)
        .collect();
    let longest = after.split(|&a| a).map(<[bool]>::len).max().unwrap_or(0);
    assert!(
        longest < 64,
        "after the loss, {longest} packets in a row did not ask"
    );
}
