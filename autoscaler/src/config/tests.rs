use std::time::Duration;

use super::*;
use crate::core::scaler::ScaleFactorCounts;

fn write(dir: &tempfile::TempDir, text: &str) -> PathBuf {
    let path = dir.path().join("autoscaler.toml");
    std::fs::write(&path, text).unwrap();
    path
}

const MINIMAL: &str = r#"
[server]
listen = "127.0.0.1:8090"
public_url = "http://127.0.0.1:8090"
[state]
dir = "./state"
[upstream]
url = "https://gitlab.example.com"
[[pools]]
name = "default"
upstream_token = "glrt-upstream"
registration_token = "reg-default"
request_concurrency = 4
"#;

fn no_env() -> Vec<(String, String)> {
    Vec::new()
}

#[test]
fn the_documented_example_loads_with_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let c = Config::load(&write(&dir, MINIMAL), no_env()).unwrap();
    assert_eq!(c.server.listen.port(), 8090);
    assert_eq!(c.state.dir, dir.path().join("./state"));
    assert_eq!(c.upstream.url.as_str(), "https://gitlab.example.com/");
    assert_eq!(c.server.long_poll_timeout, Duration::from_secs(50));
    assert_eq!(c.pools.len(), 1);
    assert_eq!(c.pools[0].upstream_token.expose(), "glrt-upstream");
    assert_eq!(c.pools[0].request_concurrency, 4);
    assert_eq!(
        c.server.public_url.as_ref().map(url::Url::as_str),
        Some("http://127.0.0.1:8090/")
    );
}

#[test]
fn every_problem_is_reported_at_once_with_its_path() {
    let dir = tempfile::tempdir().unwrap();
    let text = r#"
[server]
listen = "not-an-address"
colour = "blue"
[state]
[upstream]
url = "ftp://gitlab"
[[pools]]
name = "Bad Name"
request_concurrency = 0
[[pools]]
name = "ok"
upstream_token = "t"
upstream_token_file = "/nonexistent"
"#;
    let err = Config::load(&write(&dir, text), no_env()).unwrap_err();
    let paths: Vec<&str> = err.problems.iter().map(|p| p.path.as_str()).collect();
    for expected in [
        "server.listen",
        "server.colour",
        "state.dir",
        "upstream.url",
        "pools[0].name",
        "pools[0].upstream_token",
        "pools[0].request_concurrency",
        "pools[1].upstream_token",
    ] {
        assert!(paths.contains(&expected), "missing {expected} in {paths:?}");
    }
    let text = err.to_string();
    assert!(text.contains("server.colour: unknown key"), "{text}");
}

#[test]
fn environment_overrides_tables_and_pools_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let env = vec![
        (
            "AUTOSCALER_SERVER__LISTEN".to_string(),
            "127.0.0.1:9999".to_string(),
        ),
        (
            "AUTOSCALER_POOLS__DEFAULT__REQUEST_CONCURRENCY".into(),
            "8".into(),
        ),
        (
            "AUTOSCALER_POOLS__DEFAULT__UPSTREAM_TOKEN".into(),
            "glrt-from-env".into(),
        ),
        ("UNRELATED".into(), "x".into()),
    ];
    let c = Config::load(&write(&dir, MINIMAL), env).unwrap();
    assert_eq!(c.server.listen.port(), 9999);
    assert_eq!(c.pools[0].request_concurrency, 8);
    assert_eq!(c.pools[0].upstream_token.expose(), "glrt-from-env");
}

#[test]
fn the_command_lines_own_variables_are_not_overrides() {
    let dir = tempfile::tempdir().unwrap();
    let env = [
        "AUTOSCALER_CONFIG",
        "AUTOSCALER_ADMIN_URL",
        "AUTOSCALER_ADMIN_TOKEN_FILE",
    ]
    .map(|k| (k.to_string(), "/somewhere".to_string()));
    let loaded = Config::load(&write(&dir, MINIMAL), env);
    assert!(loaded.is_ok(), "{}", loaded.unwrap_err());
}

