//! Property tests: emit then parse gives back the same packet for every opcode; parse then
//! emit gives back the same bytes; arbitrary bytes never make the parser panic.

use oxrdma_wire::opcode::{Payload, Position};
use oxrdma_wire::{
    icrc, AethRepr, AtomicAckEthRepr, AtomicEthRepr, BthRepr, DethRepr, ExtHeaders, FethRepr,
    Headers, NakCode, Opcode, PacketRepr, Psn, RethRepr, Syndrome, WireError,
};
use proptest::prelude::*;

fn syndrome() -> impl Strategy<Value = Syndrome> {
    prop_oneof![
        (0u8..32).prop_map(|credits| Syndrome::Ack { credits }),
        (0u8..32).prop_map(|timer| Syndrome::RnrNak { timer }),
        (0u8..32).prop_map(|c| Syndrome::Nak(NakCode::from_code(c))),
    ]
}

fn bth(opcode: Opcode) -> impl Strategy<Value = BthRepr> {
    (
        any::<(bool, bool, u16, bool, bool)>(),
        0u32..1 << 24,
        any::<(bool, bool)>(),
        0u32..1 << 24,
    )
        .prop_map(
            move |(
                (solicited, migreq, pkey, fecn, becn),
                dest_qpn,
                (ack_req, selective_repeat),
                psn,
            )| BthRepr {
                opcode,
                solicited,
                migreq,
                pkey,
                fecn,
                becn,
                dest_qpn,
                ack_req,
                psn: Psn::new(psn),
                selective_repeat,
            },
        )
}

fn ext(h: Headers) -> impl Strategy<Value = ExtHeaders> {
    let opt = move |bit: Headers| h.contains(bit);
    (
        (any::<u32>(), 0u32..1 << 24).prop_map(|(qkey, src_qpn)| DethRepr { qkey, src_qpn }),
        (0u8..16, 0u8..4).prop_map(|(placement_type, selectivity_level)| FethRepr {
            placement_type,
            selectivity_level,
        }),
        any::<(u64, u32, u32)>().prop_map(|(virtual_address, rkey, dma_length)| RethRepr {
            virtual_address,
            rkey,
            dma_length,
        }),
        any::<(u64, u32, u64, u64)>().prop_map(|(virtual_address, rkey, swap_add, compare)| {
            AtomicEthRepr {
                virtual_address,
                rkey,
                swap_add,
                compare,
            }
        }),
        (syndrome(), 0u32..1 << 24).prop_map(|(syndrome, msn)| AethRepr { syndrome, msn }),
        any::<(u64, u32, u32)>(),
    )
        .prop_map(
            move |(deth, feth, reth, atomic, aeth, (orig, imm, inv))| ExtHeaders {
                deth: opt(Headers::DETH).then_some(deth),
                feth: opt(Headers::FETH).then_some(feth),
                reth: opt(Headers::RETH).then_some(reth),
                atomic_eth: opt(Headers::ATOMIC_ETH).then_some(atomic),
                aeth: opt(Headers::AETH).then_some(aeth),
                atomic_ack_eth: opt(Headers::ATOMIC_ACK_ETH)
                    .then_some(AtomicAckEthRepr { original: orig }),
                immdt: opt(Headers::IMMDT).then_some(imm),
                ieth: opt(Headers::IETH).then_some(inv),
            },
        )
}

fn payload(op: Opcode) -> BoxedStrategy<Vec<u8>> {
    let info = op.info().unwrap();
    match info.payload {
        Payload::None => Just(Vec::new()).boxed(),
        Payload::Exactly(n) => proptest::collection::vec(any::<u8>(), n).boxed(),
        Payload::Any if matches!(info.position, Position::First | Position::Middle) => (0usize
            ..=1024)
            .prop_flat_map(|w| proptest::collection::vec(any::<u8>(), w * 4))
            .boxed(),
        Payload::Any => proptest::collection::vec(any::<u8>(), 0..=4096).boxed(),
    }
}

/// (opcode, BTH, extension headers, payload) for any opcode in the table.
fn packet() -> impl Strategy<Value = (BthRepr, ExtHeaders, Vec<u8>)> {
    let ops: Vec<Opcode> = Opcode::all().collect();
    proptest::sample::select(ops)
        .prop_flat_map(|op| (bth(op), ext(op.info().unwrap().headers), payload(op)))
}

