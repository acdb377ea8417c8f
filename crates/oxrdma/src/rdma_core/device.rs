//! An rdma-core device: opened by name, its limits and its RoCE v2 GIDs.

use super::verbs::{check, last_error, query_gid_ex, verbs};
use crate::error::{Error, Result};
use oxrdma_core::{AtomicCap, DeviceAttr, DeviceTransport, Gid, Mtu};
use oxrdma_verbs_abi::*;
use std::ffi::CStr;
use std::net::IpAddr;
use std::ptr::NonNull;

/// The port every verb here names: RoCE devices have one per netdev.
pub(crate) const PORT: u8 = 1;

/// `enum ibv_gid_type`'s RoCE v2 (what `_ibv_query_gid_ex` reports).
const GID_TYPE_ROCE_V2: u32 = 2;

/// An open device (`ibv_open_device`), closed when the last object made on it goes.
#[derive(Debug)]
pub(crate) struct Device {
    ctx: NonNull<ibv_context>,
    pub name: String,
    pub attr: DeviceAttr,
    pub active_mtu: Mtu,
    /// Its transport (`ibv_device`'s transport type; IB for one this does not know).
    pub transport: DeviceTransport,
    /// The GID table by index, RoCE v2 entries only (the others are the zero GID).
    pub gids: Vec<Gid>,
}

// SAFETY: libibverbs contexts may be used from any thread; the pointer is only read.
unsafe impl Send for Device {}
// SAFETY: as above: every verb called through it is thread-safe in rdma-core.
unsafe impl Sync for Device {}

impl Device {
    /// Walks the devices rdma-core sees (`ibv_get_device_list`), giving each one's name
    /// and handle to `f` until it returns Some; the list is freed after.
    fn each<T>(
        mut f: impl FnMut(&CStr, *mut ibv_device) -> Option<Result<T>>,
    ) -> Result<Option<T>> {
        let v = verbs()?;
        let mut n = 0;
        // SAFETY: `n` is writable; the list is freed below.
        let list = unsafe { (v.ibv_get_device_list)(&mut n) };
        if list.is_null() {
            return Err(last_error("ibv_get_device_list"));
        }
        let mut found = None;
        for i in 0..usize::try_from(n).unwrap_or(0) {
            // SAFETY: the list holds `n` device pointers.
            let dev = unsafe { *list.add(i) };
            // SAFETY: a device of the list; its name is a C string it owns.
            let name = unsafe { CStr::from_ptr((v.ibv_get_device_name)(dev)) };
            found = f(name, dev);
            if found.is_some() {
                break;
            }
        }
        // SAFETY: the list `ibv_get_device_list` returned, freed once; a context opened
        // from it outlives it.
        unsafe { (v.ibv_free_device_list)(list) };
        found.transpose()
    }

    /// The names of the devices rdma-core sees.
    pub fn names() -> Result<Vec<String>> {
        let mut names = Vec::new();
        Self::each::<()>(|name, _| {
            names.push(name.to_string_lossy().into_owned());
            None
        })?;
        Ok(names)
    }

    /// Opens the device `name`.
    pub fn open(name: &str) -> Result<Device> {
        let v = verbs()?;
        let found = Self::each(|this, dev| {
            (this.to_bytes() == name.as_bytes()).then(|| {
                // SAFETY: a device of the list, read and opened before the list is freed.
                let (ctx, transport) = unsafe { ((v.ibv_open_device)(dev), (*dev).transport_type) };
                let ctx = NonNull::new(ctx).ok_or_else(|| last_error("ibv_open_device"))?;
                Ok((ctx, transport))
            })
        })?;
        let (ctx, transport) =
            found.ok_or_else(|| Error::NoRdmaCore(format!("no rdma-core device named {name}")))?;
        let transport =
            DeviceTransport::from_transport_type(transport).unwrap_or(DeviceTransport::Ib);
        // Closed by Drop if a query fails.
        let mut dev = Device {
            ctx,
            name: name.to_string(),
            attr: DeviceAttr::default(),
            active_mtu: Mtu::Mtu1024,
            transport,
            gids: Vec::new(),
        };
        dev.query()?;
        Ok(dev)
    }

    /// The device (of those rdma-core sees) whose GID table has `ip` as a RoCE v2 GID.
    pub fn open_by_ip(ip: IpAddr) -> Result<Device> {
        let want = Gid::from(ip);
        for name in Self::names()? {
            let dev = Self::open(&name)?;
            if dev.gids.contains(&want) {
                return Ok(dev);
            }
        }
        Err(Error::NoRdmaCore(format!(
            "no rdma-core device has {ip} among its RoCE v2 GIDs"
        )))
    }

    pub fn ctx(&self) -> *mut ibv_context {
        self.ctx.as_ptr()
    }

