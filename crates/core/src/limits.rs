//! The device's limits in one place: what one packet and one message may hold, and the
//! `ibv_device_attr` limits the engine enforces.

/// The largest packet the engine writes: headers, a 4096-byte payload, pad and ICRC.
pub const MAX_PACKET: usize = 4096 + 64;

/// The largest message: 2^31 bytes, as the RETH's DMA length and IBA allow.
pub(crate) const MAX_MESSAGE: u64 = 1 << 31;

/// Device limits (`struct ibv_device_attr`, the fields oxrdma enforces).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceAttr {
    /// Max queue pairs.
    pub max_qp: u32,
    /// Max work requests in one send or receive queue.
    pub max_qp_wr: u32,
    /// Max scatter/gather elements in one send or receive WR.
    pub max_sge: u32,
    /// Max completion queues.
    pub max_cq: u32,
    /// Max depth of one CQ, in completions.
    pub max_cqe: u32,
    /// Max memory regions.
    pub max_mr: u32,
    /// Largest memory region, in bytes.
    pub max_mr_size: u64,
    /// Max protection domains.
    pub max_pd: u32,
    /// Max outstanding RDMA READ/atomic requests per QP, initiated (`max_rd_atomic`) and
    /// received (`max_dest_rd_atomic`) alike.
    pub max_qp_rd_atom: u8,
    /// Max inline data in one send WR, in bytes.
    pub max_inline_data: u32,
    /// The atomicity reported to programs (`atomic_cap`): HCA, among this device's own
    /// operations (the engine performs them as CPU atomics, so GLOB would also hold).
    pub atomic_cap: AtomicCap,
    /// Max memory windows.
    pub max_mw: u32,
    /// Max shared receive queues.
    pub max_srq: u32,
    /// Max work requests in one SRQ.
    pub max_srq_wr: u32,
    /// Max scatter/gather elements in one SRQ receive WR.
    pub max_srq_sge: u32,
    /// Max address handles.
    pub max_ah: u32,
}

impl Default for DeviceAttr {
    fn default() -> Self {
        DeviceAttr {
            max_qp: 16_384,
            max_qp_wr: 16_384,
            max_sge: 32,
            max_cq: 16_384,
            max_cqe: 1 << 20,
            max_mr: 1 << 16,
            max_mr_size: 1 << 40,
            max_pd: 1 << 16,
            // As rxe (and so what perftest asks for).
            max_qp_rd_atom: 128,
            max_inline_data: 256,
            atomic_cap: AtomicCap::Hca,
            max_mw: 1 << 16,
            max_srq: 1 << 16,
            max_srq_wr: 16_384,
            max_srq_sge: 27,
            max_ah: 1 << 16,
        }
    }
}

/// `enum ibv_atomic_cap`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum AtomicCap {
    /// Atomic operations are not supported (`IBV_ATOMIC_NONE`).
    None = 0,
    /// Atomics are atomic among this device's atomic operations (`IBV_ATOMIC_HCA`).
    Hca = 1,
    /// Atomics are atomic with respect to every other access too, CPUs and other devices
    /// (`IBV_ATOMIC_GLOB`).
    Glob = 2,
}

/// What remote peers may make a device spend (ReDMArk's A4 and A5), beside the
/// [`DeviceAttr`] limits on what the process itself creates. A peer is a source address:
/// one hostile host cannot take what the others need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerLimits {
    /// Connection requests (and SIDR requests) from one address the application has not
    /// answered yet, over all listeners; more are dropped and the peer asks again, as
    /// when a listener's backlog is full.
    pub cm_pending_per_peer: u32,
    /// Passive connections from one address at once (requested, connected; not those in
    /// timewait); more are rejected with "no resources". Bounds the QPs a program that
    /// accepts every request spends on one peer.
    pub cm_conns_per_peer: u32,
    /// Bytes of duplicate READs a QP answers again per second, beyond as many bytes as it
    /// answered new READs (a burst of that size may come at once). A requester asks again
    /// only what it lost; a flood of copies gets no more than this back.
    pub dup_read_bytes_per_sec: u64,
    /// Bytes of packets that came ahead of a gap all the device's QPs keep together (each
    /// keeps 32 MiB at most); beyond it a packet is not kept and its requester sends it
    /// again.
    pub reorder_bytes: usize,
}

impl Default for PeerLimits {
    fn default() -> Self {
        PeerLimits {
            cm_pending_per_peer: 256,
            // A quarter of the device's QPs.
            cm_conns_per_peer: 4096,
            dup_read_bytes_per_sec: 16 << 20,
            reorder_bytes: 256 << 20,
        }
    }
}

