//! `import-config` on the sample configurations in `tests/import-config/`: the result is a
//! valid configuration with the settings carried over, and what is not carried is named.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use super::*;
use crate::config::Config;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn sample(name: &str) -> PathBuf {
    repo().join("tests/import-config").join(name)
}

/// Imports a sample with the repository's provisioners, and loads the result as
/// `autoscaler run` would.
fn import_sample(name: &str) -> (Config, Imported) {
    let text = std::fs::read_to_string(sample(name)).unwrap();
    let options = Options {
        provisioners_dir: repo().join("provisioners"),
    };
    let imported = import(&text, &options).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("autoscaler.toml");
    std::fs::write(&path, &imported.config).unwrap();
    let config =
        Config::load(&path, Vec::new()).unwrap_or_else(|e| panic!("{e}\n{}", imported.config));
    (config, imported)
}

fn keys(notes: &[Note]) -> Vec<&str> {
    notes.iter().map(|n| n.key.as_str()).collect()
}

#[test]
fn a_taskscaler_runner_becomes_a_pool_with_its_policies() {
    let (config, imported) = import_sample("taskscaler.toml");
    assert_eq!(config.upstream.url.as_str(), "https://gitlab.example.com/");
    assert_eq!(config.pools.len(), 1);
    let pool = &config.pools[0];
    assert_eq!(pool.name, "docker-autoscaler-aws");
    assert_eq!(
        pool.upstream_token.expose(),
        "glrt-t4sk5c4l3r-sample-token-000"
    );
    assert_eq!(pool.request_concurrency, 6);
    let s = &pool.scaling;
    assert_eq!(
        (s.max_machines, s.capacity_per_machine, s.max_use_count),
        (10, 2, 10)
    );
    assert!(s.delete_on_shutdown);
    let p = pool.provisioner.as_ref().unwrap();
    assert!(p.command.ends_with("provisioners/aws/provisioner"));
    assert_eq!(p.env["AWS_REGION"], "eu-central-1");
    assert_eq!(p.env["AWS_SSH_USER"], "ubuntu");
    assert_eq!((p.create_rate, p.create_burst), (2.0, 6));
    assert_eq!(p.reconcile_interval, Duration::from_secs(30));
    assert_eq!(pool.policies.len(), 2);
    let (always, weekend) = (&pool.policies[0], &pool.policies[1]);
    assert_eq!((always.idle_count, always.idle_time), (2, 20 * 60 * 1000));
    assert_eq!((always.scale_factor, always.scale_factor_limit), (0.5, 8));
    assert_eq!(
        (weekend.idle_count, weekend.timezone),
        (0, chrono_tz::Europe::Berlin)
    );
    let sidecar = pool.sidecar.as_ref().unwrap();
    assert_eq!(
        sidecar.ready_command.as_deref(),
        Some("cloud-init status --wait")
    );
    let executor_config = format!("{sidecar:?}");
    assert!(
        executor_config.contains("[runners.docker]"),
        "{executor_config}"
    );
    assert!(
        executor_config.contains("[runners.cache.s3]"),
        "{executor_config}"
    );
    let dropped = keys(&imported.not_carried);
    for key in [
        "concurrent",
        "shutdown_timeout",
        "session_server",
        "runners[0].limit",
        "runners[0].autoscaler.state_storage",
        "runners[0].autoscaler.instance_creation_time_buckets",
        "runners[0].autoscaler.plugin_config.name",
        "runners[0].autoscaler.plugin_config.profile",
        "runners[0].autoscaler.connector_config.use_external_addr",
        "runners[0].autoscaler.policy[1].preemptive_mode",
    ] {
        assert!(dropped.contains(&key), "{key} is not reported: {dropped:?}");
    }
    assert!(keys(&imported.to_check).contains(&"server.public_url"));
}

#[test]
fn a_docker_machine_runner_becomes_a_docker_machine_pool() {
    let (config, imported) = import_sample("docker-machine.toml");
    let pool = &config.pools[0];
    assert_eq!(pool.name, "docker-machine-aws");
    let s = &pool.scaling;
    assert_eq!((s.max_machines, s.capacity_per_machine), (30, 1));
    // IdleCountMin is the floor, IdleCount the ceiling of IdleScaleFactor's idle machines.
    assert_eq!(
        (s.idle_count, s.scale_factor, s.scale_factor_limit),
        (1, 1.5, 5)
    );
    assert_eq!(
        (s.idle_time, s.max_use_count),
        (Duration::from_secs(1800), 100)
    );
    let p = pool.provisioner.as_ref().unwrap();
    assert!(
        p.command
            .ends_with("provisioners/docker-machine/provisioner")
    );
    assert_eq!(p.env["DOCKER_MACHINE_DRIVER"], "amazonec2");
    assert_eq!(p.env["DOCKER_MACHINE_NAME"], "gitlab-docker-machine-%s");
    assert_eq!(
        p.env["DOCKER_MACHINE_OPTIONS"].lines().collect::<Vec<_>>(),
        [
            "amazonec2-region=eu-central-1",
            "amazonec2-instance-type=m5.large",
            "amazonec2-vpc-id=vpc-0123456789abcdef0"
        ]
    );
    assert_eq!(p.create_burst, 3);
    assert_eq!(pool.policies.len(), 2);
    let (weekdays, weekend) = (&pool.policies[0], &pool.policies[1]);
    assert_eq!((weekdays.idle_count, weekdays.idle_time), (10, 3_600_000));
    assert_eq!(weekdays.timezone, chrono_tz::Europe::Berlin);
    assert_eq!(
        weekend.periods.len(),
        1,
        "the 2020-only period is not carried"
    );
    let dropped = keys(&imported.not_carried);
    for key in [
        "runners[0].builds_dir",
        "runners[0].machine.OffPeakPeriods",
        "runners[0].machine.autoscaling[1].Periods[1]",
    ] {
        assert!(dropped.contains(&key), "{key} is not reported: {dropped:?}");
    }
    assert!(keys(&imported.to_check).contains(&"runners[0].machine.autoscaling[1].Timezone"));
}

#[test]
fn what_is_not_a_runner_configuration_is_refused_with_the_reason() {
    let options = Options {
        provisioners_dir: PathBuf::from("/p"),
    };
    let autoscaler_config = std::fs::read_to_string(sample("not-a-runner.toml")).unwrap();
    assert!(matches!(
        import(&autoscaler_config, &options),
        Err(ImportError::NoRunners)
    ));
    assert!(matches!(
        import("[[runners]\n", &options),
        Err(ImportError::NotToml(_))
    ));
    let shell_runner = "[[runners]]\nname = \"x\"\nexecutor = \"shell\"\n";
    assert!(matches!(
        import(shell_runner, &options),
        Err(ImportError::NothingAutoscales)
    ));
    let code = import_config(&sample("not-a-runner.toml"), None, PathBuf::from("/p"));
    assert_eq!(code, ExitCode::from(65));
}

#[test]
fn the_output_file_is_private() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("autoscaler.toml");
    let code = import_config(
        &sample("docker-machine.toml"),
        Some(&out),
        PathBuf::from("/p"),
    );
    assert_eq!(code, ExitCode::SUCCESS);
    let mode = std::fs::metadata(Path::new(&out))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
}
