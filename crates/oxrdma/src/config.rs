//! Which devices the configuration names, by name and address (the C library's device
//! list, and the tool's commands that act on every device). The first of these that exists
//! decides:
//! 1. `OXRDMA_DEVICES="oxr0=127.0.0.2,oxr1=[::1]"` (name=address pairs, commas between);
//! 2. the file `OXRDMA_CONFIG` names (it must exist);
//! 3. `$XDG_CONFIG_HOME/oxrdma/devices.conf` (`~/.config/...` without the variable);
//! 4. `/etc/oxrdma/devices.conf`.
//!
//! A file holds one `name = address` per line; `#` starts a comment. With none of them,
//! `Ok(None)`: the caller's default device.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

/// A device name's longest length plus one (`IBV_SYSFS_NAME_MAX`, the C struct's array).
pub const NAME_MAX: usize = 64;

/// Devices as (name, address), in the order configured.
pub type DeviceList = Vec<(String, IpAddr)>;

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

/// `name=address`; an IPv6 address may be in brackets.
fn parse_item(item: &str) -> Result<(String, IpAddr), String> {
    let (name, addr) = item
        .split_once('=')
        .ok_or_else(|| format!("'{item}' is not name=address"))?;
    let (name, addr) = (name.trim(), addr.trim());
    if name.is_empty() || name.len() >= NAME_MAX || name.contains(char::is_whitespace) {
        return Err(format!(
            "device name '{name}' is empty, too long or has a space"
        ));
    }
    let bare = addr.trim_start_matches('[').trim_end_matches(']');
    let ip = bare
        .parse::<IpAddr>()
        .map_err(|_| format!("'{addr}' (device {name}) is not an IP address"))?;
    Ok((name.to_string(), ip))
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
        let d = parse_devices("oxr0=127.0.0.2, oxr1=[::1]").unwrap();
        assert_eq!(d[0], ("oxr0".into(), "127.0.0.2".parse().unwrap()));
        assert_eq!(d[1], ("oxr1".into(), "::1".parse().unwrap()));
        assert!(parse_devices("oxr0").unwrap_err().contains("name=address"));
        assert!(parse_devices("oxr0=nowhere")
            .unwrap_err()
            .contains("not an IP"));
        assert!(parse_devices("a=::1,a=::2").unwrap_err().contains("twice"));
    }

    #[test]
    fn a_file_has_one_device_per_line_and_comments() {
        let text = "# lab devices\n\noxr0 = 127.0.0.2   # this host\n  lab = [::1]\n";
        let d = parse_file(text).unwrap();
        assert_eq!(d.len(), 2);
        assert_eq!(d[1], ("lab".into(), "::1".parse().unwrap()));
        assert!(parse_file("a = 127.0.0.2\nb 127.0.0.3\n")
            .unwrap_err()
            .starts_with("2: "));
        assert!(parse_file("my dev = ::1").unwrap_err().contains("space"));
    }
}
