//! The pieces a workload's arrivals and its pipelines are both drawn with: how many jobs
//! (`count` or `rate`), a duration or a range of them, and times drawn from the seeded
//! generator.

use std::time::Duration;

use super::rng::Rng;
use crate::config::reader::Section;
use crate::config::values;
use crate::core::Millis;

/// Exactly a count, or a Poisson rate an hour.
#[derive(Debug, Clone, Copy)]
pub enum HowMany {
    PerHour(f64),
    Exactly(u32),
}

pub fn ms(d: Duration) -> Millis {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// `count_key = n` (exactly n) or `rate_key = r` (Poisson, r an hour), one of the two.
pub fn read_how_many(s: &Section<'_>, count_key: &str, rate_key: &str) -> Option<HowMany> {
    let rate: Option<f64> = s.optional(rate_key);
    let exactly: Option<u32> = s.optional(count_key);
    match (rate, exactly) {
        (Some(r), None) if r > 0.0 && r <= 1_000_000.0 => Some(HowMany::PerHour(r)),
        (Some(_), None) => {
            s.problem(rate_key, "must be above 0 and at most 1000000");
            None
        }
        (None, Some(n)) => Some(HowMany::Exactly(n)),
        _ => {
            s.problem(
                count_key,
                format!("give either {count_key} (a count) or {rate_key} (a rate)"),
            );
            None
        }
    }
}

/// `key = ["30s", "90s"]` (uniform between) or `key = "1m"` (always).
pub fn read_range(s: &Section<'_>, key: &str) -> Option<(Millis, Millis)> {
    let value = s.parsed(key, |v| match v {
        figment::value::Value::Array(_, items) if items.len() == 2 => {
            let low = values::duration(&items[0])?;
            let high = values::duration(&items[1])?;
            if high < low {
                return Err("the second duration must not be below the first".into());
            }
            Ok((ms(low), ms(high)))
        }
        figment::value::Value::Array(..) => Err("must be two durations: [low, high]".into()),
        other => values::duration(other).map(|d| (ms(d), ms(d))),
    });
    if value.is_none() && !s.has(key) {
        s.problem(key, "is required");
    }
    value
}

/// Offsets (ms, within `span`) at which arrivals of `batch` jobs come: `n / batch` uniform
/// times for exactly n jobs, or a Poisson process at the rate.
pub fn draw_times(rng: &mut Rng, span: f64, how_many: HowMany, batch: u32) -> Vec<f64> {
    match how_many {
        HowMany::Exactly(n) => (0..n.div_ceil(batch)).map(|_| rng.unit() * span).collect(),
        HowMany::PerHour(rate) => {
            let per_ms = rate / f64::from(batch) / 3_600_000.0;
            let mut t = 0.0;
            let mut times = Vec::new();
            loop {
                t += rng.exponential(per_ms);
                if t >= span {
                    break times;
                }
                times.push(t);
            }
        }
    }
}

/// A duration drawn uniformly in `[low, high]`.
pub fn uniform(rng: &mut Rng, (low, high): (Millis, Millis)) -> Millis {
    low + (rng.unit() * (high - low) as f64) as Millis
}
