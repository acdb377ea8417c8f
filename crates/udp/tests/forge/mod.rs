//! Packets written by hand through a raw socket, dressed as Linux rxe's kernel sends them
//! (any source address: a forger's too), and a device with one RC QP connected to a peer
//! the test plays: what the tests of foreign and hostile packets share.

#![allow(dead_code)] // Each test file uses some.

use oxrdma_core::{
    Access, Counter, Counters, Gid, QpCap, QpInitAttr, QpType, RecvWr, RxDrop, Sge, SharedBuffer,
    WorkCompletion,
};
use oxrdma_sim::pair::{connect_attrs, PairOptions};
use oxrdma_wire::{
    checksum, icrc, AethRepr, BthRepr, ExtHeaders, Opcode, PacketRepr, Psn, Syndrome,
};
use rustix::net::SendFlags;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::device::Device;

pub const PEER_QPN: u32 = 0x11;
pub const PEER_PSN: u32 = 0x00ab_cdef;
pub const MY_PSN: u32 = 0x0012_3456;
/// rxe's source port for a QP pair: 0xC000 | hash (any value in that range will do).
pub const RXE_SPORT: u16 = 0xC0AB;

/// How one packet is dressed on the wire.
#[derive(Clone, Copy)]
pub struct Shape {
    pub src: IpAddr,
    pub udp_checksum: bool,
    pub corrupt_icrc: bool,
    pub dport: u16,
}

/// The IP header (as rxe's kernel writes it) + UDP header + `roce` (BTH..ICRC), with the
/// ICRC computed over exactly these headers.
pub fn frame(shape: Shape, dst: IpAddr, roce: &mut [u8]) -> Vec<u8> {
    let udp_len = (8 + roce.len()) as u16;
    let mut udp = [0u8; 8];
    udp[0..2].copy_from_slice(&RXE_SPORT.to_be_bytes());
    udp[2..4].copy_from_slice(&shape.dport.to_be_bytes());
    udp[4..6].copy_from_slice(&udp_len.to_be_bytes());
    let (mut ip_hdr, addrs) = match (shape.src, dst) {
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            let mut h = vec![0u8; 40];
            // Version 6, traffic class 0x12, flow label 0xabcde.
            h[0..4].copy_from_slice(&(6u32 << 28 | 0x12 << 20 | 0xabcde).to_be_bytes());
            h[4..6].copy_from_slice(&udp_len.to_be_bytes());
            h[6] = 17;
            h[7] = 255;
            h[8..24].copy_from_slice(&s.octets());
            h[24..40].copy_from_slice(&d.octets());
            let addrs = h[8..40].to_vec();
            (h, addrs)
        }
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let mut h = vec![0u8; 20];
            h[0] = 0x45;
            h[1] = 0x12; // TOS
            h[2..4].copy_from_slice(&(20 + udp_len).to_be_bytes());
            h[4..6].copy_from_slice(&0x1234u16.to_be_bytes()); // Identification
            h[6] = 0x40; // DF
            h[8] = 255; // TTL
            h[9] = 17;
            h[12..16].copy_from_slice(&s.octets());
            h[16..20].copy_from_slice(&d.octets());
            checksum::fill_ipv4(&mut h);
            let addrs = h[12..20].to_vec();
            (h, addrs)
        }
        _ => unreachable!("one family per test"),
    };
    let mut ip_udp = ip_hdr.clone();
    ip_udp.extend_from_slice(&udp);
    icrc::fill(&ip_udp, roce).unwrap();
    if shape.corrupt_icrc {
        *roce.last_mut().unwrap() ^= 0x5a;
    }
    if shape.udp_checksum {
        let mut datagram = udp.to_vec();
        datagram.extend_from_slice(roce);
        let (src, dst) = addrs.split_at(addrs.len() / 2);
        let c = checksum::udp(src, dst, &datagram);
        udp[6..8].copy_from_slice(&c.to_be_bytes());
    }
    ip_hdr.extend_from_slice(&udp);
    ip_hdr.extend_from_slice(roce);
    ip_hdr
}

/// Sends one packet through a raw socket that carries its own IP header.
pub fn send_raw(raw: &OwnedFd, shape: Shape, dst: IpAddr, packet: &PacketRepr<'_>) {
    let mut roce = vec![0u8; packet.buffer_len()];
    packet.emit(&mut roce).unwrap();
    let bytes = frame(shape, dst, &mut roce);
    // The port is ignored for raw sockets; the address picks the route.
    rustix::net::sendto(raw, &bytes, SendFlags::empty(), &SocketAddr::new(dst, 0))
        .expect("raw send");
}

