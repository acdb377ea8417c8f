//! The `oxrdma` commands as a user runs them.

mod common;
use common::{free_port, oxrdma};

use std::path::{Path, PathBuf};
use std::process::Command;

/// `perf --loopback` always uses 127.0.0.2 and 127.0.0.3: tests that run it take turns.
static LOOPBACK_PAIR: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The JSON lines a successful command printed.
fn json_lines(out: std::process::Output) -> Vec<serde_json::Value> {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// A fresh directory of this test process for the files a test writes.
fn scratch_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("oxrdma-{name}-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn vector(name: &str) -> PathBuf {
    let dir = std::env::var_os("OXRDMA_RXE_PCAP_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/vectors/rxe")
        });
    dir.join(name)
}

#[test]
fn json_lines_carry_the_fields_that_matter() {
    let out = oxrdma()
        .arg("decode")
        .arg("--json")
        .arg(vector("rc_read_bw.pcap"))
        .output()
        .unwrap();
    let lines = json_lines(out);
    assert_eq!(lines.len(), 55);
    assert!(lines.iter().all(|l| l["icrc"] == "ok"));
    let req = lines
        .iter()
        .find(|l| l["opcode"] == "RC_RDMA_READ_REQUEST")
        .unwrap();
    assert_eq!(req["reth"]["len"], 10000);
    assert_eq!(req["ack_req"], true);
    let first = lines
        .iter()
        .find(|l| l["opcode"] == "RC_RDMA_READ_RESPONSE_FIRST")
        .unwrap();
    assert_eq!(first["aeth"]["kind"], "ACK");
    assert_eq!(first["aeth"]["msn"], 1);
    assert_eq!(first["psn"], req["psn"]);
}

#[test]
fn text_lines_show_naks_atomics_and_datagrams() {
    let text = |name: &str| {
        let out = oxrdma().arg("decode").arg(vector(name)).output().unwrap();
        assert!(out.status.success());
        String::from_utf8(out.stdout).unwrap()
    };
    let rnr = text("rc_send_rnr.pcap");
    assert!(rnr.contains("RNR_NAK 12 (retry after 640 us)"), "{rnr}");
    assert!(rnr.contains("NAK 0 (PSN_SEQUENCE_ERROR)"));
    let cas = text("rc_atomic_cas.pcap");
    assert!(cas
        .lines()
        .any(|l| l.contains("RC_COMPARE_SWAP") && l.contains("compare=")));
    assert!(cas
        .lines()
        .any(|l| l.contains("RC_ATOMIC_ACKNOWLEDGE") && l.contains("orig=")));
    let ud = text("ud_pingpong.pcap");
    assert!(ud
        .lines()
        .all(|l| l.contains("qkey=0x11111111") && l.ends_with("icrc=ok")));
    let v6 = text("rc_pingpong_ipv6.pcap");
    assert!(v6.contains("[fd77::2]:50241 > [fd77::1]:4791"));
}

/// Copies a classic pcap, flipping one byte of the `nth` frame (counted from 0).
fn corrupt_copy(src: &Path, dst: &Path, nth: usize, offset_from_end: usize) {
    use pcap_file::pcap::{PcapPacket, PcapReader, PcapWriter};
    let mut r = PcapReader::new(std::fs::File::open(src).unwrap()).unwrap();
    let mut w = PcapWriter::with_header(std::fs::File::create(dst).unwrap(), r.header()).unwrap();
    let mut i = 0;
    while let Some(p) = r.next_packet() {
        let p = p.unwrap();
        let mut data = p.data.to_vec();
        if i == nth {
            let at = data.len() - offset_from_end;
            data[at] ^= 0x01;
        }
        w.write_packet(&PcapPacket::new(p.timestamp, p.orig_len, &data))
            .unwrap();
        i += 1;
    }
}

