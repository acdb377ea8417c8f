//! `ibv_open_device` and `ibv_close_device`: a context with the verbs' entry points the
//! header's inline functions call through (`ibv_context_ops`, `verbs_context`).

use crate::abi::*;
use crate::context::{query_device_ex, query_port_ex, Context};
use crate::device::{lookup, Device};
use crate::errno::set_errno;
use crate::registry::Registry;
use oxrdma::config::Target;
use oxrdma::{BindError, Error};
use std::ffi::{c_int, c_void};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Mutex;

/// The devices this process has open, one context of each to open others from.
static OPEN: Mutex<Vec<(usize, oxrdma::WeakDevice)>> = Mutex::new(Vec::new());

/// Opens a context on `d`. A device this process has open already gives another context of
/// the same device, as on a NIC: the same GID, and QPs of the two contexts reach each other
/// (test suites open one device twice and connect its QPs to their own GID). Otherwise the
/// device opens on its address, or the first free loopback one.
fn open_ox(d: &'static Device, name: &str) -> Result<oxrdma::Context, c_int> {
    let key = std::ptr::from_ref(d) as usize;
    let mut open = OPEN.lock().unwrap_or_else(|p| p.into_inner());
    open.retain(|(_, w)| w.is_open());
    if let Some(again) = open
        .iter()
        .find(|(k, _)| *k == key)
        .and_then(|(_, w)| w.open_again())
    {
        return again.map_err(|e| {
            eprintln!("oxrdma: device {name}: {e}");
            libc::ENOMEM
        });
    }
    let c = open_first(d, name)?;
    capture(&c, name);
    open.push((key, c.weak_device()));
    Ok(c)
}

/// `OXRDMA_PCAP=FILE`: the device's packets, both ways, go to FILE (`%p` in it becomes
/// the process ID, so two processes on one host write two files).
fn capture(c: &oxrdma::Context, name: &str) {
    if let Some(p) = std::env::var_os("OXRDMA_PCAP") {
        let path = p
            .to_string_lossy()
            .replace("%p", &std::process::id().to_string());
        if let Err(e) = c.capture_to(std::path::Path::new(&path)) {
            eprintln!("oxrdma: device {name}: cannot capture to {path}: {e}");
        }
    }
}

/// Opens `d` for the first time in this process: its own address, or the first free
/// loopback one.
fn open_first(d: &Device, name: &str) -> Result<oxrdma::Context, c_int> {
    let fail = |ip: IpAddr, e: Error| match &e {
        Error::Bind(BindError::InUse { .. }) => {
            eprintln!(
                "oxrdma: device {name}: {ip} is in use by a program that does not share it \
                     (Linux rxe, another user's processes, or OXRDMA_SHARE=0); give this one \
                     another address, e.g. OXRDMA_DEVICES={name}=127.0.0.9"
            );
            libc::EADDRINUSE
        }
        Error::Bind(BindError::NotLocal { .. }) => {
            eprintln!("oxrdma: device {name}: {e} (see OXRDMA_DEVICES)");
            libc::EADDRNOTAVAIL
        }
        _ => {
            eprintln!("oxrdma: device {name}: {e}");
            libc::ENODEV
        }
    };
    match &d.addr {
        Target::Address(ip) => oxrdma::Context::open_engine(*ip).map_err(|e| fail(*ip, e)),
        Target::Iwarp(ip) => oxrdma::Context::open_iwarp(*ip).map_err(|e| fail(*ip, e)),
        Target::Interface(ifname) => oxrdma::Context::open_interface(ifname).map_err(|e| {
            eprintln!("oxrdma: device {name} (interface {ifname}): {e}");
            match e {
                Error::Bind(BindError::InUse { .. }) => libc::EADDRINUSE,
                _ => libc::ENODEV,
            }
        }),
        Target::Loopback => {
            for n in 2..=254u8 {
                let ip = IpAddr::V4(Ipv4Addr::new(127, 0, 0, n));
                // An address of its own, as before addresses were shared: each end of a
                // pingpong on one host has its own GID, and the CM rendezvous finds them.
                match oxrdma::Context::open_alone(ip) {
                    Ok(c) => return Ok(c),
                    Err(Error::Bind(BindError::InUse { .. })) => continue,
                    Err(e) => return Err(fail(ip, e)),
                }
            }
            eprintln!("oxrdma: device {name}: every address 127.0.0.2-254 is taken");
            Err(libc::EADDRINUSE)
        }
    }
}

/// `ibv_open_device`.
///
/// # Safety
/// `dev` is NULL or any pointer (only ours are accepted).
pub(crate) unsafe extern "C" fn open_device(dev: *mut ibv_device) -> *mut ibv_context {
    let Some(d) = lookup(dev) else {
        set_errno(libc::ENODEV);
        return std::ptr::null_mut();
    };
    let name = crate::device::name(d);
    let ox = match open_ox(d, &name) {
        Ok(c) => c,
        Err(e) => {
            set_errno(e);
            return std::ptr::null_mut();
        }
    };
    let async_fd = {
        use std::os::fd::AsRawFd;
        ox.async_fd().as_raw_fd()
    };
    let cmd = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
        .ok();
    let cmd_fd = cmd.as_ref().map_or(-1, |f| {
        use std::os::fd::AsRawFd;
        f.as_raw_fd()
    });
    let ctx = Box::new(Context {
        vctx: verbs_context {
            query_port: Some(query_port_ex),
            query_device_ex: Some(query_device_ex),
            create_cq_ex: Some(crate::cq_ex::create_cq_ex),
            create_qp_ex: Some(crate::qp_ex::create_qp_ex),
            sz: size_of::<verbs_context>(),
            context: ibv_context {
                device: dev,
                ops: ibv_context_ops {
                    poll_cq: Some(crate::cq::poll_cq),
                    req_notify_cq: Some(crate::cq::req_notify_cq),
                    post_send: Some(crate::qp::post_send),
                    post_recv: Some(crate::qp::post_recv),
                    post_srq_recv: Some(crate::srq::post_srq_recv),
                    alloc_mw: Some(crate::mw::alloc_mw),
                    bind_mw: Some(crate::mw::bind_mw),
                    dealloc_mw: Some(crate::mw::dealloc_mw),
                    ..ibv_context_ops::EMPTY
                },
                cmd_fd,
                async_fd,
                num_comp_vectors: 1,
                // PTHREAD_MUTEX_INITIALIZER is all zeros in glibc.
                mutex: pthread_mutex_t([0; 40]),
                abi_compat: usize::MAX as *mut c_void,
            },
            ..verbs_context::EMPTY
        },
        ox,
        dev: d,
        objects: Mutex::new(Registry::default()),
        cmd,
    });
    let ctx = Box::leak(ctx);
    &mut ctx.vctx.context
}

/// `ibv_close_device`.
///
/// # Safety
/// `ctx` is NULL or an open context whose objects are all destroyed.
pub(crate) unsafe extern "C" fn close_device(ctx: *mut ibv_context) -> c_int {
    // SAFETY: the caller's promise.
    let Some(c) = (unsafe { Context::from_ibv(ctx) }) else {
        return libc::EINVAL;
    };
    // SAFETY: `c` was leaked from a Box in `open_device` and is given back once.
    drop(unsafe { Box::from_raw(std::ptr::from_ref(c).cast_mut()) });
    0
}
