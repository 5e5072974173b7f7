//! `[runners.machine]` (docker+machine) as a pool whose machines the `docker-machine`
//! provisioner makes with the same driver and options. One job per machine, as there.

use toml::{Table, Value};

use super::source::Source;
use super::{Options, Report};

pub(super) fn convert(
    machine: &Source<'_>,
    entry: &Source<'_>,
    options: &Options,
    pool: &mut Table,
    report: &mut Report,
) {
    pool.insert(
        "provisioner".into(),
        Value::Table(provisioner(machine, options, report)),
    );
    let mut scaling = Table::new();
    // docker+machine's rule (idle machines counted, kept for IdleTime), said outright.
    scaling.insert("strategy".into(), "idle".into());
    match entry.int("limit").filter(|n| *n > 0) {
        Some(n) => {
            scaling.insert("max_machines".into(), Value::Integer(n));
        }
        None => report.check(
            entry.key_path("limit"),
            "without a limit docker+machine makes machines without bound; here scaling.max_machines is 10 unless set",
        ),
    }
    scaling.insert("capacity_per_machine".into(), Value::Integer(1));
    idle_settings(machine, &mut scaling);
    if let Some(n) = machine.int("MaxBuilds") {
        scaling.insert("max_use_count".into(), Value::Integer(n.max(0)));
    }
    pool.insert("scaling".into(), Value::Table(scaling));
    let policies: Vec<Value> = machine
        .tables("autoscaling")
        .iter()
        .filter_map(|p| policy(p, report).map(Value::Table))
        .collect();
    if !policies.is_empty() {
        pool.insert("policy".into(), Value::Array(policies));
    }
    for key in [
        "OffPeakPeriods",
        "OffPeakTimezone",
        "OffPeakIdleCount",
        "OffPeakIdleTime",
    ] {
        machine.drop(
            key,
            "removed in gitlab-runner 14; write a [[runners.machine.autoscaling]] entry (it becomes a [[pools.policy]])",
            &mut report.not_carried,
        );
    }
    machine.rest("no equivalent here", &mut report.not_carried);
}

fn provisioner(machine: &Source<'_>, options: &Options, report: &mut Report) -> Table {
    let mut table = Table::new();
    let command = options
        .provisioners_dir
        .join("docker-machine")
        .join("provisioner");
    table.insert("command".into(), command.display().to_string().into());
    if let Some(n) = machine.int("MaxGrowthRate").filter(|n| *n > 0) {
        table.insert("create_burst".into(), Value::Integer(n.min(1000)));
    }
    let mut env = Table::new();
    match machine.str("MachineDriver") {
        Some(driver) => {
            env.insert("DOCKER_MACHINE_DRIVER".into(), driver.into());
        }
        None => report.check(
            machine.key_path("MachineDriver"),
            "no driver: set DOCKER_MACHINE_DRIVER in [pools.provisioner.env]",
        ),
    }
    if let Some(name) = machine.str("MachineName") {
        if name.matches("%s").count() == 1 {
            env.insert("DOCKER_MACHINE_NAME".into(), name.into());
        } else {
            report.not_carried(
                machine.key_path("MachineName"),
                "needs exactly one %s; the provisioner's default name template is used",
            );
        }
    }
    if let Some(Value::Array(options)) = machine.get("MachineOptions") {
        let lines: Vec<&str> = options.iter().filter_map(Value::as_str).collect();
        env.insert("DOCKER_MACHINE_OPTIONS".into(), lines.join("\n").into());
    }
    table.insert("env".into(), Value::Table(env));
    table
}

