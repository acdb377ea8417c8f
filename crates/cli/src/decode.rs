//! `oxrdma decode`: one line (or one JSON object) per RoCEv2 packet in a capture, and per
//! iWARP MPA frame and FPDU (`decode_iwarp.rs`).

use crate::capture::{Frame, RoceFrame};
use anyhow::Context as _;
use oxrdma_wire::{icrc, AethRepr, NakCode, PacketRepr, Syndrome};
use serde::Serialize;
use std::fmt::Write as _;
use std::io::{self, BufWriter, Write};
use std::path::PathBuf;

/// `oxrdma decode`.
#[derive(clap::Args, Debug, Clone)]
pub struct DecodeArgs {
    /// The capture file (pcap or pcapng; Ethernet, raw IP or Linux cooked frames).
    pub file: PathBuf,
    /// Print JSON lines instead of text.
    #[arg(long)]
    pub json: bool,
    /// UDP destination port that carries RoCEv2.
    #[arg(long, default_value_t = oxrdma_wire::ROCE_V2_PORT)]
    pub port: u16,
    /// Exit with status 1 if any packet is malformed or fails its ICRC.
    #[arg(long)]
    pub strict: bool,
}

/// `oxrdma decode`: prints every RoCEv2 packet of the capture; Ok(false) under `--strict`
/// when one is malformed, fails its ICRC or cannot be read.
pub fn run(a: &DecodeArgs) -> anyhow::Result<bool> {
    let (file, json, port, strict) = (a.file.as_path(), a.json, a.port, a.strict);
    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let mut bad = 0usize;
    let mut iwarp = crate::decode_iwarp::Iwarp::default();
    let (mut fpdus, mut bad_iwarp) = (0usize, 0usize);
    let counts = crate::capture::for_each_frame(file, port, |frame| {
        let frame = match frame {
            Frame::Roce(f) => f,
            Frame::Tcp(seg) => {
                for d in iwarp.segment(seg) {
                    fpdus += 1;
                    bad_iwarp += usize::from(d.bad());
                    if json {
                        serde_json::to_writer(&mut out, &d)?;
                        out.write_all(b"\n")?;
                    } else {
                        writeln!(out, "{}", crate::decode_iwarp::format_line(&d))?;
                    }
                }
                return Ok(());
            }
        };
        let d = decode(frame);
        // A packet cut by the snap length counts as bad only if its headers are cut too.
        if d.packet.is_none() || d.icrc == "bad" {
            bad += 1;
        }
        if json {
            serde_json::to_writer(&mut out, &d)?;
            out.write_all(b"\n")?;
        } else {
            writeln!(out, "{}", format_line(&d))?;
        }
        Ok(())
    })?;
    for d in iwarp.finish() {
        fpdus += 1;
        bad_iwarp += 1;
        if json {
            serde_json::to_writer(&mut out, &d)?;
            out.write_all(b"\n")?;
        } else {
            writeln!(out, "{}", crate::decode_iwarp::format_line(&d))?;
        }
    }
    out.flush().context("cannot write to standard output")?;
    if fpdus > 0 {
        eprintln!(
            "{}: {fpdus} iWARP MPA frames and FPDUs, {bad_iwarp} malformed, bad CRC or not \
             decodable",
            file.display()
        );
    }
    bad += bad_iwarp;
    eprintln!(
        "{}: {} frames, {} RoCEv2 packets, {} malformed or bad ICRC{}",
        file.display(),
        counts.frames,
        counts.roce,
        bad - bad_iwarp,
        if counts.unreadable > 0 {
            format!(", {} frames unreadable (cut short?)", counts.unreadable)
        } else {
            String::new()
        },
    );
    if counts.cut > 0 {
        eprintln!(
            "{}: {} RoCEv2 packets captured in part (snap length): headers decoded, ICRC not checked",
            file.display(),
            counts.cut
        );
    }
    // Strict: a frame that cannot be read may have been a RoCE packet; it is not checked.
    Ok(!(strict && (bad > 0 || counts.unreadable > 0)))
}

/// Everything `decode` reports about one packet. Absent headers are omitted from JSON.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Decoded {
    pub frame: usize,
    /// Seconds since the Unix epoch.
    pub time: f64,
    pub src: String,
    pub dst: String,
    /// `ok`, `bad`, `unchecked` (when the packet did not parse far enough) or `cut` (the
    /// capture holds only part of the packet: its snap length).
    pub icrc: &'static str,
    /// Why the packet did not parse or its ICRC did not verify.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub packet: Option<Fields>,
}

