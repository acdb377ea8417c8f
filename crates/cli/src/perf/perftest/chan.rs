//! perftest's TCP side channel: lock-step exchanges of fixed-size messages, the client
//! writing first (PERFTEST-OOB.md §1). Every read has a deadline, so a silent or
//! misbehaving peer ends the run with one error instead of a hang.

use anyhow::{bail, Context as _};
use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::time::Duration;

/// How long any one message may take outside the test (perftest itself sleeps 1 s after
/// connecting; a TCG guest is slow).
pub const STEP: Duration = Duration::from_secs(60);

pub struct Chan {
    tcp: TcpStream,
    client: bool,
}

impl Chan {
    /// Waits for one client on `listener` (perftest's server accepts exactly one).
    pub fn accept(listener: TcpListener) -> anyhow::Result<Chan> {
        let (tcp, _) = listener
            .accept()
            .context("waiting for the perftest client")?;
        Chan::new(tcp, false)
    }

    pub fn connect(host: &str, port: u16) -> anyhow::Result<Chan> {
        let addrs = (host, port)
            .to_socket_addrs()
            .with_context(|| format!("cannot resolve {host}"))?;
        let mut last = None;
        // perftest's server listens on IPv4 only.
        for a in addrs.filter(|a| a.is_ipv4()) {
            match TcpStream::connect_timeout(&a, Duration::from_secs(10)) {
                Ok(t) => return Chan::new(t, true),
                Err(e) => last = Some(e),
            }
        }
        let e = last.map_or("no IPv4 address".to_string(), |e| e.to_string());
        bail!("cannot reach the perftest server at {host}:{port}: {e}")
    }

    fn new(tcp: TcpStream, client: bool) -> anyhow::Result<Chan> {
        tcp.set_nodelay(true)?;
        Ok(Chan { tcp, client })
    }

    /// One exchange: sends `out` and returns the peer's `N`-byte message named `what`.
    /// The client writes first, the server reads first, as perftest does.
    pub fn swap<const N: usize>(
        &mut self,
        out: &[u8],
        what: &str,
        wait: Duration,
    ) -> anyhow::Result<[u8; N]> {
        if self.client {
            self.send(out, what)?;
            self.recv(what, wait)
        } else {
            let got = self.recv(what, wait)?;
            self.send(out, what)?;
            Ok(got)
        }
    }

    fn send(&mut self, out: &[u8], what: &str) -> anyhow::Result<()> {
        // One write: perftest reads each message with a single read().
        self.tcp
            .write_all(out)
            .with_context(|| format!("cannot send our {what} to the perftest peer"))
    }

    fn recv<const N: usize>(&mut self, what: &str, wait: Duration) -> anyhow::Result<[u8; N]> {
        self.tcp.set_read_timeout(Some(wait))?;
        let mut buf = [0u8; N];
        let mut got = 0;
        while got < N {
            match self.tcp.read(&mut buf[got..]) {
                Ok(0) => bail!(
                    "the perftest peer closed the connection during its {what} ({got} of {N} bytes)"
                ),
                Ok(n) => got += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => bail!(
                    "no {what} from the perftest peer within {} s ({got} of {N} bytes)",
                    wait.as_secs()
                ),
                Err(e) => return Err(e).with_context(|| format!("reading the peer's {what}")),
            }
        }
        Ok(buf)
    }

    /// The end of a bw test: both sides write DONE and close. We read the peer's DONE when
    /// it comes soon (so our close does not reset the connection under it) and accept its
    /// absence, an EOF or a reset: perftest closes without reading.
    pub fn done(mut self) -> anyhow::Result<()> {
        self.send(super::msg::DONE, "DONE")?;
        let _ = self.recv::<5>("DONE", Duration::from_secs(2));
        Ok(())
    }

    /// Waits (at most `wait`) for the peer to close its end: write_lat has no closing
    /// exchange, and a server that left early could strand the client's last ACK.
    pub fn linger(mut self, wait: Duration) {
        let _ = self.tcp.set_read_timeout(Some(wait));
        let mut b = [0u8; 64];
        while matches!(self.tcp.read(&mut b), Ok(n) if n > 0) {}
    }
}