/// Sets limits from `name=value` pairs separated by commas, as `OXRDMA_LIMITS` holds them
/// (`max_qp=1024,cm_conns_per_peer=64,dup_read_bytes_per_sec=4M`): the names are the
/// fields of [`DeviceAttr`] (the process's own objects) and [`PeerLimits`] (what peers may
/// make it spend); a value may end in K, M or G (powers of 1024). Anything else is an
/// error that names what is wrong.
pub fn apply_limits(
    text: &str,
    attr: &mut DeviceAttr,
    peer: &mut PeerLimits,
) -> Result<(), String> {
    for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (name, value) = pair
            .split_once('=')
            .ok_or_else(|| format!("`{pair}` is not name=value"))?;
        let (name, value) = (name.trim(), value.trim());
        let n = parse_size(value).ok_or_else(|| format!("{name}: `{value}` is not a count"))?;
        let small = |max: u64| {
            u32::try_from(n)
                .ok()
                .filter(|&v| v > 0 && u64::from(v) <= max)
                .ok_or_else(|| format!("{name}: {n} is not between 1 and {max}"))
        };
        match name {
            "max_qp" => attr.max_qp = small(1 << 24)?,
            "max_qp_wr" => attr.max_qp_wr = small(1 << 20)?,
            "max_cq" => attr.max_cq = small(1 << 24)?,
            "max_cqe" => attr.max_cqe = small(1 << 24)?,
            "max_mr" => attr.max_mr = small(1 << 24)?,
            "max_mr_size" => attr.max_mr_size = n.max(1),
            "max_pd" => attr.max_pd = small(1 << 24)?,
            "max_mw" => attr.max_mw = small(1 << 24)?,
            "max_srq" => attr.max_srq = small(1 << 24)?,
            "max_ah" => attr.max_ah = small(1 << 24)?,
            "cm_pending_per_peer" => peer.cm_pending_per_peer = small(u32::MAX.into())?,
            "cm_conns_per_peer" => peer.cm_conns_per_peer = small(u32::MAX.into())?,
            "dup_read_bytes_per_sec" => peer.dup_read_bytes_per_sec = n,
            "reorder_bytes" => {
                peer.reorder_bytes =
                    usize::try_from(n).map_err(|_| format!("{name}: {n} is too large"))?
            }
            _ => {
                return Err(format!(
                    "no limit named `{name}` (there are max_qp, max_qp_wr, max_cq, max_cqe, \
                     max_mr, max_mr_size, max_pd, max_mw, max_srq, max_ah, \
                     cm_pending_per_peer, cm_conns_per_peer, dup_read_bytes_per_sec, \
                     reorder_bytes)"
                ))
            }
        }
    }
    Ok(())
}

/// `123`, `64K`, `16M`, `1G` (powers of 1024).
fn parse_size(s: &str) -> Option<u64> {
    let (digits, shift) = match s.as_bytes().last()? {
        b'k' | b'K' => (&s[..s.len() - 1], 10),
        b'm' | b'M' => (&s[..s.len() - 1], 20),
        b'g' | b'G' => (&s[..s.len() - 1], 30),
        _ => (s, 0),
    };
    let n: u64 = digits.parse().ok()?;
    n.checked_mul(1 << shift)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_are_set_by_name_and_bad_ones_are_refused_by_name() {
        let (mut attr, mut peer) = (DeviceAttr::default(), PeerLimits::default());
        apply_limits(
            " max_qp=64, cm_conns_per_peer = 8,dup_read_bytes_per_sec=4M,reorder_bytes=1g,",
            &mut attr,
            &mut peer,
        )
        .unwrap();
        assert_eq!(attr.max_qp, 64);
        assert_eq!(peer.cm_conns_per_peer, 8);
        assert_eq!(peer.dup_read_bytes_per_sec, 4 << 20);
        assert_eq!(peer.reorder_bytes, 1 << 30);
        assert_eq!(attr.max_mr, DeviceAttr::default().max_mr, "the rest stays");
        for (bad, says) in [
            ("max_qp", "not name=value"),
            ("max_qps=4", "no limit named `max_qps`"),
            ("max_qp=0", "not between 1 and"),
            ("max_qp=99999999999", "not between 1 and"),
            ("max_qp=12Q", "not a count"),
            ("cm_pending_per_peer=-1", "not a count"),
            ("dup_read_bytes_per_sec=99999999999G", "not a count"),
        ] {
            let e = apply_limits(bad, &mut attr, &mut peer).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
