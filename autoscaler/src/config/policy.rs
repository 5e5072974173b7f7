//! `[[pools.policy]]`: idle settings that apply during cron periods, as taskscaler's
//! `[[runners.autoscaler.policy]]` entries do (the last matching entry wins; see
//! `core::schedule`).

use chrono_tz::Tz;

use super::reader::Section;
use super::values;
use crate::core::schedule::{Period, PolicyEntry};

/// Reads every `[[pools.policy]]` entry; `None` for one with problems (each is reported with
/// its key path, e.g. `pools[0].policy[1].periods[0]`).
pub(super) fn read_policies(entries: Vec<Section<'_>>) -> Vec<Option<PolicyEntry>> {
    entries.into_iter().map(read_policy).collect()
}

fn read_policy(s: Section<'_>) -> Option<PolicyEntry> {
    let expressions: Vec<String> = s.or("periods", vec!["* * * * *".to_string()]);
    let mut periods = Vec::new();
    let mut valid = true;
    for (i, expression) in expressions.iter().enumerate() {
        match Period::parse(expression) {
            Ok(period) => periods.push(period),
            Err(e) => {
                s.problem(&format!("periods[{i}]"), e);
                valid = false;
            }
        }
    }
    if expressions.is_empty() {
        s.problem("periods", "needs at least one cron expression");
    }
    let timezone = read_timezone(&s);
    let idle_count: u32 = s.or("idle_count", 0);
    let idle_time = s
        .parsed("idle_time", values::duration)
        .unwrap_or(std::time::Duration::from_secs(600));
    let (scale_factor, scale_factor_limit) = read_scale_factor(&s, idle_count);
    s.finish();
    let idle_time = u64::try_from(idle_time.as_millis()).unwrap_or(u64::MAX);
    (valid && !periods.is_empty()).then_some(PolicyEntry {
        periods,
        timezone: timezone?,
        idle_count,
        idle_time,
        scale_factor,
        scale_factor_limit,
    })
}

/// `timezone`: an IANA name (`Europe/Berlin`); UTC when absent.
fn read_timezone(s: &Section<'_>) -> Option<Tz> {
    let name: String = s.or("timezone", "UTC".to_string());
    match name.parse::<Tz>() {
        Ok(tz) => Some(tz),
        Err(_) => {
            s.problem(
                "timezone",
                format!(
                    "{name:?} is not a time zone of the IANA database (e.g. \"Europe/Berlin\")"
                ),
            );
            None
        }
    }
}

/// `scale_factor` (≥ 0) and `scale_factor_limit` (0: none; else at least `idle_count`, which
/// is the floor of the idle target).
pub(super) fn read_scale_factor(s: &Section<'_>, idle_count: u32) -> (f64, u32) {
    let scale_factor: f64 = s.or("scale_factor", 0.0);
    if !(0.0..=100.0).contains(&scale_factor) {
        s.problem("scale_factor", "must be between 0 and 100");
    }
    let limit: u32 = s.or("scale_factor_limit", 0);
    if limit > 0 && limit < idle_count {
        s.problem(
            "scale_factor_limit",
            format!("is {limit}, below idle_count {idle_count}: idle_count is the least idle capacity, the limit the most"),
        );
    }
    (scale_factor, limit)
}
