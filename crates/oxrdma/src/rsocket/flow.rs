//! The accounting of one rsocket connection, apart from the verbs that carry it: send
//! and receive sequence numbers (credits), the bytes free in each buffer, control-message
//! slots, and what each message received or send completed changes. `stream.rs` posts the
//! work requests these numbers allow. The rules are rsockets' (rdma-core's rsocket.c):
//! a peer may have as many messages outstanding as its credits, data goes into the
//! receive buffer half the peer last advertised, a half is advertised again once read.

use oxrdma_wire::rsocket::{ctrl, Op, RsSge};
use rustix::io::Errno;
use std::collections::VecDeque;

/// Below this many free send-buffer bytes a sender waits for completions.
pub(super) const SNDLOWAT: u32 = 2048;
/// Send chunks start at this size and double up to `MAX_TRANSFER`, so the first bytes
/// leave at once and the rest in large writes.
pub(super) const OLAP_START: u32 = 2048;
pub(super) const MAX_TRANSFER: u32 = 65536;
/// Send-queue slots kept for control messages (credit updates, shutdown).
pub(super) const CTRL_SLOTS: u32 = 4;

/// Where the connection is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Link {
    Connecting,
    Open,
    /// The peer (or this side) said DISCONNECT, or the CM did.
    Closed,
    /// A send failed or the connection could not be made.
    Failed(Errno),
}

/// A credit update to post: the receive half to advertise (if one is free) and the
/// immediate data that carries the new send limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Credit {
    pub imm: u32,
    /// The SGE to write and where in the peer's target SGL it goes (entry index).
    pub sge: Option<(RsSge, u32)>,
}

#[derive(Debug)]
pub(super) struct Flow {
    pub link: Link,
    pub readable: bool,
    pub writable: bool,
    /// SO_ERROR, cleared when read.
    pub err: Option<Errno>,
    /// The CQ is armed: its next completion makes the completion channel readable.
    pub armed: bool,
    pub sq_size: u32,
    pub rq_size: u32,
    pub sbuf_size: u32,
    pub rbuf_size: u32,
    // Sending.
    pub sseq_no: u16,
    /// The peer lets us send while `sseq_no != sseq_comp`.
    pub sseq_comp: u16,
    pub sqe_avail: u32,
    pub sbuf_avail: u32,
    /// Where the next copy into the send buffer goes.
    pub sbuf_head: u32,
    /// Which of the two target SGEs (peer receive-buffer halves) data goes to.
    pub target_sge: usize,
    pub ctrl_seqno: u32,
    pub ctrl_max_seqno: u32,
    /// The peer's target SGL (where credit updates are written) and its next entry.
    pub remote_sgl: RsSge,
    pub remote_sge: u32,
    /// The peer's iomap table (for `riowrite`), if it takes direct writes.
    pub remote_iomap: RsSge,
    /// The peer's byte order differs: SGEs written to it are swapped.
    pub swap: bool,
    // Receiving.
    pub rseq_no: u16,
    pub rseq_comp: u16,
    /// Receive-buffer bytes read and not yet advertised.
    pub rbuf_avail: u32,
    /// The start of the next half to advertise.
    pub rbuf_free: u32,
    /// Where reading goes on.
    pub rbuf_read: u32,
    /// Lengths of the data messages received, in order (the first maybe partly read).
    pub rmsg: VecDeque<u32>,
    /// Their sum: bytes written into the receive buffer and not yet read.
    pub queued: u64,
    /// Messages go as SENDs of 4 bytes (iWARP has no immediate data): a data message
    /// is a WRITE and such a SEND, two send slots, and a credit update with an SGE two
    /// control slots (rsockets' `RS_OPT_MSG_SEND`).
    pub msg_send: bool,
    /// Whether `riowrite` waits for the peer's answer (`answer.rs`).
    pub answer: super::answer::AnswerWait,
}

