//! `oxrdma decode` for iWARP: each TCP connection whose bytes open with an MPA frame is
//! put back in order per direction (retransmissions taken once, a gap in the capture ends
//! that direction's decoding), then read as MPA's request or reply and the FPDUs that
//! follow, each FPDU's DDP and RDMAP headers decoded and its CRC32c checked where MPA
//! agreed on CRCs.

use crate::capture::TcpSegment;
use oxrdma_wire::iwarp::ddp::{DdpRepr, Placement, RdmapOpcode, ReadRequestRepr, TerminateRepr};
use oxrdma_wire::iwarp::mpa::{self, EnhancedRepr, FrameKind, MpaFrameRepr};
use oxrdma_wire::WireError;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;

/// One MPA frame or FPDU, or why a direction could not be read on.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IwarpDecoded {
    /// The frame its last byte came in.
    pub frame: usize,
    /// Seconds since the Unix epoch.
    pub time: f64,
    pub src: String,
    pub dst: String,
    /// `mpa_request`, `mpa_reply`, `fpdu`, or `error`.
    pub kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mpa: Option<Mpa>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fpdu: Option<Fpdu>,
}

/// An MPA request's or reply's fields.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Mpa {
    pub crc: bool,
    pub markers: bool,
    pub rejected: bool,
    pub revision: u8,
    /// The private data's length, RFC 6581's four bytes included.
    pub private_data_len: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ird: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ord: Option<u16>,
}

