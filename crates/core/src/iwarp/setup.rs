//! The MPA exchange (RFC 5044 §7.1, RFC 6581) that turns a TCP connection into an iWARP
//! one, on each side, without I/O: the initiator writes its request and reads the reply;
//! the responder reads the request, shows it to the application (the RDMA CM's connect
//! request, with the private data) and answers accept or reject.
//!
//! What is settled: CRCs (on if either side asks: RFC 5044 says both directions then
//! carry them); markers (oxrdma sends none and takes none, as siw: a peer that asks for
//! them is refused); the READ depths (RFC 6581: neither side issues more READs than the
//! other takes at once); and, peer to peer, the zero-length message the initiator sends
//! first so that the responder may send (a WRITE where both offer it, as siw prefers).

use oxrdma_wire::iwarp::mpa::{self, EnhancedRepr, FrameKind, MpaFrameRepr};
use oxrdma_wire::WireError;

/// What one side offers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetupConfig {
    /// Ask for CRC32c on every FPDU.
    pub crc: bool,
    /// RDMA READs this side takes at once (its IRD).
    pub ird: u16,
    /// RDMA READs this side issues at once (its ORD).
    pub ord: u16,
    /// Speak RFC 6581 (revision 2): depths and the ready-to-receive message.
    pub enhanced: bool,
    /// The ULP's private data (the RDMA CM's), at most 512 bytes with the 4 of RFC 6581.
    pub private_data: Vec<u8>,
}

impl Default for SetupConfig {
    fn default() -> Self {
        SetupConfig {
            crc: true,
            ird: 16,
            ord: 16,
            enhanced: true,
            private_data: Vec::new(),
        }
    }
}

/// The zero-length message a peer-to-peer initiator sends first (RFC 6581's RTR).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rtr {
    /// A zero-length RDMA WRITE.
    Write,
    /// A zero-length RDMA READ.
    Read,
    /// A zero-length SEND (the responder must have a receive posted).
    Send,
}

/// What the two sides settled on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Negotiated {
    /// Every FPDU carries a CRC32c, both ways.
    pub crc: bool,
    /// READs this side takes at once.
    pub ird: u16,
    /// READs this side may issue at once (never more than the peer takes).
    pub ord: u16,
    /// Revision 2 peer to peer: the message the initiator sends first (the initiator
    /// sends it; the responder sends nothing before it has arrived).
    pub rtr: Option<Rtr>,
    /// The peer's private data, without RFC 6581's four bytes.
    pub peer_private_data: Vec<u8>,
}

