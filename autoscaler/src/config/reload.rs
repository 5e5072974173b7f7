//! What a configuration read again on `SIGHUP` changes, and whether the running service can
//! take it. A pool's scaling policy (`[pools.scaling]` but `capacity_per_machine`, and its
//! `[[pools.policy]]` entries) applies live: it is what the planner, the slot gate and the
//! intake read at each pass. Everything else is built into running parts at start (listeners,
//! the store, provisioners, launchers, sidecars already started with their concurrency,
//! upstream tokens), so a change to it refuses the whole reload.
//!
//! Every field of every configuration struct is named below, destructured without `..`: a field
//! added later does not compile until it is sorted into live or restart.

use std::fmt::Debug;

use super::{
    AdminConfig, Config, LogConfig, PoolConfig, ProvisionerConfig, ServerConfig, SshConfig,
    StateConfig, UpstreamConfig,
};
use crate::config::ScalingConfig;
use crate::core::schedule::PolicyEntry;

/// One key whose value differs between the running configuration and the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// The key path, as problems name it (`pools[0].scaling.idle_count`).
    pub path: String,
    /// For live changes, `old -> new`; for others, why a restart is needed.
    pub detail: String,
}

/// The differences, sorted by whether the running service can take them.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Comparison {
    /// Applied to the running pools.
    pub live: Vec<Change>,
    /// Each one refuses the reload: the service must be restarted for it.
    pub restart: Vec<Change>,
}

impl Comparison {
    fn restart(&mut self, path: impl Into<String>, why: &str) {
        self.restart.push(Change {
            path: path.into(),
            detail: why.to_string(),
        });
    }

    /// Notes a key that needs a restart when its value differs (compared as printed: every
    /// field here prints its whole value, secrets aside, which are compared on their own).
    fn fixed<T: Debug>(&mut self, prefix: &str, key: &str, old: &T, new: &T) {
        if format!("{old:?}") != format!("{new:?}") {
            self.restart(join(prefix, key), "needs a restart");
        }
    }

    fn live<T: Debug>(&mut self, prefix: &str, key: &str, old: &T, new: &T) {
        let (old, new) = (format!("{old:?}"), format!("{new:?}"));
        if old != new {
            self.live.push(Change {
                path: join(prefix, key),
                detail: format!("{old} -> {new}"),
            });
        }
    }
}

fn join(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        key.to_string()
    } else {
        format!("{prefix}.{key}")
    }
}

/// Compares fields of two values of one struct: `$kind` is `fixed` or `live`. The pattern
/// without `..` makes the list exhaustive.
macro_rules! compare {
    ($out:expr, $prefix:expr, $ty:ident, $old:expr, $new:expr, $kind:ident: [$($field:ident),* $(,)?] $(, skip: [$($skipped:ident),*])?) => {{
        let $ty { $($field: _,)* $($($skipped: _,)*)? } = $old;
        $( $out.$kind($prefix, stringify!($field), &$old.$field, &$new.$field); )*
    }};
}

/// What differs between the running configuration `old` and `new`, read from the same file.
pub fn compare(old: &Config, new: &Config) -> Comparison {
    let mut out = Comparison::default();
    let Config {
        server: _,
        state: _,
        upstream: _,
        log: _,
        ssh: _,
        admin: _,
        pools: _,
        file: _,
    } = old;
    compare_server(&mut out, &old.server, &new.server);
    compare!(out, "state", StateConfig, &old.state, &new.state, fixed: [dir]);
    compare!(out, "upstream", UpstreamConfig, &old.upstream, &new.upstream, fixed: [
        url, connect_timeout, call_timeout, job_request_timeout, gitlab_long_poll,
        keepalive_interval, artifact_timeout, poll_interval,
    ], skip: [api_token]);
    // Compared by value: a secret's Debug hides it.
    if old.upstream.api_token != new.upstream.api_token {
        out.restart(join("upstream", "api_token"), "needs a restart");
    }
    compare!(out, "log", LogConfig, &old.log, &new.log, fixed: [level, format]);
    compare!(out, "ssh", SshConfig, &old.ssh, &new.ssh, fixed: [key_file]);
    compare_admin(&mut out, old.admin.as_ref(), new.admin.as_ref());
    compare_pools(&mut out, &old.pools, &new.pools);
    out
}

fn compare_server(out: &mut Comparison, old: &ServerConfig, new: &ServerConfig) {
    compare!(out, "server", ServerConfig, old, new, fixed: [
        listen, public_url, tls, long_poll_timeout, max_trace_patch_bytes, max_update_bytes,
        shutdown_grace, instance_id, connections,
    ]);
}

