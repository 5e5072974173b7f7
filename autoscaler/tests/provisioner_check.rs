#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions
//! The conformance kit judges provisioners: a correct one passes every clause, and each
//! deliberately broken one fails, with the clause that catches it named.

use std::path::PathBuf;
use std::time::Duration;

use autoscaler::provisioner::Timeouts;
use autoscaler::provisioner::check::{CheckOptions, Outcome, Report, check};

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/file-provisioner")
}

async fn run(mode: &str) -> Report {
    run_with(mode, false).await
}

/// Runs the kit on the fixture, declaring `stop_start` or not.
async fn run_with(mode: &str, stop_start: bool) -> Report {
    let dir = tempfile::tempdir().unwrap();
    let mut options = CheckOptions::new(fixture());
    if stop_start {
        options.env.insert("STOP_START".into(), "1".into());
    }
    options.env.insert(
        "FILE_PROVISIONER_DIR".into(),
        dir.path().display().to_string(),
    );
    options.env.insert("BREAK".into(), mode.into());
    let t = Duration::from_secs(2);
    options.timeouts = Timeouts {
        info: t,
        create: t,
        list: t,
        status: t,
        destroy: t,
    };
    options.poll_interval = Duration::from_millis(50);
    check(options).await
}

/// The numbers of the failed clauses, and the report for the assertion message.
fn failures(report: &Report) -> (Vec<u8>, String) {
    (
        report.failed().iter().map(|c| c.number).collect(),
        report.to_string(),
    )
}

#[tokio::test]
async fn a_correct_provisioner_passes_every_clause() {
    let report = run("").await;
    assert!(report.passed(), "{report}");
    assert_eq!(report.clauses.len(), 17);
    let skipped: Vec<u8> = report
        .clauses
        .iter()
        .filter(|c| matches!(&c.outcome, Outcome::Skipped(why) if why.contains("stop_start")))
        .map(|c| c.number)
        .collect();
    assert_eq!(skipped, vec![13, 14, 15, 16, 17], "{report}");
    assert!(
        report
            .to_string()
            .contains("17 clauses: 12 passed, 0 failed, 5 skipped"),
        "{report}"
    );
}

#[tokio::test]
async fn a_correct_provisioner_with_stop_start_passes_every_clause() {
    let report = run_with("", true).await;
    assert!(
        report
            .to_string()
            .contains("17 clauses: 17 passed, 0 failed, 0 skipped"),
        "{report}"
    );
}

#[tokio::test]
async fn a_stop_that_loses_the_labels_is_caught() {
    let report = run_with("stop-forgets-labels", true).await;
    let (failed, text) = failures(&report);
    assert_eq!(failed, vec![13], "{text}");
    assert!(text.contains("status gives labels {}"), "{text}");
}

#[tokio::test]
async fn a_hanging_provisioner_fails_on_time() {
    let report = run("hang").await;
    let (failed, text) = failures(&report);
    assert!(
        failed.contains(&4) && failed.contains(&9) && failed.contains(&12),
        "{text}"
    );
    assert!(text.contains("did not finish within"), "{text}");
    assert!(text.contains("ran past its"), "{text}");
}

#[tokio::test]
async fn garbage_on_stdout_is_named() {
    let report = run("garbage").await;
    let (failed, text) = failures(&report);
    assert_eq!(failed, vec![1, 12], "{text}");
    assert!(text.contains("not exactly one JSON object"), "{text}");
}

#[tokio::test]
async fn a_missing_field_is_named() {
    let report = run("missing-field").await;
    let (failed, text) = failures(&report);
    assert!(failed.contains(&4) && failed.contains(&12), "{text}");
    assert!(text.contains("missing field `state`"), "{text}");
    assert!(text.contains("\"state\" is a required property"), "{text}");
}

#[tokio::test]
async fn a_destroy_that_is_not_idempotent_is_caught() {
    let report = run("non-idempotent-destroy").await;
    let (failed, text) = failures(&report);
    assert_eq!(failed, vec![8], "{text}");
    let clause = &report.clauses[7];
    assert!(
        matches!(&clause.outcome, Outcome::Failed(why) if why.contains("no machine")),
        "{text}"
    );
}
