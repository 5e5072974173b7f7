#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions
//! `autoscaler check-config` says which strategy each pool runs and why, so that no setting
//! switches it unseen: a `[[pools.policy]]` entry on a pool that named no strategy keeps the
//! demand-aware default, with the entry as a floor.

use std::process::Command;

fn check_config(pools: &str) -> (bool, String) {
    let dir = tempfile::tempdir().unwrap();
    let provisioner = dir.path().join("provisioner");
    std::fs::write(&provisioner, "#!/bin/sh\nexit 0\n").unwrap();
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:8090\"\n[state]\ndir = \"./state\"\n\
         [upstream]\nurl = \"https://gitlab.example.com\"\n{pools}"
    )
    .replace("PROVISIONER", &provisioner.display().to_string());
    let config = dir.path().join("autoscaler.toml");
    std::fs::write(&config, text).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_autoscaler"))
        .args(["check-config", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

const POOL: &str = "[[pools]]\nname = \"NAME\"\nupstream_token = \"glrt-NAME\"\n\
    [pools.provisioner]\ncommand = \"PROVISIONER\"\n[pools.sidecar]\nmode = \"builtin\"\nbinary = \"PROVISIONER\"\n";

#[test]
fn check_config_prints_each_pools_strategy_and_why() {
    let with_entry = POOL.replace("NAME", "floors")
        + "[[pools.policy]]\nperiods = [\"* 7-19 * * mon-fri\"]\nidle_count = 3\n";
    let idle = POOL.replace("NAME", "taskscaler") + "[pools.scaling]\nidle_count = 2\n";
    let named = POOL.replace("NAME", "named") + "[pools.scaling]\nstrategy = \"idle\"\n";
    let (ok, text) = check_config(&format!("{with_entry}{idle}{named}"));
    assert!(ok, "{text}");
    for line in [
        "pool \"floors\": strategy demand (the default); 1 [[pools.policy]] entry: floors under the forecast",
        "pool \"taskscaler\": strategy idle (idle_count, scale_factor or scale_factor_limit written in [pools.scaling] without a strategy)",
        "pool \"named\": strategy idle (written)",
    ] {
        assert!(text.contains(line), "no {line:?} in:\n{text}");
    }
}
