//! The benchmark: `cargo xtask bench` (a release build of this binary).
//!
//! Starts the fake GitLab, the autoscaler and many lightweight protocol clients, measures each
//! figure with the clients talking to the fake GitLab directly and through the autoscaler,
//! prints the table with targets, and writes it into `BENCHMARKS.md` between its markers.
//!
//! `bench [FIGURE...] [--quick] [--no-write] [--pin-check]`; figures: `pickup`, `throughput`,
//! `trace`, `artifacts`, `footprint`, `durability`, `injection`. `--quick` shrinks every figure (a
//! smoke run; its numbers are not written). `--pin-check` takes the "own cores" pass on any
//! machine, on sets that overlap (the clients share CPUs with GitLab and the autoscaler): it
//! checks that the pinning works, and its numbers are not written either.

#![allow(clippy::print_stdout)]

mod client;
mod cores;
mod figures;
mod report;
mod stack;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, Result};

use report::Row;

const BEGIN: &str = "<!-- bench:begin -->";
const END: &str = "<!-- bench:end -->";

#[derive(Debug)]
struct Args {
    chosen: Vec<String>,
    quick: bool,
    write: bool,
    pin_check: bool,
}

fn args() -> Args {
    let mut out = Args {
        chosen: Vec::new(),
        quick: false,
        write: true,
        pin_check: false,
    };
    for a in std::env::args().skip(1) {
        match a.as_str() {
            "--quick" => out.quick = true,
            "--no-write" => out.write = false,
            "--pin-check" => out.pin_check = true,
            _ => out.chosen.push(a),
        }
    }
    out
}

#[tokio::main]
async fn main() -> ExitCode {
    match run(args()).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("bench: {e:#}");
            ExitCode::from(2)
        }
    }
}

async fn run(args: Args) -> Result<bool> {
    let wants = |name: &str| args.chosen.is_empty() || args.chosen.iter().any(|c| c == name);
    let scratch = tempfile::Builder::new()
        .prefix("autoscaler-bench-")
        .tempdir()?;
    // BENCH_KEEP=1 keeps the processes' logs and state for a look afterwards.
    let dir = if std::env::var_os("BENCH_KEEP").is_some() {
        let kept = scratch.keep();
        println!("Keeping logs and state in {}", kept.display());
        kept
    } else {
        scratch.path().to_path_buf()
    };
    let dir = dir.as_path();
    let q = args.quick;
    // A build that just ran leaves its output to be written back, and a disk busy with that
    // answers every sync slowly: the first figure starts once it is on disk, like the others.
    sync_disk()?;
    println!("Benchmark on {}\n", report::machine());
    let started = Instant::now();
    let mut rows: Vec<Row> = Vec::new();
    let keep = std::env::var_os("BENCH_KEEP").is_some();
    let mut step = |name: &str, result: Result<Vec<Row>>| -> Result<()> {
        let new = result.with_context(|| format!("figure {name}"))?;
        settle(&dir.join(name), keep)?;
        print!(
            "{}",
            report::table(&new)
                .lines()
                .skip(2)
                .map(|l| format!("{l}\n"))
                .collect::<String>()
        );
        rows.extend(new);
        Ok(())
    };
    let separate = if args.pin_check {
        Some(cores::overlapping(cores::available()))
    } else {
        cores::split(cores::available())
    };
    match &separate {
        Some(s) => println!(
            "Relay figures are taken twice: on shared cores, then with GitLab on CPUs {}, the \
             autoscaler on {} and the clients on {} (rows marked \"own cores\").\n",
            s.gitlab, s.autoscaler, s.clients
        ),
        None => println!("Fewer than 8 cores: every process shares them.\n"),
    }
    for sets in std::iter::once(None).chain(separate.iter().map(Some)) {
        cores::pin(sets)?;
        let own = |mut rows: Vec<Row>| {
            if sets.is_some() {
                for r in &mut rows {
                    r.measure = format!("{} (own cores)", r.measure);
                }
            }
            rows
        };
        let name = |figure: &str| {
            if sets.is_some() {
                format!("{figure}-own")
            } else {
                figure.to_string()
            }
        };
        if wants("pickup") {
            let r = figures::pickup::run(&dir.join(name("pickup")), if q { 50 } else { 400 }).await;
            step(&name("pickup"), r.map(own))?;
        }
        if wants("throughput") {
            let r = figures::throughput::run(&dir.join(name("throughput")), if q { 2 } else { 10 })
                .await;
            step(&name("throughput"), r.map(own))?;
        }
        if wants("trace") {
            let r = figures::trace::run(&dir.join(name("trace")), if q { 1 } else { 5 }).await;
            step(&name("trace"), r.map(own))?;
        }
        if wants("artifacts") {
            let size = if q { 64 << 20 } else { 1 << 30 };
            let r = figures::artifacts::run(&dir.join(name("artifacts")), size).await;
            step(&name("artifacts"), r.map(own))?;
        }
    }
    cores::pin(None)?;
    if wants("footprint") {
        let (m, j) = if q { (1_000, 2_000) } else { (10_000, 20_000) };
        let r = figures::footprint::run(&dir.join("footprint"), m, j).await;
        step("footprint", r)?;
    }
    if wants("durability") {
        let r = figures::durability::run(&dir.join("durability"), if q { 256 } else { 2048 }).await;
        step("durability", r)?;
    }
    if wants("injection") {
        let r = figures::injection::run(&dir.join("injection")).await;
        step("injection", r)?;
    }
    let table = report::table(&rows);
    let took = started.elapsed().as_secs_f64();
    println!("\n{table}\nThe whole run took {took:.0} s.");
    let all_met = rows.iter().all(|r| r.met);
    if args.write && !args.quick && !args.pin_check && args.chosen.is_empty() {
        let path = write(&table, took)?;
        println!("Wrote {}.", path.display());
    }
    Ok(all_met)
}

/// Lets the disk go quiet after a figure: its state is deleted (unless kept) and what is still
/// dirty in the page cache is written out, so that the write-back of one figure (hundreds of
/// MiB of store and logs) does not fall on the next one.
fn settle(figure_dir: &std::path::Path, keep: bool) -> Result<()> {
    if !keep && figure_dir.exists() {
        std::fs::remove_dir_all(figure_dir)
            .with_context(|| format!("removing {}", figure_dir.display()))?;
    }
    sync_disk()
}

/// Writes everything the system still holds for the disk (`sync`).
fn sync_disk() -> Result<()> {
    let status = std::process::Command::new("sync")
        .status()
        .context("running sync")?;
    anyhow::ensure!(status.success(), "sync failed: {status}");
    Ok(())
}

/// Puts the table between the markers of `BENCHMARKS.md`, keeping the prose around it.
fn write(table: &str, took: f64) -> Result<PathBuf> {
    let path = e2e::stack::repo_root().join("BENCHMARKS.md");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let (head, rest) = text
        .split_once(BEGIN)
        .context("BENCHMARKS.md has no begin marker")?;
    let (_, tail) = rest
        .split_once(END)
        .context("BENCHMARKS.md has no end marker")?;
    let when = std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M UTC"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let body = format!(
        "{BEGIN}\nMeasured {when} by `cargo xtask bench` ({took:.0} s) on {}.\n\n{table}{END}",
        report::machine()
    );
    std::fs::write(&path, format!("{head}{body}{tail}"))?;
    Ok(path)
}
