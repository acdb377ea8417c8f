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
