//! One suite, two implementations: what every `Store` must do.

use std::sync::Arc;

use super::*;
use crate::core::job::JobPhase;
use crate::secret::{Secret, TokenDigest};

fn job(id: u64) -> JobRecord {
    JobRecord {
        id: JobId(id),
        pool: "default".into(),
        token: Secret::new(format!("glcbt-{id}")),
        dependencies: vec![DependencyGrant {
            id: JobId(id - 1),
            token: Secret::new("glcbt-dep"),
        }],
        project_id: Some(4),
        pipeline: None,
        class: None,
        phase: JobPhase::Queued,
        accepted_at: 1_000,
        queued_at_gitlab_ms: None,
        runner_interrupted_listed: false,
        acknowledged: false,
        held: false,
        artifact_refusal: None,
        timeline: Vec::new(),
        failed: false,
        spooled: vec![SpooledUpload {
            file: "spool/1".into(),
            query: Some("artifact_type=archive".into()),
            content_type: "multipart/form-data; boundary=x".into(),
            size: 10,
        }],
    }
}

fn sidecar(id: u64) -> SidecarRecord {
    SidecarRecord {
        id: SidecarId(id),
        pool: "default".into(),
        token_digest: TokenDigest::of(&format!("glrt-{id}")),
        description: Some("test".into()),
        created_at: 5,
        machine: None,
    }
}

fn machine(id: &str) -> MachineRecord {
    MachineRecord {
        id: id.into(),
        pool: "default".into(),
        state: crate::core::machine::MachineState::Booting,
        since: 7,
        created_at: 5,
        source: String::new(),
        class: None,
        provider_id: Some(format!("p-{id}")),
        endpoint: Some(Endpoint {
            host: "127.0.0.1".into(),
            port: 2222,
            user: "runner".into(),
        }),
        host_key: Some(HostKey {
            key: "ssh-ed25519 AAAA".into(),
            source: HostKeySource::Provider,
        }),
        sidecar: Some(SidecarId(3)),
        use_count: 2,
        reason: None,
        destroy_attempts: 0,
        next_attempt: 0,
        restarted_at: None,
        timeline: vec![TimelineEntry {
            at: 5,
            state: crate::core::machine::MachineState::Requested,
            reason: None,
        }],
    }
}

async fn machines(store: &dyn Store) {
    store.put_machine(&machine("m-1")).unwrap();
    store.put_machine(&machine("m-2")).unwrap();
    assert_eq!(
        store.machines().unwrap(),
        vec![machine("m-1"), machine("m-2")]
    );
    store.remove_machine("m-1").unwrap();
    assert_eq!(store.machines().unwrap(), vec![machine("m-2")]);
    store.durable().await.unwrap();
}

async fn jobs_and_payloads(store: &dyn Store) {
    let mut j = job(10);
    store.put_job(&j).unwrap();
    store.put_payload(j.id, b"{\"id\":10}").unwrap();
    store.durable().await.unwrap();
    assert_eq!(store.job(JobId(10)).unwrap(), Some(j.clone()));
    assert_eq!(
        store.payload(JobId(10)).unwrap().as_deref(),
        Some(&b"{\"id\":10}"[..])
    );
    j.phase = JobPhase::Finished { at: 9 };
    store.put_job(&j).unwrap();
    assert_eq!(store.jobs().unwrap(), vec![j.clone()]);
    store.remove_job(j.id).unwrap();
    assert_eq!(store.job(j.id).unwrap(), None);
    assert_eq!(store.payload(j.id).unwrap(), None);
    assert!(store.jobs().unwrap().is_empty());
    store.remove_job(JobId(999)).unwrap();
}

async fn sidecars_meta_and_ids(store: &dyn Store) {
    store.put_sidecar(&sidecar(1)).unwrap();
    store.put_sidecar(&sidecar(2)).unwrap();
    assert_eq!(store.sidecars().unwrap(), vec![sidecar(1), sidecar(2)]);
    store.remove_sidecar(SidecarId(1)).unwrap();
    assert_eq!(store.sidecars().unwrap(), vec![sidecar(2)]);
    store
        .put_meta("pool/default/system_id", b"s_0123456789ab")
        .unwrap();
    assert_eq!(
        store.meta("pool/default/system_id").unwrap().as_deref(),
        Some(&b"s_0123456789ab"[..])
    );
    assert_eq!(store.meta("absent").unwrap(), None);
    let a = store.next_id().unwrap();
    let b = store.next_id().unwrap();
    assert!(a > 0 && b > a);
    store.durable().await.unwrap();
}

#[tokio::test]
async fn memory_store_conforms() {
    let store = MemoryStore::new();
    jobs_and_payloads(&store).await;
    sidecars_meta_and_ids(&store).await;
    machines(&store).await;
}

#[tokio::test]
async fn sled_store_conforms() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_when_released(dir.path()).unwrap();
    jobs_and_payloads(&store).await;
    sidecars_meta_and_ids(&store).await;
    machines(&store).await;
}

#[tokio::test]
async fn sled_store_keeps_records_across_reopen_and_ids_keep_growing() {
    let dir = tempfile::tempdir().unwrap();
    let last_id = {
        let store = open_when_released(dir.path()).unwrap();
        store.put_job(&job(7)).unwrap();
        store.put_payload(JobId(7), b"payload").unwrap();
        store.put_sidecar(&sidecar(3)).unwrap();
        let id = store.next_id().unwrap();
        store.durable().await.unwrap();
        id
    };
    let store = open_when_released(dir.path()).unwrap();
    assert_eq!(store.jobs().unwrap(), vec![job(7)]);
    assert_eq!(
        store.payload(JobId(7)).unwrap().as_deref(),
        Some(&b"payload"[..])
    );
    assert_eq!(store.sidecars().unwrap(), vec![sidecar(3)]);
    assert!(store.next_id().unwrap() > last_id);
}

