//! Every RoCEv2 packet Linux rxe put on the wire in `tests/vectors/rxe` parses,
//! re-emits byte for byte, and its ICRC verifies against the captured IP and UDP headers.
//! Per-file and per-opcode counts are checked against the independent decoder's output
//! (`decoded/*.txt`, written by `interop/analyze-pcap.py`).

use oxrdma_cli::capture::for_each_roce;
use oxrdma_wire::icrc_id::verify_ipv4_any_id;
use oxrdma_wire::{icrc, PacketRepr, ROCE_V2_PORT};
use std::collections::BTreeMap;
use std::path::PathBuf;

fn vectors_dir() -> PathBuf {
    let dir = std::env::var_os("OXRDMA_RXE_PCAP_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/vectors/rxe")
        });
    assert!(
        dir.is_dir(),
        "rxe captures not found at {} (they ship in tests/vectors/rxe; OXRDMA_RXE_PCAP_DIR points elsewhere)",
        dir.display()
    );
    dir
}

/// Opcode name as `analyze-pcap.py` spells it.
fn reference_name(ours: &str) -> String {
    ours.replace("RDMA_", "")
        .replace("_WITH_IMMEDIATE", "_IMM")
        .replace("_WITH_INVALIDATE", "_INV")
}

/// The "per opcode:" section of a decoded/NAME.txt file.
fn reference_counts(text: &str) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    let mut in_section = false;
    for line in text.lines() {
        let t = line.trim();
        if t == "per opcode:" {
            in_section = true;
            continue;
        }
        if in_section {
            let mut parts = t.split_whitespace();
            match (
                parts.next(),
                parts.next().and_then(|n| n.parse().ok()),
                parts.next(),
            ) {
                (Some(name), Some(n), None) => {
                    out.insert(name.to_string(), n);
                }
                _ => break,
            }
        }
    }
    out
}

#[test]
fn every_rxe_packet_parses_reemits_and_verifies() {
    let dir = vectors_dir();
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "pcap"))
        .collect();
    files.sort();
    assert!(
        files.len() >= 20,
        "expected the rxe captures, found {}",
        files.len()
    );
    let mut total = 0;
    let mut ipv4 = 0;
    for path in &files {
        let mut per_opcode = BTreeMap::<String, usize>::new();
        let counts = for_each_roce(path, ROCE_V2_PORT, |f| {
            let where_ = format!("{} frame {}", path.display(), f.frame);
            let p = PacketRepr::parse(f.payload).map_err(|e| anyhow::anyhow!("{where_}: {e}"))?;
            icrc::verify(f.ip_udp(), f.payload).map_err(|e| anyhow::anyhow!("{where_}: {e}"))?;
            if f.ip_udp()[0] >> 4 == 4 {
                // As a UDP socket sees it: the ID is unknown, and must come out of the ICRC.
                let id = u16::from_be_bytes([f.ip_udp()[4], f.ip_udp()[5]]);
                let mut blind = f.ip_udp().to_vec();
                blind[4..6].fill(0);
                assert_eq!(verify_ipv4_any_id(&blind, f.payload), Ok(id), "{where_}");
                ipv4 += 1;
            }
            let mut again = vec![0u8; p.buffer_len()];
            p.emit(&mut again).unwrap();
            icrc::fill(f.ip_udp(), &mut again).unwrap();
            assert_eq!(again, f.payload, "{where_}: re-emitted bytes differ");
            *per_opcode
                .entry(reference_name(p.bth.opcode.name()))
                .or_default() += 1;
            Ok(())
        })
        .unwrap();
        let decoded = path.with_extension("txt");
        let decoded = decoded
            .parent()
            .unwrap()
            .join("decoded")
            .join(decoded.file_name().unwrap());
        let text = std::fs::read_to_string(&decoded)
            .unwrap_or_else(|e| panic!("{}: {e}", decoded.display()));
        assert_eq!(per_opcode, reference_counts(&text), "{}", path.display());
        total += counts.roce;
    }
    // README.md of the captures: "every one of the 2,410 RoCE packets verifies".
    assert_eq!(total, 2410);
    // All but rc_pingpong_ipv6's 50 are IPv4, and every one gave back its real ID.
    assert_eq!(ipv4, 2360);
}