/// Why the exchange failed (the driver closes the TCP connection).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SetupError {
    /// The peer's frame is not MPA, or not the one expected here.
    #[error("bad MPA frame: {0}")]
    Wire(#[from] WireError),
    /// A reply came to a responder, or a request to an initiator.
    #[error("MPA {0:?} frame where the other was expected")]
    WrongFrame(FrameKind),
    /// The peer wants markers, which oxrdma does not send.
    #[error("the peer asks for MPA markers, which oxrdma does not send")]
    Markers,
    /// Our private data is too long (512 bytes, 4 of them RFC 6581's).
    #[error("private data of {0} bytes is over MPA's limit")]
    PrivateData(usize),
    /// Revision 2 peer to peer with no ready-to-receive message both sides know.
    #[error("no ready-to-receive message both sides offer")]
    NoRtr,
    /// A call that does not fit the exchange's state.
    #[error("MPA exchange: {0}")]
    State(&'static str),
}

/// What the exchange has come to after the bytes given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SetupEvent {
    /// Nothing yet: more bytes are needed.
    Pending,
    /// Responder: a request came; answer with [`Setup::accept`] or [`Setup::reject`].
    Request {
        /// The initiator's private data, without RFC 6581's four bytes.
        private_data: Vec<u8>,
        /// Its IRD and ORD (revision 2), to check against what the application wants.
        ird: u16,
        /// See `ird`.
        ord: u16,
    },
    /// The connection is up with these terms; FPDUs follow.
    Established(Negotiated),
    /// Initiator: the responder refused, with its private data.
    Rejected {
        /// The responder's private data.
        private_data: Vec<u8>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Phase {
    /// Initiator: the request is written, the reply awaited.
    AwaitReply,
    /// Responder: the request awaited.
    AwaitRequest,
    /// Responder: the request shown, the application's answer awaited.
    Answer {
        peer: Peer,
    },
    Done,
}

/// What a peer's frame said.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Peer {
    crc: bool,
    revision: u8,
    enhanced: Option<EnhancedRepr>,
    private_data: Vec<u8>,
}

/// One side's MPA exchange.
#[derive(Debug)]
pub struct Setup {
    cfg: SetupConfig,
    phase: Phase,
    /// Bytes of the peer's frame read so far.
    inbound: Vec<u8>,
}

impl Setup {
    /// The initiator's side, and the request it writes first.
    pub fn initiator(cfg: SetupConfig) -> Result<(Setup, Vec<u8>), SetupError> {
        let enhanced = cfg.enhanced.then_some(EnhancedRepr {
            ird: cfg.ird,
            ord: cfg.ord,
            peer_to_peer: true,
            send_rtr: false,
            write_rtr: true,
            read_rtr: true,
        });
        let request = frame(
            FrameKind::Request,
            cfg.crc,
            false,
            enhanced,
            &cfg.private_data,
        )?;
        let s = Setup {
            cfg,
            phase: Phase::AwaitReply,
            inbound: Vec::new(),
        };
        Ok((s, request))
    }

    /// The responder's side: it reads first.
    pub fn responder(cfg: SetupConfig) -> Setup {
        Setup {
            cfg,
            phase: Phase::AwaitRequest,
            inbound: Vec::new(),
        }
    }

    /// Takes bytes read from the TCP stream. Returns what the exchange came to and how
    /// many of `bytes` it took: after `Established`, the rest are the first FPDUs'.
    pub fn feed(&mut self, bytes: &[u8]) -> Result<(SetupEvent, usize), SetupError> {
        let expect = match self.phase {
            Phase::AwaitReply => FrameKind::Reply,
            Phase::AwaitRequest => FrameKind::Request,
            _ => return Err(SetupError::State("no frame expected now")),
        };
        let had = self.inbound.len();
        self.inbound.extend_from_slice(bytes);
        let (f, len) = match MpaFrameRepr::parse(&self.inbound) {
            Err(WireError::Truncated { .. }) => return Ok((SetupEvent::Pending, bytes.len())),
            Err(e) => return Err(e.into()),
            Ok(got) => got,
        };
        let taken = len - had;
        if f.kind != expect {
            return Err(SetupError::WrongFrame(f.kind));
        }
        if f.markers && !f.rejected {
            return Err(SetupError::Markers);
        }
        let (peer, rejected) = (peer(&f)?, f.rejected);
        self.inbound = Vec::new();
        let event = match expect {
            FrameKind::Request => {
                let (ird, ord) = peer.enhanced.map_or((0, 0), |e| (e.ird, e.ord));
                let private_data = peer.private_data.clone();
                self.phase = Phase::Answer { peer };
                SetupEvent::Request {
                    private_data,
                    ird,
                    ord,
                }
            }
            FrameKind::Reply => {
                self.phase = Phase::Done;
                if rejected {
                    SetupEvent::Rejected {
                        private_data: peer.private_data,
                    }
                } else {
                    SetupEvent::Established(self.settle(&peer)?)
                }
            }
        };
        Ok((event, taken))
    }

    /// Responder: the private data its reply carries, chosen once the request is seen
    /// (in place of the configuration's).
    pub fn set_private_data(&mut self, private_data: Vec<u8>) {
        self.cfg.private_data = private_data;
    }

    /// Responder: accepts the request shown; returns the reply to write and the terms.
    pub fn accept(&mut self) -> Result<(Vec<u8>, Negotiated), SetupError> {
        let Phase::Answer { peer } = std::mem::replace(&mut self.phase, Phase::Done) else {
            return Err(SetupError::State("no request to accept"));
        };
        let terms = self.settle(&peer)?;
        let enhanced = (peer.enhanced.is_some() && self.cfg.enhanced).then(|| EnhancedRepr {
            ird: terms.ird,
            ord: terms.ord,
            peer_to_peer: terms.rtr.is_some(),
            send_rtr: terms.rtr == Some(Rtr::Send),
            write_rtr: terms.rtr == Some(Rtr::Write),
            read_rtr: terms.rtr == Some(Rtr::Read),
        });
        let reply = frame(
            FrameKind::Reply,
            terms.crc,
            false,
            enhanced,
            &self.cfg.private_data,
        )?;
        Ok((reply, terms))
    }

    /// Responder: refuses the request shown, with `private_data`; returns the reply to
    /// write (then the driver closes the connection).
    pub fn reject(&mut self, private_data: &[u8]) -> Result<Vec<u8>, SetupError> {
        let Phase::Answer { peer } = std::mem::replace(&mut self.phase, Phase::Done) else {
            return Err(SetupError::State("no request to reject"));
        };
        let enhanced = (peer.enhanced.is_some() && self.cfg.enhanced).then(EnhancedRepr::default);
        frame(FrameKind::Reply, self.cfg.crc, true, enhanced, private_data)
    }

    /// The terms with `peer` (the request, or the reply).
    fn settle(&self, peer: &Peer) -> Result<Negotiated, SetupError> {
        let cfg = &self.cfg;
        let (ird, mut ord, mut rtr) = (cfg.ird, cfg.ord, None);
        if let (Some(e), true) = (peer.enhanced, cfg.enhanced) {
            // Never issue more READs than the peer takes (each side keeps its own IRD).
            ord = ord.min(e.ird);
            // The initiator offered every message it can send; the responder picks one.
            if e.peer_to_peer {
                rtr = Some(if e.write_rtr {
                    Rtr::Write
                } else if e.read_rtr {
                    Rtr::Read
                } else if e.send_rtr {
                    Rtr::Send
                } else {
                    return Err(SetupError::NoRtr);
                });
            }
        }
        Ok(Negotiated {
            crc: cfg.crc || peer.crc,
            ird,
            ord,
            rtr,
            peer_private_data: peer.private_data.clone(),
        })
    }
}

/// What a peer's frame says, RFC 6581's bytes taken off its private data.
fn peer(f: &MpaFrameRepr<'_>) -> Result<Peer, SetupError> {
    let (enhanced, private_data) = if f.enhanced {
        let e = EnhancedRepr::parse(f.private_data)?;
        (Some(e), &f.private_data[EnhancedRepr::LEN..])
    } else {
        (None, f.private_data)
    };
    Ok(Peer {
        crc: f.crc,
        revision: f.revision,
        enhanced,
        private_data: private_data.to_vec(),
    })
}

/// A request or reply: revision 2 with `enhanced`'s bytes ahead of `private_data`.
fn frame(
    kind: FrameKind,
    crc: bool,
    rejected: bool,
    enhanced: Option<EnhancedRepr>,
    private_data: &[u8],
) -> Result<Vec<u8>, SetupError> {
    let mut pd = Vec::with_capacity(EnhancedRepr::LEN + private_data.len());
    if let Some(e) = enhanced {
        pd.resize(EnhancedRepr::LEN, 0);
        e.emit(&mut pd)?;
    }
    pd.extend_from_slice(private_data);
    if pd.len() > mpa::MAX_PRIVATE_DATA {
        return Err(SetupError::PrivateData(private_data.len()));
    }
    let f = MpaFrameRepr {
        kind,
        markers: false,
        crc,
        rejected,
        revision: if enhanced.is_some() { 2 } else { 1 },
        enhanced: enhanced.is_some(),
        private_data: &pd,
    };
    let mut out = vec![0u8; f.buffer_len()];
    f.emit(&mut out)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Runs both sides, the bytes between them cut after `cuts` bytes each time.
    fn exchange(
        a: SetupConfig,
        b: SetupConfig,
        cut: usize,
        accept: bool,
    ) -> Result<(SetupEvent, Option<Negotiated>), SetupError> {
        let (mut init, request) = Setup::initiator(a)?;
        let mut resp = Setup::responder(b);
        let cut = cut.max(1);
        let mut shown = None;
        for chunk in request.chunks(cut) {
            let (e, n) = resp.feed(chunk)?;
            assert_eq!(n, chunk.len(), "a request chunk is taken whole");
            if e != SetupEvent::Pending {
                shown = Some(e);
            }
        }
        assert!(
            matches!(shown, Some(SetupEvent::Request { .. })),
            "{shown:?}"
        );
        let (reply, theirs) = if accept {
            let (r, t) = resp.accept()?;
            (r, Some(t))
        } else {
            (resp.reject(b"no")?, None)
        };
        // The reply, then an FPDU's first bytes in the same read.
        let mut stream = reply.clone();
        stream.extend_from_slice(&[0, 4, 9, 9]);
        let mut at = 0;
        loop {
            let end = (at + cut).min(stream.len());
            let (e, n) = init.feed(&stream[at..end])?;
            at += n;
            if e != SetupEvent::Pending {
                assert_eq!(at, reply.len(), "the FPDU's bytes are left");
                return Ok((e, theirs));
            }
            assert!(at < stream.len(), "the reply never completed");
        }
    }

    #[test]
    fn defaults_agree() {
        let a = SetupConfig {
            private_data: b"hello".to_vec(),
            ird: 8,
            ord: 32,
            ..SetupConfig::default()
        };
        let (e, b) = exchange(a, SetupConfig::default(), 7, true).unwrap();
        let SetupEvent::Established(a) = e else {
            panic!("{e:?}")
        };
        let b = b.unwrap();
        assert!(a.crc && b.crc);
        // The initiator issues at most the 16 the responder takes.
        assert_eq!((a.ird, a.ord), (8, 16));
        assert_eq!(b.ord, 8);
        assert_eq!((a.rtr, b.rtr), (Some(Rtr::Write), Some(Rtr::Write)));
        assert_eq!(b.peer_private_data, b"hello");
    }

    #[test]
    fn crc_if_either_asks() {
        for (ca, cb) in [(false, false), (false, true), (true, false)] {
            let a = SetupConfig {
                crc: ca,
                ..SetupConfig::default()
            };
            let b = SetupConfig {
                crc: cb,
                ..SetupConfig::default()
            };
            let (e, theirs) = exchange(a, b, 3, true).unwrap();
            let SetupEvent::Established(ours) = e else {
                panic!("{e:?}")
            };
            assert_eq!(ours.crc, ca || cb);
            assert_eq!(theirs.unwrap().crc, ca || cb);
        }
    }

    #[test]
    fn revision_1_peers() {
        let a = SetupConfig {
            enhanced: false,
            ..SetupConfig::default()
        };
        let (e, b) = exchange(a, SetupConfig::default(), 64, true).unwrap();
        let SetupEvent::Established(a) = e else {
            panic!("{e:?}")
        };
        assert_eq!((a.rtr, b.unwrap().rtr), (None, None));
    }

    #[test]
    fn rejected_with_private_data() {
        let (e, _) = exchange(SetupConfig::default(), SetupConfig::default(), 5, false).unwrap();
        assert_eq!(
            e,
            SetupEvent::Rejected {
                private_data: b"no".to_vec()
            }
        );
    }

    #[test]
    fn bad_frames_refused() {
        let mut r = Setup::responder(SetupConfig::default());
        assert!(r.feed(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").is_err());
        // A request asking for markers.
        let mut f = Setup::initiator(SetupConfig::default()).unwrap().1;
        f[16] |= 0x80;
        let mut r = Setup::responder(SetupConfig::default());
        assert_eq!(r.feed(&f), Err(SetupError::Markers));
        // A request where a reply is expected.
        let (mut i, req) = Setup::initiator(SetupConfig::default()).unwrap();
        assert_eq!(
            i.feed(&req),
            Err(SetupError::WrongFrame(FrameKind::Request))
        );
        // Private data over the limit.
        let big = SetupConfig {
            private_data: vec![0; 510],
            ..SetupConfig::default()
        };
        assert_eq!(
            Setup::initiator(big).err(),
            Some(SetupError::PrivateData(510))
        );
        // Accepting twice.
        let mut r = Setup::responder(SetupConfig::default());
        assert!(r.accept().is_err());
    }

    proptest! {
        #[test]
        fn any_cut_any_terms(cut in 1usize..64, ca in any::<bool>(), cb in any::<bool>(),
                             ird_a in 1u16..100, ord_a in 1u16..100,
                             ird_b in 1u16..100, ord_b in 1u16..100,
                             pd in proptest::collection::vec(any::<u8>(), 0..300)) {
            let a = SetupConfig { crc: ca, ird: ird_a, ord: ord_a, enhanced: true, private_data: pd.clone() };
            let b = SetupConfig { crc: cb, ird: ird_b, ord: ord_b, enhanced: true, private_data: Vec::new() };
            let (e, theirs) = exchange(a, b, cut, true).unwrap();
            let SetupEvent::Established(ours) = e else { panic!("{e:?}") };
            let theirs = theirs.unwrap();
            // Neither side issues more READs than the other takes.
            prop_assert!(ours.ord <= theirs.ird);
            prop_assert!(theirs.ord <= ours.ird);
            prop_assert_eq!(theirs.peer_private_data, pd);
            prop_assert_eq!(ours.crc, theirs.crc);
        }

        #[test]
        fn any_bytes_fail_cleanly(b in proptest::collection::vec(any::<u8>(), 0..600)) {
            let mut r = Setup::responder(SetupConfig::default());
            let _ = r.feed(&b);
            let (mut i, _) = Setup::initiator(SetupConfig::default()).unwrap();
            let _ = i.feed(&b);
        }
    }
}
