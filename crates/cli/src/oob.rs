//! The out-of-band exchange of rdma-core's example programs (`ibv_rc_pingpong`,
//! `ibv_ud_pingpong`): on TCP, the client sends 52 bytes `LID:QPN:PSN:GID` (hex, NUL
//! padded), the server answers the same, the client says `done\0`.

use anyhow::{bail, Context as _};
use oxrdma::{Endpoint, Gid};
use std::io::{Read, Write};
use std::net::TcpStream;

pub const MSG_LEN: usize = 52;

pub fn wire(e: &Endpoint) -> [u8; MSG_LEN] {
    let gid: String = e.gid.0.iter().map(|b| format!("{b:02x}")).collect();
    let s = format!("{:04x}:{:06x}:{:06x}:{gid}", 0, e.qpn, e.psn);
    let mut m = [0u8; MSG_LEN];
    m[..s.len()].copy_from_slice(s.as_bytes());
    m
}

/// Parses the peer's message; `tool` names the program in the hint for a peer without GID.
pub fn parse(m: &[u8], tool: &str) -> anyhow::Result<Endpoint> {
    let s = std::str::from_utf8(m)
        .context("peer sent non-text connection data")?
        .trim_end_matches('\0');
    let f: Vec<&str> = s.split(':').collect();
    let bad = || anyhow::anyhow!("peer sent malformed connection data {s:?}");
    if f.len() != 4 || f[3].len() != 32 {
        return Err(bad());
    }
    let qpn = u32::from_str_radix(f[1], 16).map_err(|_| bad())?;
    let psn = u32::from_str_radix(f[2], 16).map_err(|_| bad())?;
    let mut gid = [0u8; 16];
    for (i, g) in gid.iter_mut().enumerate() {
        *g = u8::from_str_radix(&f[3][2 * i..2 * i + 2], 16).map_err(|_| bad())?;
    }
    // The tools address a peer by GID only when its interface ID (low 8 bytes) is set;
    // over RoCE there is no other way to reach it.
    if gid[8..] == [0; 8] {
        bail!("peer sent no GID: RoCE needs one (run {tool} with -g <gid index>)");
    }
    Ok(Endpoint {
        gid: Gid(gid),
        qpn: qpn & 0xff_ffff,
        psn: psn & 0xff_ffff,
        key: None,
        buffers: Vec::new(),
    })
}

/// Swaps endpoints with the peer: as client of `server`, or (None) as server on `port`.
/// `ready` runs on the server between reading the client's endpoint and answering (the
/// client may send at once after the answer).
pub fn exchange(
    server: Option<&str>,
    port: u16,
    me: &Endpoint,
    tool: &str,
    ready: &mut dyn FnMut(&Endpoint) -> anyhow::Result<()>,
) -> anyhow::Result<Endpoint> {
    let mut m = [0u8; MSG_LEN];
    match server {
        Some(host) => {
            let mut s = TcpStream::connect((host, port))
                .with_context(|| format!("cannot reach {host}:{port}"))?;
            s.write_all(&wire(me))?;
            s.read_exact(&mut m)
                .context("server closed the connection")?;
            s.write_all(b"done\0")?;
            parse(&m, tool)
        }
        None => {
            let l =
                crate::listen(port).with_context(|| format!("cannot listen on TCP port {port}"))?;
            let (mut s, _) = l.accept()?;
            s.read_exact(&mut m)
                .context("client closed the connection")?;
            let peer = parse(&m, tool)?;
            ready(&peer)?;
            s.write_all(&wire(me))?;
            let mut done = [0u8; 5];
            let _ = s.read(&mut done);
            Ok(peer)
        }
    }
}

/// The two result lines both tools print.
pub fn print_result(size: usize, iters: u64, secs: f64) {
    let bytes = size as u64 * iters * 2;
    println!(
        "{bytes} bytes in {secs:.2} seconds = {:.2} Mbit/sec",
        bytes as f64 * 8.0 / secs / 1e6
    );
    println!(
        "{iters} iters in {secs:.2} seconds = {:.2} usec/iter",
        secs * 1e6 / iters as f64
    );
}
