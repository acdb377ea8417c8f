//! What a perf run reports, and how it is printed (perftest's columns, or JSON lines).

use serde::Serialize;
use std::time::Duration;

/// Bandwidth of one message size.
#[derive(Debug, Clone, Serialize)]
pub struct BwResult {
    pub test: String,
    pub bytes: usize,
    pub iterations: u64,
    /// Best rate over any window of a tenth of the run (at least 5 ms).
    pub bw_peak_gbps: f64,
    pub bw_avg_gbps: f64,
    pub bw_avg_mbps: f64,
    pub msg_rate_mpps: f64,
    pub seconds: f64,
    /// CPU milliseconds per GB moved, each side's thread and engine thread (`--cpu-util`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_client_ms_per_gb: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_server_ms_per_gb: Option<f64>,
    /// What the client's RC QPs went through (why a path is slow).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transport: Option<Transport>,
}

/// The client's QPs' transport, summed (times: the largest of the QPs').
#[derive(Debug, Clone, Default, Serialize)]
pub struct Transport {
    pub packets_sent: u64,
    pub packets_resent: u64,
    /// Of those, found lost by selective repeat and sent again alone.
    pub lost_resent: u64,
    pub selective_repeat: bool,
    /// The send window at the end, in PSNs (summed over the QPs).
    pub window: u64,
    pub srtt_us: Option<f64>,
    pub min_rtt_us: Option<f64>,
    /// RoCEv2 CNPs the peer sent for our requests that arrived marked CE.
    pub cnps_received: u64,
}

impl Transport {
    /// The sum of the QPs' figures.
    pub fn of(qps: impl IntoIterator<Item = oxrdma_core::QpTransport>) -> Transport {
        let us = |n: u64| n as f64 / 1e3;
        let larger = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        let mut t = Transport::default();
        for q in qps {
            t.packets_sent += q.packets_sent;
            t.packets_resent += q.packets_resent;
            t.lost_resent += q.lost_resent;
            t.selective_repeat |= q.selective_repeat;
            t.window += u64::from(q.window);
            t.srtt_us = larger(t.srtt_us, q.srtt.map(us));
            t.min_rtt_us = larger(t.min_rtt_us, q.min_rtt.map(us));
            t.cnps_received += q.cnps_received;
        }
        t
    }

    /// One line for the table.
    pub fn line(&self) -> String {
        let ms = |v: Option<f64>| v.map_or("-".into(), |us| format!("{:.3} ms", us / 1e3));
        format!(
            " transport: {} of {} packets sent again ({:.2} %; {} found lost), {}, window {} PSNs, srtt {}, min RTT {}, {} CNPs",
            self.packets_resent,
            self.packets_sent,
            100.0 * self.packets_resent as f64 / self.packets_sent.max(1) as f64,
            self.lost_resent,
            if self.selective_repeat { "selective repeat" } else { "go-back-N" },
            self.window,
            ms(self.srtt_us),
            ms(self.min_rtt_us),
            self.cnps_received,
        )
    }
}

/// Latency of one message size, in microseconds: half the round trip for write and send
/// (ping-pong), the whole round trip for read and atomic, as perftest reports them.
#[derive(Debug, Clone, Serialize)]
pub struct LatResult {
    pub test: String,
    pub bytes: usize,
    pub iterations: u64,
    pub min_us: f64,
    pub max_us: f64,
    pub median_us: f64,
    pub avg_us: f64,
    pub stdev_us: f64,
    pub p99_us: f64,
    pub p99_9_us: f64,
}

/// One size's result.
#[derive(Debug, Clone)]
pub enum Report {
    Bw(BwResult),
    Lat(LatResult),
}

/// Completed messages over time, for the average and the peak.
#[derive(Debug, Default)]
pub struct Progress {
    samples: Vec<(Duration, u64)>,
}

impl Progress {
    /// Records that `done` messages had completed at `t` (keeps one sample per 100 µs).
    pub fn sample(&mut self, t: Duration, done: u64) {
        match self.samples.last() {
            Some(&(last, _)) if t - last < Duration::from_micros(100) => {}
            _ => self.samples.push((t, done)),
        }
    }