impl Flow {
    pub fn new(sq_size: u32, rq_size: u32, sbuf_size: u32, rbuf_size: u32) -> Flow {
        Flow {
            link: Link::Connecting,
            readable: true,
            writable: true,
            err: None,
            armed: false,
            sq_size,
            rq_size,
            sbuf_size,
            rbuf_size,
            sseq_no: 0,
            sseq_comp: 0,
            sqe_avail: sq_size - CTRL_SLOTS,
            sbuf_avail: sbuf_size,
            sbuf_head: 0,
            target_sge: 0,
            ctrl_seqno: 0,
            ctrl_max_seqno: CTRL_SLOTS,
            remote_sgl: RsSge::default(),
            remote_sge: 1,
            remote_iomap: RsSge::default(),
            swap: false,
            rseq_no: 0,
            rseq_comp: (rq_size >> 1) as u16,
            // The first half went to the peer in the connection data.
            rbuf_avail: rbuf_size >> 1,
            rbuf_free: rbuf_size >> 1,
            rbuf_read: 0,
            rmsg: VecDeque::new(),
            queued: 0,
            msg_send: false,
            answer: Default::default(),
        }
    }

    pub fn connected(&self) -> bool {
        self.link == Link::Open
    }

    /// Whether a data message may go now, `target_len` being what is left of the
    /// peer's current receive half.
    pub fn can_send(&self, target_len: u32) -> bool {
        self.sqe_avail > u32::from(self.msg_send)
            && self.sbuf_avail >= SNDLOWAT
            && self.sseq_no != self.sseq_comp
            && target_len != 0
    }

    /// Data can be read, or reading would end (EOF or error).
    pub fn rdata_or_end(&self) -> bool {
        !self.rmsg.is_empty() || !self.readable || !self.connected()
    }

    pub fn ctrl_avail(&self) -> bool {
        self.ctrl_seqno != self.ctrl_max_seqno
    }

    /// Every send posted has completed (or the connection is gone).
    pub fn all_sends_done(&self) -> bool {
        !self.connected() || self.ctrl_max_seqno - self.ctrl_seqno + self.sqe_avail == self.sq_size
    }

    /// A half of the receive buffer is free to advertise, or the peer's credits run low.
    pub fn should_give_credits(&self) -> bool {
        (self.rbuf_avail >= self.rbuf_size >> 1
            || self.rseq_no.wrapping_sub(self.rseq_comp) as i16 >= 0)
            && self.ctrl_max_seqno.wrapping_sub(self.ctrl_seqno) > u32::from(self.msg_send)
            && self.connected()
    }

    /// Takes a control slot for a credit update and says what to post: `rbuf_addr` and
    /// `rkey` name this side's receive buffer.
    pub fn take_credit(&mut self, rbuf_addr: u64, rkey: u32) -> Credit {
        self.ctrl_seqno += 1;
        self.rseq_comp = self.rseq_no.wrapping_add((self.rq_size >> 1) as u16);
        // Not cut to 16 bits (the peer does that), as rsockets sends it.
        let imm = Op::Sgl.imm(u32::from(self.rseq_no) + self.rq_size);
        let half = self.rbuf_size >> 1;
        if self.rbuf_avail < half {
            return Credit { imm, sge: None };
        }
        let sge = RsSge {
            addr: rbuf_addr + u64::from(self.rbuf_free),
            key: rkey,
            length: half,
        };
        let at = self.remote_sge;
        if self.msg_send {
            // The WRITE of the SGE and the SEND of the message.
            self.ctrl_seqno += 1;
        }
        self.rbuf_avail -= half;
        self.rbuf_free += half;
        if self.rbuf_free >= self.rbuf_size {
            self.rbuf_free = 0;
        }
        self.remote_sge += 1;
        if self.remote_sge == self.remote_sgl.length {
            self.remote_sge = 0;
        }
        Credit {
            imm,
            sge: Some((sge, at)),
        }
    }

    /// A control message (DISCONNECT, SHUTDOWN) takes a slot: its immediate data.
    pub fn take_ctrl(&mut self, what: u32) -> u32 {
        self.ctrl_seqno += 1;
        Op::Ctrl.imm(what)
    }

