//! Helpers every command-line test file uses.

use std::process::Command;

/// The `oxrdma` binary under test.
pub fn oxrdma() -> Command {
    Command::new(env!("CARGO_BIN_EXE_oxrdma"))
}

/// A TCP port on 127.0.0.1 that was free a moment ago, below the kernel's ephemeral range,
/// and that no other call in this test process has handed out. Below the range: a port
/// the kernel handed out (bound to port 0) may be taken, before the server binds it, as
/// the local port of some other test's connection ("cannot listen on TCP port 35607:
/// Address already in use"). Not handed out twice: two servers given one port made the one
/// that bound it serve the other's client (the `shared_address` test's rare failure: a
/// client's connection reset, its server gone without a word, having served another
/// pair's client).
#[allow(dead_code)] // Not every test file needs one.
pub fn free_port() -> String {
    use std::collections::HashSet;
    use std::hash::{BuildHasher, RandomState};
    use std::sync::Mutex;
    static GIVEN: Mutex<Option<HashSet<u16>>> = Mutex::new(None);
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    let given = given.get_or_insert_with(HashSet::new);
    let ephemeral = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    const LOW: u16 = 10_000;
    let span = u64::from(ephemeral.saturating_sub(LOW).max(1000));
    // Random draws, so that test processes running at once rarely try the same ports.
    let random = RandomState::new();
    for draw in 0u64.. {
        let port = LOW + (random.hash_one(draw) % span) as u16;
        if !given.contains(&port) && std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            given.insert(port);
            return port.to_string();
        }
    }
    unreachable!("a free port below the ephemeral range")
}

/// A child process that is killed and reaped when dropped: a test that fails halfway
/// leaves no process behind holding its addresses (a later run, under another `TMPDIR`,
/// would find the port taken by a process outside its group and be refused).
#[allow(dead_code)] // Not every test file needs one.
pub struct Reaped(Option<std::process::Child>);

#[allow(dead_code)]
impl Reaped {
    /// Guards `c`.
    pub fn new(c: std::process::Child) -> Reaped {
        Reaped(Some(c))
    }

    /// The child, no longer guarded (to wait for its output).
    pub fn into_child(mut self) -> std::process::Child {
        self.0.take().expect("guarded until taken")
    }
}

impl std::ops::Deref for Reaped {
    type Target = std::process::Child;
    fn deref(&self) -> &Self::Target {
        self.0.as_ref().expect("guarded until taken")
    }
}

impl std::ops::DerefMut for Reaped {
    fn deref_mut(&mut self) -> &mut Self::Target {
        self.0.as_mut().expect("guarded until taken")
    }
}

impl Drop for Reaped {
    fn drop(&mut self) {
        if let Some(c) = self.0.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
