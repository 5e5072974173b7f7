#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions
//! `autoscaler run` on a store it must not trust: it refuses to start, says why and what to do,
//! with the exit code the README documents, and binds no port.

use std::path::Path;
use std::process::{Command, Output};

use autoscaler::store::{SCHEMA_VERSION, SledStore, Store};

/// A configuration whose state lives in `dir/state`. GitLab is never reached: the store is
/// opened before anything else happens.
fn config(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("autoscaler.toml");
    std::fs::write(
        &path,
        "[server]\nlisten = \"127.0.0.1:0\"\n\n[state]\ndir = \"state\"\n\n\
         [upstream]\nurl = \"http://127.0.0.1:9\"\n\n\
         [[pools]]\nname = \"default\"\nupstream_token = \"glrt-store-at-start-test\"\n",
    )
    .unwrap();
    path
}

/// A store with something in it, flushed and closed.
async fn store_with_state(state: &Path) {
    let store = SledStore::open(state).unwrap();
    store.put_meta("note", b"something worth keeping").unwrap();
    store.durable().await.unwrap();
    store.checkpoint().unwrap();
}

fn run(config: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_autoscaler"))
        .args(["run", "--config"])
        .arg(config)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[tokio::test]
async fn a_damaged_store_stops_the_start_with_a_recovery_path() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let state = dir.path().join("state");
    store_with_state(&state).await;
    let log = state.join("db/db");
    let size = std::fs::metadata(&log).unwrap().len();
    std::fs::write(&log, vec![0xA5u8; usize::try_from(size).unwrap()]).unwrap();

    let output = run(&config);
    let err = stderr(&output);
    assert_eq!(output.status.code(), Some(65), "{err}");
    assert!(err.contains("is damaged"), "{err}");
    assert!(
        err.contains("restore the state directory") && err.contains("move it aside"),
        "the message gives the recovery path: {err}"
    );
    assert!(
        !String::from_utf8_lossy(&output.stdout).contains("listening on"),
        "nothing may be served from a damaged store"
    );
    // The refusal holds on the next start: it is not a one-off that a retry papers over.
    assert_eq!(run(&config).status.code(), Some(65));
}

#[tokio::test]
async fn a_store_from_a_newer_version_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let state = dir.path().join("state");
    {
        let store = SledStore::open(&state).unwrap();
        store
            .put_meta("schema_version", &(SCHEMA_VERSION + 1).to_be_bytes())
            .unwrap();
        store.durable().await.unwrap();
    }
    let output = run(&config);
    let err = stderr(&output);
    assert_eq!(output.status.code(), Some(65), "{err}");
    assert!(err.contains("newer autoscaler"), "{err}");
    assert!(err.contains("downgrades are not supported"), "{err}");
}

#[tokio::test]
async fn a_state_directory_that_cannot_be_created_is_an_io_error() {
    let dir = tempfile::tempdir().unwrap();
    // `state` is a file, so the store's directory cannot exist.
    std::fs::write(dir.path().join("state"), b"not a directory").unwrap();
    let output = run(&config(dir.path()));
    let err = stderr(&output);
    assert_eq!(output.status.code(), Some(74), "{err}");
    assert!(err.contains("cannot open the store"), "{err}");
}