fn compare_admin(out: &mut Comparison, old: Option<&AdminConfig>, new: Option<&AdminConfig>) {
    match (old, new) {
        (None, None) => {}
        (Some(old), Some(new)) => {
            compare!(out, "admin", AdminConfig, old, new, fixed: [listen, book_dir], skip: [token]);
            if old.token != new.token {
                out.restart("admin.token_file", "needs a restart");
            }
        }
        _ => out.restart("admin", "added or removed: needs a restart"),
    }
}

fn compare_pools(out: &mut Comparison, old: &[PoolConfig], new: &[PoolConfig]) {
    for (i, pool) in new.iter().enumerate() {
        match old.iter().find(|o| o.name == pool.name) {
            Some(before) => compare_pool(out, &format!("pools[{i}]"), before, pool),
            None => out.restart(
                format!("pools[{i}].name"),
                &format!("pool {:?} is new: adding a pool needs a restart", pool.name),
            ),
        }
    }
    for gone in old.iter().filter(|o| !new.iter().any(|n| n.name == o.name)) {
        out.restart(
            "pools",
            &format!(
                "pool {:?} is no longer in the file: removing a pool needs a restart",
                gone.name
            ),
        );
    }
}

fn compare_pool(out: &mut Comparison, at: &str, old: &PoolConfig, new: &PoolConfig) {
    compare!(out, at, PoolConfig, old, new,
        fixed: [request_concurrency, assign_ack_timeout, classes, sidecar],
        skip: [name, upstream_token, registration_token, provisioner, sources, scaling, policies]);
    if old.upstream_token != new.upstream_token {
        out.restart(join(at, "upstream_token"), "needs a restart");
    }
    if old.registration_token != new.registration_token {
        out.restart(join(at, "registration_token"), "needs a restart");
    }
    compare_sources(out, at, old, new);
    compare_scaling(out, &join(at, "scaling"), &old.scaling, &new.scaling);
    compare_policies(out, at, &old.policies, &new.policies);
}

/// `[pools.provisioner]` is the pool's only source, named `default`; else the key paths are
/// those of `[[pools.sources]]`.
fn compare_sources(out: &mut Comparison, at: &str, old: &PoolConfig, new: &PoolConfig) {
    if old.sources.len() != new.sources.len() {
        out.restart(
            join(at, "sources"),
            "sources added or removed: needs a restart",
        );
        return;
    }
    let single = old.sources.len() == 1 && old.sources[0].name == "default";
    for (i, (before, after)) in old.sources.iter().zip(&new.sources).enumerate() {
        let prefix = if single {
            join(at, "provisioner")
        } else {
            format!("{at}.sources[{i}]")
        };
        compare!(out, &prefix, ProvisionerConfig, before, after, fixed: [
            name, max_machines, reclaim_cooldown, command, env, max_concurrency, create_rate,
            create_burst, orphan_policy, timeouts, boot_timeout, reconcile_interval, user_data,
        ]);
    }
}

fn compare_scaling(out: &mut Comparison, at: &str, old: &ScalingConfig, new: &ScalingConfig) {
    compare!(out, at, ScalingConfig, old, new, live: [
        max_machines, idle_count, idle_time, max_use_count, max_age, scale_factor,
        scale_factor_limit, scale_factor_counts, intake, hybrid_ahead, strategy, billing_period,
        acquire_timeout, delete_on_shutdown, target_wait, stopped_count, max_stopped, prices,
    ], skip: [capacity_per_machine, strategy_chosen_by]);
    if old.capacity_per_machine != new.capacity_per_machine {
        out.restart(
            join(at, "capacity_per_machine"),
            "running sidecars were started with the old concurrency: needs a restart",
        );
    }
}

fn compare_policies(out: &mut Comparison, at: &str, old: &[PolicyEntry], new: &[PolicyEntry]) {
    let shown = |entries: &[PolicyEntry]| entries.iter().map(summary).collect::<Vec<_>>();
    let (before, after) = (shown(old), shown(new));
    if before.len() != after.len() {
        out.live.push(Change {
            path: join(at, "policy"),
            detail: format!("{} entries -> {}", before.len(), after.len()),
        });
        return;
    }
    for (i, (b, a)) in before.iter().zip(&after).enumerate() {
        if b != a {
            out.live.push(Change {
                path: format!("{at}.policy[{i}]"),
                detail: format!("{b} -> {a}"),
            });
        }
    }
}

/// An entry as the operator wrote it.
fn summary(e: &PolicyEntry) -> String {
    let periods: Vec<&str> = e.periods.iter().map(|p| p.expression.as_str()).collect();
    format!(
        "{{periods {periods:?} {} idle_count {} idle_time {}s scale_factor {} limit {}}}",
        e.timezone,
        e.idle_count,
        e.idle_time / 1000,
        e.scale_factor,
        e.scale_factor_limit
    )
}

#[cfg(test)]
#[path = "reload_tests.rs"]
mod tests;
