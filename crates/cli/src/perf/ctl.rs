//! The perf control channel: text lines on the exchange's TCP connection, by which the
//! client tells the server what to run and both agree on what was moved.

use anyhow::{bail, Context as _};
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;

/// A line-oriented, optionally non-blocking view of the TCP connection.
pub struct Ctl {
    tcp: TcpStream,
    buf: Vec<u8>,
}

impl Ctl {
    pub fn new(tcp: TcpStream) -> Ctl {
        Ctl {
            tcp,
            buf: Vec::new(),
        }
    }

    pub fn send(&mut self, line: &str) -> anyhow::Result<()> {
        self.tcp
            .write_all(format!("{line}\n").as_bytes())
            .context("the peer closed the control connection")
    }

    fn take_line(&mut self) -> Option<String> {
        let nl = self.buf.iter().position(|&b| b == b'\n')?;
        let line: Vec<u8> = self.buf.drain(..=nl).collect();
        Some(String::from_utf8_lossy(&line[..nl]).into_owned())
    }

    fn fill(&mut self) -> anyhow::Result<bool> {
        let mut chunk = [0u8; 256];
        match self.tcp.read(&mut chunk) {
            Ok(0) => bail!("the peer closed the control connection"),
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                if self.buf.len() > 4096 {
                    bail!("the peer sent a control line longer than 4 KiB");
                }
                Ok(true)
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => Ok(false),
            Err(e) if e.kind() == ErrorKind::Interrupted => Ok(true),
            Err(e) => Err(e).context("control connection"),
        }
    }

    /// The next line, waiting for it.
    pub fn recv(&mut self) -> anyhow::Result<String> {
        self.tcp.set_nonblocking(false)?;
        loop {
            if let Some(l) = self.take_line() {
                return Ok(l);
            }
            self.fill()?;
        }
    }

    /// The next line if one has arrived.
    pub fn try_recv(&mut self) -> anyhow::Result<Option<String>> {
        if let Some(l) = self.take_line() {
            return Ok(Some(l));
        }
        self.tcp.set_nonblocking(true)?;
        let got = self.fill();
        self.tcp.set_nonblocking(false)?;
        got?;
        Ok(self.take_line())
    }

    /// Waits for a line `<word> <n>` and returns n; anything else is an error naming it.
    pub fn expect(&mut self, word: &str) -> anyhow::Result<u64> {
        let l = self.recv()?;
        parse_word(&l, word)
    }
}

/// Parses `<word> <n>`.
pub fn parse_word(l: &str, word: &str) -> anyhow::Result<u64> {
    if let Some(msg) = l.strip_prefix("err ") {
        bail!("the peer reports: {msg}");
    }
    let mut f = l.split_whitespace();
    match (f.next(), f.next().map(str::parse::<u64>), f.next()) {
        (Some(w), Some(Ok(n)), None) if w == word => Ok(n),
        _ => bail!("unexpected control line from the peer: {l:?} (wanted {word:?})"),
    }
}

/// Byte access for the endpoint exchange: what was already buffered comes first.
impl Read for Ctl {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        if self.buf.is_empty() {
            self.tcp.set_nonblocking(false)?;
            return self.tcp.read(out);
        }
        let n = out.len().min(self.buf.len());
        out[..n].copy_from_slice(&self.buf[..n]);
        self.buf.drain(..n);
        Ok(n)
    }
}

impl Write for Ctl {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.tcp.write(data)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.tcp.flush()
    }
}
