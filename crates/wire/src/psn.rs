//! 24-bit packet sequence numbers. They wrap, so every comparison is modular: `a` is before
//! `b` when the forward distance from `a` to `b` is less than half the space (2^23).

use core::fmt;

/// Number of distinct PSNs.
pub const PSN_MODULUS: u32 = 1 << 24;
const MASK: u32 = PSN_MODULUS - 1;

/// A packet sequence number, always below 2^24.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Psn(u32);

impl Psn {
    /// The PSN `v mod 2^24`.
    pub const fn new(v: u32) -> Self {
        Psn(v & MASK)
    }

    /// The raw 24-bit value.
    pub const fn value(self) -> u32 {
        self.0
    }

    /// `self + n`, wrapping at 2^24.
    #[must_use]
    pub const fn add(self, n: u32) -> Self {
        Psn::new(self.0.wrapping_add(n))
    }

    /// `self - n`, wrapping at 2^24.
    #[must_use]
    pub const fn sub(self, n: u32) -> Self {
        Psn::new(self.0.wrapping_sub(n))
    }

    /// The next PSN.
    #[must_use]
    pub const fn next(self) -> Self {
        self.add(1)
    }

    /// Forward distance from `self` to `later`, in `0..2^24`.
    pub const fn distance_to(self, later: Psn) -> u32 {
        later.0.wrapping_sub(self.0) & MASK
    }

    /// Signed difference `self - other` interpreted in `-2^23..2^23`.
    pub const fn diff(self, other: Psn) -> i32 {
        // Shift the 24-bit difference into the top of an i32 and back to sign-extend it.
        ((self.0.wrapping_sub(other.0) << 8) as i32) >> 8
    }

    /// True when `self` comes strictly before `other` (modulo 2^24).
    pub const fn before(self, other: Psn) -> bool {
        self.diff(other) < 0
    }

    /// True when `self` comes strictly after `other` (modulo 2^24).
    pub const fn after(self, other: Psn) -> bool {
        self.diff(other) > 0
    }

    /// True when `self` lies in the window of `len` PSNs starting at `start`.
    pub const fn in_window(self, start: Psn, len: u32) -> bool {
        start.distance_to(self) < len
    }
}

impl fmt::Debug for Psn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Psn({})", self.0)
    }
}

impl fmt::Display for Psn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn wraps_at_2_pow_24() {
        let last = Psn::new(MASK);
        assert_eq!(last.next(), Psn::new(0));
        assert!(last.before(Psn::new(0)));
        assert!(Psn::new(0).after(last));
        assert_eq!(last.distance_to(Psn::new(5)), 6);
        assert_eq!(Psn::new(3).sub(5), Psn::new(MASK - 1));
        assert!(Psn::new(2).in_window(last, 4));
        assert!(!Psn::new(3).in_window(last, 4));
    }

    #[test]
    fn half_space_boundary() {
        let a = Psn::new(0);
        assert!(a.before(Psn::new((1 << 23) - 1)));
        // Exactly half the space away is "before" from the other side: -2^23.
        assert_eq!(Psn::new(1 << 23).diff(a), -(1 << 23));
    }

    proptest! {
        #[test]
        fn add_then_compare(base in 0u32..PSN_MODULUS, n in 1u32..(1 << 23)) {
            let a = Psn::new(base);
            let b = a.add(n);
            prop_assert!(a.before(b));
            prop_assert!(b.after(a));
            prop_assert!(!b.before(a));
            prop_assert_eq!(a.distance_to(b), n);
            prop_assert_eq!(b.diff(a), n as i32);
            prop_assert_eq!(a.diff(b), -(n as i32));
            prop_assert_eq!(b.sub(n), a);
            prop_assert!(b.in_window(a, n + 1));
            prop_assert!(!b.in_window(a, n));
        }

        #[test]
        fn values_stay_24_bit(v in any::<u32>(), n in any::<u32>()) {
            prop_assert!(Psn::new(v).add(n).value() < PSN_MODULUS);
            prop_assert!(Psn::new(v).sub(n).value() < PSN_MODULUS);
            prop_assert!(!Psn::new(v).before(Psn::new(v)));
        }
    }
}