#[tokio::test]
async fn sled_store_refuses_a_newer_schema() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = open_when_released(dir.path()).unwrap();
        store
            .put_meta("schema_version", &(SCHEMA_VERSION + 1).to_be_bytes())
            .unwrap();
        store.durable().await.unwrap();
    }
    let err = open_when_released(dir.path()).unwrap_err();
    assert!(matches!(err, StoreError::NewerSchema { .. }), "{err}");
    assert!(err.to_string().contains("newer autoscaler"));
}

/// A store with a job in it, flushed and closed; returns the path of its database directory.
async fn closed_store_with_a_job(dir: &std::path::Path) -> std::path::PathBuf {
    let store = open_when_released(dir).unwrap();
    store.put_job(&job(7)).unwrap();
    store.durable().await.unwrap();
    store.checkpoint().unwrap();
    dir.join("db")
}

#[tokio::test]
async fn a_damaged_database_is_refused_not_reset() {
    let dir = tempfile::tempdir().unwrap();
    let db = closed_store_with_a_job(dir.path()).await;
    // Overwrite the log the way a bad disk or a stray `dd` would.
    let log = db.join("db");
    let garbage: Vec<u8> = (0..std::fs::metadata(&log).unwrap().len())
        .map(|i| (i * 7 + 13) as u8)
        .collect();
    std::fs::write(&log, garbage).unwrap();
    let err = open_when_released(dir.path()).unwrap_err();
    assert!(matches!(err, StoreError::Damaged { .. }), "{err}");
    assert!(err.to_string().contains("holds no store"), "{err}");
    // It stays refused: a second start does not accept what the first one saw.
    let again = open_when_released(dir.path()).unwrap_err();
    assert!(matches!(again, StoreError::Damaged { .. }), "{again}");
}

#[tokio::test]
async fn a_database_that_lost_flushed_history_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let db = closed_store_with_a_job(dir.path()).await;
    let old = tempfile::tempdir().unwrap();
    copy_dir(&db, old.path());
    {
        let store = open_when_released(dir.path()).unwrap();
        for i in 0..3 {
            store.put_job(&job(20 + i)).unwrap();
            store.durable().await.unwrap();
        }
        store.checkpoint().unwrap();
    }
    // Put the older log back: to sled it is a valid, shorter history.
    std::fs::remove_dir_all(&db).unwrap();
    copy_dir(old.path(), &db);
    let err = open_when_released(dir.path()).unwrap_err();
    assert!(err.to_string().contains("truncated or damaged"), "{err}");
}

#[tokio::test]
async fn a_lost_manifest_is_written_again_and_the_store_carries_on() {
    let dir = tempfile::tempdir().unwrap();
    closed_store_with_a_job(dir.path()).await;
    std::fs::remove_file(dir.path().join("store.json")).unwrap();
    let store = open_when_released(dir.path()).unwrap();
    assert_eq!(store.jobs().unwrap(), vec![job(7)]);
    assert!(dir.path().join("store.json").is_file());
}

/// Opens the store at `dir` once the store closed before it has let go of the directory. sled
/// releases its file lock when the last of its IO threads drops the file, which can be a moment
/// after the last handle was dropped: in one process, a reopen can find it still held. Any
/// other outcome is returned at once; the lock still held after 10 s is returned as it is.
fn open_when_released(dir: &std::path::Path) -> Result<SledStore, StoreError> {
    let deadline = crate::clock::monotonic() + std::time::Duration::from_secs(10);
    loop {
        match SledStore::open(dir) {
            Err(e)
                if e.to_string().contains("could not acquire lock")
                    && crate::clock::monotonic() < deadline =>
            {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            other => return other,
        }
    }
}

fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_durable_calls_share_flushes() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(open_when_released(dir.path()).unwrap());
    let before = store.flush_count();
    let tasks: Vec<_> = (0..64u64)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move {
                store.put_job(&job(100 + i)).unwrap();
                store.durable().await.unwrap();
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let flushes = store.flush_count() - before;
    assert!(flushes >= 1, "at least one flush must happen");
    assert!(
        flushes < 64,
        "64 concurrent writers took {flushes} flushes: no sharing"
    );
    assert_eq!(store.jobs().unwrap().len(), 64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sled_store_keeps_every_write_across_journal_switches_and_checkpoints() {
    let dir = tempfile::tempdir().unwrap();
    let payload = vec![b'x'; 4096];
    {
        let store = open_when_released(dir.path()).unwrap();
        // About 4 MiB of journal: several epochs, each checkpointed in the background.
        for id in 1..=1000u64 {
            store.put_payload(JobId(id), &payload).unwrap();
            store.put_job(&job(id)).unwrap();
            if id % 3 == 0 {
                store.remove_job(JobId(id)).unwrap();
            }
            store.durable().await.unwrap();
        }
    }
    let store = open_when_released(dir.path()).unwrap();
    let jobs = store.jobs().unwrap();
    assert_eq!(jobs.len(), 667);
    assert!(jobs.iter().all(|j| j.id.0 % 3 != 0));
    assert_eq!(
        store.payload(JobId(1000)).unwrap().as_deref(),
        Some(&payload[..])
    );
    assert_eq!(store.payload(JobId(999)).unwrap(), None);
    // The checkpoint that ended the open recorded how far it covered the journal.
    let manifest = super::manifest::Manifest::read(dir.path())
        .unwrap()
        .unwrap();
    assert!(manifest.journal_covered.is_some(), "{manifest:?}");
}
