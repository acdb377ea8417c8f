//! The device list: which oxrdma devices this process sees, by name and what each sits on.
//!
//! The configuration names them (`config.rs`: `OXRDMA_DEVICES` or a file). Without any,
//! a device per network interface (`oxr_eth0`, …, each with the interface's addresses as
//! its GIDs, as rxe's); on a host with loopback alone, `oxr0`, whose address is chosen
//! when it is opened: the first loopback address 127.0.0.2, 127.0.0.3, … that no other
//! process holds, so that both ends of a pingpong on one host find each other (each end's
//! GID says which address it took). `OXRDMA_DEVICES=oxr0=lo` asks for that one alone.

use crate::abi::{ibv_device, IBV_SYSFS_NAME_MAX, IBV_SYSFS_PATH_MAX};
use oxrdma::config::{self, Target};
use std::ffi::{c_char, c_int};
use std::net::IpAddr;
use std::sync::OnceLock;

/// One device as the C side sees it, and what oxrdma needs to open it.
#[derive(Debug)]
pub struct Device {
    /// First, so that a `*mut ibv_device` is a `*mut Device`.
    pub ibv: ibv_device,
    pub addr: Target,
}

fn c_array<const N: usize>(s: &str) -> [c_char; N] {
    let mut out = [0 as c_char; N];
    for (o, b) in out.iter_mut().zip(s.bytes().take(N - 1)) {
        *o = b as c_char;
    }
    out
}

fn device(name: &str, addr: Target, index: usize) -> Device {
    // IBV_NODE_CA and IBV_TRANSPORT_IB, as rxe reports (RoCE is the IB transport); an
    // iWARP device IBV_NODE_RNIC and IBV_TRANSPORT_IWARP, as siw.
    let transport = match addr {
        Target::Iwarp(_) => oxrdma::DeviceTransport::Iwarp,
        _ => oxrdma::DeviceTransport::Ib,
    };
    Device {
        ibv: ibv_device {
            _ops: crate::abi::_ibv_device_ops {
                _dummy1: None,
                _dummy2: None,
            },
            node_type: transport.node_type(),
            transport_type: transport.transport_type(),
            name: c_array::<IBV_SYSFS_NAME_MAX>(name),
            dev_name: c_array::<IBV_SYSFS_NAME_MAX>(&format!("uverbs{index}")),
            dev_path: c_array::<IBV_SYSFS_PATH_MAX>(&format!(
                "/sys/class/infiniband_verbs/uverbs{index}"
            )),
            ibdev_path: c_array::<IBV_SYSFS_PATH_MAX>(&format!("/sys/class/infiniband/{name}")),
        },
        addr,
    }
}

/// The devices of this process, built once from the configuration. A malformed one
/// leaves the list empty and says why on stderr once.
pub fn devices() -> &'static [Device] {
    static LIST: OnceLock<Vec<Device>> = OnceLock::new();
    LIST.get_or_init(|| match config::devices() {
        Ok(list) => list
            .into_iter()
            .enumerate()
            .map(|(i, (name, t))| device(&name, t, i))
            .collect(),
        Err(e) => {
            eprintln!("oxrdma: {e}; no devices");
            Vec::new()
        }
    })
}

/// `ibv_get_device_list`: a NULL-terminated array the caller frees with
/// `ibv_free_device_list`; `*num` (if given) gets the count.
///
/// # Safety
/// `num` is NULL or points to a writable `int`.
pub(crate) unsafe extern "C" fn get_device_list(num: *mut c_int) -> *mut *mut ibv_device {
    let list = devices()
        .iter()
        .map(|d| std::ptr::from_ref(&d.ibv).cast_mut());
    // SAFETY: the caller's promise.
    unsafe { null_terminated(list, num) }
}

/// `ibv_free_device_list`.
///
/// # Safety
/// `list` is NULL or an array `ibv_get_device_list` returned, not freed before.
pub(crate) unsafe extern "C" fn free_device_list(list: *mut *mut ibv_device) {
    // SAFETY: the caller's promise.
    unsafe { free_null_terminated(list) }
}

/// A NULL-terminated array of `items` for C (freed by `free_null_terminated`); `*num` (if
/// not NULL) gets the count.
///
/// # Safety
/// `num` is NULL or points to a writable `int`.
pub(crate) unsafe fn null_terminated<T>(
    items: impl Iterator<Item = *mut T>,
    num: *mut c_int,
) -> *mut *mut T {
    let list: Vec<*mut T> = items.chain(std::iter::once(std::ptr::null_mut())).collect();
    if !num.is_null() {
        // SAFETY: the caller passes a valid int pointer or NULL (checked).
        unsafe { *num = (list.len() - 1) as c_int };
    }
    Box::into_raw(list.into_boxed_slice()).cast()
}

