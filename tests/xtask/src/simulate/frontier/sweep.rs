//! The settings each family is run with, and the runs, two at a time (the machine has two
//! cores; every run is one `autoscaler simulate` process).

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::Result;

use super::{Point, informed};
use crate::simulate::{policy_for, run, stem, variants};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// Taskscaler over its grid.
    Taskscaler,
    /// The demand-aware policy over `target_wait`.
    Demand,
    /// The demand-aware policy with a warm pool, over `target_wait`.
    Warm,
    /// Taskscaler told each span's true arrival rates, on the streams ([`informed`]).
    Informed,
}

impl Family {
    pub const ALL: [Family; 4] = [
        Family::Taskscaler,
        Family::Demand,
        Family::Warm,
        Family::Informed,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Family::Taskscaler => "taskscaler",
            Family::Demand => "demand-aware",
            Family::Warm => "demand-aware + warm pool",
            Family::Informed => "taskscaler, rates known",
        }
    }
}

/// The targets swept, in seconds (issue #26's range, around the default of 30 s): 5 s, then
/// every 2 s from 10 s to 90 s, as finely as taskscaler's grid samples its frontier, and
/// 120 s. Evenly from 10 s: the p95 moves fastest where the target nears the lead time (a boot)
/// and, with a warm pool, where it nears the start time (10-20 s).
pub const TARGETS: [u64; 43] = {
    let mut targets = [0; 43];
    let (mut i, mut t) = (1, 10);
    targets[0] = 5;
    while t <= 90 {
        targets[i] = t;
        i += 1;
        t += 2;
    }
    targets[i] = 120;
    targets
};
/// The warm pool's cap: as many stopped machines as its demand asks for, bounded well above
/// what the shipped workloads' windows peak at, so that the cap does not decide.
const MAX_STOPPED: u32 = 100;
/// Taskscaler's grid, on its baseline's `# sweep` lines: a coarser one than `--sweep`'s, so
/// that the frontier runs in minutes, spanning the same range; as fine as the demand-aware
/// targets where the cheap points lie (a few idle slots, short idle times).
fn grid(key: &str) -> &'static [&'static str] {
    match key {
        "idle_count" => &["0", "1", "2", "3", "5", "7", "10", "15", "20", "40"],
        "idle_time" => &["\"1m\"", "\"2m\"", "\"5m\"", "\"20m\""],
        "scale_factor" => &["0.0", "0.25", "1.0"],
        _ => &[],
    }
}

/// A policy file's text with `lines` added to every `[pools.scaling]` table.
fn with_scaling(text: &str, lines: &str) -> String {
    text.replace("[pools.scaling]\n", &format!("[pools.scaling]\n{lines}"))
}

/// Every (family, setting, policy text) to run on `workload`, the informed family's too when
/// asked for (it takes as many runs as the others together).
fn settings(dir: &Path, workload: &Path, informed: bool) -> Result<Vec<(Family, String, String)>> {
    let name = stem(workload);
    let name = name.as_str();
    let demand = std::fs::read_to_string(policy_for(dir, name, "demand")?)?;
    let baseline = std::fs::read_to_string(policy_for(dir, name, "taskscaler")?)?;
    let mut out = Vec::new();
    for t in TARGETS {
        let target = format!("target_wait = \"{t}s\"\n");
        out.push((
            Family::Demand,
            format!("target_wait {t}s"),
            with_scaling(&demand, &target),
        ));
        let warm = format!("{target}max_stopped = {MAX_STOPPED}\n");
        out.push((
            Family::Warm,
            format!("target_wait {t}s, max_stopped {MAX_STOPPED}"),
            with_scaling(&demand, &warm),
        ));
    }
    for (setting, text) in variants(&baseline, grid)? {
        if scales_with_load(&setting) {
            // Taskscaler's documentation leaves open whether jobs waiting for a machine are
            // "in use": both readings run, and its frontier takes the better point of either.
            out.push((
                Family::Taskscaler,
                format!("{setting} scale_factor_counts=\"running\""),
                with_scaling(&text, "scale_factor_counts = \"running\"\n"),
            ));
        }
        out.push((Family::Taskscaler, setting, text));
    }
    if informed {
        let workload = std::fs::read_to_string(workload)?;
        for (setting, text) in informed::settings(&workload, &baseline)? {
            out.push((Family::Informed, setting, text));
        }
    }
    Ok(out)
}

/// Whether a taskscaler setting has a `scale_factor` above 0, for which the two readings differ.
fn scales_with_load(setting: &str) -> bool {
    setting.split_whitespace().any(|kv| {
        kv.strip_prefix("scale_factor=")
            .and_then(|v| v.parse::<f64>().ok())
            .is_some_and(|f| f > 0.0)
    })
}

/// Runs every setting of every family on `workload` (of the informed family only if
/// `informed`), two at a time. A setting the configuration refuses (a `scale_factor_limit`
/// below `idle_count`) is left out: an operator cannot write it.
pub fn run_families(
    binary: &Path,
    dir: &Path,
    workload: &Path,
    informed: bool,
) -> Result<Vec<Point>> {
    let name = stem(workload);
    let scratch = std::env::temp_dir().join(format!("xtask-frontier-{}", std::process::id()));
    std::fs::create_dir_all(&scratch)?;
    let queue = Mutex::new(
        settings(dir, workload, informed)?
            .into_iter()
            .enumerate()
            .collect::<Vec<_>>(),
    );
    let points = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                loop {
                    let next = queue.lock().map(|mut q| q.pop()).ok().flatten();
                    let Some((i, (family, setting, text))) = next else {
                        break;
                    };
                    let file: PathBuf = scratch.join(format!("{name}-{i}.toml"));
                    if std::fs::write(&file, text).is_err() {
                        continue;
                    }
                    if let Ok(r) = run(binary, workload, &file) {
                        let point = Point {
                            family,
                            setting,
                            run: r,
                        };
                        if let Ok(mut all) = points.lock() {
                            all.push((i, point));
                        }
                    }
                }
            });
        }
    });
    std::fs::remove_dir_all(&scratch)?;
    let mut points = points.into_inner().unwrap_or_default();
    points.sort_by_key(|(i, _)| *i);
    Ok(points.into_iter().map(|(_, p)| p).collect())
}
