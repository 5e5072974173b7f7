//! The family "taskscaler, rates known": what knowing each hour's true arrival rates is worth
//! on the workloads that are streams of random arrivals. It is taskscaler with one
//! `[[pools.policy]]` entry for every span of the workload in which its rates hold still
//! (cut at the arrivals' bounds and at midnight), whose `idle_count` is the `q`-quantile of the
//! jobs that arrive within a lead time `ℓ` at that span's rates: each `[[arrivals]]` entry's
//! batches come at random (a Poisson process), each of its `batch` jobs. No online policy knows
//! more than the rates: the times within them stay random. So its frontier shows what knowing
//! the rates perfectly buys a rule of this kind (another rule could use them better).
//!
//! A workload counts as a stream when it has no pipelines and its one-off arrivals (`jobs =`)
//! are at most a tenth of its jobs (`weekday`, `mixed`, `weekend`; not `burst` or `nightly`,
//! whose one-off bursts no rate describes). One-off arrivals are left out of the rates.

use anyhow::{Context, Result};
use chrono::Datelike;
use toml::Value;

use super::targets::RANGE;
use super::{Family, Point, Workload, cost_at, pareto};

/// The quantiles of the jobs within the lead time that the entries hold.
const QUANTILES: [f64; 13] = [
    0.3, 0.5, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.93, 0.95, 0.99, 0.999,
];
/// Lead times, in minutes: boots take 30-90 s on the shipped workloads.
const LEADS: [f64; 7] = [0.5, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5];
const IDLE_TIMES: [&str; 4] = ["1m", "2m", "5m", "20m"];
const SCALE_FACTORS: [&str; 2] = ["0.0", "0.25"];
/// The most one-off jobs, as a share of all, for a workload to count as a stream.
const ONE_OFF_SHARE: f64 = 0.1;
const DAY: u64 = 24 * 60;

/// One `[[arrivals]]` entry with a rate: its span in minutes from the start, jobs an hour,
/// jobs a batch and class.
struct Stream {
    from: u64,
    to: u64,
    per_hour: f64,
    batch: u64,
    class: Option<String>,
}

/// The workload's arrivals with a rate, its length in minutes and the day of the month it
/// starts on; `None` when it is not a stream (above).
fn streams(workload: &str) -> Result<Option<(Vec<Stream>, u64, u32)>> {
    let doc: Value = workload.parse().context("the workload is not TOML")?;
    if doc.get("pipelines").is_some() {
        return Ok(None);
    }
    let length = minutes(doc.get("length").and_then(Value::as_str).unwrap_or("24h"))?;
    let start = doc.get("start").and_then(Value::as_str).unwrap_or("");
    let first = chrono::DateTime::parse_from_rfc3339(start)
        .context("start")?
        .date_naive();
    let last = first + chrono::Days::new(length.saturating_sub(1) / DAY);
    let (mut streams, mut one_off, mut total) = (Vec::new(), 0.0, 0.0);
    for a in doc
        .get("arrivals")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let (from, to) = (span_end(a, "from")?, span_end(a, "to")?);
        if let Some(jobs) = a.get("jobs").and_then(Value::as_integer) {
            one_off += jobs as f64;
            total += jobs as f64;
            continue;
        }
        let per_hour = a
            .get("jobs_per_hour")
            .and_then(number)
            .context("jobs_per_hour")?;
        total += per_hour * (to - from) as f64 / 60.0;
        streams.push(Stream {
            from,
            to,
            per_hour,
            batch: a
                .get("batch")
                .and_then(Value::as_integer)
                .unwrap_or(1)
                .max(1) as u64,
            class: a.get("class").and_then(Value::as_str).map(str::to_string),
        });
    }
    let stream = !streams.is_empty() && one_off <= ONE_OFF_SHARE * total;
    // The policy periods name days of the month.
    anyhow::ensure!(
        !stream || (last.year(), last.month()) == (first.year(), first.month()),
        "the informed family takes streams that end in the month they start in"
    );
    Ok(stream.then_some((streams, length, first.day())))
}

fn number(v: &Value) -> Option<f64> {
    v.as_float().or_else(|| v.as_integer().map(|i| i as f64))
}

fn span_end(arrival: &Value, key: &str) -> Result<u64> {
    minutes(
        arrival
            .get(key)
            .and_then(Value::as_str)
            .context(key.to_string())?,
    )
}

/// Whole minutes of a duration written as the workloads write them (`8h30m`, `90s`).
fn minutes(text: &str) -> Result<u64> {
    let (mut seconds, mut digits) = (0u64, String::new());
    for c in text.trim().chars() {
        if c.is_ascii_digit() {
            digits.push(c);
            continue;
        }
        let unit = match c {
            'h' => 3600,
            'm' => 60,
            's' => 1,
            _ => anyhow::bail!("{text:?} is not a duration"),
        };
        seconds += digits.parse::<u64>().context("a duration")? * unit;
        digits.clear();
    }
    Ok(seconds / 60)
}

