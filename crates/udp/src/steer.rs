//! The kernel's half of sharing an address: the classic BPF program that picks, for each
//! datagram arriving on port 4791, which socket of the address's group (`group.rs`) takes
//! it, so each reaches the process that owns its number (`oxrdma_core::slot`). Classic BPF
//! steering needs no privilege (`SO_ATTACH_REUSEPORT_CBPF`); the program sees the UDP
//! payload from the BTH on and returns the index of a socket, which is the slot. It is
//! `oxrdma_core::slot::steer` compiled (the tests run both on random packets):
//!
//! - A packet to any QP but QP1: the slot of its destination QPN.
//! - A connection manager MAD (on QP1): REP, RTU, REJ, MRA, DREQ, DREP, LAP and APR by
//!   the remote comm ID (the comm ID the receiving side chose), SIDR_REP by its request
//!   ID (the requester's); REQ and SIDR_REQ by service ID, to the slot listening on it.
//! - Anything else (another MAD class, a REQ nobody listens for, a packet too short to
//!   read): the `default` slot, a live member's.
//! - A number whose slot is no live member's (the process died, or its slot is held by a
//!   device on another address of the host: slots are the host's, `host_slot.rs`): the
//!   `default` slot too, whose engine drops it as for no QP of its own, and counts it.

use oxrdma_core::slot::{offsets, COMM_ID_SHIFT, QPN_SHIFT};

/// Classic BPF opcodes (linux/bpf_common.h: class | size or operation | source).
const LD: u16 = 0x00;
const ABS: u16 = 0x20;
const LD_W_ABS: u16 = LD | ABS; // BPF_W is 0
const LD_H_ABS: u16 = LD | 0x08 | ABS;
const LD_B_ABS: u16 = LD | 0x10 | ABS;
const ALU_MUL_K: u16 = 0x04 | 0x20;
const ALU_AND_K: u16 = 0x04 | 0x50;
const ALU_RSH_K: u16 = 0x04 | 0x70;
const ALU_ADD_K: u16 = 0x04;
const ALU_SUB_K: u16 = 0x04 | 0x10;
const ALU_LSH_X: u16 = 0x04 | 0x60 | 0x08;
const LD_IMM: u16 = 0x00;
const JA: u16 = 0x05;
const JEQ_K: u16 = 0x05 | 0x10;
const JGE_K: u16 = 0x05 | 0x30;
const RET_K: u16 = 0x06;
const RET_A: u16 = 0x06 | 0x10;
const TAX: u16 = 0x07;
const TXA: u16 = 0x07 | 0x80;

/// Where the fields the program reads sit in the UDP payload, and the CM's class and
/// attributes (`oxrdma_core::slot::offsets`), as the program's constants.
const BTH_RESV8_QPN: u32 = offsets::BTH_RESV8_QPN as u32;
const MAD_CLASS: u32 = offsets::MAD_CLASS as u32;
const MAD_ATTR: u32 = offsets::MAD_ATTR as u32;
const MAD_DATA: u32 = offsets::MAD_DATA as u32;
const CLASS_CM: u32 = offsets::CLASS_CM as u32;
const REQ: u32 = offsets::REQ as u32;
const SIDR_REQ: u32 = offsets::SIDR_REQ as u32;
const SIDR_REP: u32 = offsets::SIDR_REP as u32;

/// The kernel's longest classic BPF program (BPF_MAXINSNS).
const MAX_INSNS: usize = 4096;

