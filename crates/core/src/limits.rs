//! The device's limits in one place: what one packet and one message may hold, and the
//! `ibv_device_attr` limits the engine enforces.

/// The largest packet the engine writes: headers, a 4096-byte payload, pad and ICRC.
pub const MAX_PACKET: usize = 4096 + 64;

/// The largest message: 2^31 bytes, as the RETH's DMA length and IBA allow.
pub(crate) const MAX_MESSAGE: u64 = 1 << 31;

/// Device limits (`struct ibv_device_attr`, the fields oxrdma enforces).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceAttr {
    pub max_qp: u32,
    pub max_qp_wr: u32,
    pub max_sge: u32,
    pub max_cq: u32,
    pub max_cqe: u32,
    pub max_mr: u32,
    pub max_mr_size: u64,
    pub max_pd: u32,
    pub max_qp_rd_atom: u8,
    pub max_inline_data: u32,
    /// Atomics are atomic with respect to the host's CPUs too (they are CPU atomics).
    pub atomic_cap: AtomicCap,
    pub max_mw: u32,
    pub max_srq: u32,
    pub max_srq_wr: u32,
    pub max_srq_sge: u32,
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
    None = 0,
    Hca = 1,
    Glob = 2,
}
