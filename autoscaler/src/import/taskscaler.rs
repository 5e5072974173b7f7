//! `[runners.autoscaler]` (taskscaler and a fleeting plugin) as a pool's provisioner, scaling
//! and `[[pools.policy]]` entries.

use toml::{Table, Value};

use super::source::Source;
use super::{Options, Report};

/// Plugin settings this project's provisioner of the same cloud takes, as its variables.
struct Plugin {
    provisioner: &'static str,
    /// `plugin_config` key → provisioner variable.
    settings: &'static [(&'static str, &'static str)],
    /// The connector's `username` as the provisioner's login user.
    ssh_user: &'static str,
}

const PLUGINS: &[(&str, Plugin)] = &[
    (
        "aws",
        Plugin {
            provisioner: "aws",
            settings: &[("region", "AWS_REGION")],
            ssh_user: "AWS_SSH_USER",
        },
    ),
    (
        "googlecloud",
        Plugin {
            provisioner: "gcp",
            settings: &[("project", "GCE_PROJECT"), ("zone", "GCE_ZONE")],
            ssh_user: "GCE_SSH_USER",
        },
    ),
    (
        "hetzner",
        Plugin {
            provisioner: "hetzner",
            settings: &[
                ("token", "HCLOUD_TOKEN"),
                ("location", "HCLOUD_LOCATION"),
                ("server_type", "HCLOUD_SERVER_TYPE"),
                ("image", "HCLOUD_IMAGE"),
                ("name", "HCLOUD_NAME_PREFIX"),
            ],
            ssh_user: "HCLOUD_SSH_USER",
        },
    ),
];

/// `registry/path/fleeting-plugin-aws:1.2` → `aws`.
fn plugin_name(reference: &str) -> String {
    let last = reference.rsplit('/').next().unwrap_or(reference);
    let name = last.split(':').next().unwrap_or(last);
    let name = name.strip_prefix("fleeting-plugin-").unwrap_or(name);
    match name {
        "googlecompute" | "gcp" | "google" => "googlecloud".into(),
        other => other.to_string(),
    }
}

pub(super) fn convert(
    autoscaler: &Source<'_>,
    entry: &Source<'_>,
    options: &Options,
    pool: &mut Table,
    report: &mut Report,
) {
    pool.insert(
        "provisioner".into(),
        Value::Table(provisioner(autoscaler, options, report)),
    );
    pool.insert(
        "scaling".into(),
        Value::Table(scaling(autoscaler, entry, report)),
    );
    let policies: Vec<Value> = autoscaler
        .tables("policy")
        .iter()
        .map(|p| Value::Table(policy(p, report)))
        .collect();
    if !policies.is_empty() {
        pool.insert("policy".into(), Value::Array(policies));
    }
    if let Some(command) = autoscaler.str("instance_ready_command") {
        let mut sidecar = Table::new();
        sidecar.insert("ready_command".into(), command.into());
        pool.insert("sidecar".into(), Value::Table(sidecar));
    }
    let n = &mut report.not_carried;
    for (key, reason) in [
        (
            "state_storage",
            "machines are always kept in the autoscaler's store (state.dir) and survive restarts with their jobs",
        ),
        ("vm_isolation", "nested virtualisation is not supported"),
        (
            "update_interval_when_expecting",
            "machines that change state are followed by their own pass",
        ),
        (
            "deletion_retry_interval",
            "failed deletions are retried with backoff",
        ),
        (
            "shutdown_deletion_interval",
            "see scaling.delete_on_shutdown",
        ),
        (
            "shutdown_deletion_retries",
            "see scaling.delete_on_shutdown",
        ),
        (
            "failure_threshold",
            "a machine is probed over SSH after sidecar.silence_timeout without a call",
        ),
        (
            "reservation_throttling",
            "there are no reservations on idle machines here",
        ),
        (
            "log_internal_ip",
            "addresses are in the admin API's machine list, not in job logs",
        ),
        (
            "log_external_ip",
            "addresses are in the admin API's machine list, not in job logs",
        ),
    ] {
        autoscaler.drop(key, reason, n);
    }
    autoscaler.rest("no equivalent here (e.g. Prometheus buckets)", n);
}

