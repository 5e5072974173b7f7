//! Figures, their targets, the table printed at the end and written to `BENCHMARKS.md`.

use std::fmt::Write as _;
use std::time::Duration;

/// One line of the table.
#[derive(Debug, Clone)]
pub struct Row {
    pub figure: &'static str,
    pub measure: String,
    /// The same clients talking to the fake GitLab directly, when that is meaningful.
    pub direct: Option<f64>,
    pub through: f64,
    pub unit: &'static str,
    pub target: String,
    pub met: bool,
}

impl Row {
    pub fn ratio(&self) -> Option<f64> {
        self.direct.filter(|d| *d > 0.0).map(|d| self.through / d)
    }
}

/// The `p`-th percentile (0–100) of `samples`, which it sorts.
pub fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    if samples.is_empty() {
        return Duration::ZERO;
    }
    samples.sort_unstable();
    let rank = ((p / 100.0) * (samples.len() - 1) as f64).round() as usize;
    samples[rank.min(samples.len() - 1)]
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn number(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// The table in Markdown (also readable as plain text on a terminal).
pub fn table(rows: &[Row]) -> String {
    let mut out = String::from(
        "| figure | measure | baseline | through the autoscaler | ratio | target | met |\n\
         |---|---|---:|---:|---:|---|---|\n",
    );
    for r in rows {
        let direct = r
            .direct
            .map_or_else(|| "—".to_string(), |d| format!("{} {}", number(d), r.unit));
        let ratio = r
            .ratio()
            .map_or_else(|| "—".to_string(), |x| format!("{x:.2}"));
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} {} | {} | {} | {} |",
            r.figure,
            r.measure,
            direct,
            number(r.through),
            r.unit,
            ratio,
            r.target,
            if r.met { "yes" } else { "**no**" }
        );
    }
    out
}

/// What the benchmark ran on, for the record.
pub fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    let memory = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("MemTotal"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kib| kib.parse::<u64>().ok())
        })
        .map_or_else(
            || "?".into(),
            |kib| format!("{:.0} GiB", kib as f64 / 1048576.0),
        );
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    format!("{cpu}, {cores} cores available, {memory} memory, Linux {kernel}")
}
