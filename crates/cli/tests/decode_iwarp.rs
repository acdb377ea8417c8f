//! `oxrdma decode` on iWARP: a capture of one connection (MPA's request and reply, then a
//! WRITE cut into FPDUs, a READ and its response, a SEND, and a TERMINATE for a bad STag),
//! its TCP segments cut at random places with one sent twice, is decoded frame by frame;
//! a flipped byte is a bad CRC that `--strict` fails on; a gap in the capture stops that
//! direction with an error (segments captured out of order are put back in order); and
//! tshark's iWARP dissectors read the same capture without
//! a malformed packet or a bad CRC.

mod common;
use common::oxrdma;

use etherparse::PacketBuilder;
use oxrdma_core::iwarp::qp::{Buffers, Qp, QpConfig};
use oxrdma_core::iwarp::{Setup, SetupConfig, SetupEvent};
use oxrdma_core::{SendData, SendFlags, SendWr, Sge, WrOpcode};
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use pcap_file::DataLink;
use std::path::{Path, PathBuf};
use std::time::Duration;

const A: ([u8; 4], u16) = ([10, 0, 0, 1], 40000);
const B: ([u8; 4], u16) = ([10, 0, 0, 2], 9999);

/// The bytes each way: the initiator's (`ab`) and the responder's (`ba`), in the order
/// they were sent, as (direction, bytes) runs.
fn conversation() -> Vec<(bool, Vec<u8>)> {
    let (mut ia, req) = Setup::initiator(SetupConfig::default()).unwrap();
    let mut rb = Setup::responder(SetupConfig::default());
    assert!(matches!(
        rb.feed(&req).unwrap().0,
        SetupEvent::Request { .. }
    ));
    let (rep, nb) = rb.accept().unwrap();
    let SetupEvent::Established(na) = ia.feed(&rep).unwrap().0 else {
        panic!("not established")
    };
    let cfg = |qpn| QpConfig::negotiated(qpn, 1024, &na, false);
    let mut a = Qp::after_setup(cfg(1), &na, true).unwrap();
    let mut b = Qp::after_setup(QpConfig::negotiated(2, 1024, &nb, false), &nb, false).unwrap();
    let (mut ma, mut mb) = (Buffers::default(), Buffers::default());
    ma.add(1, 0x1000, vec![7; 8192], true, true);
    mb.add(2, 0x8000, vec![9; 8192], true, true);
    let sges = |addr, len| {
        SendData::Sges(
            vec![Sge {
                addr,
                length: len,
                lkey: 1,
            }]
            .into(),
        )
    };
    let mut w = SendWr::new(10, WrOpcode::RdmaWrite, sges(0x1000, 3000));
    (w.remote_addr, w.rkey) = (0x8000, 2);
    a.post_send(w).unwrap();
    let mut r = SendWr::new(11, WrOpcode::RdmaRead, sges(0x1000, 100));
    (r.remote_addr, r.rkey) = (0x8100, 2);
    a.post_send(r).unwrap();
    b.post_recv(oxrdma_core::RecvWr {
        wr_id: 1,
        sges: vec![Sge {
            addr: 0x9000,
            length: 64,
            lkey: 2,
        }]
        .into(),
    });
    let mut s = SendWr::new(12, WrOpcode::Send, sges(0x1000, 50));
    s.flags = SendFlags::SIGNALED;
    a.post_send(s).unwrap();
    let mut runs = vec![(true, req), (false, rep)];
    for round in 0..10 {
        if round == 2 {
            // A WRITE to an STag b does not have: b TERMINATEs.
            let mut bad = SendWr::new(13, WrOpcode::RdmaWrite, sges(0x1000, 8));
            (bad.remote_addr, bad.rkey) = (0x8000, 0x77);
            a.post_send(bad).unwrap();
        }
        let (mut ab, mut ba) = (Vec::new(), Vec::new());
        a.transmit(&ma, &mut ab, 1 << 20);
        assert_eq!(b.receive(&ab, &mut mb), ab.len());
        b.transmit(&mb, &mut ba, 1 << 20);
        assert_eq!(a.receive(&ba, &mut ma), ba.len());
        for (dir, bytes) in [(true, ab), (false, ba)] {
            if !bytes.is_empty() {
                runs.push((dir, bytes));
            }
        }
    }
    runs
}

/// How the capture is cut and spoiled.
#[derive(Clone, Copy, Default)]
struct Cuts {
    /// Each FPDU a segment of its own, as senders do (tshark reads FPDUs so); otherwise
    /// segments of 1 to 700 bytes, anywhere (seeded), one of them sent twice.
    aligned: bool,
    /// One byte of the WRITE's first FPDU changed.
    flip: bool,
    /// One segment of the initiator's FPDUs left out of the capture.
    drop_one: bool,
    /// One segment of the initiator's FPDUs captured three segments late (reordered on
    /// the way, as netem does, or sent again after a loss).
    reorder: bool,
}

