use std::path::Path;
use std::time::Duration;

use super::*;
use crate::clock::ManualClock;
use crate::jobs::Jobs;
use crate::store::MemoryStore;

const PROVISIONER: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../provisioners/local/provisioner"
);

fn text(idle_count: u32, command: &str) -> String {
    format!(
        r#"
[state]
dir = "./state"
[upstream]
url = "https://gitlab.example.com"
[[pools]]
name = "linux"
upstream_token = "glrt-linux"
[pools.provisioner]
command = "{command}"
[pools.sidecar]
binary = "{PROVISIONER}"
[pools.scaling]
idle_count = {idle_count}
"#
    )
}

fn load(path: &Path, text: &str) -> Result<Config, ConfigError> {
    std::fs::write(path, text).unwrap();
    Config::load(path, Vec::new())
}

struct Rig {
    reloads: Arc<Reloads>,
    pool: Arc<Pool>,
    metrics: Arc<Metrics>,
    file: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

/// A service's pool `linux` started with `idle_count = 1`.
fn rig() -> Rig {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("autoscaler.toml");
    let config = load(&file, &text(1, PROVISIONER)).unwrap();
    let store = Arc::new(MemoryStore::new());
    let clock = Arc::new(ManualClock::new(1_000_000));
    let jobs = Arc::new(Jobs::load(store.clone(), clock.clone()).unwrap());
    let pool = Pool::open(config.pools[0].clone(), jobs, store.as_ref()).unwrap();
    let metrics = Arc::new(Metrics::new());
    let bound = Bound {
        server: "127.0.0.1:41234".parse().unwrap(),
        admin: None,
    };
    let reloads = Reloads::new(config, bound, vec![pool.clone()], metrics.clone(), clock);
    Rig {
        reloads,
        pool,
        metrics,
        file,
        _dir: dir,
    }
}

impl Rig {
    fn reload(&self, text: &str) -> ReloadReport {
        self.reloads.take(load(&self.file, text))
    }

    fn counted(&self, outcome: &str) -> bool {
        self.metrics.encode().contains(&format!(
            "autoscaler_config_reloads_total{{outcome=\"{outcome}\"}} 1"
        ))
    }
}

#[test]
fn a_new_idle_count_is_in_force_at_once_under_a_new_generation() {
    let r = rig();
    let report = r.reload(&text(3, PROVISIONER));
    assert_eq!(report.outcome, "applied");
    assert_eq!(report.details, ["pools[0].scaling.idle_count: 1 -> 3"]);
    assert_eq!(r.pool.policy().scaling.idle_count, 3);
    assert_eq!(r.reloads.status().generation, 2);
    assert_eq!(r.reloads.status().last_reload, Some(report));
    assert!(r.counted("applied"), "{}", r.metrics.encode());
}

#[test]
fn a_broken_file_changes_nothing_and_reports_each_problem_with_its_key_path() {
    let r = rig();
    let broken =
        text(3, PROVISIONER).replace("[pools.scaling]", "[pools.scaling]\nmax_machines = 0");
    let report = r.reload(&broken);
    assert_eq!(report.outcome, "invalid");
    assert_eq!(
        report.details,
        ["pools[0].scaling.max_machines: must be between 1 and 100000"]
    );
    assert_eq!(r.pool.policy().scaling.idle_count, 1, "nothing changed");
    assert_eq!(r.reloads.status().generation, 1);
    assert!(r.counted("invalid"));
}

#[test]
fn a_change_that_needs_a_restart_refuses_the_whole_reload() {
    let r = rig();
    let other = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../provisioners/python-local/provisioner"
    );
    let report = r.reload(&text(3, other));
    assert_eq!(report.outcome, "refused");
    assert_eq!(
        report.details,
        ["pools[0].provisioner.command: needs a restart"]
    );
    assert_eq!(
        r.pool.policy().scaling.idle_count,
        1,
        "the live change of the same file is not applied either"
    );
    assert_eq!(r.reloads.status().generation, 1);
    assert!(r.counted("refused"));
    // The old configuration stays the reference: the same good change applies next time.
    assert_eq!(r.reload(&text(3, PROVISIONER)).outcome, "applied");
}

#[test]
fn the_same_file_again_is_unchanged() {
    let r = rig();
    assert_eq!(r.reload(&text(1, PROVISIONER)).outcome, "unchanged");
    assert_eq!(r.reloads.status().generation, 1);
    assert!(r.counted("unchanged"));
}

#[test]
fn a_file_naming_the_address_already_bound_asks_for_no_change() {
    let r = rig();
    let listen = |port: u16| {
        format!(
            "[server]\nlisten = \"127.0.0.1:{port}\"\n{}",
            text(1, PROVISIONER)
        )
    };
    assert_eq!(r.reload(&listen(41234)).outcome, "unchanged");
    let moved = r.reload(&listen(9999));
    assert_eq!(moved.outcome, "refused");
    assert_eq!(moved.details, ["server.listen: needs a restart"]);
}

#[test]
fn the_wait_target_shown_is_the_one_in_force() {
    let r = rig();
    // `idle_count` written without a strategy: the idle strategy, which aims at no wait.
    assert_eq!(r.pool.target_wait(), None);
    let demand = |target: &str| {
        text(1, PROVISIONER).replace(
            "idle_count = 1",
            &format!("strategy = \"demand\"\ntarget_wait = \"{target}\""),
        )
    };
    assert_eq!(r.reload(&demand("45s")).outcome, "applied");
    assert_eq!(r.pool.target_wait(), Some(Duration::from_secs(45)));
    assert_eq!(r.reload(&demand("10s")).outcome, "applied");
    assert_eq!(r.pool.target_wait(), Some(Duration::from_secs(10)));
}