    /// A message arrived (the immediate data of a WRITE_WITH_IMM).
    pub fn on_message(&mut self, imm: u32) {
        match Op::split(imm) {
            (Op::Sgl, n) => self.sseq_comp = n as u16,
            (Op::Ctrl, ctrl::DISCONNECT) => self.close(),
            (Op::Ctrl, ctrl::SHUTDOWN) => {
                if self.writable {
                    self.readable = false;
                } else {
                    self.close();
                }
            }
            (Op::Data, n) => {
                // A message lies within one advertised half, and all that is unread
                // within the buffer: more is a broken or hostile peer.
                if n > self.rbuf_size >> 1 || self.queued + u64::from(n) > u64::from(self.rbuf_size)
                {
                    self.link = Link::Failed(Errno::PROTO);
                    self.err = Some(Errno::PROTO);
                    self.readable = false;
                    self.writable = false;
                    return;
                }
                self.queued += u64::from(n);
                self.rmsg.push_back(n);
            }
            // Keepalives, iomap updates (the table is read when used), reserved ops.
            _ => {}
        }
    }

    /// A send completed: the message it carried (its `wr_id`), and whether it failed.
    pub fn on_send_done(&mut self, msg: u32, failed: bool) {
        match Op::split(msg) {
            (Op::Sgl, _) => self.ctrl_max_seqno += 1,
            (Op::Ctrl, what) => {
                self.ctrl_max_seqno += 1;
                if what == ctrl::DISCONNECT {
                    self.close();
                }
            }
            (Op::IomapSgl, _) => {
                self.sqe_avail += 1;
                self.sbuf_avail += IOMAP_LEN;
            }
            (_, n) => {
                self.sqe_avail += 1;
                self.sbuf_avail += n;
            }
        }
        if failed && self.connected() {
            self.link = Link::Failed(Errno::IO);
            self.err = Some(Errno::IO);
        }
    }

    /// The SEND that carried a WRITE's message (`msg_send`) completed, `msg` its message:
    /// it returns its own send slot (the WRITE returned the data's buffer) or, for a
    /// credit update, its control slot.
    pub fn on_msg_send_done(&mut self, msg: u32, failed: bool) {
        match Op::split(msg) {
            // Its slot alone, as a data message of no bytes.
            (Op::IomapSgl, _) => self.on_send_done(Op::Data.imm(0), failed),
            (op, _) => self.on_send_done(op.imm(0), failed),
        }
    }

    pub fn close(&mut self) {
        if matches!(self.link, Link::Open | Link::Connecting) {
            self.link = Link::Closed;
        }
        self.readable = false;
        self.writable = false;
    }

    /// Takes up to `len` bytes of received data (`peek` leaves them): the receive-buffer
    /// pieces to copy out, in order.
    pub fn take_data(&mut self, len: usize, peek: bool) -> Vec<(u32, u32)> {
        let mut pieces = Vec::new();
        let mut left = len as u64;
        let mut read = self.rbuf_read;
        let mut i = 0;
        while left > 0 && i < self.rmsg.len() {
            let msg = self.rmsg[i];
            let take = u64::from(msg).min(left) as u32;
            if !peek {
                if u64::from(msg) > left {
                    self.rmsg[i] -= take;
                } else {
                    self.rseq_no = self.rseq_no.wrapping_add(1);
                    i += 1;
                }
            } else {
                i += 1;
            }
            // A message may run over the buffer's end and on from its start.
            let first = take.min(self.rbuf_size - read);
            pieces.push((read, first));
            read += first;
            if read == self.rbuf_size {
                read = 0;
            }
            if take > first {
                pieces.push((0, take - first));
                read = take - first;
            }
            left -= u64::from(take);
        }
        if !peek {
            let done = self.rmsg.len().min(i);
            // Whole messages read are gone; a partly read one stays at the front.
            self.rmsg.drain(..done);
            self.rbuf_read = read;
            self.rbuf_avail += (len as u64 - left) as u32;
            self.queued -= len as u64 - left;
        }
        pieces
    }

    /// Reserves a data message of `len` bytes: the send buffer pieces to copy it into
    /// (none if `inline`). Also counts the message against the peer's credits.
    pub fn take_send(&mut self, len: u32, inline: bool) -> Vec<(u32, u32)> {
        self.sseq_no = self.sseq_no.wrapping_add(1);
        if self.msg_send {
            // The SEND of its message.
            self.sqe_avail -= 1;
        }
        self.take_slot(len, inline)
    }