#[test]
fn provisioner_variables_set_from_the_environment_keep_their_case() {
    let dir = tempfile::tempdir().unwrap();
    let command = dir.path().join("provisioner");
    std::fs::write(&command, "#!/bin/sh\n").unwrap();
    let text = format!(
        "{MINIMAL}[pools.provisioner]\ncommand = {:?}\nenv = {{ Region = \"a\" }}\n[pools.sidecar]\nmode = \"builtin\"\n",
        command.display().to_string()
    );
    let env = vec![(
        "AUTOSCALER_POOLS__DEFAULT__PROVISIONER__ENV__AWS_REGION".to_string(),
        "eu-west-1".to_string(),
    )];
    let c = Config::load(&write(&dir, &text), env).unwrap();
    let sources = &c.pools[0].sources;
    assert_eq!(
        sources[0].env.get("AWS_REGION").map(String::as_str),
        Some("eu-west-1")
    );
    assert_eq!(sources[0].env.get("Region").map(String::as_str), Some("a"));
}

#[test]
fn environment_override_of_unknown_pool_or_key_is_a_problem() {
    let dir = tempfile::tempdir().unwrap();
    let env = vec![
        (
            "AUTOSCALER_POOLS__NOPE__REQUEST_CONCURRENCY".to_string(),
            "8".to_string(),
        ),
        ("AUTOSCALER_SERVER__COLOUR".into(), "red".into()),
    ];
    let err = Config::load(&write(&dir, MINIMAL), env).unwrap_err();
    let paths: Vec<&str> = err.problems.iter().map(|p| p.path.as_str()).collect();
    assert!(
        paths.contains(&"env AUTOSCALER_POOLS__NOPE__REQUEST_CONCURRENCY"),
        "{paths:?}"
    );
    assert!(paths.contains(&"server.colour"), "{paths:?}");
}

#[test]
fn secrets_can_come_from_files_relative_to_the_config() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("token"), "glrt-in-file\n").unwrap();
    let text = MINIMAL.replace(
        "upstream_token = \"glrt-upstream\"",
        "upstream_token_file = \"token\"",
    );
    let c = Config::load(&write(&dir, &text), no_env()).unwrap();
    assert_eq!(c.pools[0].upstream_token.expose(), "glrt-in-file");
}

#[test]
fn pools_must_not_share_names_or_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let text =
        format!("{MINIMAL}\n[[pools]]\nname = \"default\"\nupstream_token = \"glrt-upstream\"\n");
    let err = Config::load(&write(&dir, &text), no_env()).unwrap_err();
    let messages: Vec<String> = err.problems.iter().map(ToString::to_string).collect();
    assert!(
        messages.iter().any(|m| m.contains("used twice")),
        "{messages:?}"
    );
    assert!(
        messages
            .iter()
            .any(|m| m.contains("share one upstream token")),
        "{messages:?}"
    );
}

#[test]
fn secrets_never_appear_in_errors_or_debug() {
    let dir = tempfile::tempdir().unwrap();
    let c = Config::load(&write(&dir, MINIMAL), no_env()).unwrap();
    let debug = format!("{c:?}");
    assert!(!debug.contains("glrt-upstream"));
    assert!(!debug.contains("reg-default"));
    let text = MINIMAL.replace("request_concurrency = 4", "request_concurrency = \"x\"");
    let err = Config::load(&write(&dir, &text), no_env())
        .unwrap_err()
        .to_string();
    assert!(!err.contains("glrt-upstream"), "{err}");
}

#[test]
fn missing_or_broken_files_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let err = Config::load(&dir.path().join("none.toml"), no_env()).unwrap_err();
    assert!(err.to_string().contains("does not exist"));
    let err = Config::load(&write(&dir, "[server\nlisten="), no_env()).unwrap_err();
    assert!(err.to_string().contains("not valid TOML"), "{err}");
}

#[test]
fn wildcard_listen_needs_a_public_url() {
    let dir = tempfile::tempdir().unwrap();
    let text = MINIMAL
        .replace("listen = \"127.0.0.1:8090\"", "listen = \"0.0.0.0:8090\"")
        .replace("public_url = \"http://127.0.0.1:8090\"\n", "");
    let err = Config::load(&write(&dir, &text), no_env()).unwrap_err();
    assert!(err.to_string().contains("server.public_url"), "{err}");
}

