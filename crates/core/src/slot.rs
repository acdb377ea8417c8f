//! Which process of a host owns a QPN or a connection manager comm ID, when several
//! processes share one address.
//!
//! RoCEv2 peers send every packet to UDP port 4791, so the processes that share a host's
//! address share the port, and the kernel hands each packet to the one that owns it by a
//! number in it: the destination QPN (and for QP1's MADs, the comm ID the receiver chose).
//! Each process owns one of [`SLOTS`] slots; a number belongs to the slot
//! `(number × key) >> shift` names, taken modulo 2^24 for QPNs and 2^32 for comm IDs,
//! where the key is an odd number drawn when the host's group forms. The kernel's
//! steering program computes the same (see `oxrdma_udp::steer`). Multiplying by an odd
//! key permutes the numbers, so a process still draws its QPNs uniformly from 2^18 values
//! and to a peer that does not know the key every QPN stays equally likely.

/// How many processes may share one address.
pub const SLOTS: u32 = 64;
/// A QPN's slot is bits 18..24 of `qpn × key` (mod 2^24).
pub const QPN_SHIFT: u32 = 18;
/// A comm ID's slot is bits 26..32 of `id × key` (mod 2^32).
pub const COMM_ID_SHIFT: u32 = 26;
const QPN_MASK: u32 = 0xff_ffff;

/// The slot a process owns, and its host group's key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    /// Which slot (below [`SLOTS`]).
    pub index: u32,
    /// The group's key (odd).
    pub key: u32,
}

/// The inverse of odd `k` modulo 2^32 (Newton's iteration: each step doubles the bits
/// that are right).
fn inverse(k: u32) -> u32 {
    let mut x = k;
    for _ in 0..5 {
        x = x.wrapping_mul(2u32.wrapping_sub(k.wrapping_mul(x)));
    }
    x
}

impl Slot {
    /// Slot `index` of the group whose key is `key` (made odd).
    pub fn new(index: u32, key: u32) -> Slot {
        Slot {
            index: index % SLOTS,
            key: key | 1,
        }
    }

    /// The QPN of this slot that `random` (any 32 bits) picks: each of the slot's 2^18
    /// QPNs for 2^14 values of `random`.
    pub fn qpn(&self, random: u32) -> u32 {
        let v = self.index << QPN_SHIFT | (random & ((1 << QPN_SHIFT) - 1));
        v.wrapping_mul(inverse(self.key)) & QPN_MASK
    }

    /// The comm ID of this slot that `seq` picks (distinct for 2^26 values of `seq`).
    pub fn comm_id(&self, seq: u32) -> u32 {
        let v = self.index << COMM_ID_SHIFT | (seq & ((1 << COMM_ID_SHIFT) - 1));
        v.wrapping_mul(inverse(self.key))
    }

    /// The slot `qpn` belongs to in a group keyed `key`.
    pub fn of_qpn(key: u32, qpn: u32) -> u32 {
        ((qpn & QPN_MASK).wrapping_mul(key | 1) & QPN_MASK) >> QPN_SHIFT
    }

    /// The slot comm ID `id` belongs to in a group keyed `key`.
    pub fn of_comm_id(key: u32, id: u32) -> u32 {
        id.wrapping_mul(key | 1) >> COMM_ID_SHIFT
    }
}

/// Which slot's process takes a UDP payload that arrived at a shared address: what the
/// kernel's steering program returns (`oxrdma_udp::steer` compiles this to classic BPF and
/// is tested against it; the simulator runs it as is).
///
/// - A packet to any QP but QP1: the slot of its destination QPN.
/// - A CM MAD on QP1: REQ and SIDR_REQ by service ID to the slot listening on it
///   (`listeners`); SIDR_REP by its request ID; the other CM messages by the remote comm ID
///   (the receiver's own).
/// - A number whose slot is not live (bit `s` of `live`), another MAD class, a REQ nobody
///   listens for: `default`, a live member, which drops and counts what is not its own.
/// - A payload too short for a field the rule reads: slot 0 (a classic BPF program whose
///   load falls past the end returns 0).
pub fn steer(key: u32, payload: &[u8], listeners: &[(u64, u32)], default: u32, live: u64) -> u32 {
    steer_or_short(key, payload, listeners, default, live).unwrap_or(0)
}

