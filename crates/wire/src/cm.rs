//! The communication manager's messages (IBA chapter 12), the class data of a CM MAD: REQ,
//! MRA, REJ, REP, RTU, DREQ, DREP, SIDR_REQ and SIDR_REP as plain values, read from and
//! written to the 232 bytes after the MAD header. Offsets below are from that data's start.
//! Reserved bits are written as zero and not kept.

use crate::error::{need, Result};
use crate::field::{set_u16, set_u24, set_u32, set_u64, u16_at, u24_at, u32_at, u64_at};
use crate::mad::MAD_DATA_LEN;

/// CM attribute IDs (the MAD header's attribute ID says which message the data holds).
pub mod attr {
    /// Connection Request (REQ).
    pub const REQ: u16 = 0x0010;
    /// Message Receipt Acknowledgement (MRA): asks the peer to wait longer for the reply.
    pub const MRA: u16 = 0x0011;
    /// Reject (REJ).
    pub const REJ: u16 = 0x0012;
    /// Reply to a connection request (REP).
    pub const REP: u16 = 0x0013;
    /// Ready To Use (RTU): the active side's acknowledgement of a REP.
    pub const RTU: u16 = 0x0014;
    /// Disconnection Request (DREQ).
    pub const DREQ: u16 = 0x0015;
    /// Disconnection Reply (DREP).
    pub const DREP: u16 = 0x0016;
    /// Service ID Resolution Request (SIDR_REQ).
    pub const SIDR_REQ: u16 = 0x0017;
    /// Service ID Resolution Response (SIDR_REP).
    pub const SIDR_REP: u16 = 0x0018;
    /// Load Alternate Path (LAP).
    pub const LAP: u16 = 0x0019;
    /// Alternate Path Response (APR).
    pub const APR: u16 = 0x001a;
}

/// One path of a REQ (primary or alternate): 44 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CmPath {
    /// Local Port LID (16 bits); the permissive LID 0xffff on RoCE.
    pub local_lid: u16,
    /// Remote Port LID (16 bits); the permissive LID 0xffff on RoCE.
    pub remote_lid: u16,
    /// Local Port GID: on RoCEv2 the active side's IP address in GID form.
    pub local_gid: [u8; 16],
    /// Remote Port GID: on RoCEv2 the passive side's IP address in GID form.
    pub remote_gid: [u8; 16],
    /// 20 bits.
    pub flow_label: u32,
    /// 6 bits.
    pub packet_rate: u8,
    /// Traffic Class of the GRH (on RoCEv2 the IP DSCP and ECN bits).
    pub traffic_class: u8,
    /// Hop Limit of the GRH (on RoCEv2 the IP TTL).
    pub hop_limit: u8,
    /// 4 bits.
    pub sl: u8,
    /// Subnet Local: the remote port is on the local subnet (no GRH needed on IB).
    pub subnet_local: bool,
    /// 5 bits.
    pub local_ack_timeout: u8,
}

impl CmPath {
    const LEN: usize = 44;

    fn parse(b: &[u8]) -> CmPath {
        let mut local_gid = [0; 16];
        local_gid.copy_from_slice(&b[4..20]);
        let mut remote_gid = [0; 16];
        remote_gid.copy_from_slice(&b[20..36]);
        let w = u32_at(b, 36);
        CmPath {
            local_lid: u16_at(b, 0),
            remote_lid: u16_at(b, 2),
            local_gid,
            remote_gid,
            flow_label: w >> 12,
            packet_rate: (w & 0x3f) as u8,
            traffic_class: b[40],
            hop_limit: b[41],
            sl: b[42] >> 4,
            subnet_local: b[42] & 0x08 != 0,
            local_ack_timeout: b[43] >> 3,
        }
    }