    /// The device's limits, its port's MTU and its GID table.
    fn query(&mut self) -> Result<()> {
        let v = verbs()?;
        // SAFETY: all-zero bytes are a valid value of these plain C structs.
        let mut a: ibv_device_attr = unsafe { std::mem::zeroed() };
        // SAFETY: an open context and a writable struct.
        check("ibv_query_device", unsafe {
            (v.ibv_query_device)(self.ctx(), &mut a)
        })?;
        self.attr = device_attr(&a);
        let mut p = ibv_port_attr::default();
        // SAFETY: as above; the struct is at least as large as any version of it.
        check("ibv_query_port", unsafe {
            (v.ibv_query_port)(self.ctx(), PORT, &mut p)
        })?;
        self.active_mtu = Mtu::from_ibv(p.active_mtu).unwrap_or(Mtu::Mtu1024);
        let len = usize::try_from(p.gid_tbl_len).unwrap_or(0).min(256);
        self.gids = (0..len).map(|i| self.roce_v2_gid(i)).collect();
        Ok(())
    }

    /// The GID at `index` if it is a RoCE v2 one, else the zero GID.
    fn roce_v2_gid(&self, index: usize) -> Gid {
        if let Some(f) = query_gid_ex() {
            // SAFETY: all-zero bytes are a valid `ibv_gid_entry`.
            let mut e: ibv_gid_entry = unsafe { std::mem::zeroed() };
            let size = std::mem::size_of::<ibv_gid_entry>();
            // SAFETY: an open context and a writable entry of the size passed.
            let rc = unsafe { f(self.ctx(), u32::from(PORT), index as u32, &mut e, 0, size) };
            return if rc == 0 && e.gid_type == GID_TYPE_ROCE_V2 {
                Gid(e.gid.raw)
            } else {
                Gid::default()
            };
        }
        let Ok(v) = verbs() else {
            return Gid::default();
        };
        let mut g = ibv_gid::default();
        // SAFETY: an open context and a writable GID.
        let rc = unsafe { (v.ibv_query_gid)(self.ctx(), PORT, index as i32, &mut g) };
        let path = format!(
            "/sys/class/infiniband/{}/ports/{PORT}/gid_attrs/types/{index}",
            self.name
        );
        let v2 = std::fs::read_to_string(path).is_ok_and(|t| t.trim() == "RoCE v2");
        if rc == 0 && v2 {
            Gid(g.raw)
        } else {
            Gid::default()
        }
    }

    /// The index of the RoCE v2 GID that sends to `dest` by default: of `dest`'s family and
    /// scope, else of its family (IPv4 ones first), else the first.
    pub fn gid_index_for(&self, dest: Gid) -> u8 {
        let v4 = dest.ip().is_ipv4();
        let used = |g: &Gid| *g != Gid::default();
        let family = |g: &Gid| used(g) && g.ip().is_ipv4() == v4;
        let at = self
            .gids
            .iter()
            .position(|g| family(g) && g.is_link_local() == dest.is_link_local());
        let at = at.or_else(|| self.gids.iter().position(family));
        let at = at.or_else(|| self.gids.iter().position(used));
        at.unwrap_or(0) as u8
    }

    /// `index` names a RoCE v2 GID of the port: what a RoCE QP or AH may send from (an
    /// IB or RoCE v1 entry, as rxe's index 0, is refused by the provider with a bare
    /// EINVAL; this says why).
    pub fn check_sgid(&self, index: u8) -> Result<()> {
        match self.gids.get(usize::from(index)) {
            Some(g) if *g != Gid::default() => Ok(()),
            _ => Err(oxrdma_core::VerbsError::InvalidArgument(
                "the source GID index is not a RoCE v2 GID of the device (Context::gid_index_for finds one)",
            )
            .into()),
        }
    }

    /// The main GID: its first RoCE v2 IPv4 one, else its first global one, else the first.
    pub fn main_gid(&self) -> Gid {
        let used: Vec<Gid> = self
            .gids
            .iter()
            .copied()
            .filter(|g| *g != Gid::default())
            .collect();
        oxrdma_core::main_gid(&used)
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        if let Ok(v) = verbs() {
            // SAFETY: opened by `open`, closed once, after every object made on it (each
            // holds the device).
            unsafe { (v.ibv_close_device)(self.ctx()) };
        }
    }
}

/// The limits of `ibv_device_attr` in oxrdma's terms (negative counts as 0).
fn device_attr(a: &ibv_device_attr) -> DeviceAttr {
    let n = |v: i32| u32::try_from(v).unwrap_or(0);
    DeviceAttr {
        max_qp: n(a.max_qp),
        max_qp_wr: n(a.max_qp_wr),
        max_sge: n(a.max_sge),
        max_cq: n(a.max_cq),
        max_cqe: n(a.max_cqe),
        max_mr: n(a.max_mr),
        max_mr_size: a.max_mr_size,
        max_pd: n(a.max_pd),
        max_qp_rd_atom: u8::try_from(a.max_qp_rd_atom).unwrap_or(u8::MAX),
        // Not in ibv_device_attr: what the QP is made with says (`QpCap`).
        max_inline_data: DeviceAttr::default().max_inline_data,
        atomic_cap: match a.atomic_cap {
            0 => AtomicCap::None,
            1 => AtomicCap::Hca,
            _ => AtomicCap::Glob,
        },
        max_mw: n(a.max_mw),
        max_srq: n(a.max_srq),
        max_srq_wr: n(a.max_srq_wr),
        max_srq_sge: n(a.max_srq_sge),
        max_ah: n(a.max_ah),
    }
}
