//! Every connection-manager MAD Linux put on the wire in the rxe captures (UD SENDs to QP1)
//! parses as its CM message and is written back byte for byte; the fields of rping's
//! exchange are the ones the captures' README and the kernel say.

use oxrdma_cli::capture::for_each_roce;
use oxrdma_wire::cm::{attr, CmMessage};
use oxrdma_wire::mad::{MadHeader, CLASS_CM, GSI_QKEY, MAD_HEADER_LEN, MAD_LEN};
use oxrdma_wire::{PacketRepr, ROCE_V2_PORT};
use std::path::PathBuf;

fn vector(name: &str) -> PathBuf {
    std::env::var_os("OXRDMA_RXE_PCAP_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/vectors/rxe")
        })
        .join(name)
}

/// The CM messages of a capture, in order, each with its MAD header; every one checked to
/// re-emit to the bytes it came from.
fn cm_messages(name: &str) -> Vec<(MadHeader, CmMessage)> {
    let mut out = Vec::new();
    for_each_roce(&vector(name), ROCE_V2_PORT, |f| {
        let p = PacketRepr::parse(f.payload)?;
        if p.bth.dest_qpn != 1 {
            return Ok(());
        }
        let deth = p.ext.deth.expect("a UD packet to QP1");
        assert_eq!(deth.qkey, GSI_QKEY, "{name} frame {}", f.frame);
        assert_eq!(p.payload.len(), MAD_LEN, "{name} frame {}", f.frame);
        let h = MadHeader::parse(p.payload)?;
        assert_eq!(h.mgmt_class, CLASS_CM, "{name} frame {}", f.frame);
        let data = &p.payload[MAD_HEADER_LEN..];
        let m = CmMessage::parse(h.attr_id, data)?;
        let mut again = vec![0u8; MAD_LEN];
        h.emit(&mut again)?;
        m.emit(&mut again[MAD_HEADER_LEN..])?;
        assert_eq!(again, p.payload, "{name} frame {}: {}", f.frame, m.name());
        out.push((h, m));
        Ok(())
    })
    .unwrap();
    out
}

#[test]
fn every_cm_mad_in_the_captures_round_trips() {
    let mut names = Vec::new();
    for name in [
        "rping_cm.pcap",
        "rc_write_bw_rdmacm.pcap",
        "tap_guest_rping_req_to_host.pcap",
        "tap_host_built_cm_req_rej.pcap",
    ] {
        let msgs = cm_messages(name);
        assert!(!msgs.is_empty(), "{name}: no CM MADs");
        names.extend(msgs.iter().map(|(_, m)| m.name()));
    }
    for kind in ["REQ", "REP", "RTU", "REJ", "DREQ", "DREP"] {
        assert!(
            names.contains(&kind),
            "no {kind} in the captures: {names:?}"
        );
    }
}

#[test]
fn rpings_exchange_carries_what_the_kernel_puts_there() {
    let msgs = cm_messages("rping_cm.pcap");
    let (h, CmMessage::Req(req)) = &msgs[0] else {
        panic!("the first CM message is not a REQ: {msgs:?}");
    };
    assert_eq!(h.transaction_id, 0x0000_0002_5c17_97ff);
    // The TID's low half is the comm ID's wire bytes read as a little-endian number.
    assert_eq!(req.local_comm_id.to_be_bytes(), [0xff, 0x97, 0x17, 0x5c]);
    assert_eq!(
        h.transaction_id as u32,
        u32::from_le_bytes(req.local_comm_id.to_be_bytes())
    );
    // RDMA_PS_TCP (0x0106) << 16 | rping's port 7174.
    assert_eq!(req.service_id, 0x0106_0000 | 7174);
    assert_eq!((req.transport, req.starting_psn), (0, 0x6f_3396));
    assert_eq!(
        (
            req.remote_cm_response_timeout,
            req.local_cm_response_timeout
        ),
        (20, 20)
    );
    assert_eq!(
        (req.max_cm_retries, req.retry_count, req.rnr_retry_count),
        (15, 7, 7)
    );
    assert_eq!((req.path_mtu, req.pkey), (3, 0xffff));
    assert_eq!(
        (req.primary.local_lid, req.primary.remote_lid),
        (0xffff, 0xffff)
    );
    assert_eq!(
        req.primary.flow_label, 0x332a4,
        "(src port 40354 x 31 + dst port 7174) & 0xfffff"
    );
    assert_eq!(
        (req.primary.hop_limit, req.primary.local_ack_timeout),
        (64, 19)
    );
    // The CMA header: version 0, IPv4, the active side's port 40354, then both addresses.
    assert_eq!(&req.private_data[..4], &[0x00, 0x40, 0x9d, 0xa2]);
    assert_eq!(&req.private_data[16..20], &[10, 77, 0, 2]);
    assert_eq!(&req.private_data[32..36], &[10, 77, 0, 1]);
    let (rh, CmMessage::Rep(rep)) = &msgs[1] else {
        panic!("the second CM message is not a REP: {msgs:?}");
    };
    assert_eq!(
        rh.transaction_id, h.transaction_id,
        "a REP answers in the REQ's transaction"
    );
    assert_eq!(rep.remote_comm_id, req.local_comm_id);
    assert_eq!((rep.starting_psn, rep.target_ack_delay), (0xd1_7464, 15));
    let (_, CmMessage::CommIds(a, rtu)) = &msgs[2] else {
        panic!("the third CM message is not an RTU: {msgs:?}");
    };
    assert_eq!(*a, attr::RTU);
    assert_eq!(
        (rtu.local_comm_id, rtu.remote_comm_id),
        (req.local_comm_id, rep.local_comm_id)
    );
}