    fn emit(&self, b: &mut [u8]) {
        set_u16(b, 0, self.local_lid);
        set_u16(b, 2, self.remote_lid);
        b[4..20].copy_from_slice(&self.local_gid);
        b[20..36].copy_from_slice(&self.remote_gid);
        set_u32(
            b,
            36,
            (self.flow_label & 0xf_ffff) << 12 | u32::from(self.packet_rate & 0x3f),
        );
        b[40] = self.traffic_class;
        b[41] = self.hop_limit;
        b[42] = (self.sl & 0xf) << 4 | u8::from(self.subnet_local) << 3;
        b[43] = (self.local_ack_timeout & 0x1f) << 3;
    }
}

/// Connection request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Req {
    /// Local Communication ID: the sender's identifier for this connection.
    pub local_comm_id: u32,
    /// 24 bits (ECE).
    pub vendor_id: u32,
    /// Service ID the connection is for (the listener it addresses).
    pub service_id: u64,
    /// Local CA GUID: the sending channel adapter's node GUID.
    pub local_ca_guid: u64,
    /// Local Q_Key of the sender's QP.
    pub local_qkey: u32,
    /// 24 bits.
    pub local_qpn: u32,
    /// Responder Resources: RDMA READs and atomics the sender accepts in flight as responder.
    pub responder_resources: u8,
    /// Local EE context number (EECN), 24 bits; used by Reliable Datagram only.
    pub local_eecn: u32,
    /// Initiator Depth: RDMA READs and atomics the sender keeps in flight as requester.
    pub initiator_depth: u8,
    /// Remote EE context number (EECN), 24 bits; used by Reliable Datagram only.
    pub remote_eecn: u32,
    /// 5 bits.
    pub remote_cm_response_timeout: u8,
    /// 2 bits: 0 RC, 1 UC, 3 see `extended_transport`.
    pub transport: u8,
    /// End-to-End Flow Control: the sender's responder generates AETH credits.
    pub e2e_flow_control: bool,
    /// 24 bits.
    pub starting_psn: u32,
    /// 5 bits.
    pub local_cm_response_timeout: u8,
    /// 3 bits.
    pub retry_count: u8,
    /// Partition Key (P_Key) for the connection.
    pub pkey: u16,
    /// 4 bits (IBA encoding: 3 = 1024).
    pub path_mtu: u8,
    /// RDC Exists: a Reliable Datagram channel already exists (RD only).
    pub rdc_exists: bool,
    /// 3 bits.
    pub rnr_retry_count: u8,
    /// 4 bits.
    pub max_cm_retries: u8,
    /// SRQ: the sender's QP takes receives from a shared receive queue.
    pub srq: bool,
    /// 3 bits.
    pub extended_transport: u8,
    /// Primary path.
    pub primary: CmPath,
    /// Alternate path, all zero when there is none.
    pub alternate: CmPath,
    /// Private Data (92 bytes), passed to the passive side's consumer.
    pub private_data: [u8; Req::PRIVATE_DATA],
}

impl Req {
    /// Length of a REQ's private data in bytes.
    pub const PRIVATE_DATA: usize = 92;

    /// Reads a REQ from the 232 bytes of CM MAD data `d`.
    pub fn parse(d: &[u8]) -> Result<Req> {
        need("CM REQ", d, MAD_DATA_LEN)?;
        let mut private_data = [0; Self::PRIVATE_DATA];
        private_data.copy_from_slice(&d[140..232]);
        Ok(Req {
            local_comm_id: u32_at(d, 0),
            vendor_id: u24_at(d, 5),
            service_id: u64_at(d, 8),
            local_ca_guid: u64_at(d, 16),
            local_qkey: u32_at(d, 28),
            local_qpn: u24_at(d, 32),
            responder_resources: d[35],
            local_eecn: u24_at(d, 36),
            initiator_depth: d[39],
            remote_eecn: u24_at(d, 40),
            remote_cm_response_timeout: d[43] >> 3,
            transport: (d[43] >> 1) & 3,
            e2e_flow_control: d[43] & 1 != 0,
            starting_psn: u24_at(d, 44),
            local_cm_response_timeout: d[47] >> 3,
            retry_count: d[47] & 7,
            pkey: u16_at(d, 48),
            path_mtu: d[50] >> 4,
            rdc_exists: d[50] & 0x08 != 0,
            rnr_retry_count: d[50] & 7,
            max_cm_retries: d[51] >> 4,
            srq: d[51] & 0x08 != 0,
            extended_transport: d[51] & 7,
            primary: CmPath::parse(&d[52..52 + CmPath::LEN]),
            alternate: CmPath::parse(&d[96..96 + CmPath::LEN]),
            private_data,
        })
    }