    /// The result for `iterations` messages of `bytes` that took `secs` in all.
    pub fn bw(&self, test: String, bytes: usize, iterations: u64, secs: f64) -> BwResult {
        let total = bytes as f64 * iterations as f64;
        let avg = total * 8.0 / secs / 1e9;
        let window = Duration::from_secs_f64((secs / 10.0).max(5e-3));
        let mut peak: f64 = 0.0;
        let mut j = 0;
        for i in 0..self.samples.len() {
            let (t, n) = self.samples[i];
            while j + 1 < i && t - self.samples[j + 1].0 >= window {
                j += 1;
            }
            let (t0, n0) = self.samples[j];
            if t - t0 >= window {
                let gbps = (n - n0) as f64 * bytes as f64 * 8.0 / (t - t0).as_secs_f64() / 1e9;
                peak = peak.max(gbps);
            }
        }
        BwResult {
            test,
            bytes,
            iterations,
            bw_peak_gbps: peak.max(avg),
            bw_avg_gbps: avg,
            bw_avg_mbps: total / secs / 1e6,
            msg_rate_mpps: iterations as f64 / secs / 1e6,
            seconds: secs,
            cpu_client_ms_per_gb: None,
            cpu_server_ms_per_gb: None,
            transport: None,
        }
    }
}

impl LatResult {
    /// Summarises latency samples (microseconds); `samples` must not be empty.
    pub fn from_samples(test: String, bytes: usize, mut samples: Vec<f64>) -> LatResult {
        samples.sort_by(f64::total_cmp);
        let n = samples.len();
        let pct = |p: f64| samples[((n as f64 * p) as usize).min(n - 1)];
        let avg = samples.iter().sum::<f64>() / n as f64;
        let var = samples.iter().map(|s| (s - avg) * (s - avg)).sum::<f64>() / n as f64;
        LatResult {
            test,
            bytes,
            iterations: n as u64,
            min_us: samples[0],
            max_us: samples[n - 1],
            median_us: pct(0.5),
            avg_us: avg,
            stdev_us: var.sqrt(),
            p99_us: pct(0.99),
            p99_9_us: pct(0.999),
        }
    }
}

/// The table header perftest prints above its results.
pub fn header(r: &Report) -> &'static str {
    match r {
        Report::Bw(_) => " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   BW average[MB/sec]   MsgRate[Mpps]",
        Report::Lat(_) => " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec]",
    }
}

/// One table row.
pub fn row(r: &Report) -> String {
    match r {
        Report::Bw(b) => format!(
            " {:<10} {:<14} {:<18.2} {:<20.2} {:<20.2} {:.6}",
            b.bytes, b.iterations, b.bw_peak_gbps, b.bw_avg_gbps, b.bw_avg_mbps, b.msg_rate_mpps
        ),
        Report::Lat(l) => format!(
            " {:<6} {:<14} {:<14.2} {:<12.2} {:<18.2} {:<14.2} {:<15.2} {:<22.2} {:.2}",
            l.bytes,
            l.iterations,
            l.min_us,
            l.max_us,
            l.median_us,
            l.avg_us,
            l.stdev_us,
            l.p99_us,
            l.p99_9_us
        ),
    }
}

/// A progress bar on standard error for runs long enough to want one (hidden when standard
/// error is not a terminal).
pub fn bar(show: bool, len: u64, what: &str) -> indicatif::ProgressBar {
    if !show {
        return indicatif::ProgressBar::hidden();
    }
    let pb = indicatif::ProgressBar::with_draw_target(
        Some(len),
        indicatif::ProgressDrawTarget::stderr_with_hz(4),
    );
    if let Ok(style) =
        indicatif::ProgressStyle::with_template("{msg:>12} [{bar:40}] {pos}/{len} {elapsed}")
    {
        pb.set_style(style.progress_chars("=> "));
    }
    pb.set_message(what.to_string());
    pb
}
