//! The project's C example (`examples/rc_verbs.c`), compiled against Debian's
//! `infiniband/verbs.h` and linked with `-libverbs`, runs on this library: RDMA WRITE,
//! READ, SEND with immediate and both atomics between two contexts of one process, each
//! result checked by the program. Needs libibverbs-dev: without it the test says SKIPPED,
//! and fails instead under `OXRDMA_CI`.

use std::path::Path;
use std::process::Command;

#[test]
fn the_c_example_runs_every_rc_operation_and_checks_the_bytes() {
    if !Path::new("/usr/include/infiniband/verbs.h").exists() {
        assert!(
            std::env::var_os("OXRDMA_CI").is_none(),
            "verbs.h is missing: install libibverbs-dev"
        );
        eprintln!("SKIPPED: verbs.h is missing (install libibverbs-dev)");
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let dir = std::env::temp_dir().join(format!("oxrdma-c-example-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join("rc_verbs");
    let cc = Command::new("cc")
        .arg(root.join("examples/rc_verbs.c"))
        .args(["-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg("-libverbs")
        .output()
        .unwrap();
    assert!(
        cc.status.success(),
        "{}",
        String::from_utf8_lossy(&cc.stderr)
    );
    // The library this test was built with, under the name the program asks for.
    let so = std::env::current_exe()
        .unwrap()
        .with_file_name("liboxrdma_ibverbs.so");
    std::os::unix::fs::symlink(&so, dir.join("libibverbs.so.1")).unwrap();
    let out = Command::new(&exe)
        .env("LD_LIBRARY_PATH", &dir)
        .env_remove("OXRDMA_DEVICES")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
    assert!(out.status.success(), "{text}");
    for line in [
        "RDMA WRITE 1024 B: ok",
        "RDMA READ 1024 B: ok",
        "SEND with immediate 512 B: ok",
        "atomics: ok",
        "all checks passed",
    ] {
        assert!(text.contains(line), "no '{line}' in:\n{text}");
    }
}
