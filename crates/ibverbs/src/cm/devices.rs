//! The devices RDMA CM ids live on: each opened once for the process (the one
//! `ibv_context` every id of it shares, as `id->verbs`, and that `rdma_get_devices`
//! lists), with one protection domain the library allocates (`id->pd`). Kept open until
//! the process ends, as librdmacm keeps them.

use crate::abi::{ibv_context, ibv_pd};
use crate::device::devices;
use oxrdma::config::Target;
use std::ffi::c_int;
use std::net::IpAddr;
use std::sync::Mutex;

/// An open device: its context and the library's PD (pointers kept as addresses: they
/// are the program's to use from any thread).
#[derive(Debug, Clone, Copy)]
pub struct CmDevice {
    pub verbs: usize,
    pub pd: usize,
}

impl CmDevice {
    pub fn verbs(self) -> *mut ibv_context {
        self.verbs as *mut ibv_context
    }
    pub fn pd(self) -> *mut ibv_pd {
        self.pd as *mut ibv_pd
    }
}

static OPENED: Mutex<Vec<Option<CmDevice>>> = Mutex::new(Vec::new());

/// Device `i`, opened on first use.
fn open(i: usize) -> Result<CmDevice, c_int> {
    let list = devices();
    let d = list.get(i).ok_or(libc::ENODEV)?;
    let mut opened = OPENED.lock().unwrap_or_else(|p| p.into_inner());
    opened.resize(list.len(), None);
    if let Some(c) = opened[i] {
        return Ok(c);
    }
    let dev = std::ptr::from_ref(&d.ibv).cast_mut();
    // SAFETY: `dev` is one of our devices.
    let verbs = unsafe { crate::open::open_device(dev) };
    if verbs.is_null() {
        return Err(crate::errno::last_errno().unwrap_or(libc::ENODEV));
    }
    // SAFETY: `verbs` was just opened.
    let pd = unsafe { crate::pd::alloc_pd(verbs) };
    if pd.is_null() {
        return Err(libc::ENOMEM);
    }
    let c = CmDevice {
        verbs: verbs as usize,
        pd: pd as usize,
    };
    opened[i] = Some(c);
    Ok(c)
}

/// The device for an id bound or resolved from `ip`: the one on that address (or on the
/// interface that has it; a loopback address: the loopback device), else the first
/// (which takes the wildcard address).
pub fn device_for(ip: Option<IpAddr>) -> Result<CmDevice, c_int> {
    let list = devices();
    let on = |ip: IpAddr| {
        let iface = oxrdma::interfaces::interface_with(ip);
        list.iter().position(|d| match &d.addr {
            Target::Address(a) => *a == ip,
            Target::Interface(n) => iface.as_ref().is_some_and(|i| &i.name == n && !i.loopback),
            Target::Loopback => ip.is_loopback(),
            Target::Iwarp(a) => *a == ip,
        })
    };
    let i = ip
        .filter(|ip| !ip.is_unspecified())
        .and_then(on)
        .unwrap_or(0);
    open(i)
}

/// Whether a device sits on loopback (configured, or on a host with no other interface).
pub fn on_loopback() -> bool {
    devices().iter().any(|d| match &d.addr {
        Target::Loopback => true,
        Target::Address(a) | Target::Iwarp(a) => a.is_loopback(),
        Target::Interface(_) => false,
    })
}

/// Every device, opened (`rdma_get_devices`).
pub fn all() -> Result<Vec<CmDevice>, c_int> {
    (0..devices().len()).map(open).collect()
}

/// Whether any device is configured (an event channel needs one: ENODEV otherwise).
pub fn any() -> bool {
    !devices().is_empty()
}
