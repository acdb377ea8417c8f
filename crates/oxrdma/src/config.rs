//! Which devices there are, by name and what each sits on (the C library's device list,
//! and the tool's commands that act on every device). The first of these that exists
//! decides:
//! 1. `OXRDMA_DEVICES="oxr0=127.0.0.2,oxr1=[::1],lab=eth1,siw0=iwarp:127.0.0.3"`
//!    (name=address or name=interface pairs, commas between; `iwarp:` before an address
//!    makes an iWARP device there, as `rdma link add siw0 type siw` does);
//! 2. the file `OXRDMA_CONFIG` names (it must exist);
//! 3. `$XDG_CONFIG_HOME/oxrdma/devices.conf` (`~/.config/...` without the variable);
//! 4. `/etc/oxrdma/devices.conf`.
//!
//! A file holds one `name = address` or `name = interface` per line; `#` starts a
//! comment. With none of them, the devices follow the host's interfaces ([`discovered`]).

use std::net::IpAddr;
use std::path::{Path, PathBuf};

/// A device name's longest length plus one (`IBV_SYSFS_NAME_MAX`, the C struct's array).
pub const NAME_MAX: usize = 64;

/// What a device sits on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// One address: its GID table is that address alone.
    Address(IpAddr),
    /// A network interface, as `rdma link add rxeN type rxe netdev IF` makes: its
    /// addresses are its GID table, in rxe's order.
    Interface(String),
    /// An iWARP device on one address (node type RNIC, transport iWARP): its QPs run
    /// over TCP, connected through the RDMA CM.
    Iwarp(IpAddr),
    /// The loopback interface: each process's device takes the first loopback address
    /// 127.0.0.2, 127.0.0.3, … no other process holds (both ends of a pingpong on one
    /// host find each other through the CM's rendezvous and their GIDs).
    Loopback,
}

/// Devices as (name, what it sits on), in order.
pub type DeviceList = Vec<(String, Target)>;

/// The name of the loopback device.
pub const LOOPBACK_DEVICE: &str = "oxr0";

/// The devices: as configured, else as discovered. A configured interface this host
/// (network namespace) does not have is an error, as `rdma link add` refuses one.
pub fn devices() -> Result<DeviceList, String> {
    let Some(list) = configured()? else {
        return Ok(discovered());
    };
    let here = oxrdma_udp::interfaces::interfaces();
    for (name, t) in &list {
        if let Target::Interface(i) = t {
            if !here.iter().any(|h| &h.name == i) {
                let from = if std::env::var_os("OXRDMA_DEVICES").is_some() {
                    "OXRDMA_DEVICES"
                } else {
                    "the devices file"
                };
                return Err(format!(
                    "{from}: device {name}: no network interface {i} on this host"
                ));
            }
        }
    }
    Ok(list)
}

/// With nothing configured: a device per network interface that is up and has an
/// address, named `oxr_<interface>`, in the order of the interfaces' indexes, as rxe
/// devices on a host's NICs; on a host with none (loopback alone), the loopback device
/// `oxr0`. A program that takes the first device (`ibv_rc_pingpong`, perftest without
/// `-d`) reaches other hosts, and one that uses every device (UCX, MPI) uses none that
/// cannot; the RDMA CM picks the device by the route to its peer, and a loopback address
/// takes the first device, as the kernel's CM binds one. Processes on one host reach each
/// other through the interface's shared address.
pub fn discovered() -> DeviceList {
    let list: DeviceList = oxrdma_udp::interfaces::interfaces()
        .into_iter()
        .filter(|i| i.up && !i.loopback && !i.addrs.is_empty())
        .map(|i| (format!("oxr_{}", i.name), Target::Interface(i.name)))
        .filter(|(n, _)| n.len() < NAME_MAX)
        .collect();
    if list.is_empty() {
        return vec![(LOOPBACK_DEVICE.to_string(), Target::Loopback)];
    }
    list
}

/// What the configuration names, or what is wrong with it (naming the variable or the
/// file and line).
pub fn configured() -> Result<Option<DeviceList>, String> {
    if let Ok(spec) = std::env::var("OXRDMA_DEVICES") {
        return parse_devices(&spec)
            .map(Some)
            .map_err(|e| format!("OXRDMA_DEVICES: {e}"));
    }
    if let Some(path) = std::env::var_os("OXRDMA_CONFIG") {
        return read_file(Path::new(&path)).map(Some);
    }
    let user = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".config")));
    let files = user
        .map(|d| d.join("oxrdma/devices.conf"))
        .into_iter()
        .chain([PathBuf::from("/etc/oxrdma/devices.conf")]);
    for f in files {
        if f.exists() {
            return read_file(&f).map(Some);
        }
    }
    Ok(None)
}

fn read_file(path: &Path) -> Result<DeviceList, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    parse_file(&text).map_err(|e| format!("{}:{e}", path.display()))
}

/// `OXRDMA_DEVICES`' syntax.
pub fn parse_devices(spec: &str) -> Result<DeviceList, String> {
    let items = spec.split(',').filter(|s| !s.trim().is_empty());
    check_names(items.map(parse_item).collect::<Result<_, _>>()?)
}