    /// Writes this REQ into the 232 bytes of CM MAD data `d`, reserved bits zero.
    pub fn emit(&self, d: &mut [u8]) -> Result<()> {
        need("CM REQ", d, MAD_DATA_LEN)?;
        d[..MAD_DATA_LEN].fill(0);
        set_u32(d, 0, self.local_comm_id);
        set_u24(d, 5, self.vendor_id);
        set_u64(d, 8, self.service_id);
        set_u64(d, 16, self.local_ca_guid);
        set_u32(d, 28, self.local_qkey);
        set_u24(d, 32, self.local_qpn);
        d[35] = self.responder_resources;
        set_u24(d, 36, self.local_eecn);
        d[39] = self.initiator_depth;
        set_u24(d, 40, self.remote_eecn);
        d[43] = (self.remote_cm_response_timeout & 0x1f) << 3
            | (self.transport & 3) << 1
            | u8::from(self.e2e_flow_control);
        set_u24(d, 44, self.starting_psn);
        d[47] = (self.local_cm_response_timeout & 0x1f) << 3 | (self.retry_count & 7);
        set_u16(d, 48, self.pkey);
        d[50] = (self.path_mtu & 0xf) << 4
            | u8::from(self.rdc_exists) << 3
            | (self.rnr_retry_count & 7);
        d[51] = (self.max_cm_retries & 0xf) << 4
            | u8::from(self.srq) << 3
            | (self.extended_transport & 7);
        self.primary.emit(&mut d[52..52 + CmPath::LEN]);
        self.alternate.emit(&mut d[96..96 + CmPath::LEN]);
        d[140..232].copy_from_slice(&self.private_data);
        Ok(())
    }
}

/// Connection reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rep {
    /// Local Communication ID: the replying (passive) side's identifier.
    pub local_comm_id: u32,
    /// Remote Communication ID: the REQ's Local Communication ID, echoed.
    pub remote_comm_id: u32,
    /// Local Q_Key of the replying side's QP.
    pub local_qkey: u32,
    /// 24 bits.
    pub local_qpn: u32,
    /// Local EE context number (EECN), 24 bits; used by Reliable Datagram only.
    pub local_eecn: u32,
    /// 24 bits.
    pub starting_psn: u32,
    /// ECE vendor ID, carried in the reserved bytes after the QPN, EECN and PSN.
    pub vendor_id: u32,
    /// Responder Resources: RDMA READs and atomics the replier accepts in flight as responder.
    pub responder_resources: u8,
    /// Initiator Depth: RDMA READs and atomics the replier keeps in flight as requester.
    pub initiator_depth: u8,
    /// 5 bits.
    pub target_ack_delay: u8,
    /// 2 bits.
    pub failover_accepted: u8,
    /// End-to-End Flow Control: the replier's responder generates AETH credits.
    pub e2e_flow_control: bool,
    /// 3 bits.
    pub rnr_retry_count: u8,
    /// SRQ: the replier's QP takes receives from a shared receive queue.
    pub srq: bool,
    /// Local CA GUID: the replying channel adapter's node GUID.
    pub local_ca_guid: u64,
    /// Private Data (196 bytes), passed to the active side's consumer.
    pub private_data: [u8; Rep::PRIVATE_DATA],
}

impl Rep {
    /// Length of a REP's private data in bytes.
    pub const PRIVATE_DATA: usize = 196;