/// An FPDU's DDP segment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Fpdu {
    pub opcode: &'static str,
    pub last: bool,
    /// `ok`, `bad`, or `none` (MPA agreed on no CRCs).
    pub crc: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stag: Option<u32>,
    /// Tagged offset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub to: Option<u64>,
    /// Untagged: queue number, message sequence number, message offset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub msn: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mo: Option<u32>,
    /// SEND with Invalidate: the STag invalidated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inv_stag: Option<u32>,
    pub payload_len: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read: Option<ReadRequest>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub terminate: Option<Terminate>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ReadRequest {
    pub sink_stag: u32,
    pub sink_to: u64,
    pub size: u32,
    pub source_stag: u32,
    pub source_to: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Terminate {
    /// 0 RDMAP, 1 DDP, 2 MPA/TCP.
    pub layer: u8,
    pub etype: u8,
    pub ecode: u8,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// No payload yet.
    #[default]
    Unknown,
    /// Opened with an MPA key: its frame is read next.
    Frame,
    /// FPDUs.
    Fpdus,
    /// Not iWARP, rejected, or a gap in the capture: nothing more is read.
    Done,
}

/// One direction of a connection.
#[derive(Debug, Default)]
struct Dir {
    /// The sequence number of the next byte expected.
    next: Option<u32>,
    /// Bytes in order, not yet decoded.
    buf: Vec<u8>,
    phase: Phase,
    /// Segments captured ahead of a gap (reordered on the way, or sent again later), by
    /// how far ahead of `next` they begin: taken in once the gap fills.
    ahead: BTreeMap<u32, Vec<u8>>,
    /// The last segment seen, to name in a gap that never filled (`Iwarp::finish`).
    last: Option<(usize, f64)>,
}

/// Segments held ahead of a gap per direction, at most: a gap that stays open this long
/// is a loss in the capture, not reordering.
const AHEAD_MAX: usize = 4096;

/// What each side's MPA frame asked for: CRCs are used if either did.
#[derive(Debug, Default, Clone, Copy)]
struct Crcs {
    request: Option<bool>,
    reply: Option<bool>,
}

impl Crcs {
    fn agreed(&self) -> Option<bool> {
        Some(self.request? || self.reply?)
    }
}

/// The iWARP conversations of a capture, decoded as its TCP segments come.
#[derive(Debug, Default)]
pub struct Iwarp {
    dirs: HashMap<(SocketAddr, SocketAddr), Dir>,
    crcs: HashMap<(SocketAddr, SocketAddr), Crcs>,
}

impl Iwarp {
    /// Takes one captured segment; returns what it completed.
    pub fn segment(&mut self, s: &TcpSegment<'_>) -> Vec<IwarpDecoded> {
        let d = self.dirs.entry((s.src, s.dst)).or_default();
        if s.syn {
            *d = Dir {
                next: Some(s.seq.wrapping_add(1)),
                ..Dir::default()
            };
            self.crcs.remove(&conn_key(s.src, s.dst));
        }
        let mut out = Vec::new();
        if s.payload.is_empty() || d.phase == Phase::Done {
            return out;
        }
        d.last = Some((s.frame, s.time.as_secs_f64()));
        let next = *d.next.get_or_insert(s.seq);
        let ahead = s.seq.wrapping_sub(next);
        if ahead != 0 && ahead < 1 << 31 {
            // Bytes not captured yet: held until they come (reordered), or until the
            // capture ends without them (`finish`).
            if d.ahead.len() >= AHEAD_MAX {
                out.push(line(s, "error").with_error(gap(ahead)));
                d.phase = Phase::Done;
                d.ahead.clear();
            } else {
                d.ahead.entry(ahead).or_insert_with(|| s.payload.to_vec());
            }
            return out;
        }
        if !take(d, s.seq, s.payload) {
            return out; // sent again, taken already
        }
        // What waited beyond the gap this segment filled.
        while let Some((&off, _)) = d.ahead.first_key_value() {
            let at = d.next.unwrap_or(next);
            let seq = next.wrapping_add(off);
            if seq.wrapping_sub(at) != 0 && seq.wrapping_sub(at) < 1 << 31 {
                break; // still a gap before it
            }
            let bytes = d.ahead.pop_first().map(|(_, b)| b).unwrap_or_default();
            take(d, seq, &bytes);
        }
        // Offsets are kept from the `next` they were measured from.
        if !d.ahead.is_empty() {
            let at = d.next.unwrap_or(next);
            let moved = at.wrapping_sub(next);
            d.ahead = std::mem::take(&mut d.ahead)
                .into_iter()
                .map(|(off, b)| (off.wrapping_sub(moved), b))
                .collect();
        }
        if d.phase == Phase::Unknown {
            if d.buf.len() < 16 {
                return out;
            }
            let key = &d.buf[..16];
            d.phase = if key == mpa::REQ_KEY || key == mpa::REP_KEY {
                Phase::Frame
            } else {
                d.buf = Vec::new();
                Phase::Done
            };
        }
        let crcs = self.crcs.entry(conn_key(s.src, s.dst)).or_default();
        read_on(d, crcs, s, &mut out);
        out
    }
}

/// Takes the part of the segment at `seq` beyond what `d` has in order; false if none.
fn take(d: &mut Dir, seq: u32, payload: &[u8]) -> bool {
    let Some(next) = d.next else {
        return false;
    };
    let old = next.wrapping_sub(seq) as usize;
    let Some(new) = payload.get(old..).filter(|n| !n.is_empty()) else {
        return false;
    };
    d.next = Some(next.wrapping_add(new.len() as u32));
    d.buf.extend_from_slice(new);
    true
}

fn gap(bytes: u32) -> String {
    format!(
        "{bytes} bytes of this direction are missing from the capture: not decoded from \
         here on"
    )
}

impl Iwarp {
    /// The capture ended: a direction still waiting for bytes before what it holds has
    /// lost them (an error for each).
    pub fn finish(&mut self) -> Vec<IwarpDecoded> {
        let mut out = Vec::new();
        for (&(src, dst), d) in &mut self.dirs {
            let (Some(&off), Some((frame, time))) = (d.ahead.keys().next(), d.last) else {
                continue;
            };
            if d.phase == Phase::Unknown || d.phase == Phase::Done {
                continue;
            }
            out.push(
                IwarpDecoded {
                    frame,
                    time,
                    src: src.to_string(),
                    dst: dst.to_string(),
                    kind: "error",
                    error: None,
                    mpa: None,
                    fpdu: None,
                }
                .with_error(gap(off)),
            );
            d.phase = Phase::Done;
        }
        out
    }
}

/// Decodes what `d` holds whole.
fn read_on(d: &mut Dir, crcs: &mut Crcs, s: &TcpSegment<'_>, out: &mut Vec<IwarpDecoded>) {
    let mut at = 0;
    loop {
        let rest = &d.buf[at..];
        match d.phase {
            Phase::Frame => match MpaFrameRepr::parse(rest) {
                Err(WireError::Truncated { .. }) => break,
                Err(e) => {
                    out.push(line(s, "error").with_error(format!("MPA frame: {e}")));
                    d.phase = Phase::Done;
                    break;
                }
                Ok((f, len)) => {
                    let (kind, asked) = match f.kind {
                        FrameKind::Request => ("mpa_request", &mut crcs.request),
                        FrameKind::Reply => ("mpa_reply", &mut crcs.reply),
                    };
                    *asked = Some(f.crc);
                    let enhanced = f
                        .enhanced
                        .then(|| EnhancedRepr::parse(f.private_data).ok())
                        .flatten();
                    let mut l = line(s, kind);
                    l.mpa = Some(Mpa {
                        crc: f.crc,
                        markers: f.markers,
                        rejected: f.rejected,
                        revision: f.revision,
                        private_data_len: f.private_data.len(),
                        ird: enhanced.map(|e| e.ird),
                        ord: enhanced.map(|e| e.ord),
                    });
                    out.push(l);
                    d.phase = if f.rejected || f.markers {
                        Phase::Done // nothing follows a refusal; markers are not read
                    } else {
                        Phase::Fpdus
                    };
                    at += len;
                }
            },
            Phase::Fpdus => {
                // The initiator's FPDUs follow the reply, the responder's the request.
                let Some(crc) = crcs.agreed() else { break };
                let (seg, len, crc_word) = match mpa::parse_fpdu(rest, crc) {
                    Err(WireError::Truncated { .. }) => break,
                    Err(WireError::MpaCrcMismatch { .. }) => {
                        let ulpdu = usize::from(u16::from_be_bytes([rest[0], rest[1]]));
                        let len = mpa::fpdu_len(ulpdu, crc);
                        let seg = &rest[mpa::FPDU_HEADER_LEN..mpa::FPDU_HEADER_LEN + ulpdu];
                        (seg, len, "bad")
                    }
                    Err(e) => {
                        out.push(line(s, "error").with_error(format!("FPDU: {e}")));
                        d.phase = Phase::Done;
                        break;
                    }
                    Ok((seg, len)) => (seg, len, if crc { "ok" } else { "none" }),
                };
                let mut l = line(s, "fpdu");
                match fpdu(seg, crc_word) {
                    Ok(f) => l.fpdu = Some(f),
                    Err(e) => l = l.with_error(format!("DDP segment: {e}")),
                }
                if crc_word == "bad" {
                    l = l.with_error("CRC32c does not match".into());
                }
                out.push(l);
                at += len;
            }
            Phase::Unknown | Phase::Done => break,
        }
    }
    d.buf.drain(..at.min(d.buf.len()));
}

/// The fields of one DDP segment.
fn fpdu(seg: &[u8], crc: &'static str) -> Result<Fpdu, WireError> {
    let (h, hl) = DdpRepr::parse(seg)?;
    let payload = &seg[hl..];
    let mut f = Fpdu {
        opcode: opcode_name(h.opcode),
        last: h.last,
        crc,
        stag: None,
        to: None,
        queue: None,
        msn: None,
        mo: None,
        inv_stag: None,
        payload_len: payload.len(),
        read: None,
        terminate: None,
    };
    match h.placement {
        Placement::Tagged { stag, offset } => (f.stag, f.to) = (Some(stag), Some(offset)),
        Placement::Untagged {
            ulp,
            queue,
            msn,
            offset,
        } => {
            (f.queue, f.msn, f.mo) = (Some(queue as u32), Some(msn), Some(offset));
            f.inv_stag = h.opcode.invalidates().then_some(ulp);
        }
    }
    match h.opcode {
        RdmapOpcode::ReadRequest => {
            let r = ReadRequestRepr::parse(payload)?;
            f.read = Some(ReadRequest {
                sink_stag: r.sink_stag,
                sink_to: r.sink_offset,
                size: r.size,
                source_stag: r.source_stag,
                source_to: r.source_offset,
            });
        }
        RdmapOpcode::Terminate => {
            let t = TerminateRepr::parse(payload)?;
            f.terminate = Some(Terminate {
                layer: t.layer,
                etype: t.etype,
                ecode: t.ecode,
            });
        }
        _ => {}
    }
    Ok(f)
}

fn opcode_name(op: RdmapOpcode) -> &'static str {
    match op {
        RdmapOpcode::Write => "WRITE",
        RdmapOpcode::ReadRequest => "READ_REQUEST",
        RdmapOpcode::ReadResponse => "READ_RESPONSE",
        RdmapOpcode::Send => "SEND",
        RdmapOpcode::SendInvalidate => "SEND_INV",
        RdmapOpcode::SendSe => "SEND_SE",
        RdmapOpcode::SendSeInvalidate => "SEND_SE_INV",
        RdmapOpcode::Terminate => "TERMINATE",
    }
}

