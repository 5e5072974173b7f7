//! Which of a pool's `[[pools.policy]]` entries is in force at an instant.
//!
//! Entries are written as taskscaler's are: `periods`, cron expressions that describe the
//! minutes an entry applies to (`"* 7-19 * * mon-fri"`: every minute from 07:00 to 19:59 on
//! working days), read in the entry's `timezone`. The last entry with a matching period wins;
//! when none matches, the pool's `[pools.scaling]` values apply. Pure: time comes in as
//! milliseconds since the Unix epoch.

use chrono::{DateTime, Timelike, Utc};
use chrono_tz::Tz;
use croner::Cron;
use croner::parser::{CronParser, Seconds};

use super::Millis;
use super::scaler::ScalePolicy;

/// The idle settings one entry sets while one of its periods matches.
#[derive(Debug, Clone)]
pub struct PolicyEntry {
    pub periods: Vec<Period>,
    pub timezone: Tz,
    /// Free job slots to keep ready.
    pub idle_count: u32,
    pub idle_time: Millis,
    /// Extra free slots as a multiple of the slots in use.
    pub scale_factor: f64,
    /// Most free slots `scale_factor` may ask for (0: no limit).
    pub scale_factor_limit: u32,
}

/// One cron expression, parsed.
#[derive(Debug, Clone)]
pub struct Period {
    pub expression: String,
    cron: Cron,
}

impl Period {
    /// Parses a 5-field cron expression (a 6-field one with seconds is accepted too; seconds
    /// are ignored, a period covers whole minutes). Day and month names are accepted.
    pub fn parse(expression: &str) -> Result<Self, String> {
        let cron = CronParser::builder()
            .seconds(Seconds::Optional)
            .build()
            .parse(expression)
            .map_err(|e| format!("{expression:?} is not a cron expression: {e}"))?;
        Ok(Self {
            expression: expression.to_string(),
            cron,
        })
    }

    /// Whether the minute holding `now` (in `timezone`) is one of this period's.
    fn covers(&self, now: Millis, timezone: Tz) -> bool {
        let Some(utc) = DateTime::<Utc>::from_timestamp_millis(i64::try_from(now).unwrap_or(0))
        else {
            return false;
        };
        let local = utc.with_timezone(&timezone);
        let minute = local.with_second(0).and_then(|t| t.with_nanosecond(0));
        minute.is_some_and(|m| self.cron.is_time_matching(&m).unwrap_or(false))
    }
}

impl PolicyEntry {
    pub fn applies(&self, now: Millis) -> bool {
        self.periods.iter().any(|p| p.covers(now, self.timezone))
    }
}

/// The index of the entry in force at `now`: the last one with a matching period.
pub fn in_force(entries: &[PolicyEntry], now: Millis) -> Option<usize> {
    entries.iter().rposition(|entry| entry.applies(now))
}