    /// Reads a REP from the 232 bytes of CM MAD data `d`.
    pub fn parse(d: &[u8]) -> Result<Rep> {
        need("CM REP", d, MAD_DATA_LEN)?;
        let mut private_data = [0; Self::PRIVATE_DATA];
        private_data.copy_from_slice(&d[36..232]);
        Ok(Rep {
            local_comm_id: u32_at(d, 0),
            remote_comm_id: u32_at(d, 4),
            local_qkey: u32_at(d, 8),
            local_qpn: u24_at(d, 12),
            local_eecn: u24_at(d, 16),
            starting_psn: u24_at(d, 20),
            vendor_id: u32::from(d[15]) << 16 | u32::from(d[19]) << 8 | u32::from(d[23]),
            responder_resources: d[24],
            initiator_depth: d[25],
            target_ack_delay: d[26] >> 3,
            failover_accepted: (d[26] >> 1) & 3,
            e2e_flow_control: d[26] & 1 != 0,
            rnr_retry_count: d[27] >> 5,
            srq: d[27] & 0x10 != 0,
            local_ca_guid: u64_at(d, 28),
            private_data,
        })
    }

    /// Writes this REP into the 232 bytes of CM MAD data `d`, reserved bits zero.
    pub fn emit(&self, d: &mut [u8]) -> Result<()> {
        need("CM REP", d, MAD_DATA_LEN)?;
        d[..MAD_DATA_LEN].fill(0);
        set_u32(d, 0, self.local_comm_id);
        set_u32(d, 4, self.remote_comm_id);
        set_u32(d, 8, self.local_qkey);
        set_u24(d, 12, self.local_qpn);
        d[15] = (self.vendor_id >> 16) as u8;
        set_u24(d, 16, self.local_eecn);
        d[19] = (self.vendor_id >> 8) as u8;
        set_u24(d, 20, self.starting_psn);
        d[23] = self.vendor_id as u8;
        d[24] = self.responder_resources;
        d[25] = self.initiator_depth;
        d[26] = (self.target_ack_delay & 0x1f) << 3
            | (self.failover_accepted & 3) << 1
            | u8::from(self.e2e_flow_control);
        d[27] = (self.rnr_retry_count & 7) << 5 | u8::from(self.srq) << 4;
        set_u64(d, 28, self.local_ca_guid);
        d[36..232].copy_from_slice(&self.private_data);
        Ok(())
    }
}

/// Connection reject.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rej {
    /// Local Communication ID of the rejecting side.
    pub local_comm_id: u32,
    /// Remote Communication ID: the peer's identifier for the connection being rejected.
    pub remote_comm_id: u32,
    /// 2 bits: 0 REQ, 1 REP, 2 other.
    pub message_rejected: u8,
    /// 7 bits.
    pub ari_length: u8,
    /// Reason code (see the associated constants).
    pub reason: u16,
    /// Additional Rejection Information (ARI), of which `ari_length` bytes are meaningful.
    pub ari: [u8; 72],
    /// Private Data (148 bytes).
    pub private_data: [u8; Rej::PRIVATE_DATA],
}

impl Rej {
    /// Length of a REJ's private data in bytes.
    pub const PRIVATE_DATA: usize = 148;
    /// The passive side has no resources for the connection.
    pub const NO_RESOURCES: u16 = 3;
    /// The active side gave up on its REQ (its ARI is its node GUID).
    pub const TIMEOUT: u16 = 4;
    /// No listener for the service ID.
    pub const INVALID_SERVICE_ID: u16 = 8;
    /// A REQ for a connection in timewait, or a duplicate.
    pub const STALE_CONNECTION: u16 = 10;
    /// `rdma_reject` and the like.
    pub const CONSUMER_DEFINED: u16 = 28;

    /// Reads a REJ from the 232 bytes of CM MAD data `d`.
    pub fn parse(d: &[u8]) -> Result<Rej> {
        need("CM REJ", d, MAD_DATA_LEN)?;
        let mut ari = [0; 72];
        ari.copy_from_slice(&d[12..84]);
        let mut private_data = [0; Self::PRIVATE_DATA];
        private_data.copy_from_slice(&d[84..232]);
        Ok(Rej {
            local_comm_id: u32_at(d, 0),
            remote_comm_id: u32_at(d, 4),
            message_rejected: d[8] >> 6,
            ari_length: d[9] >> 1,
            reason: u16_at(d, 10),
            ari,
            private_data,
        })
    }

