//! The RDMA CM's conventions on top of the IB CM (what librdmacm and the Linux kernel's CMA
//! put in a REQ): service IDs built from a port space and an IP port, the 36-byte CMA header
//! that opens a REQ's (and SIDR_REQ's) private data, and the flow label of an IP-addressed
//! connection, from which RoCEv2 derives its data QPs' UDP source port.

use crate::error::{need, Result};
use crate::field::{set_u16, u16_at};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// `RDMA_PS_TCP`: connected QPs addressed by IP (rping, perftest -R, rsockets).
pub const PS_TCP: u16 = 0x0106;
/// `RDMA_PS_UDP`: UD QPs resolved with SIDR.
pub const PS_UDP: u16 = 0x0111;
/// `RDMA_PS_IB`: either QP type.
pub const PS_IB: u16 = 0x013f;
/// `RDMA_PS_IPOIB`.
pub const PS_IPOIB: u16 = 0x0002;

/// The IB service ID of `port` in `port_space` (`RDMA_IB_IP_PS_*` | port).
pub fn service_id(port_space: u16, port: u16) -> u64 {
    u64::from(port_space) << 16 | u64::from(port)
}

/// The port space and port a service ID names, if it is one of the RDMA CM's (the upper
/// 32 bits zero).
pub fn split_service_id(sid: u64) -> Option<(u16, u16)> {
    (sid >> 32 == 0).then_some(((sid >> 16) as u16, sid as u16))
}

/// The CMA header a REQ's private data opens with (36 bytes): who connects to whom.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmaHeader {
    /// The active side's port.
    pub src_port: u16,
    /// The active side's IP address.
    pub src: IpAddr,
    /// The passive side's (listener's) IP address.
    pub dst: IpAddr,
}

impl CmaHeader {
    /// Header length in bytes.
    pub const LEN: usize = 36;

    /// Reads the header at the start of a REQ's private data; `None` for a version or IP
    /// version other than the CMA's 0 and 4/6, or mixed address families.
    pub fn parse(b: &[u8]) -> Result<Option<CmaHeader>> {
        need("CMA header", b, Self::LEN)?;
        if b[0] != 0 {
            return Ok(None);
        }
        let addr = |at: usize, v6: bool| -> IpAddr {
            let mut a = [0u8; 16];
            a.copy_from_slice(&b[at..at + 16]);
            if v6 {
                IpAddr::V6(Ipv6Addr::from(a))
            } else {
                IpAddr::V4(Ipv4Addr::new(a[12], a[13], a[14], a[15]))
            }
        };
        let v6 = match b[1] >> 4 {
            4 => false,
            6 => true,
            _ => return Ok(None),
        };
        Ok(Some(CmaHeader {
            src_port: u16_at(b, 2),
            src: addr(4, v6),
            dst: addr(20, v6),
        }))
    }

    /// Writes the header into the first 36 bytes of `b`; both addresses must be of one
    /// family (IPv4 as 12 zero bytes and the address, as Linux writes it).
    pub fn emit(&self, b: &mut [u8]) -> Result<()> {
        need("CMA header", b, Self::LEN)?;
        let put = |b: &mut [u8], a: IpAddr| match a {
            IpAddr::V4(v4) => {
                b[..12].fill(0);
                b[12..16].copy_from_slice(&v4.octets());
            }
            IpAddr::V6(v6) => b.copy_from_slice(&v6.octets()),
        };
        b[0] = 0;
        b[1] = if self.src.is_ipv4() { 0x40 } else { 0x60 };
        set_u16(b, 2, self.src_port);
        put(&mut b[4..20], self.src);
        put(&mut b[20..36], self.dst);
        Ok(())
    }
}

/// The flow label Linux gives an IP-addressed RoCE connection (when the application set
/// none): from the active side's port and the listener's.
pub fn flow_label(src_port: u16, dst_port: u16) -> u32 {
    (u32::from(src_port) * 31 + u32::from(dst_port)) & 0xf_ffff
}

/// The UDP source port RoCEv2 derives from a flow label (what rxe uses for a QP whose path
/// has one, instead of its QPN hash).
pub fn udp_sport(flow_label: u32) -> u16 {
    let fl = flow_label & 0xf_ffff;
    0xc000 | ((fl & 0x3fff) ^ (fl >> 14)) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_ids_are_the_kernels() {
        // RDMA_IB_IP_PS_TCP | 7174 (rping's port), as rping's REQ carries.
        assert_eq!(service_id(PS_TCP, 7174), 0x0106_1c06);
        assert_eq!(service_id(PS_UDP, 1), 0x0111_0001);
        assert_eq!(service_id(PS_IB, 18515), 0x013f_4853);
        assert_eq!(split_service_id(0x0106_1c06), Some((PS_TCP, 7174)));
        assert_eq!(split_service_id(0x1234_0000_0106_1c06), None);
    }

    #[test]
    fn the_cma_header_of_rpings_req_round_trips() {
        // rping_cm's REQ: version 0, IPv4, port 40354, 10.77.0.2 -> 10.77.0.1.
        let mut b = [0u8; 36];
        b[..4].copy_from_slice(&[0x00, 0x40, 0x9d, 0xa2]);
        b[16..20].copy_from_slice(&[10, 77, 0, 2]);
        b[32..36].copy_from_slice(&[10, 77, 0, 1]);
        let h = CmaHeader::parse(&b).unwrap().unwrap();
        assert_eq!(h.src_port, 40354);
        assert_eq!(h.src, IpAddr::from([10, 77, 0, 2]));
        assert_eq!(h.dst, IpAddr::from([10, 77, 0, 1]));
        let mut out = [0xffu8; 36];
        h.emit(&mut out).unwrap();
        assert_eq!(out, b);
        b[0] = 1;
        assert_eq!(CmaHeader::parse(&b).unwrap(), None, "another CMA version");
        assert!(CmaHeader::parse(&b[..35]).is_err());
    }

    #[test]
    fn flow_labels_give_the_captures_data_ports() {
        // rping and two perftest -R runs: the REQ's flow label, then the data QPs' source
        // port in the captures.
        for (src, dst, fl, sport) in [
            (40354, 7174, 0x332a4, 62120),
            (41940, 18515, 0x41eff, 57071),
            (50657, 18515, 0x83e92, 65202),
        ] {
            assert_eq!(flow_label(src, dst), fl);
            assert_eq!(udp_sport(fl), sport);
        }
    }
}
