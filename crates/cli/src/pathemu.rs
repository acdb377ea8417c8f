//! `oxrdma path-emu`: a long, lossy path between two network namespaces, for tests and
//! benchmarks on a kernel without netem. Each namespace gets a TUN device with an
//! address; IP packets read from one are written to the other after a one-way delay,
//! through a link of a given rate with a tail-drop queue, with random loss, jitter and
//! reordering per direction, seeded, and (`--ecn-ms`) ECN marking past a queue depth, as
//! an AQM router marks. Runs until stopped (SIGTERM/SIGINT) or `--seconds`, then prints
//! what it forwarded, dropped and marked as JSON.

use anyhow::{bail, Context};
use oxrdma_wire::checksum;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// `oxrdma path-emu`.
#[derive(clap::Args, Debug, Clone)]
pub struct PathEmuArgs {
    /// The two network namespaces (`ip netns` names), which must exist.
    #[arg(long, num_args = 2, value_names = ["NS_A", "NS_B"])]
    pub netns: Vec<String>,
    /// The TUN devices' addresses, in NS_A and NS_B (one /24).
    #[arg(long, num_args = 2, value_names = ["ADDR_A", "ADDR_B"], default_values = ["10.99.0.1", "10.99.0.2"])]
    pub addrs: Vec<std::net::Ipv4Addr>,
    /// One-way delay, ms.
    #[arg(long, default_value_t = 25.0)]
    pub delay_ms: f64,
    /// Extra one-way delay, uniform in 0..jitter, ms (packets are never reordered by it).
    #[arg(long, default_value_t = 0.0)]
    pub jitter_ms: f64,
    /// Link rate per direction, Mbit/s.
    #[arg(long, default_value_t = 200.0)]
    pub rate_mbit: f64,
    /// Packet loss per direction, 0 to 1.
    #[arg(long, default_value_t = 0.0)]
    pub loss: f64,
    /// The queue before the link: what waits longer than this is dropped, ms.
    #[arg(long, default_value_t = 100.0)]
    pub queue_ms: f64,
    /// An AQM threshold, ms: packets that would wait in the queue longer than this are
    /// marked CE if ECN-capable and dropped if not, as RFC 3168 has a router mark where it
    /// would drop (default: none; a tail-drop queue only).
    #[arg(long)]
    pub ecn_ms: Option<f64>,
    /// Packets held back per direction, 0 to 1: each arrives up to a quarter of the
    /// one-way delay late, overtaken by those sent after it.
    #[arg(long, default_value_t = 0.0)]
    pub reorder: f64,
    /// The device MTU.
    #[arg(long, default_value_t = 1500)]
    pub mtu: u32,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Stop after this long (default: when stopped by a signal).
    #[arg(long)]
    pub seconds: Option<f64>,
}

/// One direction's counters.
#[derive(Debug, Default)]
struct Counters {
    forwarded: AtomicU64,
    lost: AtomicU64,
    queue_drops: AtomicU64,
    bytes: AtomicU64,
    ce_marked: AtomicU64,
    aqm_drops: AtomicU64,
    reordered: AtomicU64,
}

/// A packet on its way: when it arrives, its number (in the order it left), its bytes.
type Flying = Reverse<(Instant, u64, Vec<u8>)>;

/// Packets on their way, by when each arrives (then by when each left).
#[derive(Debug, Default)]
struct Line {
    packets: Mutex<BinaryHeap<Flying>>,
    ready: Condvar,
}

