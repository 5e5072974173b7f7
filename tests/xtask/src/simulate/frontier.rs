//! `cargo xtask simulate --frontier`: for every shipped workload, the trade between the p95
//! wait and the machine time paid for nothing (overhead: idle plus booting machine-minutes)
//! that each policy family can reach, its Pareto frontier, the oracle's point, and the targets
//! of issues #26 and #29 checked against them ([`targets`]).
//!
//! The families ([`sweep`]): the demand-aware policy over `target_wait`; the same with a warm
//! pool (`max_stopped`); taskscaler over a grid of `idle_count` × `idle_time` × `scale_factor`
//! on its baseline's `# sweep` lines; and on the streams, taskscaler told each span's true
//! arrival rates ([`informed`]), a reference no target reads. `--write` puts the tables into
//! the book (`docs/src/design/frontier.md`), `--plot` draws one SVG per workload beside it
//! ([`plot`]).
//! With `--seeds N` it sweeps N other draws of every workload instead and tabulates each
//! target line on each ([`draws`]).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use super::{Run, stem};

mod draws;
mod informed;
mod plot;
mod sweep;
mod targets;

pub use sweep::Family;

/// One simulated setting of a family.
#[derive(Clone)]
pub struct Point {
    pub family: Family,
    pub setting: String,
    pub run: Run,
}

impl Point {
    pub fn overhead(&self) -> f64 {
        self.run.idle + self.run.booting
    }
}

/// A workload's sweep: every point, the oracle's overhead and whether it is made of pipelines.
pub struct Workload {
    pub name: String,
    pub points: Vec<Point>,
    pub oracle_overhead: f64,
    pub pipelines: bool,
}

impl Workload {
    pub fn family(&self, family: Family) -> Vec<&Point> {
        self.points.iter().filter(|p| p.family == family).collect()
    }
}

/// The points no other point of the same list beats on both figures (`cost` of each, p95),
/// cheapest first: each one waits strictly less than every cheaper one.
pub fn pareto<'a>(points: &[&'a Point], cost: impl Fn(&Point) -> f64) -> Vec<&'a Point> {
    let mut sorted = points.to_vec();
    sorted.sort_by(|a, b| {
        cost(a)
            .total_cmp(&cost(b))
            .then(a.run.p95.total_cmp(&b.run.p95))
    });
    let mut front: Vec<&Point> = Vec::new();
    for p in sorted {
        if front.last().is_none_or(|last| p.run.p95 < last.run.p95) {
            front.push(p);
        }
    }
    front
}

/// The least `cost` a frontier pays for a p95 of at most `p95`: the frontier read as a step
/// function (the cheapest point at or below that wait; `None` if none waits so little).
pub fn cost_at(front: &[&Point], p95: f64, cost: impl Fn(&Point) -> f64) -> Option<f64> {
    front
        .iter()
        .filter(|p| p.run.p95 <= p95 + 1e-9)
        .map(|p| cost(p))
        .min_by(f64::total_cmp)
}

/// The least p95 a frontier reaches for at most `budget`.
pub fn p95_within(front: &[&Point], budget: f64, cost: impl Fn(&Point) -> f64) -> Option<f64> {
    front
        .iter()
        .filter(|p| cost(p) <= budget + 1e-9)
        .map(|p| p.run.p95)
        .min_by(f64::total_cmp)
}

pub fn frontier(
    root: &Path,
    binary: &Path,
    workloads: &[PathBuf],
    args: &[String],
    draws: Option<u64>,
) -> Result<()> {
    let dir = root.join("deploy/simulate");
    if let Some(count) = draws {
        let page = draws::draws(binary, &dir, workloads, count)?;
        print!("{page}");
        if args.iter().any(|a| a == "--write") {
            write_page(&root.join(FRONTIER_PAGE), &page, draws::MARKERS)?;
        }
        return Ok(());
    }
    let mut all = Vec::new();
    for w in workloads {
        eprintln!("{}: sweeping", stem(w));
        all.push(sweep_workload(binary, &dir, w, true)?);
    }
    let mut page = String::new();
    for w in &all {
        page.push_str(&table(w));
    }
    let (verdicts, missed) = targets::check(&all);
    page.push_str(&verdicts);
    page.push_str(&rates_known(&all));
    print!("{page}");
    if args.iter().any(|a| a == "--plot") {
        for w in &all {
            let file = root.join(format!("docs/src/design/frontier-{}.svg", w.name));
            std::fs::write(&file, plot::svg(w))?;
            eprintln!("{}: written", file.display());
        }
    }
    if args.iter().any(|a| a == "--write") {
        write_page(&root.join(FRONTIER_PAGE), &page, (BEGIN, END))?;
    }
    if missed > 0 {
        eprintln!("{missed} target lines MISSED (above)");
    }
    Ok(())
}

