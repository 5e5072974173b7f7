use std::os::unix::fs::PermissionsExt;

use super::*;
use crate::provisioner::{Labels, Provisioner, StartAnswer, StopAnswer};

/// Writes an executable script into a temp dir and wraps it as a provisioner.
fn script(body: &str, timeouts: Timeouts) -> (tempfile::TempDir, ScriptProvisioner) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("provisioner");
    std::fs::write(&path, format!("#!/usr/bin/env bash\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    let env = BTreeMap::from([("REGION".to_string(), "eu-1".to_string())]);
    let p = ScriptProvisioner::new(path, "linux", "as-test", env, timeouts, 4);
    (dir, p)
}

fn quick() -> Timeouts {
    Timeouts {
        info: Duration::from_millis(1500),
        create: Duration::from_millis(1500),
        list: Duration::from_millis(1500),
        status: Duration::from_millis(1500),
        destroy: Duration::from_millis(1500),
    }
}

#[tokio::test]
async fn a_good_answer_is_parsed_and_the_request_arrives_on_stdin() {
    let (dir, p) = script(
        r#"cat > "$(dirname "$0")/request.json"; echo "[$1]" >&2; echo '{"machines":[{"id":"a","state":"running","labels":{"x":"y"}}]}'"#,
        quick(),
    );
    let listed = p
        .list(Labels::from([("x".into(), "y".into())]))
        .await
        .unwrap();
    assert_eq!(listed[0].id, "a");
    let request: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("request.json")).unwrap()).unwrap();
    assert_eq!(
        request,
        json!({"protocol": 1, "pool": "linux", "labels": {"x": "y"}})
    );
}

#[tokio::test]
async fn the_environment_is_clean_and_explicit() {
    let (_dir, p) = script(
        r#"env | sort | jq -R . | jq -s '{id: "m", state: "gone", labels: (map(split("=") | {(.[0]): (.[1:] | join("="))}) | add)}'"#,
        quick(),
    );
    let status = p.status("m").await.unwrap();
    let keys: Vec<&str> = status.labels.keys().map(String::as_str).collect();
    for k in &keys {
        assert!(
            [
                "PATH",
                "HOME",
                "USER",
                "LANG",
                "TMPDIR",
                "PWD",
                "SHLVL",
                "_",
                "OLDPWD",
                "AUTOSCALER_PROTOCOL",
                "AUTOSCALER_POOL",
                "AUTOSCALER_ID",
                "REGION"
            ]
            .contains(k),
            "unexpected variable {k} in the provisioner's environment"
        );
    }
    assert_eq!(status.labels["AUTOSCALER_POOL"], "linux");
    assert_eq!(status.labels["AUTOSCALER_ID"], "as-test");
    assert_eq!(status.labels["REGION"], "eu-1");
    assert_eq!(status.labels["AUTOSCALER_PROTOCOL"], "1");
}

