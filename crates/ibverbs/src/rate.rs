//! `ibv_rate_to_mult`, `mult_to_ibv_rate`, `ibv_rate_to_mbps`, `mbps_to_ibv_rate`: the
//! static rate enum against multiples of 2.5 Gb/s and against Mb/s, rdma-core's tables.

use crate::abi::IBV_RATE_MAX;
use std::ffi::c_int;

/// (`enum ibv_rate`, multiple of 2.5 Gb/s or 0 where it is none, Mb/s).
const RATES: [(c_int, c_int, c_int); 23] = [
    (2, 1, 2500),
    (5, 2, 5000),
    (3, 4, 10000),
    (6, 8, 20000),
    (4, 12, 30000),
    (7, 16, 40000),
    (8, 24, 60000),
    (9, 32, 80000),
    (10, 48, 120000),
    (11, 0, 14062),
    (12, 0, 56250),
    (13, 0, 112500),
    (14, 0, 168750),
    (15, 0, 25781),
    (16, 0, 103125),
    (17, 0, 206250),
    (18, 0, 309375),
    (19, 11, 28125),
    (20, 20, 53125),
    (21, 160, 425000),
    (22, 240, 637500),
    (23, 320, 850000),
    (24, 480, 1275000),
];

pub(crate) extern "C" fn rate_to_mult(rate: c_int) -> c_int {
    RATES
        .iter()
        .find(|r| r.0 == rate && r.1 != 0)
        .map_or(-1, |r| r.1)
}

pub(crate) extern "C" fn mult_to_rate(mult: c_int) -> c_int {
    RATES
        .iter()
        .find(|r| r.1 == mult && mult != 0)
        .map_or(IBV_RATE_MAX, |r| r.0)
}

pub(crate) extern "C" fn rate_to_mbps(rate: c_int) -> c_int {
    RATES.iter().find(|r| r.0 == rate).map_or(-1, |r| r.2)
}

pub(crate) extern "C" fn mbps_to_rate(mbps: c_int) -> c_int {
    RATES
        .iter()
        .find(|r| r.2 == mbps)
        .map_or(IBV_RATE_MAX, |r| r.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_convert_both_ways_as_rdma_core_does() {
        // IBV_RATE_10_GBPS is 3: four times 2.5 Gb/s.
        assert_eq!((rate_to_mult(3), mult_to_rate(4)), (4, 3));
        // IBV_RATE_100_GBPS (16) has no multiple, and is 103125 Mb/s (64b/66b).
        assert_eq!(
            (rate_to_mult(16), rate_to_mbps(16), mbps_to_rate(103125)),
            (-1, 103125, 16)
        );
        assert_eq!(
            (rate_to_mbps(0), mult_to_rate(3), mbps_to_rate(1)),
            (-1, 0, 0)
        );
        for &(rate, mult, mbps) in &RATES {
            assert_eq!(mbps_to_rate(rate_to_mbps(rate)), rate);
            if mult != 0 {
                assert_eq!(mult_to_rate(rate_to_mult(rate)), rate, "{mbps}");
            }
        }
    }
}