/// Marks an IP packet CE if it is ECN-capable (its ECN field ECT(0), ECT(1) or CE);
/// true if it was. IPv4's header checksum is updated.
fn mark_ce(p: &mut [u8]) -> bool {
    match p.first().map(|b| b >> 4) {
        Some(4) if p.len() >= 20 && p[1] & 0b11 != 0 => {
            p[1] |= 0b11;
            let ihl = usize::from(p[0] & 0x0f) * 4;
            if ihl < 20 || p.len() < ihl {
                return false;
            }
            p[10..12].fill(0);
            let c = checksum::finish(checksum::sum(0, &p[..ihl]));
            p[10..12].copy_from_slice(&c.to_be_bytes());
            true
        }
        // IPv6: the traffic class's low two bits are bits 5-4 of the second byte.
        Some(6) if p.len() >= 40 && p[1] & 0x30 != 0 => {
            p[1] |= 0x30;
            true
        }
        _ => false,
    }
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

/// Opens a TUN device named `name` inside network namespace `ns`.
fn tun_in(ns: &str, name: &str) -> anyhow::Result<File> {
    let home = File::open("/proc/thread-self/ns/net").context("this thread's namespace")?;
    let there = File::open(format!("/var/run/netns/{ns}"))
        .with_context(|| format!("network namespace {ns} (ip netns add {ns})"))?;
    // SAFETY: setns on this thread with a namespace descriptor we hold open.
    if unsafe { libc::setns(there.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        bail!("setns {ns}: {}", std::io::Error::last_os_error());
    }
    let tun = File::options().read(true).write(true).open("/dev/net/tun");
    let made = tun.context("/dev/net/tun").and_then(|f| {
        // SAFETY: ifreq is plain data; all zero is valid.
        let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
        for (d, s) in req.ifr_name.iter_mut().zip(name.bytes()) {
            *d = s as libc::c_char;
        }
        req.ifr_ifru.ifru_flags = (libc::IFF_TUN | libc::IFF_NO_PI) as libc::c_short;
        // SAFETY: TUNSETIFF reads (and fills in) the ifreq we pass.
        if unsafe { libc::ioctl(f.as_raw_fd(), libc::TUNSETIFF, &mut req) } != 0 {
            bail!(
                "TUNSETIFF {name} in {ns}: {}",
                std::io::Error::last_os_error()
            );
        }
        Ok(f)
    });
    // SAFETY: back to the namespace this thread started in.
    if unsafe { libc::setns(home.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        bail!("setns back: {}", std::io::Error::last_os_error());
    }
    made
}

fn ip(args: &[&str]) -> anyhow::Result<()> {
    let st = std::process::Command::new("ip")
        .args(args)
        .status()
        .context("ip")?;
    if !st.success() {
        bail!("ip {}: {st}", args.join(" "));
    }
    Ok(())
}

/// Reads packets from `from` and puts those the link lets through on `line`.
fn ingress(mut from: File, line: Arc<Line>, a: PathEmuArgs, seed: u64, c: Arc<Counters>) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let ns = |ms: f64| Duration::from_nanos((ms * 1e6) as u64);
    let (delay, jitter, queue) = (ns(a.delay_ms), ns(a.jitter_ms), ns(a.queue_ms));
    let ecn = a.ecn_ms.map(ns);
    let mut link_free = Instant::now();
    let mut last_arrival = Instant::now();
    let mut buf = vec![0u8; 65536];
    let mut seq = 0u64;
    while !STOP.load(Ordering::Relaxed) {
        let Ok(n) = from.read(&mut buf) else { break };
        let now = Instant::now();
        let wait = link_free.saturating_duration_since(now);
        if wait > queue {
            c.queue_drops.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        if ecn.is_some_and(|e| wait > e) {
            if !mark_ce(&mut buf[..n]) {
                c.aqm_drops.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            c.ce_marked.fetch_add(1, Ordering::Relaxed);
        }
        // The wire time of the packet with Ethernet's framing (38 bytes beside the IP
        // packet: header, FCS, preamble, gap).
        let wire = Duration::from_secs_f64((n + 38) as f64 * 8.0 / (a.rate_mbit * 1e6));
        link_free = link_free.max(now) + wire;
        if rng.random_bool(a.loss) {
            c.lost.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        let extra = if jitter.is_zero() {
            Duration::ZERO
        } else {
            jitter.mul_f64(rng.random::<f64>())
        };
        let mut at = (link_free + delay + extra).max(last_arrival);
        last_arrival = at;
        if a.reorder > 0.0 && rng.random_bool(a.reorder) {
            // Held back alone: `last_arrival` stays, so later packets overtake it.
            at += delay.mul_f64(rng.random::<f64>() / 4.0);
            c.reordered.fetch_add(1, Ordering::Relaxed);
        }
        c.bytes.fetch_add(n as u64, Ordering::Relaxed);
        seq += 1;
        line.packets
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Reverse((at, seq, buf[..n].to_vec())));
        line.ready.notify_one();
    }
}

/// Writes each packet on `line` to `to` when it is due.
fn egress(mut to: File, line: Arc<Line>, c: Arc<Counters>) {
    let mut q = line.packets.lock().unwrap_or_else(|p| p.into_inner());
    while !STOP.load(Ordering::Relaxed) {
        let Some(&Reverse((at, _, _))) = q.peek() else {
            q = line
                .ready
                .wait_timeout(q, Duration::from_millis(50))
                .unwrap_or_else(|p| p.into_inner())
                .0;
            continue;
        };
        let now = Instant::now();
        if at > now {
            q = line
                .ready
                .wait_timeout(q, at - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
            continue;
        }
        let Some(Reverse((_, _, p))) = q.pop() else {
            continue;
        };
        drop(q);
        if to.write_all(&p).is_ok() {
            c.forwarded.fetch_add(1, Ordering::Relaxed);
        }
        q = line.packets.lock().unwrap_or_else(|p| p.into_inner());
    }
}

/// `oxrdma path-emu`: true when it ran.
pub fn run(a: &PathEmuArgs) -> anyhow::Result<bool> {
    if !(0.0..1.0).contains(&a.loss) || a.rate_mbit <= 0.0 || a.delay_ms < 0.0 || a.queue_ms <= 0.0
    {
        bail!("path-emu needs 0 <= --loss < 1, --rate-mbit > 0, --delay-ms >= 0, --queue-ms > 0");
    }
    if !(0.0..=1.0).contains(&a.reorder) || a.ecn_ms.is_some_and(|e| e.is_nan() || e < 0.0) {
        bail!("path-emu needs 0 <= --reorder <= 1 and --ecn-ms >= 0");
    }
    let (ta, tb) = (
        tun_in(&a.netns[0], "oxpath0")?,
        tun_in(&a.netns[1], "oxpath0")?,
    );
    for (ns, addr) in a.netns.iter().zip(&a.addrs) {
        let cidr = format!("{addr}/24");
        ip(&["-n", ns, "addr", "add", &cidr, "dev", "oxpath0"])?;
        let mtu = a.mtu.to_string();
        ip(&["-n", ns, "link", "set", "oxpath0", "mtu", &mtu, "up"])?;
        ip(&["-n", ns, "link", "set", "lo", "up"])?;
    }
    // SAFETY: the handler only stores to an atomic.
    unsafe {
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
    }
    let dirs = [(ta.try_clone()?, tb.try_clone()?, 0u64), (tb, ta, 1u64)];
    let mut counters = Vec::new();
    let mut threads = Vec::new();
    for (from, to, dir) in dirs {
        let (line, c) = (Arc::new(Line::default()), Arc::new(Counters::default()));
        let (l2, c2, a2, seed) = (line.clone(), c.clone(), a.clone(), a.seed * 2 + dir);
        threads.push(std::thread::spawn(move || ingress(from, l2, a2, seed, c2)));
        let (l3, c3) = (line, c.clone());
        threads.push(std::thread::spawn(move || egress(to, l3, c3)));
        counters.push(c);
    }
    let addrs: Vec<String> = a.addrs.iter().map(|a| a.to_string()).collect();
    println!(
        "{}",
        serde_json::json!({"ready": true, "netns": a.netns, "addrs": addrs})
    );
    let start = Instant::now();
    while !STOP.load(Ordering::Relaxed) {
        if a.seconds
            .is_some_and(|s| start.elapsed().as_secs_f64() >= s)
        {
            STOP.store(true, Ordering::Relaxed);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // The readers block in read(): the process ends with them.
    let dir = |c: &Counters| {
        serde_json::json!({
            "forwarded": c.forwarded.load(Ordering::Relaxed),
            "lost": c.lost.load(Ordering::Relaxed),
            "queue_drops": c.queue_drops.load(Ordering::Relaxed),
            "bytes": c.bytes.load(Ordering::Relaxed),
            "ce_marked": c.ce_marked.load(Ordering::Relaxed),
            "aqm_drops": c.aqm_drops.load(Ordering::Relaxed),
            "reordered": c.reordered.load(Ordering::Relaxed),
        })
    };
    println!(
        "{}",
        serde_json::json!({"a_to_b": dir(&counters[0]), "b_to_a": dir(&counters[1])})
    );
    std::io::stdout().flush()?;
    std::process::exit(0);
}