    /// Writes this REJ into the 232 bytes of CM MAD data `d`, reserved bits zero.
    pub fn emit(&self, d: &mut [u8]) -> Result<()> {
        need("CM REJ", d, MAD_DATA_LEN)?;
        d[..MAD_DATA_LEN].fill(0);
        set_u32(d, 0, self.local_comm_id);
        set_u32(d, 4, self.remote_comm_id);
        d[8] = (self.message_rejected & 3) << 6;
        d[9] = (self.ari_length & 0x7f) << 1;
        set_u16(d, 10, self.reason);
        d[12..84].copy_from_slice(&self.ari);
        d[84..232].copy_from_slice(&self.private_data);
        Ok(())
    }
}

/// A message that names both comm IDs and carries private data after `at` bytes: RTU,
/// DREP (at 8), DREQ (its remote QPN at 8, data at 12), MRA (its two fields at 8 and 9,
/// data at 10).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommIds {
    /// Local Communication ID of the sender.
    pub local_comm_id: u32,
    /// Remote Communication ID: the peer's identifier for the connection.
    pub remote_comm_id: u32,
    /// DREQ: the remote QPN (24 bits). MRA: message MRAed (2 bits) << 8 | service timeout
    /// (5 bits). RTU, DREP: 0.
    pub extra: u32,
    /// The private data: 224 bytes for RTU and DREP, the first 220 for DREQ and 222 for
    /// MRA (the rest zero).
    pub private_data: [u8; CommIds::PRIVATE_DATA],
}

impl CommIds {
    /// Length of the private data buffer: the largest of the four (RTU, DREP).
    pub const PRIVATE_DATA: usize = 224;

    fn data_at(attr_id: u16) -> usize {
        match attr_id {
            attr::DREQ => 12,
            attr::MRA => 10,
            _ => 8,
        }
    }

    /// The message of `attr_id` (RTU, DREP, DREQ or MRA) in `d`.
    pub fn parse(attr_id: u16, d: &[u8]) -> Result<CommIds> {
        need("CM message", d, MAD_DATA_LEN)?;
        let extra = match attr_id {
            attr::DREQ => u24_at(d, 8),
            attr::MRA => u32::from(d[8] >> 6) << 8 | u32::from(d[9] >> 3),
            _ => 0,
        };
        let at = Self::data_at(attr_id);
        let mut private_data = [0; Self::PRIVATE_DATA];
        private_data[..MAD_DATA_LEN - at].copy_from_slice(&d[at..MAD_DATA_LEN]);
        Ok(CommIds {
            local_comm_id: u32_at(d, 0),
            remote_comm_id: u32_at(d, 4),
            extra,
            private_data,
        })
    }

    /// Writes the message of `attr_id` (RTU, DREP, DREQ or MRA) into `d`, reserved bits zero.
    pub fn emit(&self, attr_id: u16, d: &mut [u8]) -> Result<()> {
        need("CM message", d, MAD_DATA_LEN)?;
        d[..MAD_DATA_LEN].fill(0);
        set_u32(d, 0, self.local_comm_id);
        set_u32(d, 4, self.remote_comm_id);
        match attr_id {
            attr::DREQ => set_u24(d, 8, self.extra),
            attr::MRA => {
                d[8] = ((self.extra >> 8) as u8 & 3) << 6;
                d[9] = (self.extra as u8 & 0x1f) << 3;
            }
            _ => {}
        }
        let at = Self::data_at(attr_id);
        d[at..MAD_DATA_LEN].copy_from_slice(&self.private_data[..MAD_DATA_LEN - at]);
        Ok(())
    }
}

/// Service ID resolution request (UD: find the QPN and Q_Key behind a service ID).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SidrReq {
    /// Request ID: chosen by the requester, echoed by the SIDR_REP.
    pub request_id: u32,
    /// Partition Key (P_Key) the requester will use.
    pub pkey: u16,
    /// Service ID to resolve.
    pub service_id: u64,
    /// Private Data (216 bytes).
    pub private_data: [u8; SidrReq::PRIVATE_DATA],
}

