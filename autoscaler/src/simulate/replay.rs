//! A replay file (`*.tsv`): recorded jobs, one a line, tab-separated, under a header line.
//! Each recorded pipeline is run as GitLab runs one ([`pipelines`]): a job is pending at its
//! recorded ready time, and not before the jobs of its pipeline's earlier stages that it waited
//! for have ended in the run, so a policy that makes a build wait longer delays the tests
//! after it, and one that serves it sooner does not bring them before their recorded time.
//!
//! ```text
//! # lines starting with # and blank lines are skipped; → stands for a tab
//! ready→duration→project→pipeline→stage→name→class
//! 2026-11-23T08:00:00Z→4m30s→web→1017→build→compile→default
//! 2026-11-23T08:04:31Z→6m→web→1017→test→rspec 1/8→default
//! ```
//!
//! `ready` is an RFC 3339 time, `duration` a humantime duration or a number of seconds,
//! `pipeline` a number; an optional eighth column, [`STATUS`], says how each job ended. The
//! run starts at the earliest ready time.

use std::collections::BTreeMap;
use std::path::Path;

use chrono::DateTime;

use super::SimulateError;
use super::pipeline::{Pipeline, PipelineJob};
use super::workload::{Job, Label};
use crate::core::Millis;

/// The columns, in order: the header line must be exactly these, or these and [`STATUS`].
pub const COLUMNS: [&str; 7] = [
    "ready", "duration", "project", "pipeline", "stage", "name", "class",
];

/// The optional eighth column: how the job ended, as GitLab names it (`success`, `failed`,
/// `canceled`). A failed or canceled job tells the pipeline forecast that the stages after
/// it are not coming, as its final state tells the service; without the column every job
/// passed.
pub const STATUS: &str = "status";

/// Bad lines named one by one: beyond these, a file is wrong throughout and a count says more.
const MAX_PROBLEMS: usize = 20;

/// A replay read: its jobs in order of ready time, and the line each came from.
#[derive(Debug)]
pub struct Replay {
    pub start: Millis,
    pub end: Millis,
    /// (line, job), sorted by ready time.
    pub jobs: Vec<(usize, Job)>,
}

pub fn read(path: &Path) -> Result<Replay, SimulateError> {
    let text = std::fs::read_to_string(path).map_err(|source| SimulateError::Read {
        file: path.to_path_buf(),
        source,
    })?;
    parse(&text).map_err(|problems| SimulateError::Invalid {
        file: path.to_path_buf(),
        problems,
    })
}

/// Every bad line, as `line N: what is wrong`.
pub fn parse(text: &str) -> Result<Replay, Vec<String>> {
    let mut lines = text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l))
        .filter(|(_, l)| !l.trim().is_empty() && !l.starts_with('#'));
    let mut problems = Vec::new();
    let mut with_status = false;
    match lines.next() {
        Some((_, header)) if header.split('\t').eq(COLUMNS) => {}
        Some((_, header)) if header.split('\t').eq(COLUMNS.into_iter().chain([STATUS])) => {
            with_status = true;
        }
        Some((n, _)) => problems.push(format!(
            "line {n}: the header must be the columns {} (and optionally {STATUS}) separated by tabs",
            COLUMNS.join(", ")
        )),
        None => problems.push("has no header line and no jobs".into()),
    }
    let mut jobs = Vec::new();
    for (n, line) in lines {
        match parse_line(line, with_status) {
            Ok(job) => jobs.push((n, job)),
            Err(e) => problems.push(format!("line {n}: {e}")),
        }
    }
    if jobs.is_empty() && problems.is_empty() {
        problems.push("has no jobs".into());
    }
    if problems.len() > MAX_PROBLEMS {
        let more = problems.len() - MAX_PROBLEMS;
        problems.truncate(MAX_PROBLEMS);
        problems.push(format!("and {more} more bad lines"));
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    jobs.sort_by_key(|(_, j)| j.at);
    let start = jobs.first().map_or(0, |(_, j)| j.at);
    let end = jobs.last().map_or(0, |(_, j)| j.at);
    Ok(Replay { start, end, jobs })
}

