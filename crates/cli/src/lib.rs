//! The `oxrdma` tool's subcommands, as a library so tests can drive them.

pub mod args;
pub mod capture;
pub mod cm;
pub mod cmlink;
pub mod decode;
pub mod decode_iwarp;
pub mod devinfo;
pub mod devnodes;
pub mod drops;
pub mod exec;
pub mod iwarp_perf;
pub mod oob;
pub mod pathemu;
pub mod perf;
pub mod pingloop;
pub mod pingpong;
pub mod rstream;
pub mod scale;
pub mod sim;
pub mod stats;
pub mod threads;
pub mod udpingpong;

/// The Q_Key of UD QPs in rdma-core's ibv_ud_pingpong and in perftest (DEF_QKEY), and so in
/// `oxrdma ud-pingpong` and `oxrdma perf -c UD`.
pub const UD_QKEY: u32 = 0x1111_1111;

/// Listens for the out-of-band TCP connection on every address, IPv6 and IPv4 (falling back
/// to IPv4 alone where IPv6 is off).
pub fn listen(port: u16) -> std::io::Result<std::net::TcpListener> {
    std::net::TcpListener::bind(("::", port))
        .or_else(|_| std::net::TcpListener::bind(("0.0.0.0", port)))
}