impl SidrReq {
    /// Length of a SIDR_REQ's private data in bytes.
    pub const PRIVATE_DATA: usize = 216;

    /// Reads a SIDR_REQ from the 232 bytes of CM MAD data `d`.
    pub fn parse(d: &[u8]) -> Result<SidrReq> {
        need("CM SIDR_REQ", d, MAD_DATA_LEN)?;
        let mut private_data = [0; Self::PRIVATE_DATA];
        private_data.copy_from_slice(&d[16..232]);
        Ok(SidrReq {
            request_id: u32_at(d, 0),
            pkey: u16_at(d, 4),
            service_id: u64_at(d, 8),
            private_data,
        })
    }

    /// Writes this SIDR_REQ into the 232 bytes of CM MAD data `d`, reserved bits zero.
    pub fn emit(&self, d: &mut [u8]) -> Result<()> {
        need("CM SIDR_REQ", d, MAD_DATA_LEN)?;
        d[..MAD_DATA_LEN].fill(0);
        set_u32(d, 0, self.request_id);
        set_u16(d, 4, self.pkey);
        set_u64(d, 8, self.service_id);
        d[16..232].copy_from_slice(&self.private_data);
        Ok(())
    }
}

/// Service ID resolution reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SidrRep {
    /// Request ID of the SIDR_REQ this answers.
    pub request_id: u32,
    /// 0 valid; 1 service ID not supported; 2 rejected; 3 no QP; 4 redirect; 5 version.
    pub status: u8,
    /// Additional Information Length: bytes of `info` that are meaningful.
    pub info_length: u8,
    /// 24 bits.
    pub qpn: u32,
    /// Service ID that was resolved.
    pub service_id: u64,
    /// Q_Key of the UD QP serving the service.
    pub qkey: u32,
    /// Additional Information (72 bytes), of which `info_length` are meaningful.
    pub info: [u8; 72],
    /// Private Data (136 bytes).
    pub private_data: [u8; SidrRep::PRIVATE_DATA],
}

impl SidrRep {
    /// Length of a SIDR_REP's private data in bytes.
    pub const PRIVATE_DATA: usize = 136;

    /// Reads a SIDR_REP from the 232 bytes of CM MAD data `d`.
    pub fn parse(d: &[u8]) -> Result<SidrRep> {
        need("CM SIDR_REP", d, MAD_DATA_LEN)?;
        let mut info = [0; 72];
        info.copy_from_slice(&d[24..96]);
        let mut private_data = [0; Self::PRIVATE_DATA];
        private_data.copy_from_slice(&d[96..232]);
        Ok(SidrRep {
            request_id: u32_at(d, 0),
            status: d[4],
            info_length: d[5],
            qpn: u24_at(d, 8),
            service_id: u64_at(d, 12),
            qkey: u32_at(d, 20),
            info,
            private_data,
        })
    }

    /// Writes this SIDR_REP into the 232 bytes of CM MAD data `d`, reserved bits zero.
    pub fn emit(&self, d: &mut [u8]) -> Result<()> {
        need("CM SIDR_REP", d, MAD_DATA_LEN)?;
        d[..MAD_DATA_LEN].fill(0);
        set_u32(d, 0, self.request_id);
        d[4] = self.status;
        d[5] = self.info_length;
        set_u24(d, 8, self.qpn);
        set_u64(d, 12, self.service_id);
        set_u32(d, 20, self.qkey);
        d[24..96].copy_from_slice(&self.info);
        d[96..232].copy_from_slice(&self.private_data);
        Ok(())
    }
}

/// Any CM message, by the MAD's attribute ID. Held by value: the wire crate allocates
/// nothing, and every message is about one MAD's size.
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(clippy::large_enum_variant)] // only `Other` is small
pub enum CmMessage {
    /// Connection Request (REQ).
    Req(Req),
    /// Connection Reply (REP).
    Rep(Rep),
    /// Reject (REJ).
    Rej(Rej),
    /// RTU, DREQ, DREP or MRA, with its attribute ID.
    CommIds(u16, CommIds),
    /// Service ID Resolution Request (SIDR_REQ).
    SidrReq(SidrReq),
    /// Service ID Resolution Response (SIDR_REP).
    SidrRep(SidrRep),
    /// LAP, APR or an attribute the CM does not define: its ID (answered as unsupported).
    Other(u16),
}