/// Every family's points on the workload at `path` (the informed one's only if `informed`),
/// and its oracle. The policies are those written for the workload's name (its file's stem),
/// wherever the file is.
fn sweep_workload(binary: &Path, dir: &Path, path: &Path, informed: bool) -> Result<Workload> {
    Ok(Workload {
        oracle_overhead: oracle_overhead(binary, path)?,
        pipelines: std::fs::read_to_string(path)?.contains("[[pipelines]]"),
        name: stem(path),
        points: sweep::run_families(binary, dir, path, informed)?,
    })
}

fn oracle_overhead(binary: &Path, workload: &Path) -> Result<f64> {
    let out = std::process::Command::new(binary)
        .arg("simulate")
        .arg(workload)
        .arg("--oracle")
        .output()
        .context("cannot run the oracle")?;
    if !out.status.success() {
        bail!(
            "oracle {}: {}",
            workload.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    v["overhead_minutes"]
        .as_f64()
        .context("the oracle reports no overhead_minutes")
}

/// A workload's frontier points, family by family, and the oracle.
fn table(w: &Workload) -> String {
    let mut out = format!(
        "\n#### {0}\n\n![{0}: p95 wait against overhead](frontier-{0}.svg)\n\n| family | setting | p95 s | overhead machine-min | idle | booting | never used | cost |\n|---|---|---:|---:|---:|---:|---:|---:|\n",
        w.name
    );
    for family in Family::ALL {
        for p in pareto(&w.family(family), Point::overhead) {
            let r = &p.run;
            out.push_str(&format!(
                "| {} | {} | {:.1} | {:.0} | {:.0} | {:.0} | {} | {} |\n",
                family.label(),
                p.setting,
                r.p95,
                p.overhead(),
                r.idle,
                r.booting,
                r.never_used,
                r.cost.map_or(String::new(), |c| format!("{c:.2}"))
            ));
        }
    }
    out.push_str(&format!(
        "| oracle | every job's machine ready when it is pending (boots of 60 s) | 0.0 | {:.0} | | | | |\n",
        w.oracle_overhead
    ));
    out
}

/// The informed family's reading on the streams, under its heading (nothing if none is one).
fn rates_known(all: &[Workload]) -> String {
    let lines: Vec<String> = all.iter().filter_map(informed::reading).collect();
    if lines.is_empty() {
        return String::new();
    }
    format!(
        "\n#### Rates known\n\nNot a target: each frontier's overhead as a share of taskscaler's grid frontier's, least and most, over the p95s from 10 to 60 s that both reach (at the p95, that overhead against taskscaler's).\n\n{}\n",
        lines.join("\n")
    )
}

const BEGIN: &str = "<!-- frontier:begin (cargo xtask simulate --frontier --write) -->";
const END: &str = "<!-- frontier:end -->";
const FRONTIER_PAGE: &str = "docs/src/design/frontier.md";

/// Puts `body` between the page's `(begin, end)` markers.
fn write_page(page: &Path, body: &str, (begin, end): (&str, &str)) -> Result<()> {
    let text = std::fs::read_to_string(page)?;
    let (Some(a), Some(b)) = (text.find(begin), text.find(end)) else {
        bail!("{FRONTIER_PAGE} lacks the markers {begin} and {end}");
    };
    let updated = format!("{}{begin}\n{body}\n{}", &text[..a], &text[b..]);
    std::fs::write(page, updated)?;
    eprintln!("{FRONTIER_PAGE}: written between {begin} and {end}");
    Ok(())
}
