use std::time::Duration;

use super::*;
use crate::clock::ManualClock;
use crate::core::SidecarId;
use crate::store::MemoryStore;

fn table() -> (Jobs, Arc<MemoryStore>, Arc<ManualClock>) {
    let store = Arc::new(MemoryStore::new());
    let clock = Arc::new(ManualClock::new(10_000));
    (
        Jobs::load(store.clone(), clock.clone()).unwrap(),
        store,
        clock,
    )
}

fn payload(id: u64, deps: &[(u64, &str)]) -> Vec<u8> {
    let deps: Vec<_> = deps
        .iter()
        .map(|(d, t)| serde_json::json!({"id": d, "name": "dep", "token": t}))
        .collect();
    serde_json::to_vec(&serde_json::json!({
        "id": id, "token": format!("glcbt-{id}"), "job_info": {"project_id": 3}, "dependencies": deps
    }))
    .unwrap()
}

#[tokio::test]
async fn accept_stores_payload_byte_for_byte_and_is_idempotent() {
    let (jobs, store, _) = table();
    let p = payload(5, &[]);
    assert_eq!(jobs.accept("default", &p).unwrap(), Accepted::New(JobId(5)));
    assert_eq!(store.payload(JobId(5)).unwrap().unwrap(), &p[..]);
    assert_eq!(
        store.job(JobId(5)).unwrap().unwrap().phase,
        JobPhase::Queued
    );
    assert_eq!(
        jobs.accept("default", &p).unwrap(),
        Accepted::Again(JobId(5))
    );
    assert!(jobs.accept("default", b"{}").is_err());
}

/// A stock runner would keep a suspended environment on a machine the autoscaler destroys when
/// idle: the member is gone from what is stored and handed out, the rest as GitLab sent it.
#[tokio::test]
async fn accept_keeps_no_suspend_options() {
    let (jobs, store, _) = table();
    let p = br#"{"id":6,"token":"glcbt-6","suspend_options":{"suspend_on_success":true},"job_info":{"project_id":3}}"#;
    assert_eq!(jobs.accept("default", p).unwrap(), Accepted::New(JobId(6)));
    let kept = br#"{"id":6,"token":"glcbt-6","job_info":{"project_id":3}}"#;
    assert_eq!(store.payload(JobId(6)).unwrap().unwrap(), &kept[..]);
}

#[tokio::test]
async fn phases_are_persisted() {
    let (jobs, store, _) = table();
    jobs.accept("default", &payload(5, &[])).unwrap();
    jobs.apply(
        JobId(5),
        JobEvent::HandedOut {
            sidecar: SidecarId(1),
        },
    )
    .unwrap();
    assert!(matches!(
        store.job(JobId(5)).unwrap().unwrap().phase,
        JobPhase::Assigned { .. }
    ));
    let reloaded = Jobs::load(store.clone(), Arc::new(ManualClock::new(0))).unwrap();
    assert!(matches!(
        reloaded.phase(JobId(5)),
        Some(JobPhase::Assigned { .. })
    ));
    assert!(matches!(
        jobs.apply(
            JobId(5),
            JobEvent::HandedOut {
                sidecar: SidecarId(2)
            }
        ),
        Err(JobsError::Transition(_))
    ));
    assert!(matches!(
        jobs.apply(JobId(6), JobEvent::Accepted),
        Err(JobsError::Unknown(_))
    ));
}

#[tokio::test]
async fn only_the_jobs_own_token_opens_it() {
    let (jobs, _, _) = table();
    jobs.accept("default", &payload(5, &[])).unwrap();
    jobs.accept("default", &payload(6, &[])).unwrap();
    assert!(jobs.authorize(JobId(5), "glcbt-5").is_ok());
    assert_eq!(
        jobs.authorize(JobId(5), "glcbt-6"),
        Err(Denied::WrongToken(JobId(5)))
    );
    assert_eq!(
        jobs.authorize(JobId(7), "glcbt-7"),
        Err(Denied::UnknownJob(JobId(7)))
    );
}

#[tokio::test]
async fn downloads_are_open_only_to_declared_dependencies() {
    let (jobs, _, _) = table();
    jobs.accept("default", &payload(20, &[(11, "glcbt-dep11")]))
        .unwrap();
    // The dependency's own grant token and the dependent job's token both open it.
    assert!(jobs.authorize_download(JobId(11), "glcbt-dep11").is_ok());
    assert!(jobs.authorize_download(JobId(11), "glcbt-20").is_ok());
    // A job that is not a declared dependency stays closed, whatever the token.
    assert_eq!(
        jobs.authorize_download(JobId(12), "glcbt-20"),
        Err(Denied::UnknownJob(JobId(12)))
    );
    assert_eq!(
        jobs.authorize_download(JobId(11), "glcbt-other"),
        Err(Denied::WrongToken(JobId(11)))
    );
    // A held job's own artifacts, with its own token.
    assert!(jobs.authorize_download(JobId(20), "glcbt-20").is_ok());
    // Once the dependent job is finished, the grant ends.
    jobs.apply(JobId(20), JobEvent::Ended).unwrap();
    assert!(jobs.authorize_download(JobId(11), "glcbt-dep11").is_err());
}

