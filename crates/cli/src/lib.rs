//! The `oxrdma` tool's subcommands, as a library so tests can drive them.

pub mod capture;
pub mod decode;
pub mod devinfo;
pub mod perf;
pub mod pingpong;
pub mod sim;
