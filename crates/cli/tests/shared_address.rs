//! Many processes on one address, as RDMA is deployed (MPI ranks, a server beside its
//! tools): `oxrdma perf` servers, eight processes all on 127.0.0.95, and their eight clients
//! all on 127.0.0.96, run at once. Each process owns a slot of its address's QPNs and the
//! kernel hands it its own packets; a packet that reached another process would be
//! dropped there (an unknown QPN), and its pair would fail or never finish.

mod common;
use common::{free_port, oxrdma};

use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

const PAIRS: usize = 8;

fn perf(test: &str, args: &[&str]) -> std::process::Command {
    let mut c = oxrdma();
    c.args([
        "perf",
        test,
        "-n",
        "300",
        "-s",
        "65536",
        "--json",
        "--no-progress",
    ])
    .args(args)
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    c
}

fn run_pairs(test: &str) {
    let ports: Vec<String> = (0..PAIRS).map(|_| free_port()).collect();
    let servers: Vec<Child> = ports
        .iter()
        .map(|p| perf(test, &["-d", "127.0.0.95", "-p", p]).spawn().unwrap())
        .collect();
    // Each client tries until its server listens.
    let clients: Vec<Child> = ports
        .iter()
        .map(|p| {
            let script = format!(
                "for i in $(seq 100); do \"$0\" perf {test} 127.0.0.1 -d 127.0.0.96 -p {p} -n 300 \
                 -s 65536 --json --no-progress && exit 0; sleep 0.1; done; exit 1"
            );
            std::process::Command::new("sh")
                .args(["-c", &script, env!("CARGO_BIN_EXE_oxrdma")])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(120);
    for (i, mut c) in clients.into_iter().chain(servers).enumerate() {
        loop {
            if let Some(status) = c.try_wait().unwrap() {
                let out = c.wait_with_output().unwrap();
                let text = String::from_utf8_lossy(&out.stdout);
                assert!(
                    status.success(),
                    "{test}: process {i} failed: {text}{}",
                    String::from_utf8_lossy(&out.stderr)
                );
                if i < PAIRS {
                    let r: serde_json::Value =
                        serde_json::from_str(text.lines().last().unwrap_or("")).unwrap();
                    assert_eq!(r["iterations"], 300, "{test} pair {i}");
                }
                break;
            }
            if Instant::now() > deadline {
                let _ = c.kill();
                panic!("{test}: process {i} did not finish in 120 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

#[test]
fn eight_pairs_of_processes_on_two_shared_addresses() {
    // SEND: every message must reach the one process that posted its receive.
    run_pairs("send-bw");
    // READ: the responses come back to the one process that asked.
    run_pairs("read-bw");
}
