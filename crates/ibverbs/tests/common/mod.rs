//! Compiling a C program against Debian's `infiniband/verbs.h` with `-libverbs` and
//! running it on this library.

use std::path::Path;
use std::process::{Command, Output};

/// Compiles `source` (a path from the repository root) and runs it with `libibverbs.so.1`
/// naming the library these tests were built with, nothing else set. None (after saying
/// SKIPPED) without libibverbs-dev; under `OXRDMA_CI` that fails instead.
pub fn compile_and_run(source: &str) -> Option<Output> {
    if !Path::new("/usr/include/infiniband/verbs.h").exists() {
        assert!(
            std::env::var_os("OXRDMA_CI").is_none(),
            "verbs.h is missing: install libibverbs-dev"
        );
        // Past the harness, which hides what a passing test prints: a skip must show.
        let _ = std::io::Write::write_fmt(
            &mut std::io::stderr(),
            format_args!("SKIPPED: verbs.h is missing (install libibverbs-dev)\n"),
        );
        return None;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let stem = Path::new(source).file_stem().unwrap().to_string_lossy();
    let dir = std::env::temp_dir().join(format!("oxrdma-c-{stem}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join(&*stem);
    let cc = Command::new("cc")
        .arg(root.join(source))
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
    let so = std::env::current_exe()
        .unwrap()
        .with_file_name("liboxrdma_ibverbs.so");
    let link = dir.join("libibverbs.so.1");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&so, &link).unwrap();
    let out = Command::new(&exe)
        .env("LD_LIBRARY_PATH", &dir)
        // The loopback device alone (with nothing set, the devices would follow this
        // host's interfaces; tests talk over loopback only).
        .env("OXRDMA_DEVICES", "oxr0=lo")
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    Some(out)
}

/// Standard output and error together.
pub fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Compiles and runs `source`, a program that prints "PASS <case>" per case and exits 1 at
/// the first failure, and checks that it printed `cases` PASS lines (a crash part-way
/// would leave fewer), no FAIL, and exited 0.
#[allow(dead_code)] // The C example's test checks its own lines instead.
pub fn assert_all_pass(source: &str, cases: usize) {
    let Some(out) = compile_and_run(source) else {
        return;
    };
    let text = text(&out);
    assert!(out.status.success(), "{text}");
    assert!(!text.contains("FAIL"), "{text}");
    let passed = text.lines().filter(|l| l.starts_with("PASS ")).count();
    assert_eq!(passed, cases, "{text}");
}