#[tokio::test]
async fn exit_codes_mean_retry_later_permanent_and_error() {
    let (_d, p) = script(
        r#"echo '{"error":"quota exhausted","retry_after":30}'; exit 75"#,
        quick(),
    );
    assert_eq!(
        p.info().await.unwrap_err(),
        ProvisionerError::RetryLater {
            message: "quota exhausted".into(),
            retry_after: Some(Duration::from_secs(30))
        }
    );
    let (_d, p) = script(r#"echo '{"error":"no such image"}'; exit 78"#, quick());
    assert!(p.info().await.unwrap_err().is_permanent());
    let (_d, p) = script("echo 'cloud API said 500' >&2; exit 3", quick());
    let e = p.info().await.unwrap_err();
    assert_eq!(
        e,
        ProvisionerError::Failed {
            exit: "exit 3".into(),
            message: "cloud API said 500".into()
        }
    );
}

#[tokio::test]
async fn a_hanging_script_is_killed_with_everything_it_started() {
    let (dir, p) = script(
        r#"sleep 1000 & echo $! > "$(dirname "$0")/child.pid"; sleep 1000"#,
        quick(),
    );
    let e = p.list(Labels::new()).await.unwrap_err();
    assert_eq!(e, ProvisionerError::TimedOut(Duration::from_millis(1500)));
    let pid: i32 = std::fs::read_to_string(dir.path().join("child.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // The background child was in the script's process group: it must be gone (or a zombie
    // waiting for init, which is no longer running). SIGKILL to a group is delivered
    // asynchronously, so on a loaded machine the child may still be scheduled out for a moment
    // after the kill returned: it is watched for up to 5 s (there is no event to wait on for a
    // process that is not ours).
    let alive = || {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| {
                s.split_whitespace()
                    .nth(2)
                    .is_some_and(|state| state != "Z")
            })
            .unwrap_or(false)
    };
    let deadline = crate::clock::monotonic() + Duration::from_secs(5);
    while alive() && crate::clock::monotonic() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(!alive(), "the script's child {pid} survived the timeout");
}

#[tokio::test]
async fn garbage_truncated_or_huge_output_is_refused() {
    let (_d, p) = script("echo 'Starting...'; echo '{\"machines\": []}'", quick());
    assert!(matches!(
        p.list(Labels::new()).await,
        Err(ProvisionerError::InvalidResponse(_))
    ));
    let (_d, p) = script(r#"printf '{"machines": [{"id": "a", "st'"#, quick());
    assert!(matches!(
        p.list(Labels::new()).await,
        Err(ProvisionerError::InvalidResponse(_))
    ));
    let (_d, p) = script("yes '{}' | head -c 5000000", quick());
    assert_eq!(
        p.list(Labels::new()).await.unwrap_err(),
        ProvisionerError::OutputTooLarge(STDOUT_LIMIT)
    );
    let (_d, p) = script(r#"echo '{"machines": [{"id": "a"}]}'"#, quick());
    let e = p.list(Labels::new()).await.unwrap_err();
    assert!(e.to_string().contains("state"), "{e}");
    let (_d, p) = script(r#"echo '{"id": "m", "state": "melting"}'"#, quick());
    assert!(
        p.status("m")
            .await
            .unwrap_err()
            .to_string()
            .contains("melting")
    );
}

#[tokio::test]
async fn a_missing_executable_is_a_clear_error() {
    let p = ScriptProvisioner::new(
        "/nonexistent/provisioner".into(),
        "p",
        "as",
        BTreeMap::new(),
        quick(),
        1,
    );
    let e = p.info().await.unwrap_err();
    assert!(
        matches!(e, ProvisionerError::Spawn(_))
            && e.to_string().contains("/nonexistent/provisioner"),
        "{e}"
    );
}

#[tokio::test]
async fn stop_and_start_pass_the_id_in_argv_and_stdin_and_read_their_states() {
    let (dir, p) = script(
        r#"cat > "$(dirname "$0")/$1.json"
case "$1" in
  stop) echo "{\"id\":\"$2\",\"state\":\"stopped\"}" ;;
  start) echo "{\"id\":\"$2\",\"state\":\"starting\"}" ;;
esac"#,
        quick(),
    );
    assert_eq!(p.stop("i-1").await.unwrap(), StopAnswer::Stopped);
    assert_eq!(p.start("i-1").await.unwrap(), StartAnswer::Starting);
    for verb in ["stop", "start"] {
        let request: serde_json::Value = serde_json::from_slice(
            &std::fs::read(dir.path().join(format!("{verb}.json"))).unwrap(),
        )
        .unwrap();
        assert_eq!(
            request,
            json!({"protocol": 1, "pool": "linux", "id": "i-1"})
        );
    }
}

#[tokio::test]
async fn a_stop_refused_for_this_machine_is_permanent_and_a_hang_is_timed_out() {
    let (_d, p) = script(
        r#"echo '{"error":"spot instances cannot be stopped"}'; exit 78"#,
        quick(),
    );
    let e = p.stop("i-1").await.unwrap_err();
    assert!(e.is_permanent(), "{e}");
    assert!(e.to_string().contains("spot instances"), "{e}");
    let (_d, p) = script("exec sleep 30", quick());
    let e = p.start("i-1").await.unwrap_err();
    assert_eq!(e, ProvisionerError::TimedOut(quick().destroy));
}