/// Writes the conversation as TCP segments of IPv4 packets, SYNs first.
fn capture(path: &Path, cuts: Cuts) {
    let Cuts {
        aligned,
        flip,
        drop_one,
        reorder,
    } = cuts;
    let mut held: Option<(u32, Vec<u8>)> = None;
    let mut a_segment = 0;
    let mut w = PcapWriter::with_header(
        std::fs::File::create(path).unwrap(),
        PcapHeader {
            datalink: DataLink::RAW,
            ..Default::default()
        },
    )
    .unwrap();
    let mut seq = [1000u32, 5000u32];
    let mut t = 0u64;
    let mut put =
        |w: &mut PcapWriter<std::fs::File>, from_a: bool, syn: bool, seq: u32, p: &[u8]| {
            let ((s, sp), (d, dp)) = if from_a { (A, B) } else { (B, A) };
            let b = PacketBuilder::ipv4(s, d, 64).tcp(sp, dp, seq, 65535);
            let b = if syn { b.syn() } else { b.ack(1) };
            let mut pkt = Vec::new();
            b.write(&mut pkt, p).unwrap();
            t += 1;
            let ts = Duration::from_micros(t);
            w.write_packet(&PcapPacket::new(ts, pkt.len() as u32, &pkt))
                .unwrap();
        };
    for (i, from_a) in [true, false].into_iter().enumerate() {
        put(&mut w, from_a, true, seq[i], &[]);
        seq[i] += 1;
    }
    let mut rng = 0x2545_F491_4F6C_DD1Du64;
    let mut segment = 0;
    let mut flipped = false;
    for (run, (from_a, mut bytes)) in conversation().into_iter().enumerate() {
        let i = usize::from(!from_a);
        // The initiator's first FPDUs: the RTR (20 bytes), then the WRITE's first.
        if flip && from_a && run > 1 && !flipped {
            bytes[40] ^= 1;
            flipped = true;
        }
        let mut at = 0;
        while at < bytes.len() {
            let n = if run < 2 {
                bytes.len() // an MPA frame
            } else if aligned {
                let ulpdu = usize::from(u16::from_be_bytes([bytes[at], bytes[at + 1]]));
                oxrdma_wire::iwarp::mpa::fpdu_len(ulpdu, true)
            } else {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                1 + (rng % 700) as usize
            };
            let n = n.min(bytes.len() - at);
            segment += 1;
            let skip = drop_one && from_a && segment == 12;
            a_segment += usize::from(from_a);
            let late = reorder && from_a && a_segment == 8;
            if late {
                held = Some((seq[i], bytes[at..at + n].to_vec()));
            } else if !skip {
                put(&mut w, from_a, false, seq[i], &bytes[at..at + n]);
            }
            if reorder && from_a && a_segment == 11 {
                let (s0, b) = held.take().expect("held since a's 8th segment");
                put(&mut w, true, false, s0, &b);
            }
            if segment == 7 && !aligned {
                put(&mut w, from_a, false, seq[i], &bytes[at..at + n]); // again
            }
            seq[i] = seq[i].wrapping_add(n as u32);
            at += n;
        }
    }
}

fn decode(path: &Path, strict: bool) -> (bool, Vec<serde_json::Value>) {
    let mut c = oxrdma();
    c.args(["decode", "--json"]).arg(path);
    if strict {
        c.arg("--strict");
    }
    let out = c.output().unwrap();
    let lines = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (out.status.success(), lines)
}

fn tmp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("oxrdma-decode-iwarp-{}-{name}", std::process::id()))
}

#[test]
fn an_iwarp_conversation_decodes_frame_by_frame() {
    let path = tmp("ok.pcap");
    capture(&path, Cuts::default());
    let (ok, lines) = decode(&path, true);
    assert!(ok, "{lines:#?}");
    let kinds: Vec<_> = lines.iter().map(|l| l["kind"].as_str().unwrap()).collect();
    assert_eq!(&kinds[..2], ["mpa_request", "mpa_reply"]);
    assert_eq!(lines[0]["mpa"]["revision"], 2);
    let ops: Vec<(String, bool)> = lines[2..]
        .iter()
        .map(|l| {
            let f = &l["fpdu"];
            assert_eq!(f["crc"], "ok", "{l}");
            (f["opcode"].as_str().unwrap().to_string(), f["last"] == true)
        })
        .collect();
    let names: Vec<&str> = ops.iter().map(|(o, _)| o.as_str()).collect();
    // The RTR, the WRITE in three FPDUs (1024-byte FPDUs), the READ request, its
    // response, the SEND, the WRITE with the bad STag, and b's TERMINATE.
    assert_eq!(names[0], "WRITE", "the RTR");
    assert_eq!(lines[2]["fpdu"]["payload_len"], 0);
    for want in ["READ_REQUEST", "READ_RESPONSE", "SEND", "TERMINATE"] {
        assert!(names.contains(&want), "{want} in {names:?}");
    }
    let writes = ops.iter().filter(|(o, _)| o == "WRITE").count();
    assert!(writes >= 5, "{names:?}");
    let read = lines
        .iter()
        .find(|l| l["fpdu"]["opcode"] == "READ_REQUEST")
        .unwrap();
    assert_eq!(read["fpdu"]["read"]["size"], 100);
    assert_eq!(read["fpdu"]["read"]["source_stag"], 2);
    let term = lines
        .iter()
        .find(|l| l["fpdu"]["opcode"] == "TERMINATE")
        .unwrap();
    assert_eq!(term["src"], "10.0.0.2:9999");
    // DDP's layer (1), a tagged buffer error (1), an invalid STag (0): RFC 5041.
    let t = &term["fpdu"]["terminate"];
    assert_eq!(
        (&t["layer"], &t["etype"], &t["ecode"]),
        (&1.into(), &1.into(), &0.into())
    );
    let _ = std::fs::remove_file(&path);
}

