//! `target_wait`: read, defaulted, and refused where it means nothing.

use std::time::Duration;

use crate::config::Config;

fn load(scaling: &str) -> Result<Config, Vec<String>> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("autoscaler.toml");
    let text = format!(
        "[state]\ndir = \"/tmp/state\"\n[upstream]\nurl = \"https://gitlab.example.com\"\n\
         [[pools]]\nname = \"linux\"\nupstream_token = \"t\"\n[pools.scaling]\n{scaling}\n"
    );
    std::fs::write(&path, text).unwrap();
    Config::load(&path, Vec::new())
        .map_err(|e| e.problems.iter().map(ToString::to_string).collect())
}

#[test]
fn target_wait_defaults_to_30s_and_reaches_the_planner() {
    let c = load("max_machines = 4").unwrap();
    assert_eq!(c.pools[0].scaling.target_wait, Duration::from_secs(30));
    let c = load("target_wait = \"12s\"").unwrap();
    assert_eq!(c.pools[0].scaling.scale_policy().target_wait, 12_000);
}

#[test]
fn target_wait_is_refused_under_the_idle_strategy_and_above_an_hour() {
    let idle = load("strategy = \"idle\"\ntarget_wait = \"10s\"").unwrap_err();
    assert!(
        idle.iter()
            .any(|p| p.contains("scaling.target_wait") && p.contains("strategy")),
        "{idle:?}"
    );
    let long = load("target_wait = \"2h\"").unwrap_err();
    assert!(long.iter().any(|p| p.contains("at most 1h")), "{long:?}");
}
