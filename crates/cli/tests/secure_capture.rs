//! What a capture of a secure QP shows (issue 58, item 3): two QPs on loopback, each
//! connected through endpoints that offer X25519 keys, move a WRITE, a READ and a SEND of
//! a known pattern while one device captures. Neither the capture's bytes, nor
//! `oxrdma decode`, nor tshark's RoCE dissector show the rkey, the address or the payload;
//! every packet's ICRC still verifies. The same exchange between plain QPs shows all
//! three: the check can fail.

mod common;
use common::oxrdma;

use oxrdma::{
    Access, ConnectOptions, Context, QpCap, QpType, RecvWr, SendData, SendFlags, SendWr, WcStatus,
    WrOpcode,
};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const LEN: usize = 16 << 10;

/// What the exchange used: the rkey, the remote address, the payload.
struct Secrets {
    rkey: u32,
    addr: u64,
    payload: Vec<u8>,
}

fn exchange(secure: bool, pcap: &Path, last: u8) -> Secrets {
    let a = Context::open(format!("127.0.0.{last}").parse().unwrap()).unwrap();
    let b = Context::open(format!("127.0.0.{}", last + 1).parse().unwrap()).unwrap();
    a.capture_to(pcap).unwrap();
    let (pa, pb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (ca, cb) = (a.create_cq(16).unwrap(), b.create_cq(16).unwrap());
    let qa = pa
        .create_qp(&ca, &ca, QpType::Rc, QpCap::default())
        .unwrap();
    let qb = pb
        .create_qp(&cb, &cb, QpType::Rc, QpCap::default())
        .unwrap();
    let (ea, eb) = if secure {
        (qa.secure_endpoint().unwrap(), qb.secure_endpoint().unwrap())
    } else {
        (qa.endpoint(), qb.endpoint())
    };
    let o = ConnectOptions {
        require_secure: secure,
        mtu: oxrdma::Mtu::Mtu1024,
        ..ConnectOptions::default()
    };
    qa.connect(&eb, &o).unwrap();
    qb.connect(&ea, &o).unwrap();
    let ma = pa.register(3 * LEN, Access::ALL).unwrap();
    let mb = pb.register(3 * LEN, Access::ALL).unwrap();
    // Not a repeating pattern: any 16 bytes of it name their place.
    let payload: Vec<u8> = (0..LEN as u32)
        .map(|i| (i ^ (i >> 8) ^ 0xa5) as u8)
        .collect();
    ma.write(0, &payload).unwrap();
    qb.post_recv(RecvWr {
        wr_id: 9,
        sges: vec![mb.sge(2 * LEN, LEN).unwrap()].into(),
    })
    .unwrap();
    let wr = |id, op, off| {
        let mut w = SendWr::new(
            id,
            op,
            SendData::Sges(vec![ma.sge(off, LEN).unwrap()].into()),
        );
        (w.remote_addr, w.rkey, w.flags) = (mb.addr(), mb.rkey(), SendFlags::SIGNALED);
        w
    };
    qa.post_send(wr(1, WrOpcode::RdmaWrite, 0)).unwrap();
    qa.post_send(wr(2, WrOpcode::RdmaRead, LEN)).unwrap();
    qa.post_send(wr(3, WrOpcode::Send, 0)).unwrap();
    let mut wcs = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while wcs.len() < 3 {
        assert!(Instant::now() < deadline, "{wcs:?}");
        ca.poll(&mut wcs, 8).unwrap();
    }
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
    let mut got = vec![0u8; LEN];
    for off in [0, 2 * LEN] {
        mb.read(off, &mut got).unwrap();
        assert_eq!(got, payload, "at {off}");
    }
    ma.read(LEN, &mut got).unwrap();
    assert_eq!(got, payload, "the READ");
    let s = Secrets {
        rkey: mb.rkey(),
        addr: mb.addr(),
        payload,
    };
    drop((qa, qb, ma, mb, ca, cb, pa, pb, a, b));
    s
}

/// Which of the secrets `pcap` shows: in its bytes, in `oxrdma decode --json`, in tshark's
/// detailed dissection (where installed).
fn shown(pcap: &Path, s: &Secrets) -> Vec<String> {
    let mut found = Vec::new();
    let bytes = std::fs::read(pcap).unwrap();
    let has = |needle: &[u8]| bytes.windows(needle.len()).any(|w| w == needle);
    if has(&s.rkey.to_be_bytes()) {
        found.push("the rkey in the bytes".to_string());
    }
    if has(&s.addr.to_be_bytes()) {
        found.push("the address in the bytes".to_string());
    }
    if s.payload.chunks(16).any(has) {
        found.push("payload in the bytes".to_string());
    }
    let out = oxrdma()
        .args(["decode", "--json"])
        .arg(pcap)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let decoded = String::from_utf8(out.stdout).unwrap();
    assert!(decoded.lines().count() > 10, "{decoded}");
    // Every packet is what its sender sent: the ICRC covers the sealed bytes.
    for l in decoded.lines() {
        assert!(l.contains("\"icrc\":\"ok\""), "{l}");
    }
    if decoded.contains(&format!("\"rkey\":{}", s.rkey)) {
        found.push("the rkey in oxrdma decode".to_string());
    }
    if decoded.contains(&format!("\"va\":{}", s.addr)) {
        found.push("the address in oxrdma decode".to_string());
    }
    match Command::new("tshark")
        .arg("-r")
        .arg(pcap)
        .args(["-d", "udp.port==4791,infiniband", "-V", "-x"])
        .output()
    {
        Ok(t) => {
            assert!(t.status.success());
            let text = String::from_utf8_lossy(&t.stdout).to_lowercase();
            if text.contains(&format!("remote key: 0x{:08x}", s.rkey)) {
                found.push("the rkey in tshark".to_string());
            }
            if text.contains(&format!("virtual address: 0x{:016x}", s.addr)) {
                found.push("the address in tshark".to_string());
            }
        }
        Err(_) => assert!(
            std::env::var_os("OXRDMA_CI").is_none(),
            "tshark is missing (CI installs it)"
        ),
    }
    found
}

#[test]
fn a_capture_of_a_secure_qp_shows_no_rkey_address_or_payload() {
    let dir = std::env::temp_dir().join(format!("oxrdma-secure-capture-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let plain = dir.join("plain.pcap");
    let s = exchange(false, &plain, 181);
    let in_plain = shown(&plain, &s);
    assert!(
        in_plain.iter().any(|f| f.contains("rkey in oxrdma decode"))
            && in_plain.iter().any(|f| f.contains("payload in the bytes")),
        "the plain capture should show them: {in_plain:?}"
    );
    let secure = dir.join("secure.pcap");
    let s = exchange(true, &secure, 183);
    let in_secure = shown(&secure, &s);
    assert!(
        in_secure.is_empty(),
        "the secure capture shows {in_secure:?}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
