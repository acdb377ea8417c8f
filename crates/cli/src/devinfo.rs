//! `oxrdma devinfo`: what `ibv_devinfo -v` shows, for the device on one address.

use std::net::IpAddr;

/// `oxrdma devinfo`.
#[derive(clap::Args, Debug, Clone)]
pub struct DevinfoArgs {
    /// The device's IP address (its GID).
    #[arg(short = 'd', long, default_value = "127.0.0.2")]
    pub addr: IpAddr,
}

/// Opens the device on `ip` (binding its port, so a taken address is reported) and prints
/// its description.
pub fn devinfo(ip: IpAddr) -> anyhow::Result<()> {
    let ctx = oxrdma::Context::open(ip)?;
    let a = ctx.attr();
    let gid = ctx.gid();
    println!("hca_id:\toxrdma_{ip}");
    println!("\ttransport:\t\t\tInfiniBand (0)");
    println!("\tfw_ver:\t\t\t\t{}", env!("CARGO_PKG_VERSION"));
    println!("\tvendor_id:\t\t\t0x0000");
    println!("\tphys_port_cnt:\t\t\t1");
    println!("\tmax_qp:\t\t\t\t{}", a.max_qp);
    println!("\tmax_qp_wr:\t\t\t{}", a.max_qp_wr);
    println!("\tmax_sge:\t\t\t{}", a.max_sge);
    println!("\tmax_cq:\t\t\t\t{}", a.max_cq);
    println!("\tmax_cqe:\t\t\t{}", a.max_cqe);
    println!("\tmax_mr:\t\t\t\t{}", a.max_mr);
    println!("\tmax_mr_size:\t\t\t{:#x}", a.max_mr_size);
    println!("\tmax_pd:\t\t\t\t{}", a.max_pd);
    println!("\tmax_qp_rd_atom:\t\t\t{}", a.max_qp_rd_atom);
    println!("\tmax_qp_init_rd_atom:\t\t{}", a.max_qp_rd_atom);
    println!("\tmax_inline_data:\t\t{}", a.max_inline_data);
    let cap = match a.atomic_cap {
        oxrdma_core::AtomicCap::None => "ATOMIC_NONE",
        oxrdma_core::AtomicCap::Hca => "ATOMIC_HCA",
        oxrdma_core::AtomicCap::Glob => "ATOMIC_GLOB",
    };
    println!("	atomic_cap:			{cap} ({})", a.atomic_cap as u32);
    println!("\tmax_mw:\t\t\t\t{}", a.max_mw);
    println!("\tmax_ah:\t\t\t\t{}", a.max_ah);
    println!("\tmax_srq:\t\t\t{}", a.max_srq);
    println!("\tmax_srq_wr:\t\t\t{}", a.max_srq_wr);
    println!("\tmax_srq_sge:\t\t\t{}", a.max_srq_sge);
    println!("\t\tport:\t1");
    println!("\t\t\tstate:\t\t\tPORT_ACTIVE (4)");
    let m = ctx.active_mtu();
    println!("\t\t\tmax_mtu:\t\t4096 (5)");
    println!("\t\t\tactive_mtu:\t\t{} ({})", m.bytes(), m as u32);
    println!("\t\t\tlink_layer:\t\tEthernet");
    println!("\t\t\tGID[  0]:\t\t{gid}, RoCE v2");
    Ok(())
}
