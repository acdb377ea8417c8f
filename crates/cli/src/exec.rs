//! `oxrdma exec -- PROGRAM [ARGS]`: runs an unmodified RDMA program on oxrdma's
//! `libibverbs.so.1` and `librdmacm.so.1`, which live in a directory of their own (never
//! in place of rdma-core's): that directory goes first on `LD_LIBRARY_PATH`, and the
//! program replaces this process.

use anyhow::{bail, Context};
use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

/// `oxrdma exec`.
#[derive(clap::Args, Debug, Clone)]
pub struct ExecArgs {
    /// The program and its arguments (after `--`).
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
    pub command: Vec<OsString>,
}

/// Where the libraries are: `OXRDMA_LIB_DIR`, else `../lib/oxrdma` beside this program
/// (the package's layout: /usr/bin and /usr/lib/oxrdma), else this program's own
/// directory (a cargo build's target/release).
pub fn lib_dir() -> anyhow::Result<PathBuf> {
    if let Some(d) = std::env::var_os("OXRDMA_LIB_DIR") {
        return Ok(PathBuf::from(d));
    }
    let exe = std::env::current_exe().context("cannot find this program")?;
    let bin = exe.parent().unwrap_or(Path::new("/"));
    let candidates = [bin.join("../lib/oxrdma"), bin.to_path_buf()];
    for d in &candidates {
        if d.join("libibverbs.so.1").exists() {
            return Ok(d.canonicalize().unwrap_or_else(|_| d.clone()));
        }
    }
    bail!(
        "no libibverbs.so.1 in {} or {} (set OXRDMA_LIB_DIR)",
        candidates[0].display(),
        candidates[1].display()
    )
}

/// `LD_LIBRARY_PATH` with `dir` first.
fn library_path(dir: &Path) -> OsString {
    let mut path = OsString::from(dir);
    if let Some(old) = std::env::var_os("LD_LIBRARY_PATH").filter(|o| !o.is_empty()) {
        path.push(":");
        path.push(old);
    }
    path
}

/// Replaces this process with the program; returns only if that failed.
pub fn run(a: &ExecArgs) -> anyhow::Result<()> {
    let dir = lib_dir()?;
    let (program, args) = a.command.split_first().context("no program given")?;
    let e = std::process::Command::new(program)
        .args(args)
        .env("LD_LIBRARY_PATH", library_path(&dir))
        .exec();
    Err(e).with_context(|| format!("cannot run {}", program.to_string_lossy()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_library_directory_goes_first() {
        let p = library_path(Path::new("/usr/lib/oxrdma"));
        assert!(p.to_string_lossy().starts_with("/usr/lib/oxrdma"), "{p:?}");
    }
}