/// Frees an array `null_terminated` made.
///
/// # Safety
/// `list` is NULL or such an array, not freed before.
pub(crate) unsafe fn free_null_terminated<T>(list: *mut *mut T) {
    if list.is_null() {
        return;
    }
    let mut n = 0;
    // SAFETY: the caller's promise: NULL-terminated.
    while !unsafe { *list.add(n) }.is_null() {
        n += 1;
    }
    // SAFETY: the boxed slice `null_terminated` leaked, n entries plus the NULL.
    drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(list, n + 1)) });
}

/// The `Device` behind a C pointer, if it is one of ours.
pub fn lookup(dev: *const ibv_device) -> Option<&'static Device> {
    devices()
        .iter()
        .find(|d| std::ptr::eq(std::ptr::from_ref(&d.ibv), dev))
}

/// `ibv_get_device_name`.
pub(crate) extern "C" fn get_device_name(dev: *mut ibv_device) -> *const c_char {
    match lookup(dev) {
        Some(d) => d.ibv.name.as_ptr(),
        None => std::ptr::null(),
    }
}

/// `ibv_get_device_guid`: 0 for a device that is not ours.
pub(crate) extern "C" fn get_device_guid(dev: *mut ibv_device) -> u64 {
    lookup(dev).map_or(0, guid)
}

/// The node GUID in network order: a device on an interface, from its MAC address as
/// rxe makes it (EUI-64); a device on one address, from the address.
pub fn guid(d: &Device) -> u64 {
    let tail: [u8; 4] = match &d.addr {
        Target::Address(IpAddr::V4(a)) | Target::Iwarp(IpAddr::V4(a)) => a.octets(),
        Target::Address(IpAddr::V6(a)) | Target::Iwarp(IpAddr::V6(a)) => {
            a.octets()[12..].try_into().unwrap_or([0; 4])
        }
        Target::Interface(name) => {
            let mac = oxrdma::interfaces::interface(name).and_then(|i| i.mac);
            if let Some(m) = mac {
                let g = [m[0] ^ 2, m[1], m[2], 0xff, 0xfe, m[3], m[4], m[5]];
                return u64::from_ne_bytes(g);
            }
            [0, 0, 0, 0]
        }
        Target::Loopback => [127, 0, 0, 0],
    };
    let g = [0x02, 0x0a, 0xd5, 0xff, tail[0], tail[1], tail[2], tail[3]];
    u64::from_ne_bytes(g)
}

/// The device's name, as a Rust string.
pub fn name(d: &Device) -> String {
    let bytes: Vec<u8> = d
        .ibv
        .name
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// `ibv_read_sysfs_file(dir, file, buf, size)`: reads `dir/file` into `buf` without its
/// trailing newline, NUL-terminated; the length read, or -1.
///
/// # Safety
/// `dir` and `file` are NULL or C strings; `buf` is NULL or has `size` writable bytes.
pub(crate) unsafe extern "C" fn read_sysfs_file(
    dir: *const c_char,
    file: *const c_char,
    buf: *mut c_char,
    size: usize,
) -> c_int {
    if dir.is_null() || file.is_null() || buf.is_null() || size == 0 {
        return -1;
    }
    // SAFETY: C strings (caller's promise, not NULL).
    let (d, f) = unsafe {
        (
            std::ffi::CStr::from_ptr(dir),
            std::ffi::CStr::from_ptr(file),
        )
    };
    use std::os::unix::ffi::OsStrExt;
    let path = std::path::Path::new(std::ffi::OsStr::from_bytes(d.to_bytes()))
        .join(std::ffi::OsStr::from_bytes(f.to_bytes()));
    let Ok(mut data) = std::fs::read(path) else {
        return -1;
    };
    if data.last() == Some(&b'\n') {
        data.pop();
    }
    if data.len() >= size {
        return -1;
    }
    // SAFETY: `buf` has `size` > data.len() writable bytes (caller's promise).
    unsafe {
        std::ptr::copy_nonoverlapping(data.as_ptr(), buf.cast::<u8>(), data.len());
        *buf.add(data.len()) = 0;
    }
    data.len() as c_int
}

/// `ibv_get_device_index` (1.9): the device's place in the list, or -1.
pub(crate) extern "C" fn get_device_index(dev: *mut ibv_device) -> c_int {
    devices()
        .iter()
        .position(|d| std::ptr::eq(&d.ibv, dev))
        .map_or(-1, |i| i as c_int)
}
const _: () = assert!(oxrdma::config::NAME_MAX == IBV_SYSFS_NAME_MAX);
