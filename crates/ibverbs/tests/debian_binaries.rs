//! Debian's own verbs tools, unmodified, on this library with only `LD_LIBRARY_PATH` set
//! (and `OXRDMA_DEVICES` where a case says so). Needs Debian's ibverbs-utils: without it
//! the tests say SKIPPED, and fail instead under `OXRDMA_CI` (`.ci/run` installs it).

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A directory with `libibverbs.so.1` naming the library this test was built with
/// (`cargo test` leaves it beside the test binary, in `target/<profile>/deps`).
fn lib_dir() -> PathBuf {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let exe = std::env::current_exe().unwrap();
        let so = exe.with_file_name("liboxrdma_ibverbs.so");
        assert!(so.exists(), "the library was not built: {}", so.display());
        let dir = std::env::temp_dir().join(format!("oxrdma-ibverbs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let link = dir.join("libibverbs.so.1");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&so, &link).unwrap();
        dir
    })
    .clone()
}

/// Runs a Debian tool on our library, or None (after saying SKIPPED) if it is missing.
fn run(tool: &str, args: &[&str], env: &[(&str, &str)]) -> Option<Output> {
    Some(command(tool, args, env)?.output().unwrap())
}

/// A Debian tool on our library, ready to run, or None (after saying SKIPPED) if it is
/// missing.
fn command(tool: &str, args: &[&str], env: &[(&str, &str)]) -> Option<Command> {
    let path = Path::new("/usr/bin").join(tool);
    if !path.exists() {
        assert!(
            std::env::var_os("OXRDMA_CI").is_none(),
            "{tool} is missing: install ibverbs-utils"
        );
        // Past the harness, which hides what a passing test prints: a skip must show.
        let _ = std::io::Write::write_fmt(
            &mut std::io::stderr(),
            format_args!("SKIPPED: {tool} is missing (install ibverbs-utils)\n"),
        );
        return None;
    }
    let mut c = Command::new(path);
    c.args(args)
        .env("LD_LIBRARY_PATH", lib_dir())
        // The loopback device alone, as with nothing configured on a host whose only
        // interface is loopback: with nothing set the devices would follow this host's
        // interfaces, and tests talk over loopback only.
        .env("OXRDMA_DEVICES", "oxr0=lo")
        .env_remove("OXRDMA_CONFIG")
        // No user configuration file: the directory has no `oxrdma/`.
        .env("XDG_CONFIG_HOME", lib_dir());
    for (k, v) in env {
        // An empty value: the variable unset.
        if v.is_empty() {
            c.env_remove(k);
        } else {
            c.env(k, v);
        }
    }
    Some(c)
}

/// Runs a tool that must succeed; its standard output, or None if it is missing.
fn run_ok(tool: &str, args: &[&str], env: &[(&str, &str)]) -> Option<String> {
    let out = run(tool, args, env)?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{tool} failed:\n{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(text)
}

#[test]
fn ibv_devices_lists_one_device_per_interface_with_nothing_configured() {
    let Some(text) = run_ok("ibv_devices", &[], &[("OXRDMA_DEVICES", "")]) else {
        return;
    };
    // This host's interfaces that are up and have an address, loopback aside (only listed:
    // nothing is sent); on a host with none, the loopback device.
    let mut want: Vec<String> = oxrdma::interfaces::interfaces()
        .into_iter()
        .filter(|i| i.up && !i.loopback && !i.addrs.is_empty())
        .map(|i| format!("oxr_{}", i.name))
        .collect();
    if want.is_empty() {
        want.push("oxr0".into());
    }
    assert_eq!(device_names(&text), want, "{text}");
}

#[test]
fn oxrdma_devices_lo_is_the_loopback_device_alone() {
    let Some(text) = run_ok("ibv_devices", &[], &[]) else {
        return;
    };
    assert_eq!(device_names(&text), ["oxr0"], "{text}");
}

#[test]
fn ibv_devices_lists_the_devices_oxrdma_devices_names() {
    let env = [("OXRDMA_DEVICES", "oxr0=127.0.0.2,lab=[::1]")];
    let Some(text) = run_ok("ibv_devices", &[], &env) else {
        return;
    };
    let names: Vec<&str> = text
        .lines()
        .skip(2)
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(names, ["oxr0", "lab"], "{text}");
    // GUIDs follow the address: 127.0.0.2 ends in 7f000002.
    assert!(text.contains("7f000002"), "{text}");
}

#[test]
fn a_malformed_oxrdma_devices_is_one_clear_message() {
    let Some(out) = run("ibv_devices", &[], &[("OXRDMA_DEVICES", "oxr0=nowhere")]) else {
        return;
    };
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("OXRDMA_DEVICES") && err.contains("nowhere"),
        "{err}"
    );
}