/// The transport header fields of a packet that parsed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Fields {
    pub opcode: &'static str,
    pub opcode_num: u8,
    pub dest_qpn: u32,
    pub psn: u32,
    pub ack_req: bool,
    pub solicited: bool,
    pub pkey: u16,
    pub pad: u8,
    pub payload_len: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reth: Option<Reth>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub aeth: Option<Aeth>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub atomic: Option<Atomic>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub atomic_orig: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub imm: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inv_rkey: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deth: Option<Deth>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub feth: Option<Feth>,
    /// A connection-manager MAD's message (UD SENDs to QP1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cm: Option<crate::cm::Cm>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Reth {
    pub va: u64,
    pub rkey: u32,
    pub len: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Aeth {
    pub syndrome: u8,
    /// `ACK`, `RNR_NAK` or `NAK`.
    pub kind: &'static str,
    /// ACK: credit count; RNR NAK: timer code; NAK: error code.
    pub value: u8,
    /// Human-readable meaning, e.g. `PSN_SEQUENCE_ERROR`.
    pub meaning: String,
    pub msn: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Atomic {
    pub va: u64,
    pub rkey: u32,
    pub swap_add: u64,
    pub compare: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Deth {
    pub qkey: u32,
    pub src_qpn: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Feth {
    pub placement_type: u8,
    pub selectivity_level: u8,
}

fn aeth(a: &AethRepr) -> Aeth {
    let (kind, value, meaning) = match a.syndrome {
        Syndrome::Ack { credits } => (
            "ACK",
            credits,
            if credits == oxrdma_wire::aeth::INVALID_CREDIT {
                "no credit count".to_string()
            } else {
                format!("{credits} credits")
            },
        ),
        Syndrome::RnrNak { timer } => (
            "RNR_NAK",
            timer,
            format!(
                "retry after {} us",
                oxrdma_wire::aeth::rnr_timer_micros(timer)
            ),
        ),
        Syndrome::Nak(code) => (
            "NAK",
            code.code(),
            match code {
                NakCode::PsnSequenceError => "PSN_SEQUENCE_ERROR".into(),
                NakCode::InvalidRequest => "INVALID_REQUEST".into(),
                NakCode::RemoteAccessError => "REMOTE_ACCESS_ERROR".into(),
                NakCode::RemoteOperationalError => "REMOTE_OPERATIONAL_ERROR".into(),
                NakCode::InvalidRdRequest => "INVALID_RD_REQUEST".into(),
                NakCode::Reserved(c) => format!("RESERVED_{c}"),
            },
        ),
    };
    Aeth {
        syndrome: a.syndrome.to_byte(),
        kind,
        value,
        meaning,
        msn: a.msn,
    }
}

fn fields(p: &PacketRepr<'_>, pad: u8) -> Fields {
    let e = &p.ext;
    Fields {
        opcode: p.bth.opcode.name(),
        opcode_num: p.bth.opcode.0,
        dest_qpn: p.bth.dest_qpn,
        psn: p.bth.psn.value(),
        ack_req: p.bth.ack_req,
        solicited: p.bth.solicited,
        pkey: p.bth.pkey,
        pad,
        payload_len: p.payload.len(),
        reth: e.reth.map(|r| Reth {
            va: r.virtual_address,
            rkey: r.rkey,
            len: r.dma_length,
        }),
        aeth: e.aeth.as_ref().map(aeth),
        atomic: e.atomic_eth.map(|a| Atomic {
            va: a.virtual_address,
            rkey: a.rkey,
            swap_add: a.swap_add,
            compare: a.compare,
        }),
        atomic_orig: e.atomic_ack_eth.map(|a| a.original),
        imm: e.immdt,
        inv_rkey: e.ieth,
        deth: e.deth.map(|d| Deth {
            qkey: d.qkey,
            src_qpn: d.src_qpn,
        }),
        cm: crate::cm::summary(p),
        feth: e.feth.map(|f| Feth {
            placement_type: f.placement_type,
            selectivity_level: f.selectivity_level,
        }),
    }
}

/// Decodes one captured datagram: parse, then check the ICRC against the captured headers.
pub fn decode(f: &RoceFrame<'_>) -> Decoded {
    let mut d = Decoded {
        frame: f.frame,
        time: f.time.as_secs_f64(),
        src: f.src.to_string(),
        dst: f.dst.to_string(),
        icrc: "unchecked",
        error: None,
        packet: None,
    };
    if let Some(wire_len) = f.cut_from {
        decode_cut(f, wire_len, &mut d);
        return d;
    }
    match PacketRepr::parse(f.payload) {
        Ok(p) => {
            let pad = f.payload[1] >> 4 & 3;
            d.packet = Some(fields(&p, pad));
            match icrc::verify(f.ip_udp(), f.payload) {
                Ok(()) => d.icrc = "ok",
                Err(e) => {
                    d.icrc = "bad";
                    d.error = Some(e.to_string());
                }
            }
        }
        Err(e) => {
            d.error = Some(e.to_string());
            // Its ICRC still says whether it is what its sender sent: a secure QP's packet
            // is encrypted past its BTH, and parses no further.
            if f.payload.len() >= 16 {
                d.icrc = match icrc::verify(f.ip_udp(), f.payload) {
                    Ok(()) => "ok",
                    Err(_) => "bad",
                };
            }
        }
    }
    d
}

/// A packet captured in part (a snap length): its headers, read as if the missing bytes
/// were zeros, if the capture holds all of them; its ICRC cannot be checked.
fn decode_cut(f: &RoceFrame<'_>, wire_len: usize, d: &mut Decoded) {
    d.icrc = "cut";
    let held = f.payload.len();
    let mut whole = vec![0u8; wire_len];
    whole[..held].copy_from_slice(f.payload);
    match PacketRepr::parse(&whole) {
        Ok(p) => {
            let headers = p.payload.as_ptr() as usize - whole.as_ptr() as usize;
            if held >= headers {
                d.packet = Some(fields(&p, whole[1] >> 4 & 3));
                d.error = Some(format!("captured {held} of {wire_len} bytes"));
            } else {
                d.error = Some(format!(
                    "captured {held} of {wire_len} bytes: the headers ({headers} bytes) are cut"
                ));
            }
        }
        Err(e) => d.error = Some(format!("captured {held} of {wire_len} bytes: {e}")),
    }
}

/// The one-line text form.
pub fn format_line(d: &Decoded) -> String {
    let mut s = format!("{:>5} {:.6} {} > {} ", d.frame, d.time, d.src, d.dst);
    if let Some(p) = &d.packet {
        let flags = format!(
            "{}{}",
            if p.ack_req { "A" } else { "-" },
            if p.solicited { "S" } else { "-" }
        );
        let _ = write!(
            s,
            "{} qp={:#08x} psn={} {} len={}",
            p.opcode, p.dest_qpn, p.psn, flags, p.payload_len
        );
        if p.pad != 0 {
            let _ = write!(s, " pad={}", p.pad);
        }
        if p.pkey != oxrdma_wire::DEFAULT_PKEY {
            let _ = write!(s, " pkey={:#06x}", p.pkey);
        }
        if let Some(d) = &p.deth {
            let _ = write!(s, " qkey={:#010x} src_qp={:#08x}", d.qkey, d.src_qpn);
        }
        if let Some(f) = &p.feth {
            let _ = write!(
                s,
                " flush_type={} sel={}",
                f.placement_type, f.selectivity_level
            );
        }
        if let Some(r) = &p.reth {
            let _ = write!(s, " va={:#x} rkey={:#010x} dma_len={}", r.va, r.rkey, r.len);
        }
        if let Some(a) = &p.atomic {
            let _ = write!(
                s,
                " va={:#x} rkey={:#010x} swap_add={:#x} compare={:#x}",
                a.va, a.rkey, a.swap_add, a.compare
            );
        }
        if let Some(a) = &p.aeth {
            let _ = write!(s, " {} {} ({}) msn={}", a.kind, a.value, a.meaning, a.msn);
        }
        if let Some(o) = p.atomic_orig {
            let _ = write!(s, " orig={o:#x}");
        }
        if let Some(i) = p.imm {
            let _ = write!(s, " imm={i:#010x}");
        }
        if let Some(r) = p.inv_rkey {
            let _ = write!(s, " inv_rkey={r:#010x}");
        }
        if let Some(c) = &p.cm {
            s.push_str(&crate::cm::text(c));
        }
        let _ = write!(s, " icrc={}", d.icrc);
    } else {
        s.push_str("MALFORMED");
    }
    if let Some(e) = &d.error {
        let _ = write!(s, " ({e})");
    }
    s
}
