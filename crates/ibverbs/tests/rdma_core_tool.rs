//! The `oxrdma` tool on the Rust API's rdma-core backend (`OXRDMA_BACKEND=rdma-core`),
//! loading this repository's `libibverbs.so.1`, against the tool on the engine: the same
//! program unchanged on two implementations of the API, both roles (the interop table runs
//! it on Linux rxe in a guest the same way).

use std::path::PathBuf;
use std::process::{Command, Stdio};

/// The tool and the C library this test was built beside (`target/<profile>/`).
fn built() -> (PathBuf, PathBuf) {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    let tool = deps.parent().unwrap().join("oxrdma");
    let lib = deps.join("liboxrdma_ibverbs.so");
    assert!(
        tool.exists(),
        "{} is not built: run the workspace's tests (cargo test --workspace)",
        tool.display()
    );
    assert!(lib.exists(), "{} is not built", lib.display());
    (tool, lib)
}

/// A free TCP port for the exchange.
fn free_port() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port().to_string()
}

/// `oxrdma pingpong` with `args`, on the rdma-core backend if `hw` names its address
/// (with this repository's librdmacm beside its libibverbs).
fn pingpong(tool: &PathBuf, lib: &PathBuf, hw: Option<&str>, args: &[&str]) -> Command {
    oxrdma(tool, lib, hw, "pingpong", args)
}

/// `oxrdma <sub>` with `args`, on the rdma-core backend if `hw` names its address.
fn oxrdma(tool: &PathBuf, lib: &PathBuf, hw: Option<&str>, sub: &str, args: &[&str]) -> Command {
    let mut c = Command::new(tool);
    c.arg(sub).args(args);
    if let Some(ip) = hw {
        // Built beside the C library by the rdmacm package's test.
        let rdmacm = lib.with_file_name("liboxrdma_rdmacm.so");
        c.env("OXRDMA_BACKEND", "rdma-core")
            .env("OXRDMA_LIBIBVERBS", lib)
            .env("OXRDMA_LIBRDMACM", rdmacm)
            .env("OXRDMA_DEVICES", format!("oxr0={ip}"));
    }
    c
}

/// `c`'s output once it exits; killed (and the test failed) if it runs for a minute.
fn finish(mut c: Command) -> std::process::Output {
    let mut child = c
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let until = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > until {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!("{c:?} hung: {}", String::from_utf8_lossy(&out.stderr));
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// A server then a client (tried again until the server listens); both must exit 0 and
/// count every byte.
fn run_pair(server: Command, mut client: impl FnMut() -> Command, n: usize, size: usize) {
    let server = std::thread::spawn(move || finish(server));
    let mut done = None;
    for _ in 0..50 {
        std::thread::sleep(std::time::Duration::from_millis(50));
        let out = finish(client());
        if out.status.success() {
            done = Some(out);
            break;
        }
    }
    let client = done.expect("the client never completed");
    let server = server.join().unwrap();
    let text = |o: &std::process::Output| String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(server.status.success(), "server: {}", text(&server));
    let bytes = format!("{} bytes in", 2 * n * size);
    assert!(text(&client).contains(&bytes), "client: {}", text(&client));
    assert!(text(&server).contains(&bytes), "server: {}", text(&server));
}

#[test]
fn the_tool_runs_unchanged_on_rdma_core_in_both_roles() {
    let (tool, lib) = built();
    let (hw, sw) = ("127.0.3.12", "127.0.3.13");
    let (n, size) = (100, 8192);
    let common = ["-n", "100", "-s", "8192"];
    // rdma-core serves, the engine connects.
    let port = free_port();
    let mut args = vec!["-d", hw, "-p", &port];
    args.extend(common);
    let server = pingpong(&tool, &lib, Some(hw), &args);
    run_pair(
        server,
        || {
            let mut a = vec!["127.0.0.1", "-d", sw, "-p", &port];
            a.extend(common);
            pingpong(&tool, &lib, None, &a)
        },
        n,
        size,
    );
    // The engine serves, rdma-core connects.
    let port = free_port();
    let mut args = vec!["-d", sw, "-p", &port];
    args.extend(common);
    let server = pingpong(&tool, &lib, None, &args);
    run_pair(
        server,
        || {
            let mut a = vec!["127.0.0.1", "-d", hw, "-p", &port];
            a.extend(common);
            pingpong(&tool, &lib, Some(hw), &a)
        },
        n,
        size,
    );
}

#[test]
fn the_tool_connects_through_the_rdma_cm_on_rdma_core_in_both_roles() {
    let (tool, lib) = built();
    assert!(
        lib.with_file_name("liboxrdma_rdmacm.so").exists(),
        "liboxrdma_rdmacm.so is not built: run the workspace's tests"
    );
    let (hw, sw) = ("127.0.3.16", "127.0.3.17");
    let common = ["--cm", "-n", "100", "-s", "4096"];
    for (hw_serves, port) in [(true, "7491"), (false, "7492")] {
        let (s_ip, c_ip) = if hw_serves { (hw, sw) } else { (sw, hw) };
        let side = |ip: &str| (ip == hw).then_some(hw);
        let mut args = vec!["-d", s_ip, "-p", port];
        args.extend(common);
        let server = pingpong(&tool, &lib, side(s_ip), &args);
        run_pair(
            server,
            || {
                let mut a = vec![s_ip, "-d", c_ip, "-p", port];
                a.extend(common);
                pingpong(&tool, &lib, side(c_ip), &a)
            },
            100,
            4096,
        );
    }
}

#[test]
fn rsockets_run_unchanged_on_rdma_core_in_both_roles() {
    let (tool, lib) = built();
    let (hw, sw) = ("127.0.3.18", "127.0.3.19");
    let common = ["-n", "200", "-s", "65536"];
    for (hw_serves, port) in [(true, "7493"), (false, "7494")] {
        let (s_ip, c_ip) = if hw_serves { (hw, sw) } else { (sw, hw) };
        let side = |ip: &str| (ip == hw).then_some(hw);
        let mut args = vec!["-d", s_ip, "-p", port];
        args.extend(common);
        let server = oxrdma(&tool, &lib, side(s_ip), "rstream", &args);
        run_pair(
            server,
            || {
                let mut a = vec![s_ip, "-d", c_ip, "-p", port];
                a.extend(common);
                oxrdma(&tool, &lib, side(c_ip), "rstream", &a)
            },
            200,
            65536,
        );
    }
}

#[test]
fn a_device_rdma_core_lacks_is_one_clear_error() {
    let (tool, lib) = built();
    let out = finish(pingpong(
        &tool,
        &lib,
        Some("127.0.3.14"),
        &["-d", "127.0.3.15", "-n", "1"],
    ));
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no rdma-core device has 127.0.3.15"), "{err}");
}