/// The device names `ibv_devices` listed.
fn device_names(text: &str) -> Vec<&str> {
    text.lines()
        .skip(2)
        .filter_map(|l| l.split_whitespace().next())
        .collect()
}

#[test]
fn a_configuration_file_names_devices_and_oxrdma_devices_overrides_it() {
    let dir = lib_dir().join("config");
    std::fs::create_dir_all(dir.join("oxrdma")).unwrap();
    let file = dir.join("oxrdma/devices.conf");
    std::fs::write(
        &file,
        "# two devices
file0 = 127.0.0.7
file1 = [::1]  # v6
",
    )
    .unwrap();
    let path = file.to_str().unwrap();
    let unset = ("OXRDMA_DEVICES", "");
    let Some(text) = run_ok("ibv_devices", &[], &[("OXRDMA_CONFIG", path), unset]) else {
        return;
    };
    assert_eq!(device_names(&text), ["file0", "file1"], "{text}");
    assert!(text.contains("7f000007"), "{text}");
    // The same file found as the user's, with no variable naming it.
    let home = dir.to_str().unwrap();
    let text = run_ok("ibv_devices", &[], &[("XDG_CONFIG_HOME", home), unset]).unwrap();
    assert_eq!(device_names(&text), ["file0", "file1"], "{text}");
    let env = [
        ("OXRDMA_CONFIG", path),
        ("OXRDMA_DEVICES", "env0=127.0.0.8"),
    ];
    let text = run_ok("ibv_devices", &[], &env).unwrap();
    assert_eq!(device_names(&text), ["env0"], "{text}");
    // A bad line: one message naming the file and the line, and no devices.
    std::fs::write(
        &file,
        "file0 = 127.0.0.7
file1 127.0.0.8
",
    )
    .unwrap();
    let out = run("ibv_devices", &[], &[("OXRDMA_CONFIG", path), unset]).unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("{path}:2: 'file1 127.0.0.8'")),
        "{err}"
    );
    assert!(device_names(&String::from_utf8_lossy(&out.stdout)).is_empty());
    let missing = dir.join("missing.conf");
    let out = run(
        "ibv_devices",
        &[],
        &[("OXRDMA_CONFIG", missing.to_str().unwrap()), unset],
    )
    .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("missing.conf") && err.contains("No such file"),
        "{err}"
    );
}

/// The GIDs `ibv_devinfo -v` printed.
fn gids(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("GID["))
        .filter_map(|l| l.split_once(':').map(|(_, g)| g.trim().to_string()))
        .collect()
}

#[test]
fn ibv_devinfo_describes_an_active_roce_v2_port() {
    let Some(text) = run_ok("ibv_devinfo", &["-v"], &[]) else {
        return;
    };
    for want in [
        "hca_id:\toxr0",
        "PORT_ACTIVE (4)",
        "link_layer:\t\tEthernet",
        "active_mtu:\t\t4096 (5)",
        "atomic_cap:\t\t\tATOMIC_HCA (1)",
    ] {
        assert!(text.contains(want), "no '{want}' in\n{text}");
    }
    let g = gids(&text);
    assert_eq!(g.len(), 1, "{text}");
    assert!(
        g[0].starts_with("::ffff:127.0.0.") && g[0].ends_with("RoCE v2"),
        "{text}"
    );
}

/// An iWARP device (`name=iwarp:ADDRESS`) beside a RoCE one: Debian's ibv_devinfo shows
/// each with its own transport, as it shows siw's and rxe's, and ibv_devices lists both.
/// The iWARP device offers no atomics (RDMAP carries none; siw reports none): a program
/// that looks must not be told it may post them.
#[test]
fn ibv_devinfo_shows_an_iwarp_device_as_siws() {
    let spec = "oxr0=127.0.0.63,siw0=iwarp:127.0.0.62";
    let Some(text) = run_ok("ibv_devinfo", &["-v"], &[("OXRDMA_DEVICES", spec)]) else {
        return;
    };
    let (roce, iwarp) = text.split_once("hca_id:\tsiw0").expect("siw0 listed");
    assert!(roce.contains("transport:\t\t\tInfiniBand (0)"), "{text}");
    assert!(roce.contains("atomic_cap:\t\t\tATOMIC_HCA (1)"), "{text}");
    for want in [
        "transport:\t\t\tiWARP (1)",
        "atomic_cap:\t\t\tATOMIC_NONE (0)",
        "PORT_ACTIVE (4)",
        "link_layer:\t\tEthernet",
    ] {
        assert!(iwarp.contains(want), "no '{want}' for siw0 in\n{text}");
    }
    let g = gids(iwarp);
    assert!(g.len() == 1 && !g[0].ends_with("RoCE v2"), "{text}");
    let Some(list) = run_ok("ibv_devices", &[], &[("OXRDMA_DEVICES", spec)]) else {
        return;
    };
    assert_eq!(device_names(&list), ["oxr0", "siw0"], "{list}");
}

