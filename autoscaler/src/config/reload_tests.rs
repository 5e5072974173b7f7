use super::*;

const PROVISIONER: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../provisioners/local/provisioner"
);

/// A configuration with one scaled pool `linux`; `pool_extra` goes inside that pool and
/// `more` after it (further pools).
fn config(pool_extra: &str, more: &str) -> String {
    format!(
        r#"
[server]
listen = "127.0.0.1:8090"
[state]
dir = "/var/lib/autoscaler"
[upstream]
url = "https://gitlab.example.com"
[[pools]]
name = "linux"
upstream_token = "glrt-linux"
[pools.provisioner]
command = "{PROVISIONER}"
[pools.sidecar]
binary = "{PROVISIONER}"
{pool_extra}
{more}"#
    )
}

const SCALING: &str = r#"
[pools.scaling]
idle_count = 1
max_machines = 4
[[pools.policy]]
periods = ["* 7-19 * * mon-fri"]
idle_count = 3
"#;

fn load(text: &str) -> Config {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("autoscaler.toml");
    std::fs::write(&path, text).unwrap();
    Config::load(&path, Vec::new()).unwrap_or_else(|e| panic!("{e}"))
}

fn paths(changes: &[Change]) -> Vec<&str> {
    changes.iter().map(|c| c.path.as_str()).collect()
}

#[test]
fn the_same_file_changes_nothing() {
    let text = config(SCALING, "");
    assert_eq!(compare(&load(&text), &load(&text)), Comparison::default());
}

#[test]
fn scaling_settings_and_policy_entries_apply_live_with_old_and_new_values() {
    let old = load(&config(SCALING, ""));
    let new = load(&config(
        &SCALING
            .replace("idle_count = 1", "idle_count = 2\nmax_use_count = 5")
            .replace("max_machines = 4", "max_machines = 6")
            .replace("idle_count = 3", "idle_count = 0"),
        "",
    ));
    let c = compare(&old, &new);
    assert_eq!(c.restart, vec![]);
    assert_eq!(
        paths(&c.live),
        [
            "pools[0].scaling.max_machines",
            "pools[0].scaling.idle_count",
            "pools[0].scaling.max_use_count",
            "pools[0].policy[0]",
        ]
    );
    assert_eq!(c.live[0].detail, "4 -> 6");
    assert_eq!(c.live[1].detail, "1 -> 2");
    assert!(
        c.live[3].detail.contains("idle_count 3") && c.live[3].detail.contains("idle_count 0"),
        "{}",
        c.live[3].detail
    );
}

#[test]
fn an_added_policy_entry_and_a_new_intake_apply_live() {
    let old = load(&config(SCALING, ""));
    let new = load(&config(
        &format!("{SCALING}[[pools.policy]]\nperiods = [\"* * * * sat,sun\"]\nidle_count = 0\n")
            .replace("max_machines = 4", "max_machines = 4\nintake = \"hybrid\""),
        "",
    ));
    let c = compare(&old, &new);
    assert_eq!(c.restart, vec![]);
    assert_eq!(
        paths(&c.live),
        ["pools[0].scaling.intake", "pools[0].policy"]
    );
    assert_eq!(c.live[1].detail, "1 entries -> 2");
}

#[test]
fn a_changed_provisioner_command_refuses_the_reload_naming_its_key() {
    let old = load(&config(SCALING, ""));
    let other = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../provisioners/python-local/provisioner"
    );
    let new = load(
        &config(SCALING, "")
            .replacen(PROVISIONER, other, 1)
            .replace("idle_count = 1", "idle_count = 2"),
    );
    let c = compare(&old, &new);
    assert_eq!(paths(&c.restart), ["pools[0].provisioner.command"]);
    assert_eq!(paths(&c.live), ["pools[0].scaling.idle_count"]);
}

#[test]
fn tokens_listeners_and_capacity_need_a_restart_and_no_secret_is_shown() {
    let old = load(&config(SCALING, ""));
    let new = load(
        &config(
            &SCALING.replace(
                "max_machines = 4",
                "capacity_per_machine = 2\nmax_machines = 4",
            ),
            "",
        )
        .replace("glrt-linux", "glrt-rotated")
        .replace("127.0.0.1:8090", "127.0.0.1:9000")
        .replace("[state]", "[log]\nlevel = \"debug\"\n[state]"),
    );
    let c = compare(&old, &new);
    assert_eq!(
        paths(&c.restart),
        [
            "server.listen",
            "log.level",
            "pools[0].upstream_token",
            "pools[0].scaling.capacity_per_machine",
        ]
    );
    let shown = format!("{c:?}");
    assert!(!shown.contains("glrt-"), "{shown}");
}

#[test]
fn pools_added_or_removed_need_a_restart() {
    let static_pool = "[[pools]]\nname = \"static\"\nupstream_token = \"glrt-static\"\n";
    let one = load(&config(SCALING, ""));
    let two = load(&config(SCALING, static_pool));
    let added = compare(&one, &two);
    assert_eq!(paths(&added.restart), ["pools[1].name"]);
    assert!(added.restart[0].detail.contains("\"static\" is new"));
    let removed = compare(&two, &one);
    assert_eq!(paths(&removed.restart), ["pools"]);
    assert!(
        removed.restart[0]
            .detail
            .contains("\"static\" is no longer in the file")
    );
}

#[test]
fn sources_are_named_by_their_index() {
    let sources = |second: &str| {
        format!(
            r#"
[server]
listen = "127.0.0.1:8090"
[state]
dir = "/var/lib/autoscaler"
[upstream]
url = "https://gitlab.example.com"
[[pools]]
name = "linux"
upstream_token = "glrt-linux"
[[pools.sources]]
name = "spot"
command = "{PROVISIONER}"
[[pools.sources]]
name = "on-demand"
command = "{PROVISIONER}"
max_concurrency = {second}
[pools.sidecar]
binary = "{PROVISIONER}"
"#
        )
    };
    let c = compare(&load(&sources("4")), &load(&sources("8")));
    assert_eq!(paths(&c.restart), ["pools[0].sources[1].max_concurrency"]);
}