#[test]
fn strict_mode_fails_on_a_corrupted_packet() {
    let dir = scratch_dir("decode");
    let bad = dir.join("bad.pcap");
    // Frame 14 of rc_pingpong is the first RC_SEND_FIRST; flip a payload byte.
    corrupt_copy(&vector("rc_pingpong.pcap"), &bad, 13, 10);
    let out = oxrdma()
        .args(["decode", "--strict"])
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8(out.stdout).unwrap();
    let bad_lines: Vec<_> = stdout.lines().filter(|l| l.contains("icrc=bad")).collect();
    assert_eq!(bad_lines.len(), 1, "{stdout}");
    assert!(bad_lines[0].contains("ICRC mismatch"));
    // Without --strict the same file decodes with status 0.
    assert!(oxrdma().arg("decode").arg(&bad).status().unwrap().success());
    // A RoCE frame cut short by the capture inside its headers (50 of 100 bytes: Ethernet,
    // IPv4, UDP to 4791 and 8 bytes of a BTH) cannot be checked, so --strict fails on it.
    let mut frame = vec![0u8; 12];
    frame.extend_from_slice(&[0x08, 0x00]); // IPv4
    frame.extend_from_slice(&[
        0x45, 0, 0, 86, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
    ]);
    frame.extend_from_slice(&[0x12, 0xb7, 0x12, 0xb7, 0, 66, 0, 0]); // UDP 4791 -> 4791
    frame.extend_from_slice(&[0x04, 0, 0xff, 0xff, 0, 0, 0, 0x11]); // BTH, cut
    let mut pcap = Vec::new();
    for w in [0xa1b2_c3d4u32, 0x0004_0002, 0, 0, 65535, 1] {
        pcap.extend_from_slice(&w.to_le_bytes()); // magic, version 2.4, zone, sigfigs, snaplen, Ethernet
    }
    for w in [0u32, 0, frame.len() as u32, 100] {
        pcap.extend_from_slice(&w.to_le_bytes()); // time, captured length, original length
    }
    pcap.extend_from_slice(&frame);
    let cut = dir.join("cut.pcap");
    std::fs::write(&cut, &pcap).unwrap();
    let out = oxrdma()
        .args(["decode", "--strict"])
        .arg(&cut)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(stdout.contains("captured 8 of 58 bytes"), "{stdout}");
    assert!(stdout.contains("MALFORMED"), "{stdout}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `src` rewritten as `tcpdump -s snaplen` would have captured it: each record cut to
/// `snaplen` bytes, its original length kept.
fn snapped_copy(src: &Path, dst: &Path, snaplen: usize) {
    use pcap_file::pcap::{PcapPacket, PcapReader, PcapWriter};
    let mut r = PcapReader::new(std::fs::File::open(src).unwrap()).unwrap();
    let mut header = r.header();
    header.snaplen = snaplen as u32;
    let mut w = PcapWriter::with_header(std::fs::File::create(dst).unwrap(), header).unwrap();
    while let Some(p) = r.next_packet() {
        let p = p.unwrap();
        let data = &p.data[..p.data.len().min(snaplen)];
        w.write_packet(&PcapPacket::new(p.timestamp, p.orig_len, data))
            .unwrap();
    }
}

#[test]
fn a_capture_with_a_snap_length_decodes_every_header() {
    // tcpdump -s 128 records headers only; the decoder read none of it ("orig_len >
    // snap_len"). Every packet must decode as in the whole capture, marked as cut.
    let dir = scratch_dir("snaplen");
    for name in ["rc_write_bw.pcap", "rc_atomic_faa.pcap", "ud_pingpong.pcap"] {
        let cut = dir.join(name);
        snapped_copy(&vector(name), &cut, 128);
        let whole = json_lines(
            oxrdma()
                .args(["decode", "--json"])
                .arg(vector(name))
                .output()
                .unwrap(),
        );
        let out = oxrdma()
            .args(["decode", "--json", "--strict"])
            .arg(&cut)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        let snapped = json_lines(out);
        assert_eq!(snapped.len(), whole.len(), "{name}: {stderr}");
        let mut cut_seen = 0;
        for (w, s) in whole.iter().zip(&snapped) {
            for key in [
                "frame",
                "opcode",
                "dest_qpn",
                "psn",
                "payload_len",
                "reth",
                "aeth",
            ] {
                assert_eq!(w.get(key), s.get(key), "{name} frame {}: {key}", w["frame"]);
            }
            if s["icrc"] == "cut" {
                cut_seen += 1;
            } else {
                assert_eq!(s["icrc"], "ok", "{name}: {s}");
            }
        }
        if name == "rc_write_bw.pcap" {
            assert!(
                cut_seen > 0,
                "{name}: no packet was longer than the snap length"
            );
            assert!(stderr.contains("captured in part"), "{stderr}");
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn missing_file_is_one_clear_error() {
    let out = oxrdma()
        .args(["decode", "/nonexistent/x.pcap"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("oxrdma: error: cannot open /nonexistent/x.pcap"),
        "{err}"
    );
    let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
    let out = oxrdma().args(["decode", manifest]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8(out.stderr)
        .unwrap()
        .contains("not a pcap or pcapng file"));
}

#[test]
fn perf_loopback_runs_every_test_over_udp() {
    let _turn = LOOPBACK_PAIR.lock().unwrap_or_else(|p| p.into_inner());
    let run = |args: &[&str]| {
        let out = oxrdma()
            .args(["perf"])
            .args(args)
            .args(["--loopback", "--json"])
            .output()
            .unwrap();
        json_lines(out)
    };
    for test in ["write-bw", "read-bw", "send-bw", "atomic-bw"] {
        let size = if test == "atomic-bw" { "8" } else { "10000" };
        let r = run(&[test, "-n", "300", "-s", size, "-q", "2"]);
        assert_eq!(r.len(), 1, "{test}");
        assert_eq!(r[0]["iterations"], 600, "{test}: 300 per QP");
        assert_eq!(
            r[0]["bytes"].as_u64().unwrap(),
            size.parse::<u64>().unwrap()
        );
        let (avg, peak) = (
            r[0]["bw_avg_gbps"].as_f64().unwrap(),
            r[0]["bw_peak_gbps"].as_f64().unwrap(),
        );
        assert!(avg > 0.0 && peak >= avg, "{test}: {avg} {peak}");
    }
    for test in ["write-lat", "read-lat", "send-lat", "atomic-lat"] {
        let r = run(&[test, "-n", "300"]);
        assert_eq!(r[0]["iterations"], 300, "{test}");
        let f = |k: &str| r[0][k].as_f64().unwrap();
        assert!(
            f("min_us") <= f("median_us")
                && f("median_us") <= f("p99_us")
                && f("p99_us") <= f("max_us"),
            "{test}"
        );
    }
    // -a: one line per size, 2 B .. 8 MiB.
    let r = run(&["write-bw", "-a", "-n", "8", "-t", "4"]);
    let sizes: Vec<u64> = r.iter().map(|l| l["bytes"].as_u64().unwrap()).collect();
    assert_eq!(sizes, (1..=23).map(|p| 1u64 << p).collect::<Vec<_>>());
    // -D: runs for the time given, whatever -n says.
    let t = std::time::Instant::now();
    let r = run(&["send-bw", "-D", "1", "-n", "1", "-s", "1024"]);
    assert!(t.elapsed() >= std::time::Duration::from_secs(1));
    assert!(r[0]["iterations"].as_u64().unwrap() > 1);
    // A client whose server is not there: one clear error line.
    let closed = free_port();
    let out = oxrdma()
        .args([
            "perf",
            "write-bw",
            "127.0.0.1",
            "-d",
            "127.0.0.57",
            "-p",
            &closed,
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("cannot reach the perf server at 127.0.0.1"),
        "{err}"
    );
}

#[test]
fn devinfo_describes_the_device_and_refuses_foreign_addresses() {
    let out = oxrdma()
        .args(["devinfo", "-d", "127.0.0.31"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("GID[  0]:\t\t::ffff:127.0.0.31, RoCE v2"),
        "{text}"
    );
    assert!(text.contains("atomic_cap:\t\t\tATOMIC_HCA"));
    let out = oxrdma()
        .args(["devinfo", "-d", "192.0.2.1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8(out.stderr)
        .unwrap()
        .contains("not an address of this host"));
}

#[test]
fn devinfo_lists_every_device_with_its_interface_and_gids_opening_none() {
    let out = oxrdma()
        .args(["devinfo"])
        .env("OXRDMA_DEVICES", "a=127.0.0.33,b=lo")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.starts_with("# 2 devices, configured"), "{text}");
    let a = text.find("hca_id:\ta\n").expect("device a");
    let b = text.find("hca_id:\tb\n").expect("device b");
    assert!(a < b, "in order: {text}");
    assert!(text[a..b].contains("\tinterface:\tlo (index 1"), "{text}");
    assert!(
        text[a..b].contains("\tGID[  0]:\t::ffff:127.0.0.33, RoCE v2"),
        "{text}"
    );
    assert!(text[b..].contains("127.0.0.N"), "{text}");
    // Nothing was opened: the address is free for a device that binds it alone.
    let ctx = oxrdma::Context::open_alone("127.0.0.33".parse().unwrap());
    assert!(ctx.is_ok(), "{ctx:?}");
}

/// A pingpong server (`server` args) and client (`client` args) in two processes: the
/// client is run again until the server answers (each failure must mention `retry_on`).
/// Returns the client's and the server's stdout; both must exit 0.
fn pingpong_pair(server: &[&str], client: &[&str], retry_on: &str) -> (String, String) {
    let server = oxrdma()
        .arg("pingpong")
        .args(server)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut done = None;
    for _ in 0..50 {
        std::thread::sleep(std::time::Duration::from_millis(50));
        let out = oxrdma().arg("pingpong").args(client).output().unwrap();
        if out.status.success() {
            done = Some(out);
            break;
        }
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(retry_on), "{err}");
    }
    let client = done.expect("client never completed");
    let out = server.wait_with_output().unwrap();
    assert!(out.status.success());
    (
        String::from_utf8(client.stdout).unwrap(),
        String::from_utf8(out.stdout).unwrap(),
    )
}

#[test]
fn pingpong_server_and_client_in_two_processes() {
    // A free TCP port for the exchange.
    let port = free_port();
    let (client, server) = pingpong_pair(
        &["-d", "127.0.0.53", "-p", &port, "-n", "300", "-s", "8192"],
        &[
            "127.0.0.1",
            "-d",
            "127.0.0.54",
            "-p",
            &port,
            "-n",
            "300",
            "-s",
            "8192",
        ],
        "",
    );
    assert!(client.contains("4915200 bytes in"), "{client}");
    assert!(client.contains("300 iters in"), "{client}");
    assert!(server.contains("300 iters in"));
    // A bad MTU is one clear error (a usage error, as clap reports every bad flag).
    let out = oxrdma().args(["pingpong", "-m", "1000"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8(out.stderr)
        .unwrap()
        .contains("-m must be"));
}

#[test]
fn pingpong_cm_reaches_a_server_on_another_device_through_localhost() {
    // The server's device is 127.0.0.112; the client names 127.0.0.1 and the RDMA CM
    // port, and the per-host rendezvous finds the server. Until it listens, the client is
    // rejected (REJ 8) and exits non-zero: it tries again.
    let (client, server) = pingpong_pair(
        &["--cm", "-d", "127.0.0.112", "-p", "47330", "-n", "300"],
        &[
            "--cm",
            "127.0.0.1",
            "-d",
            "127.0.0.113",
            "-p",
            "47330",
            "-n",
            "300",
        ],
        "REJECTED (status 8)",
    );
    assert!(client.contains("300 iters in"), "{client}");
    assert!(server.contains("300 iters in"));
}

#[test]
fn pcap_captures_decode_cleanly_with_valid_icrcs() {
    let _turn = LOOPBACK_PAIR.lock().unwrap_or_else(|p| p.into_inner());
    let dir = scratch_dir("pcap");
    let pcap = dir.join("bw.pcap");
    let out = oxrdma()
        .args([
            "perf",
            "write-bw",
            "--loopback",
            "-n",
            "100",
            "-s",
            "10000",
            "--pcap",
        ])
        .arg(&pcap)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Every packet, both directions, re-verifies its ICRC against the captured headers.
    let out = oxrdma()
        .args(["decode", "--strict", "--json"])
        .arg(&pcap)
        .output()
        .unwrap();
    let lines = json_lines(out);
    // 100 WRITEs of 10,000 bytes, each a train of three WRITE ONLYs (4096, 4096, 1808
    // bytes) whose RETHs name consecutive addresses; in first-sent order (retransmissions
    // may repeat a PSN).
    let mut seen = std::collections::HashSet::new();
    let mut writes = Vec::new();
    for l in lines
        .iter()
        .filter(|l| l["opcode"].as_str().unwrap().starts_with("RC_RDMA_WRITE"))
    {
        assert_eq!(l["opcode"], "RC_RDMA_WRITE_ONLY", "{l}");
        let (va, len) = (l["reth"]["va"].as_u64(), l["reth"]["len"].as_u64());
        assert_eq!(len, l["payload_len"].as_u64(), "{l}");
        if seen.insert(l["psn"].as_u64().unwrap()) {
            writes.push((va.unwrap(), len.unwrap()));
        }
    }
    assert_eq!(writes.len(), 300);
    assert!(
        writes.chunks(3).all(|c| c[0].1 == 4096
            && c[1] == (c[0].0 + 4096, 4096)
            && c[2] == (c[1].0 + 4096, 1808)),
        "{writes:?}"
    );
    assert!(lines.iter().any(|l| l["opcode"] == "RC_ACKNOWLEDGE"));
    // The independent decoder, where installed (.ci/run installs it).
    if let Ok(t) = Command::new("tshark")
        .args(["-r"])
        .arg(&pcap)
        .args([
            "-d",
            "udp.port==4791,infiniband",
            "-Y",
            "_ws.malformed || _ws.expert.severity >= error",
            "-T",
            "fields",
            "-e",
            "frame.protocols",
        ])
        .output()
    {
        assert!(t.status.success());
        // Only problems in the RoCE layers count: tshark's guesses at the payload (RPC over
        // RDMA and the like, stacked after "infiniband") misread short messages.
        let stdout = String::from_utf8_lossy(&t.stdout);
        let bad: Vec<&str> = stdout
            .lines()
            .filter(|l| !l.contains(":infiniband:"))
            .collect();
        assert!(bad.is_empty(), "tshark found malformed packets: {bad:?}");
    } else {
        assert!(
            std::env::var_os("OXRDMA_CI").is_none(),
            "tshark is missing (CI installs it)"
        );
        // Past the harness, which hides what a passing test prints: a skip must show.
        let _ = std::io::Write::write_fmt(
            &mut std::io::stderr(),
            format_args!("SKIPPED: the tshark check of the captures (install tshark)\n"),
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `oxrdma perf ARGS --loopback --json --pcap PCAP`: its result lines, and the client's
/// capture decoded (`decode --strict --json`), one JSON value per packet.
fn perf_and_decode(
    args: &[&str],
    pcap: &std::path::Path,
) -> (Vec<serde_json::Value>, Vec<serde_json::Value>) {
    let out = oxrdma()
        .args(["perf"])
        .args(args)
        .args(["--loopback", "--json", "--pcap"])
        .arg(pcap)
        .output()
        .unwrap();
    let lines = json_lines(out);
    let out = oxrdma()
        .args(["decode", "--strict", "--json"])
        .arg(pcap)
        .output()
        .unwrap();
    (lines, json_lines(out))
}

#[test]
fn perf_r_connects_every_qp_through_the_rdma_cm() {
    let _turn = LOOPBACK_PAIR.lock().unwrap_or_else(|p| p.into_inner());
    let dir = scratch_dir("perf-r");
    let pcap = dir.join("client.pcap");
    let run = |args: &[&str]| {
        let mut a = args.to_vec();
        a.extend(["-R", "-p", "47201"]);
        let (lines, decoded) = perf_and_decode(&a, &pcap);
        let cm: Vec<String> = decoded
            .iter()
            .filter_map(|l| l["cm"]["msg"].as_str().map(str::to_string))
            .collect();
        (lines, cm)
    };
    let count = |cm: &[String], m: &str| cm.iter().filter(|c| *c == m).count();
    let (r, cm) = run(&["write-bw", "-n", "200", "-q", "3"]);
    assert_eq!(r[0]["iterations"], 600);
    for m in ["REQ", "REP", "RTU"] {
        assert_eq!(count(&cm, m), 3, "{m} in {cm:?}");
    }
    // Both sides disconnect when done, so a connection's DREQs may cross
    // (one from each side): one or two per connection. The DREPs are not
    // counted: the client may exit before the last one reaches it.
    assert!((3..=6).contains(&count(&cm, "DREQ")), "DREQ in {cm:?}");
    let (r, _) = run(&["read-lat", "-n", "200"]);
    assert_eq!(r[0]["iterations"], 200);
    // UD: the server's QPN comes by SIDR.
    let (r, cm) = run(&["send-bw", "-c", "UD", "-n", "200", "-s", "1024"]);
    assert_eq!(r[0]["iterations"], 200);
    assert_eq!(
        (count(&cm, "SIDR_REQ"), count(&cm, "SIDR_REP")),
        (1, 1),
        "{cm:?}"
    );
}

#[test]
fn perf_runs_uc_and_ud_like_perftest_c() {
    let _turn = LOOPBACK_PAIR.lock().unwrap_or_else(|p| p.into_inner());
    let dir = scratch_dir("perf-c");
    let pcap = dir.join("client.pcap");
    let run = |args: &[&str]| {
        let (lines, decoded) = perf_and_decode(args, &pcap);
        // The opcodes the client's device sent and received.
        let ops: std::collections::BTreeSet<String> = decoded
            .iter()
            .map(|l| l["opcode"].as_str().unwrap().to_string())
            .collect();
        (lines, ops)
    };
    // 300 per QP fit the server's 512 standing receives: on loopback nothing is lost.
    let (r, ops) = run(&["send-bw", "-c", "UD", "-n", "300", "-s", "1024", "-q", "2"]);
    assert_eq!(r[0]["iterations"], 600);
    assert_eq!(r[0]["bytes"], 1024);
    assert_eq!(ops, ["UD_SEND_ONLY".to_string()].into(), "no ACKs in UD");
    let (r, ops) = run(&["send-lat", "-c", "UD", "-n", "200", "-s", "4096"]);
    assert_eq!(r[0]["iterations"], 200);
    assert_eq!(ops, ["UD_SEND_ONLY".to_string()].into());
    let (r, ops) = run(&["write-bw", "-c", "UC", "-n", "300", "-s", "10000"]);
    assert_eq!(r[0]["iterations"], 300);
    let want: std::collections::BTreeSet<String> = ["FIRST", "MIDDLE", "LAST"]
        .iter()
        .map(|p| format!("UC_RDMA_WRITE_{p}"))
        .collect();
    assert_eq!(ops, want, "UC WRITEs of 10000 B in 4 KiB packets, no ACKs");
    for (test, op) in [
        ("write-lat", "UC_RDMA_WRITE_ONLY"),
        ("send-bw", "UC_SEND_ONLY"),
        ("send-lat", "UC_SEND_ONLY"),
    ] {
        let (r, ops) = run(&[test, "-c", "UC", "-n", "200", "-s", "100"]);
        assert_eq!(r[0]["iterations"], 200, "{test}");
        assert_eq!(ops, [op.to_string()].into(), "{test}");
    }
    // -a with UD stops at the path MTU (loopback: 4096).
    let (r, _) = run(&["send-bw", "-c", "UD", "-a", "-n", "20"]);
    let sizes: Vec<u64> = r.iter().map(|l| l["bytes"].as_u64().unwrap()).collect();
    assert_eq!(sizes, (1..=12).map(|p| 1u64 << p).collect::<Vec<_>>());
    // What a transport cannot do: one clear line each.
    for (args, why) in [
        (&["read-bw", "-c", "UC"][..], "UC has no READ or atomics"),
        (&["atomic-lat", "-c", "UC"][..], "UC has no READ or atomics"),
        (&["write-bw", "-c", "UD"][..], "UD carries SENDs only"),
        (
            &["send-bw", "-c", "UD", "-s", "8192"][..],
            "a UD message is one packet: at most the path MTU, 4096 B",
        ),
    ] {
        perf_refuses(args, why);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `oxrdma perf ARGS --loopback` refuses to run: exit status 1 and `why` on stderr.
fn perf_refuses(args: &[&str], why: &str) {
    let out = oxrdma()
        .arg("perf")
        .args(args)
        .arg("--loopback")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{args:?}");
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains(why), "{args:?}: {err}");
}

#[test]
fn perf_cpu_util_reports_each_side() {
    let _turn = LOOPBACK_PAIR.lock().unwrap_or_else(|p| p.into_inner());
    for test in ["write-bw", "send-bw"] {
        let out = oxrdma()
            .args([
                "perf",
                test,
                "--loopback",
                "--json",
                "--cpu-util",
                "-n",
                "2000",
            ])
            .output()
            .unwrap();
        let r = &json_lines(out)[0];
        for side in ["client", "server"] {
            let ms = r[format!("cpu_{side}_ms_per_gb")].as_f64();
            // 2000 x 64 KiB is 0.13 GB: some CPU, and less than a minute of it per GB.
            assert!(
                ms.is_some_and(|ms| ms > 0.0 && ms < 60_000.0),
                "{test} {side}: {r}"
            );
        }
    }
    let out = oxrdma()
        .args(["perf", "write-bw", "--loopback", "-n", "500", "--cpu-util"])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains(" CPU per GB moved: client "), "{text}");
    // Latency tests do not report it: one clear error.
    perf_refuses(
        &["write-lat", "--cpu-util"],
        "--cpu-util measures the bandwidth tests",
    );
}

#[test]
fn perf_events_sleeps_on_the_cq_and_moves_every_message() {
    let _turn = LOOPBACK_PAIR.lock().unwrap_or_else(|p| p.into_inner());
    for test in ["write-bw", "send-bw", "read-bw"] {
        let out = oxrdma()
            .args(["perf", test, "--loopback", "--json", "-e", "-n", "2000"])
            .output()
            .unwrap();
        let r = &json_lines(out)[0];
        assert_eq!(r["iterations"].as_u64(), Some(2000), "{test}: {r}");
        assert!(
            r["bw_avg_gbps"].as_f64().is_some_and(|g| g > 0.0),
            "{test}: {r}"
        );
    }
    perf_refuses(
        &["write-lat", "-e"],
        "-e sleeps on CQ events in the bandwidth tests",
    );
}

#[test]
fn perf_between_two_processes() {
    for test in ["write-bw", "send-bw", "write-lat", "read-lat"] {
        let port = free_port();
        let server = oxrdma()
            .args([
                "perf",
                test,
                "-d",
                "127.0.0.55",
                "-p",
                &port,
                "-n",
                "500",
                "-s",
                "4096",
            ])
            .spawn()
            .unwrap();
        let mut result = None;
        for _ in 0..50 {
            std::thread::sleep(std::time::Duration::from_millis(50));
            let out = oxrdma()
                .args([
                    "perf",
                    test,
                    "127.0.0.1",
                    "-d",
                    "127.0.0.56",
                    "-p",
                    &port,
                    "-n",
                    "500",
                    "-s",
                    "4096",
                    "--json",
                ])
                .output()
                .unwrap();
            if out.status.success() {
                result = Some(out);
                break;
            }
        }
        let out = result.unwrap_or_else(|| panic!("{test} client never completed"));
        let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(r["iterations"], 500, "{test}");
        assert_eq!(r["bytes"], 4096, "{test}");
        assert!(
            server.wait_with_output().unwrap().status.success(),
            "{test} server"
        );
    }
}

#[test]
fn perf_sides_that_disagree_fail_clearly() {
    let port = free_port();
    let server = oxrdma()
        .args(["perf", "write-bw", "-d", "127.0.0.58", "-p", &port])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut client_err = String::new();
    for _ in 0..50 {
        std::thread::sleep(std::time::Duration::from_millis(50));
        let out = oxrdma()
            .args([
                "perf",
                "send-bw",
                "127.0.0.1",
                "-d",
                "127.0.0.59",
                "-p",
                &port,
            ])
            .output()
            .unwrap();
        assert!(!out.status.success());
        client_err = String::from_utf8(out.stderr).unwrap();
        if !client_err.contains("cannot reach") {
            break;
        }
    }
    assert!(
        client_err.contains("the peer reports: server runs write_bw -c RC with -q 1"),
        "{client_err}"
    );
    let out = server.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("hello send_bw 1"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}

#[test]
fn scale_measures_every_qp_count_and_refuses_empty_runs() {
    let out = oxrdma()
        .args(["scale", "--qps", "1,40", "--samples", "1", "--passes", "50"])
        .args([
            "--writes",
            "20",
            "--a",
            "127.0.0.35",
            "--b",
            "127.0.0.36",
            "--json",
        ])
        .output()
        .unwrap();
    let rows = json_lines(out);
    assert_eq!(rows.len(), 2);
    assert_eq!(
        (rows[0]["idle_qps"].as_u64(), rows[1]["idle_qps"].as_u64()),
        (Some(1), Some(40))
    );
    // One idle pair gets one WRITE; of 40, the first, middle and last get one each.
    assert_eq!(
        (
            rows[0]["idle_writes"].as_u64(),
            rows[1]["idle_writes"].as_u64()
        ),
        (Some(1), Some(3))
    );
    for r in &rows {
        for k in ["driver_pass_ns", "engine_pass_ns", "write_rtt_us"] {
            assert!(r[k].as_f64().is_some_and(|v| v > 0.0), "{k} in {r}");
        }
    }
    let out = oxrdma()
        .args(["scale", "--qps", "1", "--samples", "0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("must not be empty or zero"));
}

#[test]
fn a_reader_that_goes_away_ends_decode_quietly() {
    use std::io::Read;
    let mut child = oxrdma()
        .args(["decode", "--json"])
        .arg(vector("rc_write_bw_100000.pcap"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Read a few bytes, then close the pipe: decode has 125 KB of JSON lines to print,
    // about twice what a pipe holds, so it is still writing (its text output, 62 KB,
    // could fit and finish first).
    let mut first = [0u8; 64];
    child.stdout.take().unwrap().read_exact(&mut first).unwrap();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(out.status.signal(), Some(libc::SIGPIPE), "{:?}", out.status);
}

#[test]
fn dev_nodes_makes_one_node_per_device_and_removes_it() {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let dir = scratch_dir("devnodes").join("infiniband");
    let run = |extra: &[&str]| {
        oxrdma()
            .args(["dev-nodes", "--dir"])
            .arg(&dir)
            .args(extra)
            .env("OXRDMA_DEVICES", "oxr0=127.0.0.2,oxr1=127.0.0.3")
            .output()
            .unwrap()
    };
    let out = run(&[]);
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        assert!(!out.status.success());
        assert!(String::from_utf8_lossy(&out.stderr).contains("run as root"));
        // Past the harness, which hides what a passing test prints: a skip must show.
        let _ = std::io::Write::write_fmt(
            &mut std::io::stderr(),
            format_args!("SKIPPED: making device nodes needs root\n"),
        );
        return;
    }
    assert!(out.status.success(), "{}", common_text(&out));
    for n in ["uverbs0", "uverbs1"] {
        let m = std::fs::symlink_metadata(dir.join(n)).unwrap();
        assert!(m.file_type().is_char_device(), "{n}");
        assert_eq!((libc::major(m.rdev()), libc::minor(m.rdev())), (1, 3));
        assert_eq!(m.mode() & 0o777, 0o666);
    }
    assert!(!dir.join("uverbs2").exists());
    assert!(common_text(&run(&[])).contains("uverbs0 is there"));
    assert!(run(&["--remove"]).status.success());
    assert!(!dir.join("uverbs0").exists() && !dir.join("uverbs1").exists());
    std::fs::remove_dir_all(dir.parent().unwrap()).unwrap();
}

fn common_text(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn decode_names_the_connection_managers_messages() {
    let lines = json_lines(
        oxrdma()
            .args(["decode", "--json"])
            .arg(vector("rping_cm.pcap"))
            .output()
            .unwrap(),
    );
    let cm: Vec<&serde_json::Value> = lines.iter().filter_map(|l| l.get("cm")).collect();
    let msgs: Vec<&str> = cm.iter().map(|c| c["msg"].as_str().unwrap()).collect();
    assert_eq!(msgs, ["REQ", "REP", "RTU", "DREQ", "DREP"], "{cm:?}");
    assert_eq!(cm[0]["service_id"], 0x0106_1c06);
    assert_eq!(cm[1]["remote_comm_id"], cm[0]["local_comm_id"]);
    assert_eq!(cm[0]["tid"], cm[1]["tid"]);
    assert_eq!(cm[0]["rdma_cm"], "10.77.0.2:40354 > 10.77.0.1:7174");
}