#[test]
fn a_flipped_byte_is_a_bad_crc_and_a_gap_stops_the_direction() {
    let path = tmp("flip.pcap");
    capture(
        &path,
        Cuts {
            flip: true,
            ..Cuts::default()
        },
    );
    let (ok, lines) = decode(&path, true);
    assert!(!ok, "--strict fails on a bad CRC");
    let bad = lines.iter().filter(|l| l["fpdu"]["crc"] == "bad").count();
    assert_eq!(bad, 1, "{lines:#?}");
    let path2 = tmp("gap.pcap");
    capture(
        &path2,
        Cuts {
            drop_one: true,
            ..Cuts::default()
        },
    );
    let (ok, lines) = decode(&path2, true);
    assert!(!ok);
    let gap = lines
        .iter()
        .find(|l| l["kind"] == "error")
        .unwrap_or_else(|| panic!("no error line: {lines:#?}"));
    assert!(gap["error"].as_str().unwrap().contains("missing"), "{gap}");
    assert_eq!(gap["src"], "10.0.0.1:40000");
    // The other direction still decodes: b's READ response and TERMINATE are there.
    assert!(lines.iter().any(|l| l["fpdu"]["opcode"] == "TERMINATE"));
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_file(&path2);
}

/// tshark's own iWARP dissectors (MPA, DDP/RDMAP) on the same capture: every FPDU seen,
/// none malformed. Skipped where tshark is missing (CI installs it; with OXRDMA_CI set a
/// missing tshark fails).
#[test]
fn tshark_reads_the_same_capture() {
    if std::process::Command::new("tshark")
        .arg("-v")
        .output()
        .is_err()
    {
        assert!(std::env::var_os("OXRDMA_CI").is_none(), "tshark is missing");
        eprintln!("SKIPPED: no tshark");
        return;
    }
    let path = tmp("tshark.pcap");
    capture(
        &path,
        Cuts {
            aligned: true,
            ..Cuts::default()
        },
    );
    let out = std::process::Command::new("tshark")
        .args(["-r"])
        .arg(&path)
        .args([
            "-T",
            "fields",
            "-e",
            "iwarp_rdma.opcode",
            "-e",
            "_ws.malformed",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let opcodes: Vec<&str> = text
        .lines()
        .map(|l| l.split('\t').next().unwrap_or(""))
        .filter(|o| !o.is_empty())
        .collect();
    assert!(opcodes.len() >= 8, "tshark saw RDMAP opcodes: {text}");
    assert!(!text.contains("Malformed"), "{text}");
    // Every FPDU's CRC32c as Wireshark (and Linux siw) read it: least significant byte
    // first.
    let full = std::process::Command::new("tshark")
        .arg("-r")
        .arg(&path)
        .arg("-V")
        .output()
        .unwrap();
    let full = String::from_utf8_lossy(&full.stdout);
    let good = full.matches("Good CRC32").count();
    assert!(good >= 8, "tshark checked {good} CRCs");
    assert!(!full.contains("Bad CRC32"), "tshark found a bad CRC");
    let _ = std::fs::remove_file(&path);
}

#[test]
fn segments_captured_out_of_order_are_put_back_in_order() {
    let (path, path2) = (tmp("inorder.pcap"), tmp("reorder.pcap"));
    capture(&path, Cuts::default());
    capture(
        &path2,
        Cuts {
            reorder: true,
            ..Cuts::default()
        },
    );
    let (ok, want) = decode(&path, true);
    assert!(ok);
    let (ok, got) = decode(&path2, true);
    assert!(ok, "--strict passes: nothing was missing, {got:#?}");
    let ops = |lines: &[serde_json::Value]| -> Vec<String> {
        lines
            .iter()
            .map(|l| l["fpdu"]["opcode"].to_string())
            .collect()
    };
    assert_eq!(ops(&got), ops(&want), "the same FPDUs in the same order");
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_file(&path2);
}
