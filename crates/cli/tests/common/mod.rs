//! Helpers every command-line test file uses.

use std::process::Command;

/// The `oxrdma` binary under test.
pub fn oxrdma() -> Command {
    Command::new(env!("CARGO_BIN_EXE_oxrdma"))
}

/// A TCP port on 127.0.0.1 that was free a moment ago, and that no other call in this
/// test process has handed out: the kernel gives a released port again, and two servers
/// given one port made the one that bound it serve the other's client (the
/// `shared_address` test's rare failure: a client's connection reset, its server gone
/// without a word, having served another pair's client).
#[allow(dead_code)] // Not every test file needs one.
pub fn free_port() -> String {
    use std::collections::HashSet;
    use std::sync::Mutex;
    static GIVEN: Mutex<Option<HashSet<u16>>> = Mutex::new(None);
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    let given = given.get_or_insert_with(HashSet::new);
    loop {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        if given.insert(port) {
            return port.to_string();
        }
    }
}
