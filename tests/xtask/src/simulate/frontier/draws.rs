//! `cargo xtask simulate --frontier --seeds N`: the target lines on N other draws of every
//! workload. The frontier tables are one draw each (the workload's shipped `seed`), and a
//! line met or missed there can be that draw's luck: a frontier point is a few dozen late jobs
//! on the smaller workloads. This sweeps every family again on seeds 1 to N and prints, per
//! workload and line, each draw's figure and verdict and on how many draws the line holds.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::targets::{self, Verdict};
use super::{stem, sweep_workload};
use crate::simulate::seeds::with_seed;

/// Where `--write` puts the table in the Frontiers page.
pub const MARKERS: (&str, &str) = (
    "<!-- frontier-draws:begin (cargo xtask simulate --frontier --seeds 3 --write) -->",
    "<!-- frontier-draws:end -->",
);

/// The table of every target line on draws 1 to `count` of every workload.
pub fn draws(binary: &Path, dir: &Path, workloads: &[PathBuf], count: u64) -> Result<String> {
    let scratch = std::env::temp_dir().join(format!("xtask-draws-{}", std::process::id()));
    let mut rows: Vec<Row> = Vec::new();
    for w in workloads {
        let text = std::fs::read_to_string(w)?;
        for seed in 1..=count {
            eprintln!("{}: sweeping seed {seed} of {count}", stem(w));
            // The draw keeps the workload's name, so that its own policies are found.
            let folder = scratch.join(format!("seed-{seed}"));
            std::fs::create_dir_all(&folder)?;
            let file = folder.join(w.file_name().context("a workload without a file name")?);
            std::fs::write(&file, with_seed(&text, seed))
                .with_context(|| format!("cannot write {}", file.display()))?;
            // The target lines do not read the informed family: it is not run on the draws.
            let workload = sweep_workload(binary, dir, &file, false)?;
            for v in targets::verdicts(std::slice::from_ref(&workload)) {
                add(&mut rows, v);
            }
        }
    }
    std::fs::remove_dir_all(&scratch)?;
    Ok(table(&rows, count))
}

/// One target line of one workload, on every draw.
struct Row {
    workload: String,
    line: &'static str,
    draws: Vec<Verdict>,
}

fn add(rows: &mut Vec<Row>, v: Verdict) {
    match rows
        .iter_mut()
        .find(|r| r.workload == v.workload && r.line == v.line)
    {
        Some(row) => row.draws.push(v),
        None => rows.push(Row {
            workload: v.workload.clone(),
            line: v.line,
            draws: vec![v],
        }),
    }
}

fn table(rows: &[Row], count: u64) -> String {
    let seeds: String = (1..=count).map(|s| format!(" seed {s} |")).collect();
    let rule: String = (0..count).map(|_| "---|").collect();
    let mut out = format!(
        "\n#### Other draws\n\nEvery target line on seeds 1 to {count} of each workload (the tables above are the shipped seed's).\n\n| workload | line |{seeds} met on |\n|---|---|{rule}---:|\n"
    );
    for r in rows {
        let cells: String = r
            .draws
            .iter()
            .map(|v| format!(" {}: {} |", v.figure, if v.met { "MET" } else { "MISSED" }))
            .collect();
        let met = r.draws.iter().filter(|v| v.met).count();
        out.push_str(&format!(
            "| {} | {} |{cells} {met} of {} |\n",
            r.workload,
            r.line,
            r.draws.len()
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verdict(workload: &str, line: &'static str, met: bool) -> Verdict {
        Verdict {
            workload: workload.into(),
            line,
            figure: "12 % at 30.0 s".into(),
            met,
            text: String::new(),
        }
    }

    #[test]
    fn each_line_gathers_its_draws_and_counts_those_met() {
        let mut rows = Vec::new();
        for met in [true, false] {
            add(&mut rows, verdict("fanout", targets::FRONTIER_LINE, met));
            add(&mut rows, verdict("fanout", targets::WARM_LINE, false));
        }
        let page = table(&rows, 2);
        assert!(
            page.contains(
                "| fanout | #26 frontier | 12 % at 30.0 s: MET | 12 % at 30.0 s: MISSED | 1 of 2 |"
            ),
            "{page}"
        );
        assert!(page.contains("| fanout | #29 warm pool |"), "{page}");
        assert!(page.contains("| 0 of 2 |"), "{page}");
    }
}
