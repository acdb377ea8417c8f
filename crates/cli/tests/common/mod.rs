//! Helpers every command-line test file uses.

use std::process::Command;

/// The `oxrdma` binary under test.
pub fn oxrdma() -> Command {
    Command::new(env!("CARGO_BIN_EXE_oxrdma"))
}

/// A TCP port on 127.0.0.1 that was free a moment ago.
#[allow(dead_code)] // Not every test file needs one.
pub fn free_port() -> String {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
        .to_string()
}
