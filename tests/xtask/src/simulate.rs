//! `cargo xtask simulate`: every shipped workload (`deploy/simulate/workloads/`) under the
//! demand-aware policy and under the taskscaler baseline written for it, side by side, with the
//! target checked: p95 wait no worse than the baseline's and at least 30 % fewer idle
//! machine-minutes. `--write` puts the table into the book's measured comparisons
//! (`docs/src/design/comparisons.md`) between its markers.
//!
//! `--sweep` instead runs each baseline over a grid of its settings (the lines of the baseline
//! marked `# sweep`: `idle_count`, `idle_time`, `scale_factor`) and prints, per workload, the
//! setting with the fewest idle machine-minutes among those whose p95 wait is no worse than the
//! demand-aware policy's (or, when none is, the fastest): the check that the shipped baseline
//! is taskscaler at its best, not one chosen to lose.
//!
//! `--frontier` sweeps every policy family and prints each one's frontier of p95 wait against
//! overhead, the oracle, and the targets of issues #26 and #29 ([`frontier`]); with
//! `--seeds N`, every target line on N other draws of each workload instead.
//!
//! `--seeds N` reruns the comparison on N draws of every workload ([`seeds`]); with `--sweep`,
//! each setting is judged by its means over those draws.

// The table and the sweep are this task's output.
#![allow(clippy::print_stdout)]

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use serde_json::Value;

mod frontier;
mod seeds;

/// Fewer idle machine-minutes the demand-aware policy must reach, as a share of the baseline's.
const IDLE_SAVING: f64 = 0.30;

/// A setting of the sweep and its results.
type Best = Option<(String, Run)>;

#[derive(Clone)]
struct Run {
    p50: f64,
    p95: f64,
    p99: f64,
    idle: f64,
    booting: f64,
    total: f64,
    created: u64,
    never_used: u64,
    timeouts: u64,
    cost: Option<f64>,
}

pub fn simulate(root: &Path, args: &[String]) -> Result<()> {
    let binary = target_dir(root).join("release/autoscaler");
    let dir = root.join("deploy/simulate");
    let mut workloads: Vec<PathBuf> = std::fs::read_dir(dir.join("workloads"))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    workloads.sort();
    let draws = match args.iter().position(|a| a == "--seeds") {
        None => None,
        Some(at) => Some(
            args.get(at + 1)
                .and_then(|n| n.parse().ok())
                .filter(|&n| n > 0)
                .context("--seeds takes a number of draws, e.g. --seeds 6")?,
        ),
    };
    if args.iter().any(|a| a == "--frontier") {
        return frontier::frontier(root, &binary, &workloads, args, draws);
    }
    if args.iter().any(|a| a == "--sweep") {
        return sweep(&binary, &dir, &workloads, draws);
    }
    if let Some(count) = draws {
        return seeds::seeds(&binary, &dir, &workloads, count);
    }
    let mut table = String::from(
        "| workload | policy | p50 s | p95 s | p99 s | idle machine-min | total machine-min | machines made | acquire timeouts | cost | target |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|\n",
    );
    let mut missed = Vec::new();
    for w in &workloads {
        let name = stem(w);
        let demand = policy_for(&dir, &name, "demand")?;
        let baseline = policy_for(&dir, &name, "taskscaler")?;
        let d = run(&binary, w, &demand)?;
        let b = run(&binary, w, &baseline)?;
        let (met, saving) = target(&d, &b);
        if !met {
            missed.push(name.clone());
        }
        let verdict = format!(
            "{} (p95 {:+.1} s, idle {:+.0} %)",
            if met { "met" } else { "MISSED" },
            d.p95 - b.p95,
            -saving * 100.0
        );
        table.push_str(&row(&name, &stem(&demand), &d, &verdict));
        table.push_str(&row(&name, &stem(&baseline), &b, ""));
    }
    print!("{table}");
    if args.iter().any(|a| a == "--write") {
        write_table(&root.join(COMPARISONS_PAGE), &table)?;
    }
    if !missed.is_empty() {
        bail!("the target is missed on: {}", missed.join(", "));
    }
    Ok(())
}

