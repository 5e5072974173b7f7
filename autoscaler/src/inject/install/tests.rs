use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};

use super::*;
use crate::config::SidecarMode;

fn launch<'a>(mode: &'a SidecarMode, dir: &'a str) -> Launch<'a> {
    Launch {
        mode,
        url: "http://10.0.0.1:8090",
        name: "m-7",
        concurrency: 1,
        dir,
        binary: None,
        ca_file: None,
        job_user: None,
    }
}

/// Runs `script` as the SSH injection does (`sh -s`, the script on stdin) in `home`.
fn run(script: &str, home: &Path) -> Outcome {
    let mut child = Command::new("sh")
        .arg("-s")
        .current_dir(home)
        .env("HOME", home)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), script.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let status = out.status.code().and_then(|c| u32::try_from(c).ok());
    parse(status, &String::from_utf8_lossy(&out.stdout))
}

#[test]
fn the_script_writes_the_token_privately_and_starts_the_sidecar_detached() {
    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir(home.path().join("sc")).unwrap();
    let mode = SidecarMode::Command {
        template: "sleep 30".into(),
    };
    let l = launch(&mode, "sc");
    let files = recipe::files(&l, "glrt-'odd\"token");
    let s = script(&l, &files, None);
    assert!(
        !s.contains("glrt-"),
        "the token travels only base64-encoded"
    );

    let outcome = run(&s, home.path());
    let Outcome::Started { pid, ca_system } = outcome else {
        panic!("the sidecar did not start: {outcome:?}");
    };
    assert_eq!(ca_system, None);
    let token = home.path().join("sc/token");
    assert_eq!(
        std::fs::read_to_string(&token).unwrap(),
        "glrt-'odd\"token\n"
    );
    assert_eq!(
        std::fs::metadata(&token).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert_eq!(
        std::fs::read_to_string(home.path().join("sc/sidecar.pid")).unwrap(),
        format!("{pid}\n")
    );
    // Still running after the script ended: the start outlives the session.
    let alive = Command::new("kill").args(["-0", &pid]).status().unwrap();
    assert!(alive.success());
    let _ = Command::new("kill").arg(&pid).status();
}

#[test]
fn a_sidecar_that_dies_at_once_is_reported_with_its_log() {
    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir(home.path().join("sc")).unwrap();
    let mode = SidecarMode::Command {
        template: "echo cannot reach {url}; exit 1".into(),
    };
    let l = launch(&mode, "sc");
    let s = script(&l, &recipe::files(&l, "glrt-x"), None);
    assert_eq!(
        run(&s, home.path()),
        Outcome::Exited {
            log: "cannot reach http://10.0.0.1:8090".into()
        }
    );
}

#[test]
fn a_failing_step_is_named_with_its_output_and_nothing_is_started() {
    let home = tempfile::tempdir().unwrap();
    // The sidecar's directory is a file: no file can be written in it.
    std::fs::write(home.path().join("sc"), "").unwrap();
    let mode = SidecarMode::Command {
        template: "sleep 30".into(),
    };
    let l = launch(&mode, "sc");
    let s = script(&l, &recipe::files(&l, "glrt-x"), None);
    let Outcome::StepFailed { step, output } = run(&s, home.path()) else {
        panic!("the step's failure was not reported");
    };
    assert_eq!(step, "writing the sidecar's configuration");
    assert!(output.contains("sc/token"), "{output}");
}

#[test]
fn with_tls_the_bundle_holds_the_relay_ca_then_the_system_file() {
    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir(home.path().join("sc")).unwrap();
    let system = home.path().join("system.pem");
    std::fs::write(&system, "SYSTEM\n").unwrap();
    let mode = SidecarMode::Command {
        template: "sleep 30".into(),
    };
    let mut l = launch(&mode, "sc");
    let ca_file = recipe::ca_file("sc");
    l.ca_file = Some(&ca_file);
    let systems = vec!["/nonexistent.pem".to_string(), system.display().to_string()];
    let s = script(
        &l,
        &recipe::files(&l, "glrt-x"),
        Some(("RELAY\n", &systems)),
    );
    let outcome = run(&s, home.path());
    let Outcome::Started { pid, ca_system } = outcome else {
        panic!("the sidecar did not start: {outcome:?}");
    };
    let _ = Command::new("kill").arg(&pid).status();
    assert_eq!(
        ca_system.as_deref(),
        Some(system.display().to_string().as_str())
    );
    assert_eq!(
        std::fs::read_to_string(home.path().join(&ca_file)).unwrap(),
        "RELAY\nSYSTEM\n"
    );
}

#[test]
fn unexpected_exits_are_reported_as_such() {
    assert_eq!(
        parse(Some(127), "sh: not found\n"),
        Outcome::Broken {
            status: Some(127),
            output: "sh: not found".into()
        }
    );
    assert!(matches!(parse(Some(0), ""), Outcome::Broken { .. }));
    assert!(matches!(
        parse(Some(3), "failed what\nx\n"),
        Outcome::StepFailed {
            step: "installing the sidecar",
            ..
        }
    ));
}