fn emit_with_icrc(p: &PacketRepr<'_>, ip_udp: &[u8]) -> Vec<u8> {
    let mut buf = vec![0u8; p.buffer_len()];
    let n = p.emit(&mut buf).unwrap();
    assert_eq!(n, buf.len());
    icrc::fill(ip_udp, &mut buf).unwrap();
    buf
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn emit_then_parse_is_identity((bth, ext, payload) in packet(), id in any::<u16>(), v6 in any::<bool>()) {
        let p = PacketRepr { bth, ext, payload: &payload };
        let ip_udp: Vec<u8> = if v6 {
            icrc::ipv6_udp_header([0xfd; 16], [0xfe; 16], 49152, 4791, p.buffer_len()).to_vec()
        } else {
            icrc::ipv4_udp_header([127, 0, 0, 2], [127, 0, 0, 3], id, 49152, 4791, p.buffer_len()).to_vec()
        };
        let bytes = emit_with_icrc(&p, &ip_udp);
        prop_assert_eq!(bytes.len() % 4, 0);
        let parsed = PacketRepr::parse(&bytes).unwrap();
        prop_assert_eq!(parsed, p);
        icrc::verify(&ip_udp, &bytes).unwrap();
        // And back to the same bytes.
        prop_assert_eq!(emit_with_icrc(&parsed, &ip_udp), bytes);
    }

    #[test]
    fn any_bytes_parse_without_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = PacketRepr::parse(&bytes);
        let _ = icrc::verify(&bytes[..bytes.len().min(48)], &bytes);
    }

    #[test]
    fn truncation_is_an_error_not_a_panic((bth, ext, payload) in packet(), cut in any::<prop::sample::Index>()) {
        let p = PacketRepr { bth, ext, payload: &payload };
        let mut buf = vec![0u8; p.buffer_len()];
        p.emit(&mut buf).unwrap();
        let at = cut.index(buf.len());
        match PacketRepr::parse(&buf[..at]) {
            Err(WireError::Truncated { .. }) | Err(WireError::BadPad { .. })
            | Err(WireError::BadPayloadLength { .. }) | Err(WireError::UnexpectedPayload { .. }) => {}
            Ok(q) => {
                // Cutting whole words off a payload leaves a shorter, still valid packet.
                prop_assert!(q.payload.len() < payload.len());
            }
            Err(e) => prop_assert!(false, "unexpected error {e}"),
        }
    }
}

#[test]
fn emit_rejects_headers_that_do_not_match_the_opcode() {
    let bth = BthRepr {
        opcode: Opcode::RC_RDMA_WRITE_FIRST,
        solicited: false,
        migreq: false,
        pkey: 0xffff,
        fecn: false,
        becn: false,
        dest_qpn: 1,
        ack_req: false,
        psn: Psn::new(0),
        selective_repeat: false,
    };
    let p = PacketRepr {
        bth,
        ext: ExtHeaders::default(),
        payload: &[0; 8],
    };
    let mut buf = [0u8; 64];
    assert_eq!(p.emit(&mut buf), Err(WireError::HeadersMismatch(0x06)));
    let p = PacketRepr {
        bth: BthRepr {
            opcode: Opcode::RC_SEND_MIDDLE,
            ..bth
        },
        ext: ExtHeaders::default(),
        payload: &[0; 7],
    };
    assert!(matches!(
        p.emit(&mut buf),
        Err(WireError::BadPayloadLength { .. })
    ));
    let p = PacketRepr {
        bth: BthRepr {
            opcode: Opcode::RC_SEND_ONLY,
            ..bth
        },
        ext: ExtHeaders::default(),
        payload: &[0; 7],
    };
    assert!(matches!(
        p.emit(&mut buf[..10]),
        Err(WireError::BufferTooSmall { needed: 24, .. })
    ));
}

#[test]
fn parse_rejections_name_the_reason() {
    // RC ACK with a payload word after the AETH.
    let mut ack = [0u8; 24];
    ack[0] = 0x11;
    assert_eq!(
        PacketRepr::parse(&ack),
        Err(WireError::UnexpectedPayload {
            opcode: 0x11,
            len: 4
        })
    );
    // RC SEND_ONLY with pad 3 but only 4 bytes of data area: fine (1-byte payload).
    let mut send = [0u8; 20];
    send[0] = 0x04;
    send[1] = 0x30;
    assert_eq!(PacketRepr::parse(&send).unwrap().payload.len(), 1);
    // Same with a 3-byte data area: not a multiple of 4.
    assert!(matches!(
        PacketRepr::parse(&send[..19]),
        Err(WireError::BadPad {
            pad: 3,
            data_len: 3
        })
    ));
    // SEND_FIRST may not pad.
    send[0] = 0x00;
    assert!(matches!(
        PacketRepr::parse(&send),
        Err(WireError::BadPad { .. })
    ));
    // Opcode of the RD transport.
    send[0] = 0x40;
    assert_eq!(
        PacketRepr::parse(&send),
        Err(WireError::UnsupportedTransport(0x40))
    );
    // UD opcode that does not exist.
    send[0] = 0x60;
    assert_eq!(
        PacketRepr::parse(&send),
        Err(WireError::BadOpcodeForTransport(0x60))
    );
    // ATOMIC_WRITE must carry exactly 8 bytes.
    let mut aw = [0u8; 12 + 16 + 4 + 4];
    aw[0] = 0x1d;
    assert_eq!(
        PacketRepr::parse(&aw),
        Err(WireError::BadPayloadLength {
            opcode: 0x1d,
            len: 4
        })
    );
    // Reserved AETH syndrome type.
    let mut ack = [0u8; 20];
    ack[0] = 0x11;
    ack[12] = 0x40;
    assert_eq!(
        PacketRepr::parse(&ack),
        Err(WireError::ReservedSyndrome(0x40))
    );
}