/// The pool's scaling policy with the idle settings of the entry in force at `now` (if any),
/// and that entry's index. Machine limits (`max_machines`, `capacity_per_machine`,
/// `max_use_count`, `max_age`) are the pool's whatever the period.
pub fn policy_in_force(
    base: ScalePolicy,
    entries: &[PolicyEntry],
    now: Millis,
) -> (ScalePolicy, Option<usize>) {
    let Some(index) = in_force(entries, now) else {
        return (base, None);
    };
    let entry = &entries[index];
    let policy = ScalePolicy {
        idle_count: entry.idle_count,
        idle_time: entry.idle_time,
        scale_factor: entry.scale_factor,
        scale_factor_limit: entry.scale_factor_limit,
        ..base
    };
    (policy, Some(index))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(periods: &[&str], timezone: Tz, idle_count: u32) -> PolicyEntry {
        PolicyEntry {
            periods: periods.iter().map(|p| Period::parse(p).unwrap()).collect(),
            timezone,
            idle_count,
            idle_time: 600_000,
            scale_factor: 0.0,
            scale_factor_limit: 0,
        }
    }

    /// Milliseconds of a UTC wall-clock time.
    fn at(rfc3339: &str) -> Millis {
        let t = DateTime::parse_from_rfc3339(rfc3339).unwrap();
        u64::try_from(t.timestamp_millis()).unwrap()
    }

    #[test]
    fn working_hours_in_a_timezone_and_the_last_match_wins() {
        let berlin: Tz = "Europe/Berlin".parse().unwrap();
        let entries = [
            entry(&["* * * * *"], Tz::UTC, 0),
            entry(&["* 7-19 * * mon-fri"], berlin, 10),
        ];
        // Monday 2026-11-23 06:30 UTC is 07:30 in Berlin (CET, UTC+1).
        assert_eq!(in_force(&entries, at("2026-11-23T06:30:45Z")), Some(1));
        // 05:59 UTC is 06:59 in Berlin: not yet.
        assert_eq!(in_force(&entries, at("2026-11-23T05:59:00Z")), Some(0));
        // 19:59 in Berlin is in, 20:00 is out.
        assert_eq!(in_force(&entries, at("2026-11-23T18:59:59Z")), Some(1));
        assert_eq!(in_force(&entries, at("2026-11-23T19:00:00Z")), Some(0));
        // Saturday.
        assert_eq!(in_force(&entries, at("2026-11-28T10:00:00Z")), Some(0));
    }

    #[test]
    fn no_match_means_the_pool_defaults() {
        let entries = [entry(&["* 9-17 * * sat,sun"], Tz::UTC, 2)];
        assert_eq!(in_force(&entries, at("2026-11-23T10:00:00Z")), None);
        assert_eq!(in_force(&entries, at("2026-11-29T10:00:00Z")), Some(0));
    }

    #[test]
    fn bad_expressions_are_refused_with_the_expression() {
        let e = Period::parse("* 25 * * *").unwrap_err();
        assert!(e.contains("\"* 25 * * *\""), "{e}");
        assert!(Period::parse("every weekday").is_err());
    }

    /// A working-day period ends (virtual time): the idle target falls, idle machines go only
    /// after `idle_time`, a busy machine is never chosen, and the pool keeps a path to jobs.
    #[test]
    fn a_period_change_keeps_busy_machines_and_intake() {
        use crate::core::demand::Forecast;
        use crate::core::machine::MachineState;
        use crate::core::scaler::{MachineView, PlanInput, ScaleFactorCounts, Strategy, plan};
        let base = ScalePolicy {
            max_machines: 10,
            capacity_per_machine: 1,
            idle_count: 0,
            idle_time: 600_000,
            max_use_count: 0,
            max_age: 0,
            scale_factor: 0.0,
            scale_factor_limit: 0,
            scale_factor_counts: ScaleFactorCounts::RunningAndWaiting,
            strategy: Strategy::Idle,
            billing_period: 0,
            target_wait: 30_000,
            stopped_count: 0,
            max_stopped: 0,
            stopped_price_share: None,
        };
        let entries = [entry(&["* 7-19 * * mon-fri"], Tz::UTC, 3)];
        let machine = |id: &str, state, running, idle_since| MachineView {
            id: id.into(),
            state,
            running_jobs: running,
            use_count: 1,
            idle_since,
            created_at: 0,
        };
        let evening = at("2026-11-23T19:59:00Z");
        let (day, entry_index) = policy_in_force(base, &entries, evening);
        assert_eq!((day.idle_count, entry_index), (3, Some(0)));
        let fleet = [
            machine("busy", MachineState::Busy, 1, evening - 3_600_000),
            machine("idle-a", MachineState::Ready, 0, evening - 60_000),
            machine("idle-b", MachineState::Ready, 0, evening - 60_000),
        ];
        let night = at("2026-11-23T20:00:00Z");
        let (night_policy, night_index) = policy_in_force(base, &entries, night);
        assert_eq!((night_policy.idle_count, night_index), (0, None));
        let input = |now| PlanInput {
            machines: &fleet,
            waiting_jobs: 0,
            policy: &night_policy,
            provisioner_paused: false,
            forecast: Forecast::default(),
            now,
        };
        assert!(
            plan(&input(night)).destroy.is_empty(),
            "idle_time still runs"
        );
        let later = plan(&input(evening + 600_000));
        let gone: Vec<&str> = later.destroy.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(gone, ["idle-a", "idle-b"], "never the busy one");
        // A job arriving at night still gets a machine (the intake takes it on demand).
        let waiting = PlanInput {
            waiting_jobs: 2,
            ..input(night)
        };
        assert_eq!(plan(&waiting).create, 0, "the two idle machines take them");
    }
}
