//! `oxrdma dev-nodes`: the `/dev/infiniband/uverbs<N>` files that UCX looks for before it
//! opens a device. UCX (and so Open MPI's and MPICH's UCX paths) lists an IB device only if
//! `/dev/infiniband/<dev_name>` is a character device the user may read and write; it never
//! opens it. The C library names its devices' `dev_name` `uverbs<N>` in configuration
//! order, so one node per device (with nothing configured, one per interface and one for loopback)
//! makes UCX see them all. Each node is a character device with /dev/null's numbers (1, 3)
//! and mode 0666: harmless if anything opens it. Making nodes needs root, once per boot
//! (`/dev` is a tmpfs).

use anyhow::{bail, Context};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// `oxrdma dev-nodes`.
#[derive(clap::Args, Debug, Clone)]
pub struct DevNodesArgs {
    /// Remove the nodes this command made instead.
    #[arg(long)]
    pub remove: bool,
    /// The directory to make them in.
    #[arg(long, default_value = "/dev/infiniband", hide = true)]
    pub dir: PathBuf,
}

/// The null device's numbers: what each node is.
const NULL_DEV: (u32, u32) = (1, 3);

/// How many devices the C library lists (as it counts them).
fn device_count() -> anyhow::Result<usize> {
    match oxrdma::config::devices() {
        Ok(list) => Ok(list.len()),
        Err(e) => bail!("{e}"),
    }
}

/// Whether `path` is a node this command made (a character device with /dev/null's numbers).
fn ours(path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path).is_ok_and(|m| {
        m.file_type().is_char_device() && (libc::major(m.rdev()), libc::minor(m.rdev())) == NULL_DEV
    })
}

/// Makes (or with `--remove`, removes) one node per configured device.
pub fn run(a: &DevNodesArgs) -> anyhow::Result<()> {
    let n = device_count()?;
    for i in 0..n {
        let path = a.dir.join(format!("uverbs{i}"));
        if a.remove {
            if ours(&path) {
                std::fs::remove_file(&path)
                    .with_context(|| format!("cannot remove {}", path.display()))?;
                println!("removed {}", path.display());
            }
            continue;
        }
        if ours(&path) {
            println!("{} is there", path.display());
            continue;
        }
        if path.symlink_metadata().is_ok() {
            // A real RDMA device's node: it serves UCX as well, leave it alone.
            println!("{} exists already (left as it is)", path.display());
            continue;
        }
        std::fs::create_dir_all(&a.dir)
            .with_context(|| format!("cannot create {} (run as root)", a.dir.display()))?;
        mknod(&path)?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666))?;
        println!("made {}", path.display());
    }
    Ok(())
}

fn mknod(path: &Path) -> anyhow::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())?;
    let dev = libc::makedev(NULL_DEV.0, NULL_DEV.1);
    // SAFETY: `c` is a NUL-terminated path that lives across the call.
    if unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o666, dev) } != 0 {
        let e = std::io::Error::last_os_error();
        bail!("cannot make {}: {e} (run as root)", path.display());
    }
    Ok(())
}