/// The smallest number of jobs that the jobs arriving within `lead` minutes exceed with a
/// chance of at most `1 - q`, each stream's batches coming at random: the distributions of
/// the streams' jobs (compound Poisson), convolved.
fn quantile(streams: &[&Stream], lead: f64, q: f64) -> u64 {
    let mut pmf = vec![1.0];
    for s in streams {
        let mean = s.per_hour / s.batch as f64 * lead / 60.0;
        let mut batches = Vec::new();
        let (mut p, mut mass) = ((-mean).exp(), 0.0);
        while mass < 1.0 - 1e-9 && batches.len() < 2000 {
            batches.push(p);
            mass += p;
            p *= mean / batches.len() as f64;
        }
        let mut next = vec![0.0; pmf.len() + batches.len() * s.batch as usize];
        for (jobs, a) in pmf.iter().enumerate() {
            for (n, b) in batches.iter().enumerate() {
                next[jobs + n * s.batch as usize] += a * b;
            }
        }
        pmf = next;
    }
    let mut mass = 0.0;
    for (jobs, p) in pmf.iter().enumerate() {
        mass += p;
        if mass >= q {
            return jobs as u64;
        }
    }
    pmf.len() as u64
}

/// Cron periods for the minutes `[from, to)` from the start, within one day that starts on
/// day `day` of the month.
fn periods(from: u64, to: u64, day: u32) -> Vec<String> {
    let date = day + (from / DAY) as u32;
    let (from, to) = (from % DAY, to - (to - 1) / DAY * DAY);
    let mut out = Vec::new();
    let mut m = from;
    while m < to {
        let (hour, minute) = (m / 60, m % 60);
        let last = (to - hour * 60).min(60) - 1;
        if minute == 0 && last == 59 {
            let mut end = hour;
            while (end + 2) * 60 <= to {
                end += 1;
            }
            out.push(if end > hour {
                format!("* {hour}-{end} {date} * *")
            } else {
                format!("* {hour} {date} * *")
            });
            m = (end + 1) * 60;
        } else {
            out.push(format!("{minute}-{last} {hour} {date} * *"));
            m = hour * 60 + last + 1;
        }
    }
    out
}

/// Every (setting, policy text) of the family on `workload`, from its taskscaler baseline
/// (each pool's own settings and provisioner, its entries replaced): none unless the workload
/// is a stream. With several pools, each holds for the arrivals of its class (its name).
pub fn settings(workload: &str, baseline: &str) -> Result<Vec<(String, String)>> {
    let Some((streams, length, day)) = streams(workload)? else {
        return Ok(Vec::new());
    };
    let mut cuts: Vec<u64> = streams.iter().flat_map(|s| [s.from, s.to]).collect();
    cuts.extend((0..=length).step_by(DAY as usize));
    cuts.push(length);
    cuts.retain(|&c| c <= length);
    cuts.sort_unstable();
    cuts.dedup();
    let pools: Vec<&str> = baseline.split("[[pools]]").skip(1).collect();
    let mut out = Vec::new();
    for q in QUANTILES {
        for lead in LEADS {
            for idle_time in IDLE_TIMES {
                for scale_factor in SCALE_FACTORS {
                    let entry = Entry {
                        q,
                        lead,
                        idle_time,
                        scale_factor,
                    };
                    let text: String = pools
                        .iter()
                        .map(|pool| entry.pool(pool, &streams, &cuts, day, pools.len() > 1))
                        .collect();
                    out.push((entry.label(), text));
                }
            }
        }
    }
    Ok(out)
}

/// One setting of the family.
struct Entry {
    q: f64,
    lead: f64,
    idle_time: &'static str,
    scale_factor: &'static str,
}

impl Entry {
    fn label(&self) -> String {
        format!(
            "q={} lead={}m idle_time=\"{}\" scale_factor={}",
            self.q, self.lead, self.idle_time, self.scale_factor
        )
    }

    /// A `[[pools]]` block of the baseline (`pool`, after that header) with an entry a span.
    fn pool(
        &self,
        pool: &str,
        streams: &[Stream],
        cuts: &[u64],
        day: u32,
        by_class: bool,
    ) -> String {
        let head_end = ["[[pools.policy]]", "[pools.provisioner]"]
            .iter()
            .filter_map(|t| pool.find(t))
            .min()
            .unwrap_or(pool.len());
        let name = pool
            .split("name = \"")
            .nth(1)
            .and_then(|n| n.split('"').next());
        let mut text = format!("[[pools]]{}", &pool[..head_end]);
        for span in cuts.windows(2) {
            let rates: Vec<&Stream> = streams
                .iter()
                .filter(|s| s.from <= span[0] && s.to >= span[1])
                .filter(|s| !by_class || s.class.as_deref() == name)
                .collect();
            text.push_str(&format!(
                "\n[[pools.policy]]\nperiods = {:?}\ntimezone = \"UTC\"\nidle_count = {}\nidle_time = \"{}\"\nscale_factor = {}\nscale_factor_limit = 0\n",
                periods(span[0], span[1], day),
                quantile(&rates, self.lead, self.q),
                self.idle_time,
                self.scale_factor
            ));
        }
        if let Some(at) = pool.find("[pools.provisioner]") {
            text.push('\n');
            text.push_str(&pool[at..]);
        }
        text
    }
}

