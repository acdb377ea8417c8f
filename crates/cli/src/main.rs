//! `oxrdma`: the oxrdma command-line tool.

use anyhow::Context;
use clap::{Parser, Subcommand};
use oxrdma_cli::{capture, decode};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(name = "oxrdma", version, about = "RDMA over RoCEv2 in user space")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Print one line per RoCEv2 packet in a pcap or pcapng capture, with ICRC checks.
    Decode {
        /// The capture file (pcap or pcapng; Ethernet, raw IP or Linux cooked frames).
        file: PathBuf,
        /// Print JSON lines instead of text.
        #[arg(long)]
        json: bool,
        /// UDP destination port that carries RoCEv2.
        #[arg(long, default_value_t = oxrdma_wire::ROCE_V2_PORT)]
        port: u16,
        /// Exit with status 1 if any packet is malformed or fails its ICRC.
        #[arg(long)]
        strict: bool,
    },
}

fn run_decode(file: &Path, json: bool, port: u16, strict: bool) -> anyhow::Result<bool> {
    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let mut bad = 0usize;
    let counts = capture::for_each_roce(file, port, |frame| {
        let d = decode::decode(frame);
        if d.icrc != "ok" {
            bad += 1;
        }
        if json {
            serde_json::to_writer(&mut out, &d)?;
            out.write_all(b"\n")?;
        } else {
            writeln!(out, "{}", decode::format_line(&d))?;
        }
        Ok(())
    })?;
    out.flush().context("cannot write to standard output")?;
    eprintln!(
        "{}: {} frames, {} RoCEv2 packets, {} malformed or bad ICRC",
        file.display(),
        counts.frames,
        counts.roce,
        bad
    );
    Ok(!(strict && bad > 0))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Decode {
            file,
            json,
            port,
            strict,
        } => run_decode(file, *json, *port, *strict),
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            // A closed pipe (e.g. `| head`) is not an error worth reporting.
            if e.downcast_ref::<io::Error>()
                .is_some_and(|io| io.kind() == io::ErrorKind::BrokenPipe)
            {
                return ExitCode::SUCCESS;
            }
            eprintln!("oxrdma: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
