use std::time::Duration;

use super::*;
use crate::core::scaler::ScaleFactorCounts;

mod pools;

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