#[test]
fn the_shipped_example_configuration_is_valid() {
    let dir = tempfile::tempdir().unwrap();
    let example = include_str!("../../../deploy/autoscaler.example.toml");
    let secrets = format!("{}/", dir.path().display());
    let text = example.replace("/etc/autoscaler/", &secrets);
    for name in ["linux.token", "linux.registration"] {
        std::fs::write(dir.path().join(name), "glrt-example-secret\n").unwrap();
    }
    std::fs::write(dir.path().join("linux.registration"), "reg-example\n").unwrap();
    let c = Config::load(&write(&dir, &text), no_env()).unwrap();
    assert_eq!(c.pools[0].name, "linux");
}

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

#[test]
fn tls_keys_are_checked_with_their_paths() {
    let dir = tempfile::tempdir().unwrap();
    let text = MINIMAL.replace(
        "[state]",
        "[server.tls]\ncertificate = \"missing.pem\"\nsystem_ca_files = [\"relative.crt\"]\ncolour = 1\n[state]",
    );
    let e = Config::load(&write(&dir, &text), no_env()).unwrap_err();
    let paths: Vec<&str> = e.problems.iter().map(|p| p.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "server.tls.key",
            "server.tls.system_ca_files",
            "server.tls.colour",
            "server.public_url"
        ],
        "{e}"
    );
    let text = MINIMAL.replace(
        "[state]",
        "[server.tls]\ncertificate = \"missing.pem\"\nkey = \"missing.key\"\n[state]",
    );
    let e = Config::load(&write(&dir, &text), no_env()).unwrap_err();
    assert_eq!(e.problems[0].path, "server.tls.certificate", "{e}");
    assert!(e.problems[0].message.contains("missing.pem"), "{e}");
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
fn an_admin_api_off_loopback_needs_a_token_file() {
    let dir = tempfile::tempdir().unwrap();
    let open = format!("{MINIMAL}\n[admin]\nlisten = \"0.0.0.0:8091\"\n");
    let e = Config::load(&write(&dir, &open), no_env()).unwrap_err();
    assert!(
        e.problems
            .iter()
            .any(|p| p.path == "admin.token_file" && p.message.contains("loopback")),
        "{e}"
    );

    std::fs::write(dir.path().join("admin.token"), "s3cret-admin\n").unwrap();
    let guarded = format!("{open}token_file = \"admin.token\"\n");
    let c = Config::load(&write(&dir, &guarded), no_env()).unwrap();
    let admin = c.admin.unwrap();
    assert_eq!(
        admin.token.map(|t| t.expose().to_string()).as_deref(),
        Some("s3cret-admin")
    );

    let loopback = format!("{MINIMAL}\n[admin]\n");
    let c = Config::load(&write(&dir, &loopback), no_env()).unwrap();
    let admin = c.admin.unwrap();
    assert!(admin.listen.ip().is_loopback() && admin.token.is_none());
}

#[test]
fn a_bad_sidecar_mode_does_not_hide_the_tables_other_problems() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "{MINIMAL}[pools.sidecar]\nmode = \"podman\"\nready_timeout = \"soon\"\ncolour = \"red\"\n"
    );
    let err = Config::load(&write(&dir, &text), no_env()).unwrap_err();
    let paths: Vec<&str> = err.problems.iter().map(|p| p.path.as_str()).collect();
    for wanted in [
        "pools[0].sidecar.mode",
        "pools[0].sidecar.ready_timeout",
        "pools[0].sidecar.colour",
    ] {
        assert!(paths.contains(&wanted), "{wanted} missing from {paths:?}");
    }
}

#[test]
fn the_instance_id_a_state_directory_recorded_outlives_a_renamed_host() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    std::fs::create_dir_all(&state).unwrap();
    super::instance::record(&state, "as-old-host").unwrap();
    super::instance::record(&state, "as-ignored").unwrap();
    let c = Config::load(&write(&dir, MINIMAL), no_env()).unwrap();
    assert_eq!(c.server.instance_id, "as-old-host");

    let same = MINIMAL.replace("[server]\n", "[server]\ninstance_id = \"as-old-host\"\n");
    let c = Config::load(&write(&dir, &same), no_env()).unwrap();
    assert_eq!(c.server.instance_id, "as-old-host");

    let other = MINIMAL.replace("[server]\n", "[server]\ninstance_id = \"as-new\"\n");
    let err = Config::load(&write(&dir, &other), no_env()).unwrap_err();
    let problem = err
        .problems
        .iter()
        .find(|p| p.path == "server.instance_id")
        .expect("a changed instance id is a problem");
    assert!(problem.message.contains("\"as-old-host\""), "{problem}");
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
