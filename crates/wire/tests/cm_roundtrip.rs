//! Property tests of the CM messages: any 232 bytes under any attribute ID parse without a
//! panic, and what parses is written back to bytes that parse to the same message; any
//! MAD header round-trips.

use oxrdma_wire::cm::CmMessage;
use oxrdma_wire::mad::{MadHeader, MAD_DATA_LEN, MAD_HEADER_LEN};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn any_data_parses_and_reemits(attr in 0x0010u16..0x001c, data in prop::collection::vec(any::<u8>(), MAD_DATA_LEN)) {
        let m = CmMessage::parse(attr, &data).unwrap();
        let mut out = vec![0u8; MAD_DATA_LEN];
        m.emit(&mut out).unwrap();
        prop_assert_eq!(CmMessage::parse(attr, &out).unwrap(), m);
    }

    #[test]
    fn short_data_is_an_error(attr in 0x0010u16..0x0019, len in 0usize..MAD_DATA_LEN) {
        prop_assert!(CmMessage::parse(attr, &vec![0u8; len]).is_err());
    }

    #[test]
    fn a_mad_header_round_trips(h in prop::collection::vec(any::<u8>(), MAD_HEADER_LEN)) {
        let parsed = MadHeader::parse(&h).unwrap();
        let mut out = [0u8; MAD_HEADER_LEN];
        parsed.emit(&mut out).unwrap();
        // All but the two reserved bytes (18, 19) come back.
        prop_assert_eq!(&out[..18], &h[..18]);
        prop_assert_eq!(&out[20..], &h[20..]);
    }
}