/// `IdleCount`, `IdleTime` and the scale factor settings, in a table whose keys are the same
/// here (`idle_count`, ...). docker+machine counts idle machines and runs one job on each, so
/// idle machines are idle job slots. With `IdleScaleFactor`, `IdleCountMin` is the least idle
/// count and `IdleCount` the most, which is what `idle_count` and `scale_factor_limit` are.
fn idle_settings(source: &Source<'_>, into: &mut Table) {
    let factor = source.float("IdleScaleFactor").unwrap_or(0.0);
    let idle_count = source.int("IdleCount");
    let idle_min = source.int("IdleCountMin");
    if factor > 0.0 {
        into.insert(
            "idle_count".into(),
            Value::Integer(idle_min.unwrap_or(0).max(0)),
        );
        into.insert("scale_factor".into(), factor.into());
        if let Some(max) = idle_count.filter(|n| *n > 0) {
            into.insert("scale_factor_limit".into(), Value::Integer(max));
        }
    } else if let Some(n) = idle_count {
        into.insert("idle_count".into(), Value::Integer(n.max(0)));
    }
    if let Some(seconds) = source.int("IdleTime") {
        into.insert("idle_time".into(), format!("{}s", seconds.max(0)).into());
    }
}

/// One `[[runners.machine.autoscaling]]` entry as a `[[pools.policy]]` entry; `None` when
/// none of its periods can be carried over.
fn policy(source: &Source<'_>, report: &mut Report) -> Option<Table> {
    let mut policy = Table::new();
    let mut periods = Vec::new();
    if let Some(Value::Array(items)) = source.get("Periods") {
        for (i, item) in items.iter().enumerate() {
            match item.as_str().map(five_fields) {
                Some(Ok(period)) => periods.push(Value::String(period)),
                Some(Err(reason)) => report.not_carried(
                    format!("{}[{i}]", source.key_path("Periods")),
                    reason.as_str(),
                ),
                None => report.not_carried(
                    format!("{}[{i}]", source.key_path("Periods")),
                    "not a string",
                ),
            }
        }
        if periods.is_empty() {
            report.not_carried(
                source.path().to_string(),
                "none of its periods can be carried over, so neither can the entry",
            );
            return None;
        }
        policy.insert("periods".into(), Value::Array(periods));
    }
    match source.str("Timezone") {
        Some(zone) if zone != "Local" => {
            policy.insert("timezone".into(), zone.into());
        }
        _ => report.check(
            source.key_path("Timezone"),
            "docker+machine reads periods in the host's zone, this autoscaler in UTC: set timezone",
        ),
    }
    idle_settings(source, &mut policy);
    source.rest("no equivalent here", &mut report.not_carried);
    Some(policy)
}

/// docker+machine's cron expressions (`"* * 9-17 * * mon-fri *"`: seconds, minutes, hours,
/// day of month, month, day of week, year; six fields leave out the seconds) as the 5-field
/// expressions of `periods`: the minutes a period covers are the same.
fn five_fields(expression: &str) -> Result<String, String> {
    let fields: Vec<&str> = expression.split_whitespace().collect();
    let (minutes_on, year) = match fields.len() {
        5 => (&fields[..], None),
        6 => (&fields[..5], Some(fields[5])),
        7 => (&fields[1..6], Some(fields[6])),
        n => return Err(format!("{expression:?} has {n} fields, not 5 to 7")),
    };
    if fields.len() == 7 && fields[0] != "*" {
        return Err(format!(
            "{expression:?} picks seconds ({}); periods cover whole minutes",
            fields[0]
        ));
    }
    if let Some(year) = year.filter(|y| *y != "*") {
        return Err(format!(
            "{expression:?} picks years ({year}); periods repeat every year"
        ));
    }
    Ok(minutes_on.join(" "))
}

#[cfg(test)]
mod tests {
    use super::five_fields;

    #[test]
    fn docker_machine_periods_become_five_fields() {
        assert_eq!(
            five_fields("* * 9-17 * * mon-fri *").as_deref(),
            Ok("* 9-17 * * mon-fri")
        );
        assert_eq!(
            five_fields("* 9-17 * * mon-fri *").as_deref(),
            Ok("* 9-17 * * mon-fri")
        );
        assert_eq!(
            five_fields("* * * * sat,sun").as_deref(),
            Ok("* * * * sat,sun")
        );
        assert!(five_fields("* * * * * * 2027").is_err());
        assert!(five_fields("*/10 * * * * * *").is_err());
        assert!(five_fields("* *").is_err());
    }
}
