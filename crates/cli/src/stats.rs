//! `oxrdma stats`: the counters of every live oxrdma device on this host, whatever process
//! and user opened it, without root (each device's engine thread shows them in a file:
//! `oxrdma::host_stats`). A table, JSON lines, or Prometheus's text format; `--watch`
//! prints them again every few seconds with their rates.

use anyhow::Context as _;
use clap::Args;
use oxrdma::host_stats::{self, DeviceStats};
use oxrdma::{Counter, Counters};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::net::IpAddr;
use std::time::{Duration, Instant, UNIX_EPOCH};

#[derive(Args, Debug)]
pub struct StatsArgs {
    /// One JSON object per device, a line each.
    #[arg(long, conflicts_with = "prometheus")]
    pub json: bool,
    /// Prometheus's text exposition format (counters as `oxrdma_<name>_total`).
    #[arg(long)]
    pub prometheus: bool,
    /// Print again every SECS seconds (default 1), with each counter's rate per second.
    #[arg(long, value_name = "SECS", num_args = 0..=1, default_missing_value = "1",
          value_parser = positive_seconds)]
    pub watch: Option<f64>,
    /// With --watch: stop after this many rounds.
    #[arg(long, value_name = "N", requires = "watch")]
    pub count: Option<u64>,
    /// Every counter, zeros too (the table and --json leave zeros out).
    #[arg(long)]
    pub all: bool,
    /// Only the device with this address.
    #[arg(long, value_name = "IP")]
    pub address: Option<IpAddr>,
    /// Only the devices of this process.
    #[arg(long)]
    pub pid: Option<u32>,
}

fn positive_seconds(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.01 => Ok(v),
        _ => Err(format!("{s:?} is not a number of seconds of at least 0.01")),
    }
}

/// Runs `oxrdma stats`.
pub fn run(a: &StatsArgs) -> anyhow::Result<()> {
    let Some(every) = a.watch else {
        let now = read(a)?;
        print!("{}", render(a, &now, None));
        if now.is_empty() && !a.json && !a.prometheus {
            eprintln!("no live oxrdma device on this host");
        }
        return Ok(());
    };
    let every = Duration::from_secs_f64(every);
    let mut before: Option<(Instant, Vec<DeviceStats>)> = None;
    let mut round = 0;
    loop {
        let now = read(a)?;
        let at = Instant::now();
        let rates = before.as_ref().map(|(then, old)| {
            let secs = at.duration_since(*then).as_secs_f64().max(1e-6);
            rates_of(old, &now, secs)
        });
        print!("{}", render(a, &now, rates.as_ref()));
        if !a.json && !a.prometheus {
            println!();
        }
        round += 1;
        if a.count.is_some_and(|n| round >= n) {
            return Ok(());
        }
        before = Some((at, now));
        std::thread::sleep(every);
    }
}

fn read(a: &StatsArgs) -> anyhow::Result<Vec<DeviceStats>> {
    let all = host_stats::read().context("reading the host's oxrdma devices")?;
    Ok(all
        .into_iter()
        .filter(|d| a.address.is_none_or(|ip| d.address == ip))
        .filter(|d| a.pid.is_none_or(|p| d.pid == p))
        .collect())
}

/// Per device (by process and engine thread): each counter's rate per second between `old` and
/// `new`, `secs` apart (a device that was not there before has none).
type Rates = HashMap<(u32, i32), Vec<f64>>;

fn rates_of(old: &[DeviceStats], new: &[DeviceStats], secs: f64) -> Rates {
    let mut rates = Rates::new();
    for d in new {
        let Some(o) = old.iter().find(|o| (o.pid, o.thread) == (d.pid, d.thread)) else {
            continue;
        };
        let r = Counter::ALL
            .iter()
            .map(|&c| d.counters[c].saturating_sub(o.counters[c]) as f64 / secs)
            .collect();
        rates.insert((d.pid, d.thread), r);
    }
    rates
}

/// The text for `devices` in the format `a` asks for.
pub fn render(a: &StatsArgs, devices: &[DeviceStats], rates: Option<&Rates>) -> String {
    let mut out = String::new();
    if a.prometheus {
        prometheus(&mut out, devices);
        return out;
    }
    for d in devices {
        let r = rates.and_then(|r| r.get(&(d.pid, d.thread)));
        if a.json {
            json(&mut out, d, r, a.all);
        } else {
            table(&mut out, d, r, a.all);
        }
    }
    out
}

fn shown(c: &Counters, counter: Counter, all: bool) -> bool {
    all || c[counter] != 0
}

fn table(out: &mut String, d: &DeviceStats, rates: Option<&Vec<f64>>, all: bool) {
    let age = d.at.elapsed().unwrap_or_default().as_secs_f64();
    let _ = writeln!(
        out,
        "{} (process {}, {}), counted {age:.1} s ago",
        d.device, d.pid, d.address
    );
    for (i, &c) in Counter::ALL.iter().enumerate() {
        if !shown(&d.counters, c, all) {
            continue;
        }
        let _ = write!(out, "  {:<28} {:>16}", c.name(), d.counters[c]);
        if let Some(r) = rates {
            let _ = write!(out, " {:>14.1}/s", r[i]);
        }
        let aka: Vec<String> = [("rxe", c.rxe()), ("mlx5", c.mlx5())]
            .iter()
            .filter_map(|(who, n)| n.filter(|&n| n != c.name()).map(|n| format!("{who} {n}")))
            .collect();
        if !aka.is_empty() {
            let _ = write!(out, "   ({})", aka.join(", "));
        }
        out.push('\n');
    }
}

fn json(out: &mut String, d: &DeviceStats, rates: Option<&Vec<f64>>, all: bool) {
    let mut counters = serde_json::Map::new();
    let mut per_sec = serde_json::Map::new();
    for (i, &c) in Counter::ALL.iter().enumerate() {
        if shown(&d.counters, c, all) {
            counters.insert(c.name().into(), d.counters[c].into());
            if let Some(r) = rates {
                per_sec.insert(c.name().into(), r[i].into());
            }
        }
    }
    let unix_ns =
        d.at.duration_since(UNIX_EPOCH)
            .map_or(0, |t| t.as_nanos() as u64);
    let mut v = serde_json::json!({
        "pid": d.pid,
        "device": d.device,
        "address": d.address.to_string(),
        "unix_ns": unix_ns,
        "counters": counters,
    });
    if rates.is_some() {
        v["per_second"] = per_sec.into();
    }
    let _ = writeln!(out, "{v}");
}

/// Each counter a metric family (its help and type once), a sample per device.
fn prometheus(out: &mut String, devices: &[DeviceStats]) {
    if devices.is_empty() {
        return;
    }
    for &c in Counter::ALL {
        let name = format!("oxrdma_{}_total", c.name());
        let _ = writeln!(out, "# HELP {name} {}", c.describe());
        let _ = writeln!(out, "# TYPE {name} counter");
        for d in devices {
            let _ = writeln!(
                out,
                "{name}{{device=\"{}\",pid=\"{}\",address=\"{}\"}} {}",
                d.device.replace(['\\', '"', '\n'], "_"),
                d.pid,
                d.address,
                d.counters[c]
            );
        }
    }
}