/// Where cargo put the binary it just built: `CARGO_TARGET_DIR` when set (a target directory
/// shared between worktrees), else the workspace's own.
fn target_dir(root: &Path) -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) if !dir.is_empty() => root.join(dir),
        _ => root.join("target"),
    }
}

/// Whether the demand-aware run `d` meets the target against the baseline run `b`, and its
/// idle saving (a share of the baseline's idle machine-minutes).
fn target(d: &Run, b: &Run) -> (bool, f64) {
    let saving = if b.idle > 0.0 {
        1.0 - d.idle / b.idle
    } else {
        0.0
    };
    (d.p95 <= b.p95 && saving >= IDLE_SAVING, saving)
}

fn row(workload: &str, policy: &str, r: &Run, verdict: &str) -> String {
    let cost = r.cost.map_or("".into(), |c| format!("{c:.2}"));
    format!(
        "| {workload} | {policy} | {:.1} | {:.1} | {:.1} | {:.0} | {:.0} | {} | {} | {cost} | {verdict} |\n",
        r.p50, r.p95, r.p99, r.idle, r.total, r.created, r.timeouts
    )
}

/// `policies/<workload>-<kind>.toml`, else `policies/<kind>.toml`.
fn policy_for(dir: &Path, workload: &str, kind: &str) -> Result<PathBuf> {
    let own = dir.join(format!("policies/{workload}-{kind}.toml"));
    let shared = dir.join(format!("policies/{kind}.toml"));
    [own, shared]
        .into_iter()
        .find(|p| p.is_file())
        .with_context(|| format!("no {kind} policy for the workload {workload}"))
}