/// Both directions of a connection share one key.
fn conn_key(a: SocketAddr, b: SocketAddr) -> (SocketAddr, SocketAddr) {
    if a <= b {
        (a, b)
    } else {
        (b, a)
    }
}

fn line(s: &TcpSegment<'_>, kind: &'static str) -> IwarpDecoded {
    IwarpDecoded {
        frame: s.frame,
        time: s.time.as_secs_f64(),
        src: s.src.to_string(),
        dst: s.dst.to_string(),
        kind,
        error: None,
        mpa: None,
        fpdu: None,
    }
}

impl IwarpDecoded {
    fn with_error(mut self, e: String) -> Self {
        self.error = Some(e);
        self
    }

    /// Whether it is an error or a bad CRC.
    pub fn bad(&self) -> bool {
        self.error.is_some()
    }
}

/// One line of text for `d`.
pub fn format_line(d: &IwarpDecoded) -> String {
    use std::fmt::Write as _;
    let mut s = format!("{:>6} {:.6} {} > {} iWARP ", d.frame, d.time, d.src, d.dst);
    if let Some(m) = &d.mpa {
        let what = if d.kind == "mpa_request" {
            "MPA request"
        } else if m.rejected {
            "MPA reply (rejected)"
        } else {
            "MPA reply"
        };
        let _ = write!(
            s,
            "{what} rev {} crc={} markers={} private_data={}",
            m.revision, m.crc, m.markers, m.private_data_len
        );
        if let (Some(ird), Some(ord)) = (m.ird, m.ord) {
            let _ = write!(s, " ird={ird} ord={ord}");
        }
    }
    if let Some(f) = &d.fpdu {
        let _ = write!(s, "{}", f.opcode);
        if let (Some(stag), Some(to)) = (f.stag, f.to) {
            let _ = write!(s, " stag={stag:#x} to={to:#x}");
        }
        if let (Some(q), Some(msn), Some(mo)) = (f.queue, f.msn, f.mo) {
            let _ = write!(s, " qn={q} msn={msn} mo={mo}");
        }
        if let Some(i) = f.inv_stag {
            let _ = write!(s, " inv_stag={i:#x}");
        }
        if let Some(r) = &f.read {
            let _ = write!(
                s,
                " sink={:#x}@{:#x} size={} source={:#x}@{:#x}",
                r.sink_stag, r.sink_to, r.size, r.source_stag, r.source_to
            );
        }
        if let Some(t) = &f.terminate {
            let _ = write!(s, " layer={} type={} code={:#x}", t.layer, t.etype, t.ecode);
        }
        let _ = write!(
            s,
            " len={}{} crc={}",
            f.payload_len,
            if f.last { " last" } else { "" },
            f.crc
        );
    }
    if let Some(e) = &d.error {
        let _ = write!(s, " [{e}]");
    }
    s
}