fn stmt(code: u16, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jeq(k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter {
        code: JEQ_K,
        jt,
        jf,
        k,
    }
}

/// The program for a group keyed `key` whose live members are the slots whose bits are
/// set in `live` and whose listeners are `(service ID, slot)`; what no rule claims, and a
/// number of a slot that is not live, goes to slot `default`.
pub fn program(
    key: u32,
    listeners: &[(u64, u32)],
    default: u32,
    live: u64,
) -> Vec<libc::sock_filter> {
    let key = key | 1;
    // Where a slot in A jumps to be checked against `live` (patched once the end is known).
    let to_check = stmt(JA, 0);
    // The slot of the 32-bit value in A, taken as a comm ID.
    let comm_id_slot = [
        stmt(ALU_MUL_K, key),
        stmt(ALU_RSH_K, COMM_ID_SHIFT),
        to_check,
    ];
    let mut p = vec![
        // A = destination QPN; not QP1: its slot.
        stmt(LD_W_ABS, BTH_RESV8_QPN),
        stmt(ALU_AND_K, 0xff_ffff),
        jeq(1, 4, 0),
        stmt(ALU_MUL_K, key),
        stmt(ALU_AND_K, 0xff_ffff),
        stmt(ALU_RSH_K, QPN_SHIFT),
        to_check,
        // QP1: a CM MAD?
        stmt(LD_B_ABS, MAD_CLASS),
        jeq(CLASS_CM, 1, 0),
        stmt(RET_K, default),
        stmt(LD_H_ABS, MAD_ATTR),
        // REQ and SIDR_REQ: to the listeners' table (after the next 10 instructions).
        jeq(REQ, 10, 0),
        jeq(SIDR_REQ, 9, 0),
        jeq(SIDR_REP, 4, 0),
        // The rest: by the remote comm ID, the second word of their data.
        stmt(LD_W_ABS, MAD_DATA + 4),
    ];
    p.extend(comm_id_slot);
    // SIDR_REP: by the request ID, its first word.
    p.push(stmt(LD_W_ABS, MAD_DATA));
    p.extend(comm_id_slot);
    // The listeners: a service ID is the data's third and fourth words.
    for &(service, slot) in listeners {
        if p.len() + 6 + CHECK_LEN > MAX_INSNS {
            break;
        }
        p.extend([
            stmt(LD_W_ABS, MAD_DATA + 8),
            jeq((service >> 32) as u32, 0, 3),
            stmt(LD_W_ABS, MAD_DATA + 12),
            jeq(service as u32, 0, 1),
            stmt(RET_K, slot),
        ]);
    }
    p.push(stmt(RET_K, default));
    // Every jump to the check lands here.
    let check = p.len();
    for (at, i) in p.iter_mut().enumerate() {
        if i.code == JA {
            i.k = (check - at - 1) as u32;
        }
    }
    // The slot in A: its own if live, else the default. Bit `s` of a 32-bit half of
    // `live`, as `1 << s` (a shift of 32 or more means nothing in classic BPF).
    p.extend([
        stmt(TAX, 0),
        jge(32, 7, 0),
        // Slots 0-31.
        stmt(LD_IMM, 1),
        stmt(ALU_LSH_X, 0),
        stmt(ALU_AND_K, live as u32),
        jeq(0, 2, 0),
        stmt(TXA, 0),
        stmt(RET_A, 0),
        stmt(RET_K, default),
        // Slots 32-63.
        stmt(TXA, 0),
        stmt(ALU_SUB_K, 32),
        stmt(TAX, 0),
        stmt(LD_IMM, 1),
        stmt(ALU_LSH_X, 0),
        stmt(ALU_AND_K, (live >> 32) as u32),
        jeq(0, 3, 0),
        stmt(TXA, 0),
        stmt(ALU_ADD_K, 32),
        stmt(RET_A, 0),
        stmt(RET_K, default),
    ]);
    debug_assert_eq!(p.len() - check, CHECK_LEN);
    p
}

/// The instructions of the liveness check at the end of every program.
const CHECK_LEN: usize = 20;

fn jge(k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter {
        code: JGE_K,
        jt,
        jf,
        k,
    }
}

/// Attaches `program` to the group `socket` belongs to (any member may replace it).
pub fn attach(
    socket: &impl std::os::fd::AsRawFd,
    program: &[libc::sock_filter],
) -> std::io::Result<()> {
    let prog = libc::sock_fprog {
        len: program.len() as u16,
        filter: program.as_ptr().cast_mut(),
    };
    // SAFETY: `prog` points at `program`, alive for the call; the kernel copies it.
    let r = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ATTACH_REUSEPORT_CBPF,
            std::ptr::from_ref(&prog).cast(),
            std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oxrdma_core::Slot;

    /// Runs `p` on `packet` as the kernel does (the subset the program uses): an index, or
    /// 0 where a load falls past the end.
    fn run(p: &[libc::sock_filter], packet: &[u8]) -> u32 {
        let (mut a, mut x, mut pc) = (0u32, 0u32, 0usize);
        let at = |off: u32, n: usize| -> Option<u32> {
            let b = packet.get(off as usize..off as usize + n)?;
            Some(b.iter().fold(0u32, |v, &x| v << 8 | u32::from(x)))
        };
        loop {
            let i = p[pc];
            pc += 1;
            match i.code {
                LD_W_ABS | LD_H_ABS | LD_B_ABS => {
                    let n = match i.code {
                        LD_W_ABS => 4,
                        LD_H_ABS => 2,
                        _ => 1,
                    };
                    match at(i.k, n) {
                        Some(v) => a = v,
                        None => return 0,
                    }
                }
                LD_IMM => a = i.k,
                ALU_MUL_K => a = a.wrapping_mul(i.k),
                ALU_AND_K => a &= i.k,
                ALU_RSH_K => a >>= i.k,
                ALU_ADD_K => a = a.wrapping_add(i.k),
                ALU_SUB_K => a = a.wrapping_sub(i.k),
                // The kernel refuses nothing here, but a shift of 32 or more is undefined:
                // the program must never ask for one.
                ALU_LSH_X => a = a.checked_shl(x).filter(|_| x < 32).expect("shift < 32"),
                TAX => x = a,
                TXA => a = x,
                JA => pc += i.k as usize,
                JEQ_K => pc += usize::from(if a == i.k { i.jt } else { i.jf }),
                JGE_K => pc += usize::from(if a >= i.k { i.jt } else { i.jf }),
                RET_K => return i.k,
                RET_A => return a,
                c => panic!("opcode {c:#x}"),
            }
        }
    }

    fn bth(qpn: u32) -> Vec<u8> {
        let mut p = vec![0u8; 12];
        p[0] = 0x0a;
        p[4..8].copy_from_slice(&qpn.to_be_bytes());
        p
    }

    fn mad(attr: u16, words: [u32; 4]) -> Vec<u8> {
        let mut p = bth(1);
        p[0] = 0x64;
        p.resize(12 + 8 + 256, 0);
        p[MAD_CLASS as usize] = CLASS_CM as u8;
        p[MAD_ATTR as usize..][..2].copy_from_slice(&attr.to_be_bytes());
        for (i, w) in words.iter().enumerate() {
            p[MAD_DATA as usize + 4 * i..][..4].copy_from_slice(&w.to_be_bytes());
        }
        p
    }

    #[test]
    fn each_packet_goes_to_the_slot_that_owns_its_number() {
        let key = 0x2545_f491;
        let listeners = [(0x0000_0000_0106_4e20, 9), (0x1234_5678_0106_0001, 17)];
        let p = program(key, &listeners, 3, u64::MAX);
        for slot in [0, 1, 31, 32, 63] {
            let s = Slot::new(slot, key);
            for r in [2, 77, 0xffff_ffff] {
                assert_eq!(run(&p, &bth(s.qpn(r))), slot);
                let id = s.comm_id(r);
                // REP, RTU, REJ, DREQ: by the remote comm ID (the second word).
                for attr in [0x13, 0x14, 0x12, 0x15] {
                    assert_eq!(run(&p, &mad(attr, [7, id, 0, 0])), slot, "attr {attr:#x}");
                }
                assert_eq!(run(&p, &mad(0x18, [id, 7, 0, 0])), slot, "SIDR_REP");
            }
        }
        // REQ and SIDR_REQ by service ID; unknown services, other classes and runts to 3.
        assert_eq!(run(&p, &mad(0x10, [5, 0, 0, 0x0106_4e20])), 9);
        assert_eq!(run(&p, &mad(0x17, [5, 0, 0x1234_5678, 0x0106_0001])), 17);
        assert_eq!(run(&p, &mad(0x10, [5, 0, 0, 0x0106_0001])), 3);
        let mut other = mad(0x10, [5, 0, 0, 0x0106_4e20]);
        other[MAD_CLASS as usize] = 0x01;
        assert_eq!(run(&p, &other), 3);
        assert_eq!(run(&p, &bth(1)), 0, "a QP1 packet too short for a MAD");
        assert_eq!(run(&p, &[0u8; 3]), 0);
    }

    #[test]
    fn a_number_of_a_slot_no_live_member_holds_goes_to_the_default() {
        let key = 0x9e37_79b9;
        let live: u64 = 1 << 3 | 1 << 5 | 1 << 40;
        let p = program(key, &[], 3, live);
        for slot in 0..64 {
            let s = Slot::new(slot, key);
            let want = if live >> slot & 1 == 1 { slot } else { 3 };
            for r in [0, 9, 0x3_ffff] {
                assert_eq!(run(&p, &bth(s.qpn(r))), want, "QPN of slot {slot}");
                let id = s.comm_id(r);
                assert_eq!(run(&p, &mad(0x13, [7, id, 0, 0])), want, "REP of {slot}");
            }
        }
    }

    /// The program and the rule it compiles agree on packets built to reach every branch:
    /// any QPN, QP1 with the CM's class or another, each CM attribute, listeners that
    /// match the service ID, its high half alone or nothing, any live set, any length.
    #[test]
    fn the_program_is_the_rule_of_oxrdma_core() {
        use oxrdma_core::slot::steer;
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        for case in 0..20_000 {
            let key = next() as u32;
            let live = next();
            let default = (next() % 64) as u32;
            let sid = next();
            let listeners: Vec<(u64, u32)> = match next() % 4 {
                0 => vec![],
                1 => vec![(sid, 9)],
                2 => vec![(sid & !0xffff_ffff | 7, 3), (sid, 40)],
                _ => vec![(sid ^ 1 << 40, 5)],
            };
            let attr = [0x10, 0x17, 0x18, 0x13, 0x14, 0x12, 0x15, 0x11][(next() % 8) as usize];
            let mut p = mad(
                attr,
                [next() as u32, next() as u32, (sid >> 32) as u32, sid as u32],
            );
            match next() % 5 {
                0 => p[4..8].copy_from_slice(&(next() as u32).to_be_bytes()),
                1 => p[MAD_CLASS as usize] = next() as u8,
                _ => {}
            }
            p.truncate((next() % 300) as usize);
            let prog = program(key, &listeners, default, live);
            assert_eq!(
                run(&prog, &p),
                steer(key, &p, &listeners, default, live),
                "case {case}: {} bytes, attr {attr:#x}, listeners {listeners:?}",
                p.len()
            );
        }
    }

    #[test]
    fn the_program_stays_within_the_kernels_limit() {
        let many: Vec<(u64, u32)> = (0..5000).map(|i| (i, 1)).collect();
        assert!(program(1, &many, 0, 1).len() <= MAX_INSNS);
    }
}