    /// A send slot and buffer space for a message that is not data (direct writes,
    /// iomap entries): not counted against the peer's credits.
    pub fn take_slot(&mut self, len: u32, inline: bool) -> Vec<(u32, u32)> {
        self.sqe_avail -= 1;
        self.sbuf_avail -= len;
        if inline {
            return Vec::new();
        }
        let first = len.min(self.sbuf_size - self.sbuf_head);
        let mut pieces = vec![(self.sbuf_head, first)];
        self.sbuf_head += first;
        if first < len {
            pieces.push((0, len - first));
            self.sbuf_head = len - first;
        }
        if self.sbuf_head == self.sbuf_size {
            self.sbuf_head = 0;
        }
        pieces
    }

    /// The chunk a send starts with: small when nothing is in flight, so the first bytes
    /// leave at once (rsockets always starts small); the largest while earlier sends
    /// are still going, as a pipeline that is full gains nothing from a small one.
    pub fn first_chunk(&self) -> u32 {
        if self.sbuf_avail < self.sbuf_size {
            MAX_TRANSFER
        } else {
            OLAP_START
        }
    }

    /// The size of the next chunk of a send of `left` bytes, `olen` being the chunk size
    /// so far (doubled here), within the free send buffer and `room` at the target.
    pub fn chunk(&self, left: usize, olen: &mut u32, room: u32) -> u32 {
        let mut x = if (*olen as usize) < left {
            let x = *olen;
            if *olen < MAX_TRANSFER {
                *olen <<= 1;
            }
            x
        } else {
            left as u32
        };
        x = x.min(self.sbuf_avail).min(room);
        x
    }
}

/// An iomap entry: offset (8), then an `RsSge` (16).
pub(super) const IOMAP_LEN: u32 = 24;

#[cfg(test)]
mod tests {
    use super::*;

    fn open(sq: u32, rq: u32, buf: u32) -> Flow {
        let mut f = Flow::new(sq, rq, buf, buf);
        f.link = Link::Open;
        f.sseq_comp = rq as u16;
        f.remote_sgl = RsSge {
            addr: 0x1000,
            key: 7,
            length: 2,
        };
        f
    }

    #[test]
    fn credits_limit_messages_in_flight() {
        let mut f = open(16, 16, 1 << 17);
        for _ in 0..16 {
            assert!(f.can_send(100));
            f.take_send(10, true);
            f.on_send_done(Op::Data.imm(10), false);
        }
        // 16 messages sent, none read by the peer: no credit left.
        assert!(!f.can_send(100));
        f.on_message(Op::Sgl.imm(32));
        assert!(f.can_send(100));
        assert!(!f.can_send(0), "nothing left of the target half");
    }

    #[test]
    fn a_half_read_is_advertised_once() {
        let mut f = open(16, 16, 4096);
        assert!(f.should_give_credits(), "the second half goes at once");
        let c = f.take_credit(0x9000, 3);
        let (sge, at) = c.sge.unwrap();
        assert_eq!((sge.addr, sge.length, at), (0x9000 + 2048, 2048, 1));
        assert_eq!(Op::split(c.imm), (Op::Sgl, 16));
        assert!(!f.should_give_credits());
        f.on_message(Op::Data.imm(1500));
        f.on_message(Op::Data.imm(1000));
        assert_eq!(f.take_data(2000, false), vec![(0, 1500), (1500, 500)]);
        assert_eq!(f.rmsg, [500]);
        assert!(!f.should_give_credits(), "2000 bytes read: not yet a half");
        assert_eq!(f.take_data(4096, false), vec![(2000, 500)]);
        assert!(f.should_give_credits());
        // The first half again, into the other SGL entry; the limit moved by 2 read.
        let c = f.take_credit(0x9000, 3);
        let (sge, at) = c.sge.unwrap();
        assert_eq!((sge.addr, at), (0x9000, 0));
        assert_eq!(Op::split(c.imm), (Op::Sgl, 2 + 16));
        assert_eq!(f.rbuf_avail, 452, "2500 read, 2048 given");
    }

    #[test]
    fn data_wraps_around_the_receive_buffer() {
        let mut f = open(16, 16, 4096);
        f.rbuf_read = 4000;
        f.on_message(Op::Data.imm(200));
        assert_eq!(f.take_data(50, true), vec![(4000, 50)]);
        assert_eq!(f.take_data(300, false), vec![(4000, 96), (0, 104)]);
        assert_eq!(f.rbuf_read, 104);
        assert!(f.rmsg.is_empty());
    }