#[tokio::test]
async fn unacknowledged_hand_outs_and_finished_jobs_are_found() {
    let (jobs, store, clock) = table();
    jobs.accept("default", &payload(5, &[])).unwrap();
    jobs.accept("other", &payload(6, &[])).unwrap();
    jobs.apply(
        JobId(5),
        JobEvent::HandedOut {
            sidecar: SidecarId(1),
        },
    )
    .unwrap();
    assert!(jobs.unacknowledged("default", 60_000).is_empty());
    clock.advance(Duration::from_secs(60));
    assert_eq!(jobs.unacknowledged("default", 60_000), vec![JobId(5)]);
    assert!(jobs.unacknowledged("other", 60_000).is_empty());
    assert_eq!(jobs.queued("other"), vec![JobId(6)]);
    jobs.apply(JobId(6), JobEvent::Ended).unwrap();
    assert_eq!(jobs.collect_finished(1_000).unwrap(), 0);
    clock.advance(Duration::from_secs(1));
    assert_eq!(jobs.collect_finished(1_000).unwrap(), 1);
    assert_eq!(store.job(JobId(6)).unwrap(), None);
    assert_eq!(jobs.unfinished(), 1);
}

#[tokio::test]
async fn a_job_the_store_cannot_write_is_not_run_but_given_back_as_a_failure() {
    let (jobs, store, _clock) = table();
    store.fail_writes(true);
    let accepted = jobs.accept("default", &payload(7, &[])).unwrap();
    assert_eq!(accepted, Accepted::Unstored(JobId(7)));
    assert!(
        matches!(jobs.phase(JobId(7)), Some(JobPhase::Failing { reason, .. }) if reason.contains("could not store")),
        "owed to GitLab as a failure, never queued for a sidecar"
    );
    assert!(jobs.waiting_in_pool("default").is_empty());
    assert!(
        !jobs.store_writable().await,
        "no job is taken while the disk is full"
    );
    store.fail_writes(false);
    assert!(
        jobs.store_writable().await,
        "a probe write finds the disk usable again"
    );
}

#[tokio::test]
async fn a_job_that_could_not_be_made_durable_is_given_back_and_phase_changes_go_on_in_memory() {
    let (jobs, store, _clock) = table();
    assert_eq!(
        jobs.accept("default", &payload(8, &[])).unwrap(),
        Accepted::New(JobId(8))
    );
    assert_eq!(
        jobs.accept("default", &payload(9, &[])).unwrap(),
        Accepted::New(JobId(9))
    );
    jobs.apply(JobId(9), JobEvent::Accepted).unwrap();
    store.fail_writes(true);
    // The hand-out of job 8 cannot be recorded: it does not happen, and the job is given back
    // (the caller has already taken it from the pool's queue).
    assert!(
        jobs.apply(
            JobId(8),
            JobEvent::HandedOut {
                sidecar: SidecarId(1)
            }
        )
        .is_err()
    );
    assert!(
        matches!(jobs.phase(JobId(8)), Some(JobPhase::Failing { reason, .. }) if reason.contains("could not store")),
        "owed to GitLab as a failure"
    );
    assert!(!jobs.store_writable().await);
    // Job 9 runs on its sidecar: its end is kept in memory although the store refuses it.
    jobs.apply(JobId(9), JobEvent::Ended).unwrap();
    assert!(matches!(
        jobs.phase(JobId(9)),
        Some(JobPhase::Finished { .. })
    ));
}

#[tokio::test]
async fn a_running_job_found_at_start_up_is_owed_one_check_with_gitlab() {
    let (jobs, store, _) = table();
    jobs.accept("default", &payload(5, &[])).unwrap();
    jobs.start_running(JobId(5), SidecarId(1));
    let owed = |j: &Jobs| j.owing(1_000_000);
    assert!(owed(&jobs).is_empty(), "a job running in this run is not");

    // After a restart the store may be behind (the end of the job lost with the crash): one
    // keep-alive settles it, and a confirmed job is left alone.
    let reloaded = Jobs::load(store.clone(), Arc::new(ManualClock::new(20_000))).unwrap();
    assert!(matches!(
        reloaded.phase(JobId(5)),
        Some(JobPhase::Running { .. })
    ));
    assert_eq!(owed(&reloaded), vec![JobId(5)]);
    reloaded.confirm_running(JobId(5));
    assert!(owed(&reloaded).is_empty());
}

/// The demand forecast learns from each job's first hand-out how long it waited for a slot; a
/// job handed out again waited for a sidecar that went away, not for a slot.
#[tokio::test]
async fn a_jobs_first_hand_out_is_news_of_its_wait() {
    let (jobs, _, clock) = table();
    jobs.accept("default", &payload(5, &[])).unwrap();
    jobs.take_news("default");
    let hand_out = |sidecar| {
        jobs.apply(
            JobId(5),
            JobEvent::HandedOut {
                sidecar: SidecarId(sidecar),
            },
        )
        .unwrap()
    };
    clock.advance(Duration::from_secs(40));
    hand_out(1);
    let news: Vec<_> = jobs.take_news("default").into_iter().collect();
    assert_eq!(
        news,
        [JobNews::HandedOut {
            waited: 40_000,
            class: None
        }]
    );
    jobs.apply(JobId(5), JobEvent::AckTimedOut).unwrap();
    clock.advance(Duration::from_secs(5));
    hand_out(2);
    assert!(jobs.take_news("default").is_empty());
}

/// A job released to GitLab for want of a machine is news: its retry may come back, and the
/// machine made for it is kept for that.
#[tokio::test]
async fn a_job_released_to_gitlab_is_news_with_its_class() {
    let (jobs, _, clock) = table();
    jobs.accept("default", &payload(5, &[])).unwrap();
    jobs.take_news("default");
    clock.advance(Duration::from_secs(10));
    jobs.released_to_gitlab("default", JobId(5));
    let news: Vec<_> = jobs.take_news("default").into_iter().collect();
    assert_eq!(
        news,
        [JobNews::Released {
            at: clock.now(),
            class: None
        }]
    );
}
