//! Links `librdmacm.so.1` as rdma-core 44 links it: soname, version nodes
//! (`librdmacm.map`), and one trampoline per symbol of `symbols.txt`, each bound to its
//! node with `.symver` and jumping to `oxr_<name>` in libibverbs.so.1. The library needs
//! libibverbs.so.1 (oxrdma's, which holds the RDMA CM): it is linked against a stub of
//! that name built here (the real one need not be built first), so that the dynamic
//! loader loads the real one, whose `oxr_*` functions the jumps then reach. Also puts the
//! name `librdmacm.so.1` beside the library in the profile's output directory.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::Command;

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets it");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets it"));
    println!("cargo:rerun-if-changed=librdmacm.map");
    println!("cargo:rerun-if-changed=symbols.txt");
    let list = std::fs::read_to_string(format!("{dir}/symbols.txt")).expect("symbols.txt");
    let symbols: Vec<(&str, &str)> = list
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| l.split_once(' '))
        .collect();

    // The trampolines, included by src/lib.rs.
    let mut asm = String::new();
    for (name, node) in &symbols {
        writeln!(
            asm,
            "std::arch::global_asm!(\".globl oxr_tramp_{name}\", \".type oxr_tramp_{name}, @function\", \
             \"oxr_tramp_{name}:\", \"jmp oxr_{name}@PLT\", \".symver oxr_tramp_{name}, {name}@@{node}\");"
        )
        .expect("writing to a string");
    }
    std::fs::write(out.join("trampolines.rs"), asm).expect("OUT_DIR is writable");

    // A stub libibverbs.so.1 defining the targets, to link against.
    let mut stub = String::new();
    for (name, _) in &symbols {
        writeln!(stub, "void oxr_{name}(void) {{}}").expect("writing to a string");
    }
    let c = out.join("stub.c");
    std::fs::write(&c, stub).expect("OUT_DIR is writable");
    let so = out.join("libibverbs.so.1");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let ok = Command::new(&cc)
        .args(["-shared", "-fPIC", "-Wl,-soname,libibverbs.so.1", "-o"])
        .arg(&so)
        .arg(&c)
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "{cc} could not build the stub libibverbs.so.1");
    println!("cargo:rustc-cdylib-link-arg=-L{}", out.display());
    println!("cargo:rustc-cdylib-link-arg=-Wl,--no-as-needed");
    println!("cargo:rustc-cdylib-link-arg=-l:libibverbs.so.1");
    println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={dir}/librdmacm.map");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,librdmacm.so.1");

    // OUT_DIR is <target>/<profile>/build/<pkg>-<hash>/out.
    if let Some(profile_dir) = out.ancestors().nth(3) {
        let link = profile_dir.join("librdmacm.so.1");
        println!("cargo:rerun-if-changed={}", link.display());
        if std::fs::symlink_metadata(&link).is_err() {
            let _ = std::os::unix::fs::symlink("liboxrdma_rdmacm.so", &link);
        }
    }
}
