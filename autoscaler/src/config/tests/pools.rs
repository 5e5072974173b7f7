//! A pool's own tables: its policies and their periods, its sources and classes, and its warm
//! pool's settings, each problem reported with its key path.

use super::*;

/// A pool with a provisioner (the local one) and the given extra TOML.
fn pool_with_policies(extra: &str) -> String {
    let provisioner = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../provisioners/local/provisioner"
    );
    format!(
        "{MINIMAL}[pools.provisioner]\ncommand = \"{provisioner}\"\n[pools.sidecar]\nmode = \"builtin\"\nbinary = \"{provisioner}\"\n{extra}"
    )
}

#[test]
fn policies_load_with_periods_in_their_time_zone() {
    let dir = tempfile::tempdir().unwrap();
    let text = pool_with_policies(
        r#"
[pools.scaling]
idle_count = 1
max_age = "12h"
scale_factor_counts = "running"
[[pools.policy]]
periods = ["* 7-19 * * mon-fri"]
timezone = "Europe/Berlin"
idle_count = 6
idle_time = "20m"
scale_factor = 0.5
scale_factor_limit = 10
"#,
    );
    let c = Config::load(&write(&dir, &text), no_env()).unwrap();
    let pool = &c.pools[0];
    assert_eq!(pool.scaling.max_age, Some(Duration::from_secs(12 * 3600)));
    assert_eq!(pool.policies.len(), 1);
    let entry = &pool.policies[0];
    assert_eq!(entry.timezone.name(), "Europe/Berlin");
    assert_eq!((entry.idle_count, entry.idle_time), (6, 1_200_000));
    assert_eq!(entry.scale_factor_limit, 10);
    let policy = pool.scaling.scale_policy();
    assert_eq!(policy.scale_factor_counts, ScaleFactorCounts::Running);
}

#[test]
fn scale_factor_counts_names_its_readings() {
    let dir = tempfile::tempdir().unwrap();
    let text = pool_with_policies("[pools.scaling]\nscale_factor_counts = \"queued\"\n");
    let err = Config::load(&write(&dir, &text), no_env()).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("pools[0].scaling.scale_factor_counts")
            && text.contains("running_and_waiting"),
        "{text}"
    );
    let default = Config::load(&write(&dir, &pool_with_policies("")), no_env()).unwrap();
    assert_eq!(
        default.pools[0].scaling.scale_factor_counts,
        ScaleFactorCounts::RunningAndWaiting
    );
}

/// A `[[pools.policy]]` entry on a pool that named no strategy keeps the default demand-aware
/// strategy (the entry is a floor under it); only a written strategy, or idle settings in
/// `[pools.scaling]` itself, make it `idle`.
#[test]
fn a_policy_entry_never_changes_the_strategy() {
    use crate::core::scaler::Strategy;
    let dir = tempfile::tempdir().unwrap();
    let strategy_of = |extra: &str| {
        let c = Config::load(&write(&dir, &pool_with_policies(extra)), no_env()).unwrap();
        (
            c.pools[0].scaling.strategy,
            c.pools[0].scaling.strategy_chosen_by,
        )
    };
    let entry = "[[pools.policy]]\nperiods = [\"* 7-19 * * mon-fri\"]\nidle_count = 3\n";
    assert_eq!(strategy_of(entry), (Strategy::Demand, "the default"));
    assert_eq!(
        strategy_of(&format!("[pools.scaling]\nmax_machines = 4\n{entry}")),
        (Strategy::Demand, "the default")
    );
    assert_eq!(
        strategy_of(&format!("[pools.scaling]\nstrategy = \"idle\"\n{entry}")),
        (Strategy::Idle, "written")
    );
    let (strategy, why) = strategy_of("[pools.scaling]\nidle_count = 2\n");
    assert_eq!(strategy, Strategy::Idle);
    assert!(why.contains("idle_count"), "{why}");
}

#[test]
fn bad_policies_are_reported_with_their_key_paths() {
    let dir = tempfile::tempdir().unwrap();
    let text = pool_with_policies(
        r#"
[[pools.policy]]
periods = ["* 7-19 * * mon-fri", "* 25 * * *"]
timezone = "Mars/Olympus_Mons"
idle_count = 5
scale_factor_limit = 2
"#,
    );
    let err = Config::load(&write(&dir, &text), no_env()).unwrap_err();
    let text = err.to_string();
    for expected in [
        "pools[0].policy[0].periods[1]: \"* 25 * * *\" is not a cron expression",
        "pools[0].policy[0].timezone: \"Mars/Olympus_Mons\" is not a time zone",
        "pools[0].policy[0].scale_factor_limit: is 2, below idle_count 5",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in {text}");
    }
}

/// A pool whose machines come from `[[pools.sources]]` (the local provisioner twice) with the
/// given TOML between them.
fn pool_with_sources(first: &str, second: &str) -> String {
    let provisioner = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../provisioners/local/provisioner"
    );
    format!(
        "{MINIMAL}[[pools.sources]]\ncommand = \"{provisioner}\"\n{first}\n[[pools.sources]]\ncommand = \"{provisioner}\"\n{second}\n[pools.sidecar]\nmode = \"builtin\"\nbinary = \"{provisioner}\"\n"
    )
}

#[test]
fn sources_load_in_order_and_the_first_is_the_pools_provisioner() {
    let dir = tempfile::tempdir().unwrap();
    let text = pool_with_sources(
        "name = \"onprem\"\nmax_machines = 4",
        "name = \"cloud\"\ncreate_rate = 2.0",
    );
    let c = Config::load(&write(&dir, &text), no_env()).unwrap();
    let pool = &c.pools[0];
    let names: Vec<&str> = pool.sources.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["onprem", "cloud"]);
    assert_eq!(pool.sources[0].max_machines, Some(4));
    assert_eq!(pool.sources[1].max_machines, None);
    assert_eq!(pool.provisioner.as_ref().unwrap().name, "onprem");
}