fn parse_line(line: &str, with_status: bool) -> Result<Job, String> {
    let fields: Vec<&str> = line.split('\t').collect();
    let expected = COLUMNS.len() + usize::from(with_status);
    let miscounted = || format!("has {} tab-separated fields, not {expected}", fields.len());
    let (fixed, rest) = fields.split_at(fields.len().min(COLUMNS.len()));
    let [ready, duration, project, pipeline, stage, name, class] = fixed[..] else {
        return Err(miscounted());
    };
    if rest.len() != usize::from(with_status) {
        return Err(miscounted());
    }
    let failed = match rest.first().map(|s| s.trim()) {
        None | Some("success") => false,
        Some("failed" | "canceled") => true,
        Some(other) => {
            return Err(format!(
                "status: {other:?} is not a finished job's status (success, failed or canceled)"
            ));
        }
    };
    let at = DateTime::parse_from_rfc3339(ready.trim())
        .map_err(|e| format!("ready: {ready:?} is not an RFC 3339 time ({e})"))
        .and_then(|t| {
            u64::try_from(t.timestamp_millis())
                .map_err(|_| format!("ready: {ready:?} is before 1970"))
        })?;
    let runs_for = parse_duration(duration.trim())
        .map_err(|e| format!("duration: {duration:?} is not a duration ({e})"))?;
    let pipeline = pipeline
        .trim()
        .parse()
        .map_err(|e| format!("pipeline: {pipeline:?} is not a number ({e})"))?;
    if class.trim().is_empty() {
        return Err("class: is empty".into());
    }
    Ok(Job {
        at,
        runs_for,
        class: class.trim().to_string(),
        label: Some(Label {
            project: project.to_string(),
            pipeline,
            stage: stage.to_string(),
            name: name.to_string(),
            failed,
        }),
    })
}

/// How much later than a recorded job's ready time an earlier-stage job of its pipeline may
/// seem to end and still be one it waited for: recorded times are rounded (GitLab's to the
/// millisecond or the second, a duration to a tenth of a second).
const RECORDED_SLACK: Millis = 1_000;

/// The replay's jobs as the pipelines GitLab ran, in order of creation (their first ready
/// time), one per recorded pipeline and class (a pipeline whose jobs ran in two pools is run
/// as one in each, since each pool is simulated on its own). Each job waits for the jobs of
/// its pipeline's earlier stages (those whose first job was ready before its own stage's
/// first) that had ended by its recorded ready time, a job's end read as its `ready` plus its
/// `duration` (the format leaves out its wait, so that is the earliest it can have ended):
/// the format does not say which jobs a job `needs`, and those are the ones it can have
/// waited for. Its recorded ready time is its `not_before`.
pub fn pipelines(jobs: &[(usize, Job)]) -> Vec<Pipeline> {
    let mut groups: BTreeMap<(&str, &str, u64), Vec<&Job>> = BTreeMap::new();
    for (_, job) in jobs {
        if let Some(l) = &job.label {
            groups
                .entry((job.class.as_str(), l.project.as_str(), l.pipeline))
                .or_default()
                .push(job);
        }
    }
    let mut out: Vec<Pipeline> = groups
        .into_iter()
        .map(|((class, project, id), jobs)| pipeline(class, project, id, jobs))
        .collect();
    out.sort_by_key(|p| (p.created, p.id));
    out
}

/// One recorded pipeline's jobs (of one class) as a pipeline ([`pipelines`]).
fn pipeline(class: &str, project: &str, id: u64, jobs: Vec<&Job>) -> Pipeline {
    fn stage_of(j: &Job) -> &str {
        j.label.as_ref().map_or("", |l| l.stage.as_str())
    }
    let mut stage_ready: BTreeMap<&str, Millis> = BTreeMap::new();
    for j in &jobs {
        let first = stage_ready.entry(stage_of(j)).or_insert(j.at);
        *first = (*first).min(j.at);
    }
    // (job, its stage's first ready time), in order of ready time, earlier stages first at a
    // tie: every job waited for comes before the jobs waiting for it.
    let mut jobs: Vec<(&Job, Millis)> = jobs
        .into_iter()
        .map(|j| (j, stage_ready[stage_of(j)]))
        .collect();
    jobs.sort_by_key(|&(j, stage_first)| (j.at, stage_first));
    let waited_for = |at: usize| -> Vec<usize> {
        let (job, stage_first) = jobs[at];
        (0..at)
            .filter(|&i| {
                let (earlier, earlier_stage_first) = jobs[i];
                earlier_stage_first < stage_first
                    && earlier.at + earlier.runs_for <= job.at + RECORDED_SLACK
            })
            .collect()
    };
    let shaped = (0..jobs.len())
        .map(|at| {
            let job = jobs[at].0;
            PipelineJob {
                stage: stage_of(job).to_string(),
                name: job
                    .label
                    .as_ref()
                    .map_or_else(String::new, |l| l.name.clone()),
                runs_for: job.runs_for,
                after: waited_for(at),
                not_before: job.at,
                failed: job.label.as_ref().is_some_and(|l| l.failed),
            }
        })
        .collect();
    Pipeline {
        id,
        project: project.to_string(),
        class: class.to_string(),
        created: jobs.first().map_or(0, |(j, _)| j.at),
        scheduled_at: None,
        jobs: shaped,
    }
}

/// `"4m30s"`, or a plain number of seconds (`"270"`, `"12.5"`).
fn parse_duration(s: &str) -> Result<Millis, String> {
    if let Ok(seconds) = s.parse::<f64>() {
        return if seconds.is_finite() && seconds >= 0.0 {
            Ok((seconds * 1000.0).round() as Millis)
        } else {
            Err("must not be negative".into())
        };
    }
    humantime::parse_duration(s)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .map_err(|e| e.to_string())
}