    #[test]
    fn send_buffer_pieces_wrap_and_come_back() {
        let mut f = open(16, 16, 8192);
        f.sbuf_head = 8000;
        assert_eq!(f.take_send(1000, false), vec![(8000, 192), (0, 808)]);
        assert_eq!(f.sbuf_head, 808);
        assert_eq!(f.sbuf_avail, 8192 - 1000);
        f.on_send_done(Op::Data.imm(1000), false);
        assert_eq!(f.sbuf_avail, 8192);
        assert!(f.all_sends_done());
    }

    #[test]
    fn shutdown_and_disconnect_end_reading() {
        let mut f = open(16, 16, 4096);
        f.on_message(Op::Data.imm(10));
        f.on_message(Op::Ctrl.imm(ctrl::SHUTDOWN));
        assert!(!f.readable && f.writable && f.connected());
        assert_eq!(
            f.take_data(10, false).len(),
            1,
            "data before the shutdown stays readable"
        );
        f.on_message(Op::Ctrl.imm(ctrl::DISCONNECT));
        assert_eq!(f.link, Link::Closed);
        assert!(f.rdata_or_end());
        let mut g = open(16, 16, 4096);
        g.take_send(10, true);
        g.on_send_done(Op::Data.imm(10), true);
        assert_eq!((g.link, g.err), (Link::Failed(Errno::IO), Some(Errno::IO)));
    }

    #[test]
    fn a_peer_that_overfills_the_buffer_breaks_the_connection() {
        let mut f = open(16, 16, 4096);
        f.on_message(Op::Data.imm(2049));
        assert_eq!(
            f.link,
            Link::Failed(Errno::PROTO),
            "more than a half in one message"
        );
        assert!(f.rmsg.is_empty() && f.rdata_or_end());
        let mut g = open(16, 16, 4096);
        for _ in 0..2 {
            g.on_message(Op::Data.imm(2048));
        }
        assert!(g.connected());
        g.on_message(Op::Data.imm(1));
        assert_eq!(
            g.link,
            Link::Failed(Errno::PROTO),
            "more than the buffer unread"
        );
        let mut h = open(16, 16, 4096);
        for _ in 0..3 {
            h.on_message(Op::Data.imm(2048));
            h.take_data(2048, false);
        }
        assert!(h.connected(), "what was read makes room");
    }

    #[test]
    fn a_send_behind_others_starts_with_the_largest_chunk() {
        let mut f = open(16, 16, 1 << 20);
        assert_eq!(f.first_chunk(), OLAP_START);
        f.take_send(100, false);
        assert_eq!(f.first_chunk(), MAX_TRANSFER);
        f.on_send_done(Op::Data.imm(100), false);
        assert_eq!(f.first_chunk(), OLAP_START);
    }

    #[test]
    fn chunks_grow_from_2k_to_64k() {
        let f = open(16, 16, 1 << 20);
        let mut olen = OLAP_START;
        let sizes: Vec<u32> = (0..7)
            .map(|_| f.chunk(1 << 20, &mut olen, u32::MAX))
            .collect();
        assert_eq!(sizes, [2048, 4096, 8192, 16384, 32768, 65536, 65536]);
        assert_eq!(f.chunk(100, &mut olen, u32::MAX), 100);
        assert_eq!(f.chunk(1 << 20, &mut olen, 5000), 5000);
    }

    /// Two flows joined by in-order message queues, driven in a random order: every
    /// byte sent is read once, in order, from where the sender wrote it; credits never
    /// let a sender overrun the receive buffer; and the stream always finishes.
    mod model {
        use super::super::*;
        use proptest::prelude::*;
        use std::collections::VecDeque;

        const BASE: u64 = 0x10_000;

        struct Pair {
            a: Flow,
            b: Flow,
            /// A's target SGL (what B's credit updates write).
            target: [RsSge; 2],
            /// B's receive buffer, as A's writes left it.
            rbuf: Vec<u8>,
            a_to_b: VecDeque<u32>,
            b_to_a: VecDeque<(u32, Option<(RsSge, u32)>)>,
            sent: usize,
            read: usize,
        }

