//! Network namespaces for the tests that need root: made here, deleted when dropped,
//! nothing in them reaches any other network.

use std::os::fd::AsFd;
use std::process::Command;

fn ip(args: &[&str]) -> bool {
    Command::new("ip")
        .args(args)
        .status()
        .is_ok_and(|s| s.success())
}

/// A network namespace that is deleted when dropped.
pub struct Netns(String);

impl Drop for Netns {
    fn drop(&mut self) {
        ip(&["netns", "del", &self.0]);
    }
}

/// A namespace with `addrs` on its loopback, or None where namespaces cannot be made.
pub fn netns(tag: &str, addrs: &[&str]) -> Option<Netns> {
    let name = format!("oxr{tag}{}", std::process::id());
    if !ip(&["netns", "add", &name]) {
        let why = "cannot create a network namespace (needs root and iproute2)";
        assert!(std::env::var_os("OXRDMA_CI").is_none(), "{why}");
        // Past the harness, which hides what a passing test prints: a skip must show.
        let _ = std::io::Write::write_fmt(&mut std::io::stderr(), format_args!("SKIPPED: {why}\n"));
        return None;
    }
    let ns = Netns(name);
    assert!(ip(&["-n", &ns.0, "link", "set", "lo", "up"]));
    for a in addrs {
        let mut args = vec!["-n", &ns.0, "addr", "add", a, "dev", "lo"];
        if a.contains(':') {
            args.push("nodad");
        }
        assert!(ip(&args), "ip addr add {a}");
    }
    Some(ns)
}

/// Runs `f` on a thread inside namespace `ns` (its sockets stay there).
pub fn inside<T: Send + 'static>(ns: &Netns, f: impl FnOnce() -> T + Send + 'static) -> T {
    let file = std::fs::File::open(format!("/var/run/netns/{}", ns.0)).expect("netns file");
    std::thread::spawn(move || {
        rustix::thread::move_into_link_name_space(
            file.as_fd(),
            Some(rustix::thread::LinkNameSpaceType::Network),
        )
        .expect("setns");
        f()
    })
    .join()
    .unwrap()
}
