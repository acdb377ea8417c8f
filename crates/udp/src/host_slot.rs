//! A device's slot on its host. Each device a process opens owns one of the host's
//! [`SLOTS`] slots (per user and network namespace), and its QPNs and comm IDs are drawn
//! in that slot (`oxrdma_core::slot`) under the host's one key: so a QPN steers to the same
//! process in the group of every address the device has (`group.rs`), whichever address
//! a peer sends to.
//!
//! The slot is a lock, `<host>/u<uid>/slot-N`, held with `flock` while the device lives
//! (the kernel lets it go when the process dies). The key is `<host>/u<uid>/key`, drawn
//! once.

use oxrdma_core::slot::SLOTS;
use oxrdma_core::Slot;
use rustix::fs::{flock, FlockOperation};
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::PathBuf;

/// A device's claim on a slot of this host.
#[derive(Debug)]
pub struct HostSlot {
    slot: Slot,
    /// The slot's lock, held while the device lives.
    _claim: File,
}

impl HostSlot {
    /// Claims the first free slot of this user on this host (network namespace).
    pub fn claim() -> io::Result<HostSlot> {
        let dir = user_dir()?;
        let key = host_key(&dir)?;
        for s in 0..SLOTS {
            let f = open_lock(&dir.join(format!("slot-{s}")))?;
            if flock(&f, FlockOperation::NonBlockingLockExclusive).is_ok() {
                return Ok(HostSlot {
                    slot: Slot::new(s, key),
                    _claim: f,
                });
            }
        }
        Err(io::Error::other(format!(
            "{SLOTS} devices of this user are open on this host already (the most a host \
             takes)"
        )))
    }

    /// The slot, and the host's key.
    pub fn slot(&self) -> Slot {
        self.slot
    }
}

/// `$TMPDIR/oxrdma-host/<netns>/u<uid>`, made if missing, this user's alone.
fn user_dir() -> io::Result<PathBuf> {
    let uid = rustix::process::getuid().as_raw();
    let d = crate::host_dir("oxrdma-host")?.join(format!("u{uid}"));
    if fs::create_dir(&d).is_ok() {
        let _ = fs::set_permissions(&d, fs::Permissions::from_mode(0o700));
    }
    Ok(d)
}

/// The host's key: read from `<dir>/key`, or drawn and written there by the first device
/// (under `<dir>/.lock`, so that two first devices agree).
fn host_key(dir: &std::path::Path) -> io::Result<u32> {
    let lock = open_lock(&dir.join(".lock"))?;
    flock(&lock, FlockOperation::LockExclusive)?;
    let path = dir.join("key");
    let read = fs::read_to_string(&path)
        .ok()
        .and_then(|t| u32::from_str_radix(t.trim(), 16).ok());
    if let Some(key) = read {
        return Ok(key | 1);
    }
    let mut b = [0u8; 4];
    // The key only spreads numbers over slots (it guards nothing): any bytes will do if
    // the kernel's generator fails.
    let _ = rustix::rand::getrandom(&mut b, rustix::rand::GetRandomFlags::empty());
    let key = (u32::from_ne_bytes(b) ^ std::process::id().rotate_left(13)) | 1;
    let tmp = dir.join(format!("key.{}", std::process::id()));
    fs::write(&tmp, format!("{key:08x}\n"))?;
    fs::rename(&tmp, &path)?;
    Ok(key)
}

pub(crate) fn open_lock(path: &std::path::Path) -> io::Result<File> {
    OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_claims_take_two_slots_under_one_key() {
        let a = HostSlot::claim().unwrap();
        let b = HostSlot::claim().unwrap();
        assert_ne!(a.slot().index, b.slot().index);
        assert_eq!(a.slot().key, b.slot().key);
        let freed = a.slot().index;
        drop(a);
        // Another claim may take the freed slot or another free one, never b's.
        let c = HostSlot::claim().unwrap();
        assert_ne!(c.slot().index, b.slot().index);
        let _ = freed;
    }
}