#[test]
fn a_single_provisioner_is_the_default_source() {
    let dir = tempfile::tempdir().unwrap();
    let c = Config::load(&write(&dir, &pool_with_policies("")), no_env()).unwrap();
    let names: Vec<&str> = c.pools[0].sources.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["default"]);
}

#[test]
fn bad_sources_are_reported_with_their_key_paths() {
    let dir = tempfile::tempdir().unwrap();
    let text = pool_with_sources("name = \"spot\"\nmax_machines = 0", "name = \"spot\"");
    let e = Config::load(&write(&dir, &text), no_env()).unwrap_err();
    let text = e.to_string();
    for expected in [
        "pools[0].sources[0].max_machines: must be at least 1",
        "pools[0].sources: the name \"spot\" is used twice",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in {text}");
    }
    let unnamed = pool_with_sources("", "name = \"cloud\"");
    let e = Config::load(&write(&dir, &unnamed), no_env()).unwrap_err();
    assert!(e.to_string().contains("pools[0].sources[0].name"), "{e}");
}

#[test]
fn classes_load_with_their_sources_and_the_first_is_the_default() {
    let dir = tempfile::tempdir().unwrap();
    let text = pool_with_sources("name = \"spot\"", "name = \"big\"").replace(
        "[pools.sidecar]",
        "[[pools.classes]]\nname = \"small\"\n[[pools.classes]]\nname = \"large\"\nsources = [\"big\"]\ncapacity_per_machine = 4\n[pools.sidecar]",
    );
    let c = Config::load(&write(&dir, &text), no_env()).unwrap();
    let classes = c.pools[0].classes.as_ref().unwrap();
    assert_eq!(classes.default, "small");
    assert_eq!(classes.variable, "AUTOSCALER_MACHINE_CLASS");
    let large = classes.get("large").unwrap();
    assert_eq!(
        (large.capacity_per_machine, large.sources.clone()),
        (4, vec!["big".to_string()])
    );
    assert_eq!(classes.get("small").unwrap().capacity_per_machine, 1);
}

#[test]
fn bad_classes_are_reported_with_their_key_paths() {
    let dir = tempfile::tempdir().unwrap();
    let text = pool_with_sources("name = \"spot\"", "name = \"big\"")
        .replacen("[[pools.sources]]", "default_class = \"huge\"\n[[pools.sources]]", 1)
        .replace(
        "[pools.sidecar]",
        "[[pools.classes]]\nname = \"small\"\nsources = []\n[[pools.classes]]\nname = \"large\"\nsources = [\"gpu-farm\"]\n[pools.sidecar]",
    );
    let e = Config::load(&write(&dir, &text), no_env()).unwrap_err();
    let text = e.to_string();
    for expected in [
        "pools[0].classes[0].sources: a class needs at least one source",
        "pools[0].classes[1].sources: \"gpu-farm\" is not one of the pool's sources",
        "pools[0].default_class: \"huge\" is not one of the pool's classes",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in {text}");
    }
}

#[test]
fn a_warm_pool_needs_sidecars_started_over_ssh() {
    let dir = tempfile::tempdir().unwrap();
    let warm = "[pools.scaling]\nstopped_count = 1\nmax_stopped = 4\n";
    let c = Config::load(&write(&dir, &pool_with_policies(warm)), no_env()).unwrap();
    assert_eq!(
        (
            c.pools[0].scaling.stopped_count,
            c.pools[0].scaling.max_stopped
        ),
        (1, 4)
    );

    let from_user_data = pool_with_policies(&format!("start = \"user_data\"\n{warm}"));
    let err = Config::load(&write(&dir, &from_user_data), no_env()).unwrap_err();
    let refused: Vec<String> = err.problems.iter().map(ToString::to_string).collect();
    assert!(
        refused
            .iter()
            .any(|p| p.contains("pools[0].scaling.max_stopped")
                && p.contains("needs sidecar.start = \"ssh\"")),
        "{refused:?}"
    );
}

#[test]
fn a_warm_pools_prices_come_together_and_give_the_planner_their_ratio() {
    let dir = tempfile::tempdir().unwrap();
    let load = |scaling: &str| {
        let text = pool_with_policies(&format!("[pools.scaling]\n{scaling}"));
        Config::load(&write(&dir, &text), no_env())
    };
    let c =
        load("max_stopped = 4\nprice_per_hour = 0.04\nstopped_price_per_hour = 0.005\n").unwrap();
    let share = c.pools[0].scaling.scale_policy().stopped_price_share;
    assert_eq!(share, Some(0.125));
    let refused = |scaling: &str| -> Vec<String> {
        let err = load(scaling).unwrap_err();
        err.problems.iter().map(ToString::to_string).collect()
    };
    let alone = refused("max_stopped = 4\nprice_per_hour = 0.04\n");
    assert!(
        alone
            .iter()
            .any(|p| p.contains("scaling.stopped_price_per_hour")
                && p.contains("is needed with price_per_hour")),
        "{alone:?}"
    );
    let cold = refused("price_per_hour = 0.04\nstopped_price_per_hour = 0.005\n");
    assert!(
        cold.iter()
            .any(|p| p.contains("scaling.price_per_hour")
                && p.contains("only applies to a warm pool")),
        "{cold:?}"
    );
    let free = refused("max_stopped = 4\nprice_per_hour = 0\nstopped_price_per_hour = 0\n");
    assert!(
        free.iter().any(|p| p.contains("must be above 0")),
        "{free:?}"
    );
}