fn provisioner(autoscaler: &Source<'_>, options: &Options, report: &mut Report) -> Table {
    let reference = autoscaler.str("plugin").unwrap_or_default();
    let name = plugin_name(reference);
    let known = PLUGINS.iter().find(|(n, _)| *n == name).map(|(_, p)| p);
    let dir = known.map_or(name.as_str(), |p| p.provisioner);
    let mut table = Table::new();
    let command = options.provisioners_dir.join(dir).join("provisioner");
    table.insert("command".into(), command.display().to_string().into());
    if known.is_none() {
        report.check(
            autoscaler.key_path("plugin"),
            "no provisioner of this project matches this fleeting plugin: write one (provisioners/README.md) and point provisioner.command at it",
        );
    }
    let mut env = Table::new();
    if let Some(config) = autoscaler.table("plugin_config") {
        for (key, var) in known.map_or(&[][..], |p| p.settings) {
            match config.get(key) {
                Some(Value::String(s)) => {
                    env.insert((*var).to_string(), s.as_str().into());
                }
                Some(Value::Array(items)) if !items.is_empty() => {
                    // A list of fallbacks (Hetzner's server types): the first one.
                    env.insert(
                        (*var).to_string(),
                        items[0].as_str().unwrap_or_default().into(),
                    );
                    report.not_carried(
                        config.key_path(key),
                        "only the first entry is used; the provisioner takes one",
                    );
                }
                _ => {}
            }
        }
        config.rest(
            "the provisioner takes its settings as variables (see its README): set them in [pools.provisioner.env]",
            &mut report.not_carried,
        );
    }
    connector(autoscaler, known, &mut env, report);
    if let Some(throttle) = autoscaler.table("scale_throttle") {
        if let Some(limit) = throttle.float("limit").filter(|l| *l > 0.0) {
            table.insert("create_rate".into(), limit.min(1000.0).into());
        }
        if let Some(burst) = throttle.int("burst").filter(|b| *b > 0) {
            table.insert("create_burst".into(), Value::Integer(burst.min(1000)));
        }
        throttle.rest("no equivalent here", &mut report.not_carried);
    }
    if let Some(interval) = autoscaler.str("update_interval") {
        table.insert("reconcile_interval".into(), interval.into());
    }
    if !env.is_empty() {
        table.insert("env".into(), Value::Table(env));
    }
    table
}

/// `[runners.autoscaler.connector_config]`: the login user goes to the provisioner, the key
/// to `[ssh] key_file`; the rest is the provisioner's and SSH's business here.
fn connector(
    autoscaler: &Source<'_>,
    plugin: Option<&Plugin>,
    env: &mut Table,
    report: &mut Report,
) {
    let Some(connector) = autoscaler.table("connector_config") else {
        return;
    };
    if let (Some(user), Some(plugin)) = (connector.str("username"), plugin) {
        env.insert(plugin.ssh_user.to_string(), user.into());
    }
    if connector.str("key_path").is_some() {
        report.check(
            connector.key_path("key_path"),
            "set [ssh] key_file to this key if the machines' images already trust it; by default the autoscaler makes its own key and the provisioner installs it",
        );
    }
    connector.drop(
        "protocol",
        "machines are reached over SSH only (no WinRM)",
        &mut report.not_carried,
    );
    connector.rest(
        "the provisioner reports how to reach each machine (address, port, user, host key)",
        &mut report.not_carried,
    );
}

fn scaling(autoscaler: &Source<'_>, entry: &Source<'_>, report: &mut Report) -> Table {
    let mut scaling = Table::new();
    // Taskscaler's rule, said outright: without it the pool would run the demand-aware
    // strategy with the imported policies as floors.
    scaling.insert("strategy".into(), "idle".into());
    match autoscaler.int("max_instances").filter(|n| *n > 0) {
        Some(n) => {
            scaling.insert("max_machines".into(), Value::Integer(n));
        }
        None => report.check(
            autoscaler.key_path("max_instances"),
            "taskscaler's 0 is unlimited; here scaling.max_machines is 10 unless set",
        ),
    }
    if let Some(n) = autoscaler.int("capacity_per_instance").filter(|n| *n > 0) {
        scaling.insert("capacity_per_machine".into(), Value::Integer(n));
    }
    if let Some(n) = autoscaler.int("max_use_count") {
        scaling.insert("max_use_count".into(), Value::Integer(n.max(0)));
    }
    if let Some(t) = autoscaler.str("instance_acquire_timeout") {
        scaling.insert("acquire_timeout".into(), t.into());
    }
    if let Some(delete) = autoscaler.bool("delete_instances_on_shutdown") {
        scaling.insert("delete_on_shutdown".into(), delete.into());
    }
    entry.drop(
        "limit",
        "the pool's job limit is max_machines × capacity_per_machine",
        &mut report.not_carried,
    );
    scaling
}

/// One `[[runners.autoscaler.policy]]` entry; the keys are the same here.
fn policy(source: &Source<'_>, report: &mut Report) -> Table {
    let mut policy = Table::new();
    for key in [
        "periods",
        "timezone",
        "idle_count",
        "idle_time",
        "scale_factor",
        "scale_factor_limit",
    ] {
        if let Some(value) = source.get(key) {
            policy.insert(key.into(), value.clone());
        }
    }
    let every_minute = policy
        .get("periods")
        .and_then(Value::as_array)
        .is_none_or(|p| p.iter().all(|e| e.as_str() == Some("* * * * *")));
    if !every_minute && !policy.contains_key("timezone") {
        report.check(
            source.key_path("timezone"),
            "taskscaler reads periods in the host's zone, this autoscaler in UTC: set timezone",
        );
    }
    source.drop(
        "preemptive_mode",
        "intake is the pool's (scaling.intake), not a period's: preemptive when idle_count > 0",
        &mut report.not_carried,
    );
    source.rest("no equivalent here", &mut report.not_carried);
    policy
}