impl CmMessage {
    /// The message the CM MAD data `d` (232 bytes) holds, by the header's `attr_id`.
    pub fn parse(attr_id: u16, d: &[u8]) -> Result<CmMessage> {
        Ok(match attr_id {
            attr::REQ => CmMessage::Req(Req::parse(d)?),
            attr::REP => CmMessage::Rep(Rep::parse(d)?),
            attr::REJ => CmMessage::Rej(Rej::parse(d)?),
            attr::RTU | attr::DREQ | attr::DREP | attr::MRA => {
                CmMessage::CommIds(attr_id, CommIds::parse(attr_id, d)?)
            }
            attr::SIDR_REQ => CmMessage::SidrReq(SidrReq::parse(d)?),
            attr::SIDR_REP => CmMessage::SidrRep(SidrRep::parse(d)?),
            other => CmMessage::Other(other),
        })
    }

    /// The attribute ID the MAD header carries for this message.
    pub fn attr_id(&self) -> u16 {
        match self {
            CmMessage::Req(_) => attr::REQ,
            CmMessage::Rep(_) => attr::REP,
            CmMessage::Rej(_) => attr::REJ,
            CmMessage::CommIds(a, _) | CmMessage::Other(a) => *a,
            CmMessage::SidrReq(_) => attr::SIDR_REQ,
            CmMessage::SidrRep(_) => attr::SIDR_REP,
        }
    }

    /// Writes the message into the 232 bytes of MAD data `d` (nothing for `Other`).
    pub fn emit(&self, d: &mut [u8]) -> Result<()> {
        match self {
            CmMessage::Req(m) => m.emit(d),
            CmMessage::Rep(m) => m.emit(d),
            CmMessage::Rej(m) => m.emit(d),
            CmMessage::CommIds(a, m) => m.emit(*a, d),
            CmMessage::SidrReq(m) => m.emit(d),
            CmMessage::SidrRep(m) => m.emit(d),
            CmMessage::Other(_) => Ok(()),
        }
    }

    /// The message's name, as IBA calls it.
    pub fn name(&self) -> &'static str {
        match self.attr_id() {
            attr::REQ => "REQ",
            attr::MRA => "MRA",
            attr::REJ => "REJ",
            attr::REP => "REP",
            attr::RTU => "RTU",
            attr::DREQ => "DREQ",
            attr::DREP => "DREP",
            attr::SIDR_REQ => "SIDR_REQ",
            attr::SIDR_REP => "SIDR_REP",
            attr::LAP => "LAP",
            attr::APR => "APR",
            _ => "CM?",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_message_round_trips_and_a_short_buffer_is_an_error() {
        let mut d = [0u8; MAD_DATA_LEN];
        for (i, b) in d.iter_mut().enumerate() {
            *b = (i * 7 + 3) as u8;
        }
        for a in [
            attr::REQ,
            attr::REP,
            attr::REJ,
            attr::RTU,
            attr::DREQ,
            attr::DREP,
            attr::MRA,
            attr::SIDR_REQ,
            attr::SIDR_REP,
        ] {
            let m = CmMessage::parse(a, &d).unwrap();
            assert_eq!(m.attr_id(), a);
            let mut out = [0u8; MAD_DATA_LEN];
            m.emit(&mut out).unwrap();
            // What was written parses to the same message (reserved bits dropped).
            assert_eq!(CmMessage::parse(a, &out).unwrap(), m, "{}", m.name());
            assert!(CmMessage::parse(a, &d[..MAD_DATA_LEN - 1]).is_err());
        }
        assert_eq!(
            CmMessage::parse(attr::LAP, &d).unwrap(),
            CmMessage::Other(attr::LAP)
        );
    }
}
