//! What `oxrdma decode` says of a connection-manager MAD (a UD SEND to QP1): the message,
//! its transaction and comm IDs, and the fields a reader of a CM exchange looks for.

use oxrdma_wire::cm::CmMessage;
use oxrdma_wire::mad::{MadHeader, CLASS_CM, MAD_HEADER_LEN, MAD_LEN};
use oxrdma_wire::PacketRepr;
use serde::Serialize;
use std::fmt::Write;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Cm {
    /// REQ, REP, RTU, REJ, DREQ, DREP, MRA, SIDR_REQ, SIDR_REP, ...
    pub msg: &'static str,
    pub tid: u64,
    /// Local comm ID (SIDR: the request ID).
    pub local_comm_id: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remote_comm_id: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service_id: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub qpn: Option<u32>,
    /// The starting PSN a REQ or REP names.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_psn: Option<u32>,
    /// REJ reason, SIDR_REP status.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<u16>,
    /// An RDMA CM REQ's CMA header and service ID: `src_ip:port > dst_ip:port`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rdma_cm: Option<String>,
}

/// What an RDMA CM REQ says in its service ID and CMA header.
fn rdma_cm(sid: u64, private_data: &[u8]) -> Option<String> {
    let (_, port) = oxrdma_wire::cma::split_service_id(sid)?;
    let h = oxrdma_wire::cma::CmaHeader::parse(private_data).ok()??;
    let sock = |ip, port| std::net::SocketAddr::new(ip, port);
    Some(format!(
        "{} > {}",
        sock(h.src, h.src_port),
        sock(h.dst, port)
    ))
}

/// The CM message `p` carries, if it is a CM MAD to QP1.
pub fn summary(p: &PacketRepr<'_>) -> Option<Cm> {
    if p.bth.dest_qpn != 1 || p.payload.len() != MAD_LEN {
        return None;
    }
    let h = MadHeader::parse(p.payload).ok()?;
    if h.mgmt_class != CLASS_CM {
        return None;
    }
    let m = CmMessage::parse(h.attr_id, &p.payload[MAD_HEADER_LEN..]).ok()?;
    let mut c = Cm {
        msg: m.name(),
        tid: h.transaction_id,
        local_comm_id: 0,
        remote_comm_id: None,
        service_id: None,
        qpn: None,
        start_psn: None,
        reason: None,
        rdma_cm: None,
    };
    match &m {
        CmMessage::Req(r) => {
            c.local_comm_id = r.local_comm_id;
            (c.service_id, c.qpn, c.start_psn) =
                (Some(r.service_id), Some(r.local_qpn), Some(r.starting_psn));
            c.rdma_cm = rdma_cm(r.service_id, &r.private_data);
        }
        CmMessage::Rep(r) => {
            (c.local_comm_id, c.remote_comm_id) = (r.local_comm_id, Some(r.remote_comm_id));
            (c.qpn, c.start_psn) = (Some(r.local_qpn), Some(r.starting_psn));
        }
        CmMessage::Rej(r) => {
            (c.local_comm_id, c.remote_comm_id) = (r.local_comm_id, Some(r.remote_comm_id));
            c.reason = Some(r.reason);
        }
        CmMessage::CommIds(_, r) => {
            (c.local_comm_id, c.remote_comm_id) = (r.local_comm_id, Some(r.remote_comm_id));
        }
        CmMessage::SidrReq(r) => {
            c.local_comm_id = r.request_id;
            c.service_id = Some(r.service_id);
        }
        CmMessage::SidrRep(r) => {
            c.local_comm_id = r.request_id;
            (c.service_id, c.qpn) = (Some(r.service_id), Some(r.qpn));
            c.reason = Some(u16::from(r.status));
        }
        CmMessage::Other(_) => {}
    }
    Some(c)
}

/// The text form: ` CM REQ tid=0x… comm=0x… sid=0x… qpn=0x… start_psn=…`.
pub fn text(c: &Cm) -> String {
    let mut s = format!(
        " CM {} tid={:#x} comm={:#010x}",
        c.msg, c.tid, c.local_comm_id
    );
    if let Some(r) = c.remote_comm_id {
        let _ = write!(s, " remote_comm={r:#010x}");
    }
    if let Some(v) = c.service_id {
        let _ = write!(s, " sid={v:#x}");
    }
    if let Some(v) = c.qpn {
        let _ = write!(s, " cm_qpn={v:#08x}");
    }
    if let Some(v) = c.start_psn {
        let _ = write!(s, " start_psn={v}");
    }
    if let Some(v) = c.reason {
        let _ = write!(s, " reason={v}");
    }
    if let Some(v) = &c.rdma_cm {
        let _ = write!(s, " rdma_cm=[{v}]");
    }
    s
}