#[test]
fn with_nothing_set_a_second_process_takes_the_next_free_loopback_address() {
    // Hold 127.0.0.2 here: the tool must not get it. A sibling test's ibv_devinfo may hold
    // it for a moment (it takes the first free address too), so wait for it to let go; an
    // address held longer is held by someone else, which serves the test as well.
    let deadline = Instant::now() + Duration::from_secs(2);
    let _held = loop {
        match oxrdma::Context::open("127.0.0.2".parse().unwrap()) {
            Ok(c) => break Some(c),
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            Err(_) => break None,
        }
    };
    let Some(text) = run_ok("ibv_devinfo", &["-v"], &[]) else {
        return;
    };
    let g = gids(&text);
    assert!(
        g.len() == 1 && !g[0].starts_with("::ffff:127.0.0.2,"),
        "{text}"
    );
}

#[test]
fn a_configured_address_in_use_is_one_clear_error_naming_it_and_the_variable() {
    // A free port held alone (as Linux rxe holds its own), then the tool is pointed at it.
    let ip = (40..90).map(|n| format!("127.0.0.{n}")).find_map(|a| {
        oxrdma::Context::open_alone(a.parse().unwrap())
            .ok()
            .map(|c| (a, c))
    });
    let (addr, _held) = ip.expect("a free loopback address in 127.0.0.40-89");
    let spec = format!("oxr0={addr}");
    let Some(out) = run("ibv_devinfo", &[], &[("OXRDMA_DEVICES", &spec)]) else {
        return;
    };
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("oxrdma:")).collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(
        lines[0].contains(&addr) && lines[0].contains("OXRDMA_DEVICES"),
        "{err}"
    );
}

#[test]
fn a_configured_address_another_process_uses_is_shared() {
    // This process uses the address (as a device of its own), and the tool, configured
    // with the same address, opens its device there too: one GID, as on a NIC.
    let ip = (40..90).map(|n| format!("127.0.0.{n}")).find_map(|a| {
        oxrdma::Context::open(a.parse().unwrap())
            .ok()
            .map(|c| (a, c))
    });
    let (addr, _held) = ip.expect("a free loopback address in 127.0.0.40-89");
    let spec = format!("oxr0={addr}");
    let Some(text) = run_ok("ibv_devinfo", &["-v"], &[("OXRDMA_DEVICES", &spec)]) else {
        return;
    };
    let g = gids(&text);
    assert!(
        g.len() == 1 && g[0].starts_with(&format!("::ffff:{addr},")),
        "{text}"
    );
}

/// Runs `tool` as a server and as a client on this host (two processes, nothing set but
/// `LD_LIBRARY_PATH`, TCP port `port` for their exchange), both must succeed, and both
/// must report the same byte count. The client is retried while the server is not yet
/// listening.
fn pingpong(tool: &str, port: u16, args: &[&str]) {
    pingpong_with(tool, port, args, &[]);
}