/// A configuration file's syntax; an error begins with its line number.
pub fn parse_file(text: &str) -> Result<DeviceList, String> {
    let list = text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.split('#').next().unwrap_or_default().trim()))
        .filter(|(_, l)| !l.is_empty())
        .map(|(n, l)| parse_item(l).map_err(|e| format!("{n}: {e}")))
        .collect::<Result<_, _>>()?;
    check_names(list)
}

/// `name=address` (an IPv6 address may be in brackets), `name=interface` (`lo`: the
/// loopback device) or `name=iwarp:address`.
fn parse_item(item: &str) -> Result<(String, Target), String> {
    let (name, addr) = item
        .split_once('=')
        .ok_or_else(|| format!("'{item}' is not name=address"))?;
    let (name, addr) = (name.trim(), addr.trim());
    if name.is_empty() || name.len() >= NAME_MAX || name.contains(char::is_whitespace) {
        return Err(format!(
            "device name '{name}' is empty, too long or has a space"
        ));
    }
    if let Some(ip) = addr.strip_prefix("iwarp:") {
        let bare = ip.trim().trim_start_matches('[').trim_end_matches(']');
        let ip = bare
            .parse::<IpAddr>()
            .map_err(|_| format!("'{ip}' (iWARP device {name}) is not an IP address"))?;
        return Ok((name.to_string(), Target::Iwarp(ip)));
    }
    let bare = addr.trim_start_matches('[').trim_end_matches(']');
    let target = match bare.parse::<IpAddr>() {
        Ok(ip) => Target::Address(ip),
        Err(_) if addr == "lo" => Target::Loopback,
        Err(_) if is_interface_name(addr) => Target::Interface(addr.to_string()),
        Err(_) => {
            return Err(format!(
                "'{addr}' (device {name}) is neither an IP address nor an interface name"
            ))
        }
    };
    Ok((name.to_string(), target))
}

/// What Linux takes as an interface name: 1 to 15 bytes, no '/', ':' or space.
fn is_interface_name(s: &str) -> bool {
    (1..16).contains(&s.len())
        && !s.contains(['/', ':', '[', ']'])
        && !s.contains(char::is_whitespace)
        && s.parse::<IpAddr>().is_err()
        && !s.chars().all(|c| c.is_ascii_digit() || c == '.')
}

fn check_names(list: DeviceList) -> Result<DeviceList, String> {
    for (i, (name, _)) in list.iter().enumerate() {
        if list[..i].iter().any(|(n, _)| n == name) {
            return Err(format!("device {name} is named twice"));
        }
    }
    Ok(list)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oxrdma_devices_parses_names_and_addresses() {
        let d = parse_devices("oxr0=127.0.0.2, oxr1=[::1], lab=eth1, oxr9=lo").unwrap();
        let ip = |s: &str| Target::Address(s.parse().unwrap());
        assert_eq!(d[0], ("oxr0".into(), ip("127.0.0.2")));
        assert_eq!(d[1], ("oxr1".into(), ip("::1")));
        assert_eq!(d[2], ("lab".into(), Target::Interface("eth1".into())));
        assert_eq!(d[3], ("oxr9".into(), Target::Loopback));
        let iw = parse_devices("siw0=iwarp:127.0.0.3, siw1 = iwarp:[::1]").unwrap();
        assert_eq!(
            iw[0],
            ("siw0".into(), Target::Iwarp("127.0.0.3".parse().unwrap()))
        );
        assert_eq!(
            iw[1],
            ("siw1".into(), Target::Iwarp("::1".parse().unwrap()))
        );
        assert!(parse_devices("siw0=iwarp:eth0")
            .unwrap_err()
            .contains("not an IP address"));
        assert!(parse_devices("oxr0").unwrap_err().contains("name=address"));
        assert!(parse_devices("oxr0=10.0.0.300")
            .unwrap_err()
            .contains("neither an IP"));
        assert!(parse_devices("oxr0=a-name-far-too-long-for-linux")
            .unwrap_err()
            .contains("neither an IP"));
        assert!(parse_devices("a=::1,a=::2").unwrap_err().contains("twice"));
    }

    #[test]
    fn a_file_has_one_device_per_line_and_comments() {
        let text = "# lab devices\n\noxr0 = 127.0.0.2   # this host\n  lab = [::1]\n";
        let d = parse_file(text).unwrap();
        assert_eq!(d.len(), 2);
        assert_eq!(
            d[1],
            ("lab".into(), Target::Address("::1".parse().unwrap()))
        );
        assert!(parse_file("a = 127.0.0.2\nb 127.0.0.3\n")
            .unwrap_err()
            .starts_with("2: "));
        assert!(parse_file("my dev = ::1").unwrap_err().contains("space"));
    }

    #[test]
    fn with_nothing_configured_the_devices_are_the_interfaces_or_else_loopback() {
        let d = discovered();
        let up = oxrdma_udp::interfaces::interfaces()
            .into_iter()
            .filter(|i| i.up && !i.loopback && !i.addrs.is_empty())
            .count();
        if up == 0 {
            assert_eq!(d, [(LOOPBACK_DEVICE.into(), Target::Loopback)]);
            return;
        }
        assert_eq!(d.len(), up);
        for (name, t) in &d {
            let Target::Interface(i) = t else {
                panic!("{name}: {t:?}")
            };
            assert_eq!(name, &format!("oxr_{i}"));
        }
    }
}
