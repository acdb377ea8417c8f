//! Links the C library as rdma-core 44 links libibverbs: its version nodes
//! (`libibverbs.map`; the symbols are bound to them in `src/exports.rs`) and the soname
//! `libibverbs.so.1`. Also puts the name `libibverbs.so.1` beside the library in the
//! profile's output directory (`target/release/`), so that `LD_LIBRARY_PATH` pointing
//! there is all a program needs.

use std::path::PathBuf;

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets it");
    println!("cargo:rerun-if-changed=libibverbs.map");
    println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={dir}/libibverbs.map");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libibverbs.so.1");
    // OUT_DIR is <target>/<profile>/build/<pkg>-<hash>/out.
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets it"));
    if let Some(profile_dir) = out.ancestors().nth(3) {
        let link = profile_dir.join("libibverbs.so.1");
        // Run again whenever the name has gone missing.
        println!("cargo:rerun-if-changed={}", link.display());
        if std::fs::symlink_metadata(&link).is_err() {
            // Dangling until the library is linked, right after this script.
            let _ = std::os::unix::fs::symlink("liboxrdma_ibverbs.so", &link);
        }
    }
}