        fn pair(buf: u32, rq: u32) -> Pair {
            let (a, b) = (super::open(16, rq, buf), super::open(16, rq, buf));
            let first = RsSge {
                addr: BASE,
                key: 2,
                length: buf >> 1,
            };
            Pair {
                a,
                b,
                target: [first, RsSge::default()],
                rbuf: vec![0; buf as usize],
                a_to_b: VecDeque::new(),
                b_to_a: VecDeque::new(),
                sent: 0,
                read: 0,
            }
        }

        fn byte(i: usize) -> u8 {
            (i % 251) as u8
        }

        impl Pair {
            /// A sends up to `want` bytes as one message, if it may.
            fn send(&mut self, want: usize, total: usize) -> bool {
                let room = self.target[self.a.target_sge].length;
                if self.sent == total || !self.a.can_send(room) {
                    return false;
                }
                let mut olen = OLAP_START;
                let x = self
                    .a
                    .chunk(want.min(total - self.sent).max(1), &mut olen, room);
                assert!(x > 0);
                let t = &mut self.target[self.a.target_sge];
                let off = (t.addr - BASE) as usize;
                assert!(
                    off + x as usize <= self.rbuf.len(),
                    "a write past the buffer"
                );
                for i in 0..x as usize {
                    self.rbuf[off + i] = byte(self.sent + i);
                }
                t.addr += u64::from(x);
                t.length -= x;
                if t.length == 0 {
                    self.a.target_sge ^= 1;
                }
                let pieces = self.a.take_send(x, x <= 64);
                assert_eq!(
                    pieces.iter().map(|p| p.1).sum::<u32>(),
                    if x <= 64 { 0 } else { x }
                );
                self.a_to_b.push_back(Op::Data.imm(x));
                self.sent += x as usize;
                // Messages sent and not yet read never outnumber B's receives.
                let unread = self.a_to_b.len() + self.b.rmsg.len();
                assert!(
                    unread <= self.b.rq_size as usize,
                    "{unread} messages outstanding"
                );
                true
            }

            fn deliver_a(&mut self) -> bool {
                let Some(imm) = self.a_to_b.pop_front() else {
                    return false;
                };
                self.b.on_message(imm);
                assert!(self.b.connected(), "B failed the stream");
                self.a.on_send_done(imm, false);
                true
            }

            fn read(&mut self, k: usize) -> bool {
                if self.b.rmsg.is_empty() {
                    return false;
                }
                for (off, len) in self.b.take_data(k.max(1), false) {
                    for i in 0..len as usize {
                        assert_eq!(
                            self.rbuf[off as usize + i],
                            byte(self.read),
                            "byte {}",
                            self.read
                        );
                        self.read += 1;
                    }
                }
                true
            }

            fn credit(&mut self) -> bool {
                if !self.b.should_give_credits() {
                    return false;
                }
                let c = self.b.take_credit(BASE, 2);
                self.b_to_a.push_back((c.imm, c.sge));
                true
            }

            fn deliver_b(&mut self) -> bool {
                let Some((imm, sge)) = self.b_to_a.pop_front() else {
                    return false;
                };
                if let Some((s, at)) = sge {
                    self.target[at as usize] = s;
                }
                self.a.on_message(imm);
                self.b.on_send_done(imm, false);
                true
            }
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(300))]
            #[test]
            fn every_byte_arrives_once_in_order(
                buf_k in 2u32..64,
                rq in 16u32..40,
                steps in proptest::collection::vec(
                    (0u8..5, prop_oneof![1usize..64, 1usize..100_000]),
                    0..400,
                ),
            ) {
                let total = 1 << 20;
                let mut p = pair(buf_k * 1024, rq);
                for (what, n) in steps {
                    match what {
                        0 => { p.send(n, total); }
                        1 => { p.deliver_a(); }
                        2 => { p.read(n); }
                        3 => { p.credit(); }
                        _ => { p.deliver_b(); }
                    }
                }
                // Then everything, in a fixed order: the stream must finish.
                let mut idle = 0;
                while p.read < total {
                    let moved = p.send(usize::MAX, total) | p.deliver_a() | p.read(usize::MAX)
                        | p.credit() | p.deliver_b();
                    idle = if moved { 0 } else { idle + 1 };
                    prop_assert!(idle < 3, "stuck: sent {} read {}", p.sent, p.read);
                }
                prop_assert_eq!(p.sent, total);
            }
        }
    }
}
