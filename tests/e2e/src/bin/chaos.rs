//! The chaos suite: `cargo xtask chaos` (also run by `cargo xtask test`).
//!
//! Runs every scenario, prints its figures, and exits non-zero if any job, trace byte, artifact
//! or machine was lost. `chaos [SCENARIO...] [--seed N] [--crash-rounds N]` runs a subset;
//! scenarios: `crash` (two rounds, seeds N and N+1, unless told otherwise), `outage`,
//! `machines`, `provisioner`. The crash rounds alternate between GitLab's default (a job runs
//! from hand-out) and two-phase job commit, starting with the default; `--gitlab legacy` or
//! `--gitlab two-phase` runs every round in one.

#![allow(clippy::print_stdout)]

use std::process::ExitCode;
use std::time::Duration;

use e2e::chaos::{self, Figures};

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut seed: u64 = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(1);
    let mut crash_rounds: u64 = 2;
    let mut gitlab: Option<bool> = None;
    let mut chosen = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--seed" {
            seed = it.next().and_then(|s| s.parse().ok()).unwrap_or(seed);
        } else if a == "--gitlab" {
            gitlab = match it.next().map(String::as_str) {
                Some("legacy") => Some(false),
                Some("two-phase") => Some(true),
                other => {
                    eprintln!("--gitlab takes legacy or two-phase, not {other:?}");
                    return ExitCode::FAILURE;
                }
            };
        } else if a == "--crash-rounds" {
            crash_rounds = it
                .next()
                .and_then(|s| s.parse().ok())
                .unwrap_or(crash_rounds);
        } else {
            chosen.push(a.clone());
        }
    }
    let wants = |name: &str| chosen.is_empty() || chosen.iter().any(|c| c == name);
    println!("Chaos suite (seed {seed}): real processes, failures injected, everything counted.\n");
    let mut results: Vec<(String, anyhow::Result<Figures>)> = Vec::new();
    if wants("crash") {
        for round in 0..crash_rounds {
            let s = seed.wrapping_add(round);
            let two_phase = gitlab.unwrap_or(round % 2 == 1);
            results.push((
                "crash".into(),
                chaos::crash_restarts(s, 100, 5, two_phase).await,
            ));
            print_last(&results);
        }
    }
    if wants("outage") {
        results.push((
            "outage".into(),
            chaos::gitlab_outage(30, Duration::from_secs(60)).await,
        ));
        print_last(&results);
    }
    if wants("machines") {
        results.push(("machines".into(), chaos::machines_killed(24).await));
        print_last(&results);
    }
    if wants("provisioner") {
        results.push(("provisioner".into(), chaos::flaky_provisioner(30).await));
        print_last(&results);
    }
    let (mut lost, mut bytes, mut leaked, mut failed) = (0, 0, 0, 0);
    for (_, r) in &results {
        match r {
            Ok(f) => {
                lost += f.jobs_lost;
                bytes += f.bytes_lost();
                leaked += f.machines_leaked;
                failed += usize::from(f.verdict().is_err());
            }
            Err(_) => failed += 1,
        }
    }
    println!(
        "Summary: {} scenarios, jobs lost {lost}, bytes lost {bytes}, machines leaked {leaked}, {failed} failed.",
        results.len()
    );
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn print_last(results: &[(String, anyhow::Result<Figures>)]) {
    match results.last() {
        Some((_, Ok(f))) => println!("{f}\n"),
        Some((name, Err(e))) => println!("{name}: the scenario could not run: {e:#}\n"),
        None => {}
    }
}
