//! `oxrdma devinfo`: the devices there are (as the C library lists them: configured, or
//! one per interface and one for loopback), each with its interface, MTU and GID table;
//! or with `-d ADDR` what `ibv_devinfo -v` shows for the device on one address.

use oxrdma::config::Target;
use oxrdma::interfaces::{self, Interface};
use std::net::IpAddr;

/// `oxrdma devinfo`.
#[derive(clap::Args, Debug, Clone)]
pub struct DevinfoArgs {
    /// Open the device on this IP address and describe it as `ibv_devinfo -v` does
    /// (without it: list every device, opening none).
    #[arg(short = 'd', long)]
    pub addr: Option<IpAddr>,
}

/// `oxrdma devinfo [-d ADDR]`.
pub fn run(a: &DevinfoArgs) -> anyhow::Result<()> {
    match a.addr {
        Some(ip) => devinfo(ip),
        None => list(),
    }
}

/// Every device, what it sits on and its GIDs by index (nothing is opened or sent).
pub fn list() -> anyhow::Result<()> {
    let devices = oxrdma::config::devices().map_err(anyhow::Error::msg)?;
    let source = match oxrdma::config::configured() {
        Ok(Some(_)) => "configured (OXRDMA_DEVICES or a devices.conf)",
        _ => "nothing configured: one per interface that is up and has an address (none: loopback)",
    };
    println!("# {} devices, {source}", devices.len());
    for (name, target) in devices {
        println!("hca_id:\t{name}");
        let (iface, gids, note) = match &target {
            Target::Interface(i) => {
                let iface = interfaces::interface(i);
                let gids = iface.as_ref().map(Interface::gid_table).unwrap_or_default();
                (iface, gids, "")
            }
            Target::Address(ip) => (
                interfaces::interface_with(*ip),
                vec![oxrdma::Gid::from(*ip)],
                "",
            ),
            Target::Iwarp(ip) => (
                interfaces::interface_with(*ip),
                vec![oxrdma::Gid::from(*ip)],
                "",
            ),
            Target::Loopback => (
                interfaces::interfaces().into_iter().find(|i| i.loopback),
                Vec::new(),
                "::ffff:127.0.0.N (the first of 127.0.0.2-254 no other process holds, taken as a process opens it)",
            ),
        };
        if matches!(target, Target::Iwarp(_)) {
            println!("\ttransport:\tiWARP (1), node type RNIC");
        }
        match &iface {
            Some(i) => {
                let mtu = i
                    .addrs
                    .iter()
                    .find_map(|a| interfaces::interface_mtu(*a))
                    .map_or("?".into(), |m| m.to_string());
                println!("\tinterface:\t{} (index {}, MTU {mtu})", i.name, i.index);
            }
            None => println!("\tinterface:\tnone found"),
        }
        if !note.is_empty() {
            println!("\tGID[  0]:\t{note}, RoCE v2");
        }
        let kind = if matches!(target, Target::Iwarp(_)) {
            "iWARP"
        } else {
            "RoCE v2"
        };
        for (n, g) in gids.iter().enumerate() {
            println!("\tGID[{n:>3}]:\t{g}, {kind}");
        }
    }
    Ok(())
}

/// Opens the device on `ip` (binding its port, so a taken address is reported) and prints
/// its description.
pub fn devinfo(ip: IpAddr) -> anyhow::Result<()> {
    let ctx = oxrdma::Context::open(ip)?;
    let a = ctx.attr();
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
    for (n, g) in ctx.gids().iter().enumerate() {
        println!("\t\t\tGID[{n:>3}]:\t\t{g}, RoCE v2");
    }
    Ok(())
}
