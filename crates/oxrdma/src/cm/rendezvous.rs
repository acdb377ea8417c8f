//! Which process listens on which RDMA CM port of this host: the per-host rendezvous.
//!
//! On one host each process's device has an address of its own (127.0.0.2, 127.0.0.3, …
//! with nothing configured), but programs connect to 127.0.0.1 or to the host's address,
//! as they would with the kernel's CM, which owns every port of the host. So a listener
//! writes a file, `<dir>/<port space>-<port>`, holding the address of the device it
//! listens on, and keeps it locked (`flock`) while it listens: a connecting process on
//! the same host reads where to send its REQ, a second listener on the port finds it
//! locked (EADDRINUSE), and a file whose process died is unlocked, so stale. `<dir>` is
//! `$TMPDIR/oxrdma-cm/<network namespace>`, shared by every user (sticky, like /tmp).
//! Registrations and clean-ups hold `<dir>/.lock`; a file appears whole (written, then
//! linked into place), so lookups need no lock.

use rustix::fs::{flock, FlockOperation};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::net::IpAddr;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

/// What a listener's file says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Entry {
    /// The address of the device that listens (where REQs go).
    pub device: IpAddr,
    /// The address the listener is bound to (None: any).
    pub bound: Option<IpAddr>,
}

/// A listening registration: the file stays, locked, until this is dropped.
#[derive(Debug)]
pub(crate) struct Registration {
    file: File,
    path: PathBuf,
    /// Where the device shares its address: the REQs for the port come to this process.
    pub steer: Vec<oxrdma_udp::group::Listening>,
}

fn dir() -> io::Result<PathBuf> {
    // Every user's listeners meet here; the sticky bit keeps their files theirs.
    oxrdma_udp::host_dir("oxrdma-cm")
}

fn name(port_space: u16, port: u16) -> String {
    format!("{port_space:04x}-{port}")
}

/// Holds `<dir>/.lock` while alive (the lock goes with the file).
struct DirLock(#[allow(dead_code)] File);

impl DirLock {
    fn take(dir: &Path) -> io::Result<DirLock> {
        let f = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o666)
            .open(dir.join(".lock"))?;
        flock(&f, FlockOperation::LockExclusive)?;
        Ok(DirLock(f))
    }
}

fn parse(text: &str) -> Option<Entry> {
    let mut device = None;
    let mut bound = None;
    for line in text.lines() {
        match line.split_once('=') {
            Some(("device", v)) => device = v.parse().ok(),
            Some(("bound", "any")) => bound = None,
            Some(("bound", v)) => bound = Some(v.parse().ok()?),
            _ => {}
        }
    }
    Some(Entry {
        device: device?,
        bound,
    })
}

/// Registers a listener on `port` of `port_space`; EADDRINUSE if a live one has it.
pub(crate) fn register(port_space: u16, port: u16, entry: Entry) -> io::Result<Registration> {
    let d = dir()?;
    let _lock = DirLock::take(&d)?;
    let path = d.join(name(port_space, port));
    if let Ok(old) = File::open(&path) {
        if oxrdma_udp::held(&old) {
            return Err(io::Error::from_raw_os_error(libc_eaddrinuse()));
        }
        let _ = fs::remove_file(&path);
    }
    static N: AtomicU32 = AtomicU32::new(0);
    let tmp = d.join(format!(
        ".new-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let mut file = OpenOptions::new()
        .create_new(true)
        .write(true)
        .mode(0o644)
        .open(&tmp)?;
    flock(&file, FlockOperation::LockExclusive)?;
    let bound = entry
        .bound
        .map_or_else(|| "any".to_string(), |b| b.to_string());
    // One write: readers see the whole file or none (it is linked into place after).
    let text = format!(
        "device={}\nbound={bound}\npid={}\n",
        entry.device,
        std::process::id()
    );
    let written = file
        .write_all(text.as_bytes())
        .and_then(|()| fs::hard_link(&tmp, &path));
    let _ = fs::remove_file(&tmp);
    written?;
    Ok(Registration {
        file,
        path,
        steer: Vec::new(),
    })
}

/// The live listener on `port` of `port_space`, if any.
pub(crate) fn lookup(port_space: u16, port: u16) -> Option<Entry> {
    let path = dir().ok()?.join(name(port_space, port));
    let mut f = File::open(path).ok()?;
    if !oxrdma_udp::held(&f) {
        return None;
    }
    let mut text = String::new();
    f.read_to_string(&mut text).ok()?;
    parse(&text)
}

/// Whether a live listener holds `port` of `port_space`.
pub(crate) fn taken(port_space: u16, port: u16) -> bool {
    lookup(port_space, port).is_some()
}

fn libc_eaddrinuse() -> i32 {
    rustix::io::Errno::ADDRINUSE.raw_os_error()
}

impl Drop for Registration {
    fn drop(&mut self) {
        // Removes the file only if it is still ours (a stale one may have been replaced).
        if let Some(d) = self.path.parent() {
            if let Ok(_lock) = DirLock::take(d) {
                let ours = (fs::metadata(&self.path), self.file.metadata());
                if let (Ok(a), Ok(b)) = ours {
                    if (a.dev(), a.ino()) == (b.dev(), b.ino()) {
                        let _ = fs::remove_file(&self.path);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_is_registered_once_and_freed_on_drop() {
        let ps = 0x7e57;
        let port = 40000 + (std::process::id() % 20000) as u16;
        let e = Entry {
            device: "127.0.0.9".parse().unwrap(),
            bound: None,
        };
        let r = register(ps, port, e).unwrap();
        assert_eq!(lookup(ps, port), Some(e));
        let again = register(ps, port, e).unwrap_err();
        assert_eq!(again.raw_os_error(), Some(libc_eaddrinuse()));
        drop(r);
        assert_eq!(lookup(ps, port), None);
        let bound = Entry {
            bound: Some("127.0.0.1".parse().unwrap()),
            ..e
        };
        let r = register(ps, port, bound).unwrap();
        assert_eq!(lookup(ps, port), Some(bound));
        drop(r);
    }

    #[test]
    fn a_file_nobody_holds_is_stale() {
        let ps = 0x7e58;
        let port = 40000 + (std::process::id() % 20000) as u16;
        let path = dir().unwrap().join(name(ps, port));
        fs::write(&path, "device=127.0.0.9\nbound=any\n").unwrap();
        assert_eq!(lookup(ps, port), None, "no process holds it");
        let r = register(ps, port, parse("device=127.0.0.8\nbound=any").unwrap()).unwrap();
        assert_eq!(lookup(ps, port).unwrap().device.to_string(), "127.0.0.8");
        drop(r);
        assert!(!path.exists());
    }
}
