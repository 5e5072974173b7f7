use super::*;

fn put(n: u8) -> Entry {
    Entry::Put {
        tree: 1,
        key: vec![n],
        value: vec![n; 100],
    }
}

fn record(journal: &Journal, entry: Entry) {
    journal.record(|| Ok(((), entry))).unwrap();
}

#[tokio::test]
async fn synced_entries_come_back_in_order_after_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (journal, replay) = Journal::open(dir.path()).unwrap();
        assert!(replay.is_empty());
        for n in 0..3 {
            record(&journal, put(n));
        }
        record(
            &journal,
            Entry::Remove {
                tree: 1,
                key: vec![1],
            },
        );
        journal.durable().await.unwrap();
        // Dropped without any checkpoint: as after a power cut once `durable` returned.
    }
    let (_, replay) = Journal::open(dir.path()).unwrap();
    let mut expected: Vec<Entry> = (0..3).map(put).collect();
    expected.push(Entry::Remove {
        tree: 1,
        key: vec![1],
    });
    assert_eq!(replay, expected);
}

#[tokio::test]
async fn a_torn_last_entry_ends_the_replay_and_older_entries_survive() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (journal, _) = Journal::open(dir.path()).unwrap();
        record(&journal, put(1));
        journal.durable().await.unwrap();
        record(&journal, put(2));
        journal.durable().await.unwrap();
    }
    // Epoch 1 lives in journal-1. Cut the second entry in half, as a crash mid-write would.
    let path = dir.path().join("journal-1");
    let mut bytes = std::fs::read(&path).unwrap();
    let begin = HEADER + 1;
    let first = HEADER + 2 + 4 + 1 + 100;
    bytes.truncate(begin + first + 20);
    std::fs::write(&path, bytes).unwrap();
    let (_, replay) = Journal::open(dir.path()).unwrap();
    assert_eq!(replay, vec![put(1)]);
}

#[tokio::test]
async fn after_a_switch_both_epochs_replay_oldest_first_and_a_third_reuses_the_first_file() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (journal, _) = Journal::open(dir.path()).unwrap();
        let big = Entry::Put {
            tree: 0,
            key: vec![9],
            value: vec![0; CHECKPOINT_BYTES as usize],
        };
        record(&journal, big.clone());
        journal.durable().await.unwrap();
        record(&journal, put(5));
        assert!(journal.switch_if_long(), "a long epoch switches");
        record(&journal, put(6));
        journal.durable().await.unwrap();
        assert!(!journal.switch_if_long(), "a short epoch does not");
    }
    let (journal, replay) = Journal::open(dir.path()).unwrap();
    assert_eq!(replay.len(), 3);
    assert_eq!(replay[1..], [put(5), put(6)]);
    // The reopened journal starts epoch 3 in journal-1; epoch 1 there is gone, epoch 2 stays.
    journal.sync_now().unwrap();
    drop(journal);
    let (_, replay) = Journal::open(dir.path()).unwrap();
    assert_eq!(replay, vec![put(5), put(6)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_callers_share_syncs() {
    let dir = tempfile::tempdir().unwrap();
    let (journal, _) = Journal::open(dir.path()).unwrap();
    let journal = std::sync::Arc::new(journal);
    let tasks: Vec<_> = (0..64u8)
        .map(|n| {
            let journal = journal.clone();
            tokio::spawn(async move {
                record(&journal, put(n));
                journal.durable().await.unwrap();
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let syncs = journal.sync_count();
    assert!((1..64).contains(&syncs), "64 callers took {syncs} syncs");
    drop(journal);
    let (_, replay) = Journal::open(dir.path()).unwrap();
    assert_eq!(replay.len(), 64);
}