/// On a stream, each of the informed and the demand-aware frontiers' overhead as a share of
/// taskscaler's grid frontier's, at its least and its most over the p95s from 10 to 60 s that
/// both frontiers of the share reach (read at 10 s and at every point's p95 between): a line
/// for the page, not a target.
pub fn reading(w: &Workload) -> Option<String> {
    let task = pareto(&w.family(Family::Taskscaler), Point::overhead);
    let informed = pareto(&w.family(Family::Informed), Point::overhead);
    if informed.is_empty() {
        return None;
    }
    let span = |family: Family| {
        let front = pareto(&w.family(family), Point::overhead);
        let shares: Vec<(f64, f64, f64)> = front
            .iter()
            .chain(&task)
            .map(|p| p.run.p95)
            .chain([RANGE.0])
            .filter(|&x| (RANGE.0..=RANGE.1).contains(&x))
            .filter_map(|x| {
                let ours = cost_at(&front, x, Point::overhead)?;
                let theirs = cost_at(&task, x, Point::overhead).filter(|&t| t > 0.0)?;
                Some((x, ours, theirs))
            })
            .collect();
        let share = |&(_, o, t): &(f64, f64, f64)| o / t;
        let least = shares.iter().min_by(|a, b| share(a).total_cmp(&share(b)))?;
        let most = shares.iter().max_by(|a, b| share(a).total_cmp(&share(b)))?;
        let shown = |s: &(f64, f64, f64)| {
            format!(
                "{:.0} % ({:.1} s: {:.0} against {:.0})",
                share(s) * 100.0,
                s.0,
                s.1,
                s.2
            )
        };
        Some(format!("{} to {}", shown(least), shown(most)))
    };
    let none = || "no p95 both reach".to_string();
    Some(format!(
        "- {}: taskscaler, rates known: {}; demand-aware: {}",
        w.name,
        span(Family::Informed).unwrap_or_else(none),
        span(Family::Demand).unwrap_or_else(none)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_become_cron_periods_of_their_day() {
        assert_eq!(periods(0, 420, 23), ["* 0-6 23 * *"]);
        assert_eq!(
            periods(510, 690, 23),
            ["30-59 8 23 * *", "* 9-10 23 * *", "0-29 11 23 * *"]
        );
        assert_eq!(periods(1440, 2880, 28), ["* 0-23 29 * *"]);
    }

    #[test]
    fn the_quantile_counts_whole_batches() {
        let s = Stream {
            from: 0,
            to: 60,
            per_hour: 240.0,
            batch: 4,
            class: None,
        };
        // 2.5 batches in 2.5 minutes: at most 2 batches 54 % of the time, 3 batches 76 %.
        assert_eq!(quantile(&[&s], 2.5, 0.6), 12);
        assert_eq!(quantile(&[&s], 2.5, 0.5), 8);
        assert_eq!(quantile(&[], 2.5, 0.9), 0);
    }

    #[test]
    fn a_weekend_may_end_on_the_last_day_of_its_month() {
        let weekend = "start = \"2026-11-28T00:00:00Z\"\nlength = \"72h\"\n\
                       [[arrivals]]\nfrom = \"0h\"\nto = \"72h\"\njobs_per_hour = 2\n";
        assert!(streams(weekend).unwrap().is_some());
        let past = weekend.replace("72h", "73h");
        assert!(streams(&past).is_err(), "into December");
        let one_off = past.replace("jobs_per_hour = 2", "jobs = 50");
        assert!(
            streams(&one_off).unwrap().is_none(),
            "not a stream: not refused"
        );
        let two_days_from = |date| weekend.replace("2026-11-28", date).replace("72h", "48h");
        let leap = streams(&two_days_from("2028-02-28")).unwrap();
        assert!(leap.is_some(), "February 29, 2028");
        assert!(
            streams(&two_days_from("2100-02-28")).is_err(),
            "no February 29 in 2100"
        );
    }

    #[test]
    fn durations_are_read_in_minutes() {
        assert_eq!(minutes("8h30m").unwrap(), 510);
        assert_eq!(minutes("90s").unwrap(), 1);
        assert!(minutes("8 hours").is_err());
    }
}