/// Where the fields the rules read sit in the UDP payload: the BTH's destination QPN (with
/// resv8 before it), then for QP1's UD SENDs the MAD after BTH and DETH.
pub mod offsets {
    /// The BTH's 32-bit word of resv8 and the 24-bit destination QPN.
    pub const BTH_RESV8_QPN: usize = 4;
    /// The MAD, after the BTH (12 bytes) and DETH (8 bytes).
    pub const MAD: usize = 12 + 8;
    /// The MAD header's management class.
    pub const MAD_CLASS: usize = MAD + 1;
    /// The MAD header's 16-bit attribute ID.
    pub const MAD_ATTR: usize = MAD + 16;
    /// The MAD's data, after its 24-byte common header.
    pub const MAD_DATA: usize = MAD + 24;
    /// The CM's management class and the attributes not steered by remote comm ID.
    pub const CLASS_CM: u8 = 0x07;
    /// Attribute ID of the CM's ConnectRequest (REQ).
    pub const REQ: u16 = 0x0010;
    /// Attribute ID of ServiceIDResReq (SIDR_REQ).
    pub const SIDR_REQ: u16 = 0x0017;
    /// Attribute ID of ServiceIDResReqResp (SIDR_REP).
    pub const SIDR_REP: u16 = 0x0018;
}

fn steer_or_short(
    key: u32,
    p: &[u8],
    listeners: &[(u64, u32)],
    default: u32,
    live: u64,
) -> Option<u32> {
    use offsets::*;
    let word = |at: usize| Some(u32::from_be_bytes(p.get(at..at + 4)?.try_into().ok()?));
    let live_or_default = |s: u32| if live >> s & 1 == 1 { s } else { default };
    let qpn = word(BTH_RESV8_QPN)? & QPN_MASK;
    if qpn != 1 {
        return Some(live_or_default(Slot::of_qpn(key, qpn)));
    }
    if *p.get(MAD_CLASS)? != CLASS_CM {
        return Some(default);
    }
    let attr = u16::from_be_bytes(p.get(MAD_ATTR..MAD_ATTR + 2)?.try_into().ok()?);
    match attr {
        REQ | SIDR_REQ => {
            // The service ID's halves, read as the program reads them: the high one for
            // each listener, the low one where the high one matched.
            for &(sid, slot) in listeners {
                if word(MAD_DATA + 8)? == (sid >> 32) as u32 && word(MAD_DATA + 12)? == sid as u32 {
                    return Some(slot);
                }
            }
            Some(default)
        }
        SIDR_REP => Some(live_or_default(Slot::of_comm_id(key, word(MAD_DATA)?))),
        _ => Some(live_or_default(Slot::of_comm_id(key, word(MAD_DATA + 4)?))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn a_slots_numbers_are_its_own(index in 0..SLOTS, key: u32, r: u32) {
            let s = Slot::new(index, key);
            let q = s.qpn(r);
            prop_assert!(q <= QPN_MASK);
            prop_assert_eq!(Slot::of_qpn(s.key, q), index);
            prop_assert_eq!(Slot::of_comm_id(s.key, s.comm_id(r)), index);
        }

        #[test]
        fn distinct_draws_give_distinct_numbers(index in 0..SLOTS, key: u32, a: u32, b: u32) {
            let s = Slot::new(index, key);
            let low = (1u32 << QPN_SHIFT) - 1;
            prop_assume!(a & low != b & low);
            prop_assert_ne!(s.qpn(a), s.qpn(b));
            prop_assert_ne!(s.comm_id(a), s.comm_id(b));
        }
    }

    #[test]
    fn the_slots_split_the_qpns_evenly() {
        // Every QPN has one slot, and each slot has 2^18 of them.
        let key = 0x9e37_79b9;
        let mut per = vec![0u32; SLOTS as usize];
        for q in 0..=QPN_MASK {
            per[Slot::of_qpn(key, q) as usize] += 1;
        }
        assert!(per.iter().all(|&n| n == 1 << QPN_SHIFT), "{per:?}");
    }
}