pub fn send_only(dest_qpn: u32, psn: u32, payload: &[u8]) -> PacketRepr<'_> {
    PacketRepr {
        bth: BthRepr {
            opcode: Opcode::RC_SEND_ONLY,
            solicited: false,
            migreq: false,
            pkey: 0xffff,
            fecn: false,
            becn: false,
            dest_qpn,
            ack_req: true,
            psn: Psn::new(psn),
            selective_repeat: false,
        },
        ext: ExtHeaders::default(),
        payload,
    }
}

pub fn ack(dest_qpn: u32, psn: u32, msn: u32) -> PacketRepr<'static> {
    let mut p = send_only(dest_qpn, psn, &[]);
    p.bth.opcode = Opcode::RC_ACKNOWLEDGE;
    p.bth.ack_req = false;
    p.ext.aeth = Some(AethRepr {
        syndrome: Syndrome::Ack { credits: 31 },
        msn,
    });
    p
}

pub struct Host {
    pub dev: Device,
    pub cq: u32,
    pub qpn: u32,
    pub buf: Arc<SharedBuffer>,
    pub lkey: u32,
    pub rkey: u32,
    pub iova: u64,
}

impl Host {
    /// A device on `me` with one RC QP connected to (`peer`, PEER_QPN) and receives posted.
    pub fn open(me: IpAddr, peer: IpAddr) -> Host {
        let mut dev = Device::open(me, [7; 32]).expect("open device");
        let e = &mut dev.engine;
        let pd = e.alloc_pd().unwrap();
        let cq = e.create_cq(64).unwrap();
        let init = QpInitAttr {
            qp_type: QpType::Rc,
            send_cq: cq,
            recv_cq: cq,
            cap: QpCap::default(),
            sq_sig_all: true,
            srq: None,
        };
        let qpn = e.create_qp(pd, &init).unwrap();
        let buf = Arc::new(SharedBuffer::new(1 << 16).unwrap());
        let mr = e.reg_mr(pd, buf.clone(), None, Access::ALL).unwrap();
        let (lkey, rkey, iova) = (mr.lkey, mr.rkey, mr.iova);
        let o = PairOptions {
            mtu: oxrdma_core::Mtu::Mtu1024,
            // 1 s: a request of the victim's that the test leaves unanswered a while must
            // not run out of retries meanwhile.
            timeout: 18,
            ..Default::default()
        };
        for attr in connect_attrs(&o, Gid::from(peer), PEER_QPN, PEER_PSN, MY_PSN) {
            e.modify_qp(qpn, &attr).unwrap();
        }
        for i in 0..8u64 {
            let sges = vec![Sge {
                addr: iova + i * 1024,
                length: 1024,
                lkey,
            }];
            e.post_recv(
                qpn,
                RecvWr {
                    wr_id: i,
                    sges: sges.into(),
                },
            )
            .unwrap();
        }
        Host {
            dev,
            cq,
            qpn,
            buf,
            lkey,
            rkey,
            iova,
        }
    }

    /// Drives the device until `done` holds (2 s at most); returns the completions seen.
    pub fn drive_until(&mut self, done: &dyn Fn(&Host, usize) -> bool) -> Vec<WorkCompletion> {
        self.drive_until_for(done, 2)
    }

    /// [`Self::drive_until`], for at most `secs` seconds.
    pub fn drive_until_for(
        &mut self,
        done: &dyn Fn(&Host, usize) -> bool,
        secs: u64,
    ) -> Vec<WorkCompletion> {
        let deadline = Instant::now() + Duration::from_secs(secs);
        let mut wcs = Vec::new();
        while !done(self, wcs.len()) && Instant::now() < deadline {
            self.dev.poll().unwrap();
            wcs.extend(self.dev.engine.poll_cq(self.cq, 64).unwrap());
            self.dev.wait(Duration::from_millis(1)).unwrap();
        }
        wcs
    }

    /// The device's counters, the link's ICRC drops included.
    pub fn dev_counters(&self) -> Counters {
        let mut c = self.dev.engine.counters();
        c[Counter::BadIcrc] += self.dev.link.stats().rx_bad_icrc;
        c
    }

    pub fn recv_one(&mut self) -> WorkCompletion {
        let wcs = self.drive_until(&|_, n| n > 0);
        assert_eq!(
            wcs.len(),
            1,
            "expected one completion; drops: {}",
            self.dev.rx_drops()
        );
        wcs[0]
    }

    pub fn drops(&self, why: RxDrop) -> u64 {
        self.dev.engine.stats().rx_drops.get(why)
    }
}