fn stem(p: &Path) -> String {
    p.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn run(binary: &Path, workload: &Path, policy: &Path) -> Result<Run> {
    let out = Command::new(binary)
        .arg("simulate")
        .arg(workload)
        .arg("--policy")
        .arg(policy)
        .output()
        .with_context(|| format!("cannot run {} (build it first)", binary.display()))?;
    if !out.status.success() {
        bail!(
            "simulate {} --policy {}: {}",
            workload.display(),
            policy.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let v: Value = serde_json::from_slice(&out.stdout)?;
    let f = |path: &[&str]| {
        path.iter()
            .fold(&v, |v, k| &v[k])
            .as_f64()
            .unwrap_or(f64::NAN)
    };
    Ok(Run {
        p50: f(&["wait_seconds", "p50"]),
        p95: f(&["wait_seconds", "p95"]),
        p99: f(&["wait_seconds", "p99"]),
        idle: f(&["machine_minutes", "idle"]),
        booting: f(&["machine_minutes", "booting"]),
        total: f(&["machine_minutes", "total"]),
        created: v["machines_created"].as_u64().unwrap_or(0),
        never_used: v["machines_never_used"].as_u64().unwrap_or(0),
        timeouts: v["acquire_timeouts"].as_u64().unwrap_or(0),
        cost: v["cost"].as_f64(),
    })
}

const BEGIN: &str = "<!-- simulate:begin (cargo xtask simulate --write) -->";
const END: &str = "<!-- simulate:end -->";

/// The book's page of measured comparisons, which holds the table between the markers.
const COMPARISONS_PAGE: &str = "docs/src/design/comparisons.md";

fn write_table(page: &Path, table: &str) -> Result<()> {
    let text = std::fs::read_to_string(page)?;
    let (Some(a), Some(b)) = (text.find(BEGIN), text.find(END)) else {
        bail!("{COMPARISONS_PAGE} lacks the markers {BEGIN} and {END}");
    };
    let updated = format!("{}{BEGIN}\n{table}{}", &text[..a], &text[b..]);
    std::fs::write(page, updated)?;
    eprintln!("{COMPARISONS_PAGE}: table written");
    Ok(())
}

/// The grid: the values a `# sweep` line of a baseline takes.
fn grid(key: &str) -> &'static [&'static str] {
    match key {
        "idle_count" => &["0", "1", "2", "3", "5", "10", "15", "20", "30", "40"],
        "idle_time" => &[
            "\"1m\"", "\"2m\"", "\"5m\"", "\"10m\"", "\"20m\"", "\"30m\"",
        ],
        "scale_factor" => &["0.0", "0.1", "0.25", "0.5", "1.0"],
        _ => &[],
    }
}

/// With `draws`, every setting (and the demand-aware policy) is judged by its means over that
/// many draws of the workload ([`seeds::mean_run`]), so that the tuning is not fitted to one.
fn sweep(binary: &Path, dir: &Path, workloads: &[PathBuf], draws: Option<u64>) -> Result<()> {
    let scratch = std::env::temp_dir().join(format!("xtask-sweep-{}", std::process::id()));
    std::fs::create_dir_all(&scratch)?;
    let evaluate = |w: &Path, policy: &Path| match draws {
        None => run(binary, w, policy),
        Some(n) => seeds::mean_run(binary, &scratch, w, policy, n),
    };
    if let Some(n) = draws {
        println!("(p95 and idle are means over {n} draws of each workload)");
    }
    for w in workloads {
        let name = stem(w);
        let baseline = policy_for(dir, &name, "taskscaler")?;
        let d = evaluate(w, &policy_for(dir, &name, "demand")?)?;
        let text = std::fs::read_to_string(&baseline)?;
        // The fewest idle minutes among settings as fast as the demand-aware policy at p95,
        // and the fastest setting of all.
        let (mut matching, mut fastest): (Best, Best) = (None, None);
        for (setting, variant) in variants(&text, grid)? {
            let file = scratch.join(format!("{name}.toml"));
            std::fs::write(&file, &variant)?;
            // A combination the configuration refuses (a scale_factor_limit below idle_count)
            // is not one an operator can write.
            let Ok(r) = evaluate(w, &file) else {
                continue;
            };
            if r.p95 <= d.p95 && matching.as_ref().is_none_or(|(_, m)| r.idle < m.idle) {
                matching = Some((setting.clone(), r.clone()));
            }
            if fastest
                .as_ref()
                .is_none_or(|(_, f)| r.p95 < f.p95 || (r.p95 == f.p95 && r.idle < f.idle))
            {
                fastest = Some((setting, r));
            }
        }
        match (matching, fastest) {
            (Some((setting, m)), _) => println!(
                "{name}: demand p95 {:.1} s, idle {:.0} | fewest idle at p95 <= {:.1} s on the grid: {setting}: p95 {:.1} s, idle {:.0} ({:+.0} % for demand)",
                d.p95,
                d.idle,
                d.p95,
                m.p95,
                m.idle,
                (d.idle / m.idle - 1.0) * 100.0
            ),
            (None, Some((setting, f))) => println!(
                "{name}: demand p95 {:.1} s, idle {:.0} | no setting on the grid reaches p95 {:.1} s; the fastest: {setting}: p95 {:.1} s, idle {:.0}",
                d.p95, d.idle, d.p95, f.p95, f.idle
            ),
            (None, None) => println!("{name}: the baseline has no `# sweep` line"),
        }
    }
    std::fs::remove_dir_all(&scratch)?;
    Ok(())
}

/// Every combination of `grid` values for the `# sweep` lines of `text`, with a label. A line
/// marked `# sweep as NAME: a, b, c` takes its own values instead, labelled `NAME` (another
/// pool's key, or the off-hours one beside the working hours'); one marked `# sweep same`
/// takes the value its key took on the last line swept before it (a second pool follows the
/// first's idle time without multiplying the grid).
fn variants(
    text: &str,
    grid: fn(&str) -> &'static [&'static str],
) -> Result<Vec<(String, String)>> {
    let mut out = vec![Variant::default()];
    for line in text.lines() {
        let key = line.split('=').next().unwrap_or("").trim();
        let marker = line
            .split_once("# sweep")
            .filter(|_| !line.trim_start().starts_with('#'))
            .map(|(_, m)| m.trim());
        if marker == Some("same") {
            // A key no line before swept keeps the value written.
            for v in &mut out {
                match v.chosen.get(key) {
                    Some(value) => v.text.push_str(&format!("{key} = {value}\n")),
                    None => v.text.push_str(&format!("{line}\n")),
                }
            }
            continue;
        }
        let (shown, values): (&str, Vec<&str>) = match marker {
            Some("") => (key, grid(key).to_vec()),
            Some(m) => match m.strip_prefix("as ").and_then(|m| m.split_once(':')) {
                Some((name, list)) => (name.trim(), list.split(',').map(str::trim).collect()),
                None => bail!(
                    "`# sweep{m}`: write `# sweep`, `# sweep same` or `# sweep as NAME: a, b`"
                ),
            },
            None => (key, Vec::new()),
        };
        if values.is_empty() {
            for v in &mut out {
                v.text.push_str(line);
                v.text.push('\n');
            }
            continue;
        }
        out = out
            .into_iter()
            .flat_map(|v| {
                values.clone().into_iter().map(move |value| {
                    let mut v = v.clone();
                    v.label = format!("{} {shown}={value}", v.label);
                    v.text.push_str(&format!("{key} = {value}\n"));
                    v.chosen.insert(key.to_owned(), value.to_owned());
                    v
                })
            })
            .collect();
    }
    Ok(out
        .into_iter()
        .map(|v| (v.label.trim().to_string(), v.text))
        .collect())
}

/// A setting of the grid being built: its label, its policy text, and the value each swept
/// key took last.
#[derive(Clone, Default)]
struct Variant {
    label: String,
    text: String,
    chosen: std::collections::BTreeMap<String, String>,
}

#[cfg(test)]
mod tests {
    use super::variants;

    fn grid(key: &str) -> &'static [&'static str] {
        match key {
            "idle_count" => &["0", "5"],
            "idle_time" => &["\"1m\"", "\"2m\""],
            _ => &[],
        }
    }

    #[test]
    fn a_second_pool_sweeps_its_own_list_and_follows_the_first_where_tied() {
        let text = "name = \"small\"\nidle_count = 20 # sweep\nidle_time = \"20m\" # sweep\n\
                    name = \"large\"\nidle_count = 3 # sweep as large.idle_count: 0, 1\nidle_time = \"20m\" # sweep same\n";
        let all = variants(text, grid).unwrap();
        assert_eq!(all.len(), 8);
        let (label, policy) = &all[5];
        assert_eq!(label, "idle_count=5 idle_time=\"1m\" large.idle_count=1");
        assert_eq!(
            policy,
            "name = \"small\"\nidle_count = 5\nidle_time = \"1m\"\n\
             name = \"large\"\nidle_count = 1\nidle_time = \"1m\"\n"
        );
    }

    #[test]
    fn a_sweep_marker_it_does_not_know_is_an_error_and_comments_are_text() {
        assert!(variants("idle_count = 3 # sweep: 0, 1\n", grid).is_err());
        let tied = "idle_time = \"10m\" # sweep same\n";
        assert_eq!(
            variants(tied, grid).unwrap(),
            [(String::new(), tied.to_owned())],
            "nothing swept before: the value written stays"
        );
        let text = "# the `# sweep` lines vary\nidle_count = 3\n";
        assert_eq!(
            variants(text, grid).unwrap(),
            [(String::new(), text.to_owned())]
        );
    }
}
