//! Every live oxrdma device of this host shows its counters to other processes, without
//! root: its engine thread writes them to `<dir>/<pid>-<tid>-<address>` at most every
//! `EVERY` (100 ms) when they changed (written aside, then renamed into place, so a reader
//! sees a whole file), and holds `<dir>/<pid>-<tid>-<address>.lock` locked while the
//! device is open;
//! `oxrdma stats` reads them ([`read`]). `<dir>` is `$TMPDIR/oxrdma-stats/<network
//! namespace>`, shared by every user (sticky, like /tmp), as the CM's rendezvous is.
//!
//! The file is text: a header (`oxrdma-stats 1`, then `pid`, `thread`, `device`, `address`,
//! `unix_ns` lines) and one `<counter> <count>` line per counter.

use oxrdma_core::{Counter, Counters, Nanos};
use rustix::fs::{flock, FlockOperation};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::net::IpAddr;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How often a device's file may be written (ns).
pub(crate) const EVERY: Nanos = 100_000_000;

const MAGIC: &str = "oxrdma-stats 1";

fn dir() -> io::Result<PathBuf> {
    oxrdma_udp::host_dir("oxrdma-stats")
}

/// One device's file, written by its engine thread.
#[derive(Debug)]
pub(crate) struct Publisher {
    path: PathBuf,
    lock_path: PathBuf,
    /// Held (locked) while the device is open: readers tell a live device by it.
    _lock: File,
    header: String,
    last: Option<Counters>,
    /// When it last looked (ns on the device's clock).
    at: Option<Nanos>,
}

impl Publisher {
    /// Starts showing the device named `device` with address `address`, whose engine
    /// thread is `tid` (two devices of one process may share an address). None if the
    /// directory cannot be had (counters are then only readable in the process).
    pub fn new(device: &str, address: IpAddr, tid: i32) -> Option<Publisher> {
        let dir = dir().ok()?;
        let base = format!("{}-{tid}-{address}", std::process::id());
        let lock_path = dir.join(format!("{base}.lock"));
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o644)
            .open(&lock_path)
            .ok()?;
        flock(&lock, FlockOperation::NonBlockingLockExclusive).ok()?;
        clean(&dir);
        Some(Publisher {
            path: dir.join(base),
            lock_path,
            _lock: lock,
            header: format!(
                "{MAGIC}\npid {}\nthread {tid}\ndevice {device}\naddress {address}\n",
                std::process::id()
            ),
            last: None,
            at: None,
        })
    }

    /// Whether it is time to look at the counters again (`now`: ns on the device's clock).
    pub fn due(&self, now: Nanos) -> bool {
        self.at.is_none_or(|t| now.saturating_sub(t) >= EVERY)
    }

    /// Writes `c` if it changed since the last write.
    pub fn publish(&mut self, now: Nanos, c: &Counters) {
        self.at = Some(now);
        if self.last.as_ref() == Some(c) {
            return;
        }
        if self.write(c).is_ok() {
            self.last = Some(*c);
        }
    }

    fn write(&self, c: &Counters) -> io::Result<()> {
        let unix_ns = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let mut text = format!("{}unix_ns {unix_ns}\n", self.header);
        for (counter, n) in c.iter() {
            text.push_str(counter.name());
            text.push(' ');
            text.push_str(&n.to_string());
            text.push('\n');
        }
        // `<name>.new` (`with_extension` would replace an IPv4 address's last number).
        let mut aside = self.path.clone().into_os_string();
        aside.push(".new");
        let mut f = OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .mode(0o644)
            .open(&aside)?;
        f.write_all(text.as_bytes())?;
        fs::rename(&aside, &self.path)
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
        let _ = fs::remove_file(&self.lock_path);
    }
}

/// Removes the files of devices whose process is gone (and could not remove them).
fn clean(dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let path = e.path();
        if path.extension().is_some_and(|x| x == "lock")
            && File::open(&path).is_ok_and(|f| !oxrdma_udp::held(&f))
        {
            let _ = fs::remove_file(path.with_extension(""));
            let _ = fs::remove_file(&path);
        }
    }
}

/// One live device's counters, as its file says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceStats {
    /// The process that has it open.
    pub pid: u32,
    /// Its engine thread (two devices of one process may share an address).
    pub thread: i32,
    /// The device's name (its engine thread's, `nic-<address>` or `nic-<interface>`).
    pub device: String,
    /// Its address.
    pub address: IpAddr,
    /// When its engine thread wrote them.
    pub at: SystemTime,
    /// The counters.
    pub counters: Counters,
}

/// The counters of every live oxrdma device of this host (this network namespace), every
/// process and user, ordered by process and address.
pub fn read() -> io::Result<Vec<DeviceStats>> {
    let dir = dir()?;
    let mut out = Vec::new();
    for e in fs::read_dir(&dir)?.flatten() {
        let lock_path = e.path();
        if lock_path.extension().is_none_or(|x| x != "lock") {
            continue;
        }
        if !File::open(&lock_path).is_ok_and(|f| oxrdma_udp::held(&f)) {
            continue;
        }
        // A device opened a moment ago may not have written yet.
        if let Ok(text) = fs::read_to_string(lock_path.with_extension("")) {
            out.extend(parse(&text));
        }
    }
    out.sort_by_key(|a| (a.pid, a.address, a.thread));
    Ok(out)
}

/// A device's file; None if it is not one.
pub fn parse(text: &str) -> Option<DeviceStats> {
    let mut lines = text.lines();
    if lines.next()? != MAGIC {
        return None;
    }
    let (mut pid, mut thread, mut device, mut address, mut at) = (None, None, None, None, None);
    let mut counters = Counters::default();
    for line in lines {
        let (key, value) = line.split_once(' ')?;
        match key {
            "pid" => pid = value.parse().ok(),
            "thread" => thread = value.parse().ok(),
            "device" => device = Some(value.to_string()),
            "address" => address = value.parse().ok(),
            "unix_ns" => {
                let ns: u64 = value.parse().ok()?;
                at = Some(UNIX_EPOCH + Duration::from_nanos(ns));
            }
            name => {
                // Counters this build does not know (a newer writer) are left out.
                if let Some(&c) = Counter::ALL.iter().find(|c| c.name() == name) {
                    counters[c] = value.parse().ok()?;
                }
            }
        }
    }
    Some(DeviceStats {
        pid: pid?,
        thread: thread?,
        device: device?,
        address: address?,
        at: at?,
        counters,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_reads_back_as_written_and_junk_is_refused() {
        let mut c = Counters::default();
        c[Counter::SentPkts] = 12;
        c[Counter::BadRkey] = 3;
        let text = format!(
            "{MAGIC}\npid 42\nthread 7\ndevice nic-127.0.0.2\naddress 127.0.0.2\nunix_ns 5\n\
             sent_pkts 12\nresp_bad_rkey 3\nfuture_counter 9\n"
        );
        let d = parse(&text).unwrap();
        assert_eq!((d.pid, d.device.as_str()), (42, "nic-127.0.0.2"));
        assert_eq!(d.counters, c);
        assert_eq!(d.at, UNIX_EPOCH + Duration::from_nanos(5));
        assert_eq!(parse("hello\npid 1\n"), None);
        assert_eq!(parse(&text.replace("sent_pkts 12", "sent_pkts x")), None);
        assert_eq!(parse(&text.replace("pid 42\n", "")), None);
    }
}