/// Runs a ping-pong client, again while its server is not yet listening (for up to 10 s).
fn run_client(tool: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let out = run(tool, args, env).unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        if !(err.contains("Couldn't connect") && Instant::now() < deadline) {
            return out;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// [`pingpong`] with `env` set for both sides; returns what the server and the client
/// printed.
fn pingpong_with(
    tool: &str,
    port: u16,
    args: &[&str],
    env: &'static [(&'static str, &'static str)],
) -> (String, String) {
    if !Path::new("/usr/bin").join(tool).exists() {
        run(tool, &[], &[]); // says SKIPPED, or fails under OXRDMA_CI
        return (String::new(), String::new());
    }
    let port = port.to_string();
    let mut server_args = vec!["-p", &port];
    server_args.extend_from_slice(args);
    let server = {
        let tool = tool.to_string();
        let a: Vec<String> = server_args.iter().map(|s| s.to_string()).collect();
        std::thread::spawn(move || {
            let a: Vec<&str> = a.iter().map(String::as_str).collect();
            run(&tool, &a, env).unwrap()
        })
    };
    let mut client_args = server_args.clone();
    client_args.push("localhost");
    let client = run_client(tool, &client_args, env);
    let server = server.join().unwrap();
    let text = |o: &Output| {
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    };
    let (s, c) = (text(&server), text(&client));
    assert!(
        server.status.success() && client.status.success(),
        "{tool} {args:?}:\n--- server\n{s}--- client\n{c}"
    );
    let bytes = |t: &str| {
        t.lines()
            .find(|l| l.contains(" bytes in "))
            .and_then(|l| l.split_whitespace().next())
            .map(str::to_string)
    };
    assert!(bytes(&s).is_some(), "{s}");
    assert_eq!(bytes(&s), bytes(&c), "--- server\n{s}--- client\n{c}");
    (s, c)
}

/// Both ends of a pingpong on one configured address, as two processes on a host with a
/// NIC: one GID, the QPNs tell them apart.
#[test]
fn pingpongs_whose_two_processes_share_one_address() {
    const ENV: &[(&str, &str)] = &[("OXRDMA_DEVICES", "oxr0=127.0.0.121")];
    let gid = |t: &str| {
        t.lines()
            .find(|l| l.contains("local address"))
            .and_then(|l| l.split("GID").nth(1))
            .map(|g| g.trim().to_string())
    };
    for (tool, port) in [("ibv_rc_pingpong", 18611), ("ibv_ud_pingpong", 18612)] {
        let (s, c) = pingpong_with(tool, port, &["-g", "0", "-n", "200"], ENV);
        if s.is_empty() {
            continue;
        }
        assert_eq!(gid(&s), Some("::ffff:127.0.0.121".to_string()), "{s}");
        assert_eq!(gid(&s), gid(&c), "--- server\n{s}--- client\n{c}");
    }
}

#[test]
fn ibv_rc_pingpong_runs_between_two_processes() {
    pingpong("ibv_rc_pingpong", 18601, &["-g", "0", "-n", "200"]);
}

/// The captures `ibv_rc_pingpong` made (a file per process, `OXRDMA_PCAP` with `%p`) with
/// `env` set for both sides, read and removed.
fn pingpong_captures(port: u16, name: &str, env: &[(&'static str, &'static str)]) -> Vec<Vec<u8>> {
    captures_of("ibv_rc_pingpong", port, name, env)
}

/// [`pingpong_captures`] of `tool`.
fn captures_of(
    tool: &str,
    port: u16,
    name: &str,
    env: &[(&'static str, &'static str)],
) -> Vec<Vec<u8>> {
    let prefix = format!("oxrdma-pingpong-{name}-{}-", std::process::id());
    let pcap = std::env::temp_dir().join(format!("{prefix}%p.pcap"));
    let pcap: &'static str = Box::leak(pcap.to_string_lossy().into_owned().into_boxed_str());
    let mut all = env.to_vec();
    all.push(("OXRDMA_PCAP", pcap));
    let all: &'static [(&'static str, &'static str)] = Box::leak(all.into_boxed_slice());
    let (s, _) = pingpong_with(tool, port, &["-g", "0", "-n", "50"], all);
    if s.is_empty() {
        return Vec::new(); // skipped
    }
    let mut files = Vec::new();
    for e in std::fs::read_dir(std::env::temp_dir()).unwrap().flatten() {
        if e.file_name().to_string_lossy().starts_with(&prefix) {
            files.push(std::fs::read(e.path()).unwrap());
            std::fs::remove_file(e.path()).unwrap();
        }
    }
    // A client that started before the server listened left one with no packet.
    assert!(files.len() >= 2, "a capture per process");
    files
}

/// `OXRDMA_SECURE_KEY` on both sides secures an unmodified program's RC QPs: the
/// pingpong runs, and its payload (ibv_rc_pingpong fills its buffer with 0x7b) is on the
/// wire in the clear without the key and nowhere with it; `OXRDMA_SECURE_PEERS` keeps
/// the peers outside it plain.
#[test]
fn ibv_rc_pingpong_with_a_pre_shared_key_runs_sealed() {
    let shows_payload = |pcap: &Vec<u8>| pcap.windows(32).any(|w| w.iter().all(|&b| b == 0x7b));
    let plain = pingpong_captures(18613, "plain", &[]);
    if plain.is_empty() {
        return;
    }
    let showing = plain.iter().filter(|p| shows_payload(p)).count();
    assert!(
        showing >= 2,
        "the server's and the client's plain captures show the payload"
    );
    let key = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
    let sealed = pingpong_captures(18614, "sealed", &[("OXRDMA_SECURE_KEY", key)]);
    assert!(
        !sealed.iter().any(shows_payload),
        "a sealed capture shows the payload"
    );
    // Peers outside OXRDMA_SECURE_PEERS (rxe hosts, say) are spoken to in the clear; those
    // inside, sealed.
    let outside = pingpong_captures(
        18616,
        "outside",
        &[
            ("OXRDMA_SECURE_KEY", key),
            ("OXRDMA_SECURE_PEERS", "10.0.0.0/8,fd00::/16"),
        ],
    );
    let showing = outside.iter().filter(|p| shows_payload(p)).count();
    assert!(showing >= 2, "a peer outside OXRDMA_SECURE_PEERS is plain");
    let inside = pingpong_captures(
        18617,
        "inside",
        &[
            ("OXRDMA_SECURE_KEY", key),
            ("OXRDMA_SECURE_PEERS", "10.0.0.0/8,127.0.0.0/8"),
        ],
    );
    assert!(!inside.iter().any(shows_payload), "a peer inside is sealed");
    // UC QPs too.
    let uc = captures_of("ibv_uc_pingpong", 18618, "uc-plain", &[]);
    assert!(
        uc.iter().filter(|p| shows_payload(p)).count() >= 2,
        "plain UC"
    );
    let uc = captures_of(
        "ibv_uc_pingpong",
        18619,
        "uc",
        &[("OXRDMA_SECURE_KEY", key)],
    );
    assert!(
        !uc.iter().any(shows_payload),
        "a sealed UC capture shows the payload"
    );
    // Another suite, named on both sides, runs sealed too; two different suites get
    // nothing through.
    let gcm = [
        ("OXRDMA_SECURE_KEY", key),
        ("OXRDMA_SECURE_SUITE", "aes-256-gcm"),
    ];
    let sealed = pingpong_captures(18620, "gcm", &gcm);
    assert!(
        !sealed.iter().any(shows_payload),
        "a capture sealed with AES-256-GCM shows the payload"
    );
    let mut server = command(
        "ibv_rc_pingpong",
        &["-g", "0", "-p", "18621", "-n", "5"],
        &gcm,
    )
    .unwrap()
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let args = ["-g", "0", "-p", "18621", "-n", "5", "localhost"];
    let client = run_client("ibv_rc_pingpong", &args, &[("OXRDMA_SECURE_KEY", key)]);
    // The server waits for a message that never opens: ours to end.
    let _ = server.kill();
    let _ = server.wait();
    let err = String::from_utf8_lossy(&client.stderr);
    assert!(
        !client.status.success() && err.contains("Failed status"),
        "AEGIS-128X2 spoke to AES-256-GCM: {err}"
    );
    // A malformed key or suite is one clear error when the device opens, not a plain
    // connection.
    for (env, says) in [
        (
            ("OXRDMA_SECURE_SUITE", "aes-128-gcm"),
            "OXRDMA_SECURE_SUITE: `aes-128-gcm` is not",
        ),
        (
            ("OXRDMA_SECURE_KEY", "12ab"),
            "OXRDMA_SECURE_KEY: not 64 hex digits",
        ),
    ] {
        let args = ["-g", "0", "-p", "18615", "localhost"];
        let out = run("ibv_rc_pingpong", &args, &[env]).unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(says), "{err}");
    }
}

#[test]
fn ibv_rc_pingpong_with_completion_events_and_small_messages() {
    pingpong(
        "ibv_rc_pingpong",
        18602,
        &["-g", "0", "-n", "200", "-e", "-s", "64"],
    );
}

#[test]
fn ibv_uc_pingpong_runs_between_two_processes() {
    pingpong("ibv_uc_pingpong", 18603, &["-g", "0", "-n", "200"]);
}

#[test]
fn ibv_ud_pingpong_runs_between_two_processes() {
    pingpong("ibv_ud_pingpong", 18604, &["-g", "0", "-n", "200"]);
}

#[test]
fn ibv_srq_pingpong_runs_between_two_processes() {
    pingpong("ibv_srq_pingpong", 18605, &["-g", "0", "-n", "200"]);
}
