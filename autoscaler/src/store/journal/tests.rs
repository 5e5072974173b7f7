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
        let (journal, replay) = Journal::open(dir.path(), None).unwrap();
        assert!(replay.collected().is_empty());
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
    let (_, replay) = Journal::open(dir.path(), None).unwrap();
    let mut expected: Vec<Entry> = (0..3).map(put).collect();
    expected.push(Entry::Remove {
        tree: 1,
        key: vec![1],
    });
    assert_eq!(replay.collected(), expected);
}

/// `kill -9` between a write and its sync: the entry was written to the file when it was
/// recorded, so the next start replays it (only a power loss could take it).
#[tokio::test]
async fn an_entry_recorded_but_not_yet_synced_survives_the_process() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (journal, _) = Journal::open(dir.path(), None).unwrap();
        // The store syncs the new epoch's `begin` as it opens.
        journal.sync_now().unwrap();
        record(&journal, put(1));
        journal.durable().await.unwrap();
        record(&journal, put(2));
        // Dropped before any sync covers put(2): the process died here.
    }
    let (_, replay) = Journal::open(dir.path(), None).unwrap();
    assert_eq!(replay.collected(), vec![put(1), put(2)]);
}

#[tokio::test]
async fn a_torn_last_entry_ends_the_replay_and_older_entries_survive() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (journal, _) = Journal::open(dir.path(), None).unwrap();
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
    let (_, replay) = Journal::open(dir.path(), None).unwrap();
    assert_eq!(replay.collected(), vec![put(1)]);
}

#[tokio::test]
async fn after_a_switch_both_epochs_replay_oldest_first_and_a_third_reuses_the_first_file() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (journal, _) = Journal::open(dir.path(), None).unwrap();
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
    let (journal, replay) = Journal::open(dir.path(), None).unwrap();
    let replay = replay.collected();
    assert_eq!(replay.len(), 3);
    assert_eq!(replay[1..], [put(5), put(6)]);
    // The reopened journal starts epoch 3 in journal-1; epoch 1 there is gone, epoch 2 stays.
    // put(5) was written to epoch 1 before the switch: in the store, the checkpoint that
    // follows every switch (and the one that ends every open) has it in sled by now.
    journal.sync_now().unwrap();
    drop(journal);
    let (_, replay) = Journal::open(dir.path(), None).unwrap();
    assert_eq!(replay.collected(), vec![put(6)]);
}

/// The new epoch's first entries are written at once too, not only after its first sync.
#[tokio::test]
async fn after_a_switch_an_entry_recorded_but_not_synced_survives_the_process() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (journal, _) = Journal::open(dir.path(), None).unwrap();
        journal.sync_now().unwrap();
        let big = Entry::Put {
            tree: 0,
            key: vec![9],
            value: vec![0; CHECKPOINT_BYTES as usize],
        };
        record(&journal, big);
        journal.durable().await.unwrap();
        assert!(journal.switch_if_long(), "a long epoch switches");
        record(&journal, put(7));
        // Dropped before any sync of the new epoch: the process died here.
    }
    let (_, replay) = Journal::open(dir.path(), None).unwrap();
    assert_eq!(replay.collected().last(), Some(&put(7)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_callers_share_syncs() {
    let dir = tempfile::tempdir().unwrap();
    let (journal, _) = Journal::open(dir.path(), None).unwrap();
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
    let (_, replay) = Journal::open(dir.path(), None).unwrap();
    assert_eq!(replay.collected().len(), 64);
}

/// A position taken between writes (as a checkpoint takes it before flushing sled) leaves only
/// the later entries to replay, across a switch too; a covered epoch above every file's makes
/// the next epoch start above it.
#[tokio::test]
async fn entries_before_the_covered_position_are_not_replayed() {
    let dir = tempfile::tempdir().unwrap();
    let covered = {
        let (journal, _) = Journal::open(dir.path(), None).unwrap();
        record(&journal, put(1));
        record(&journal, put(2));
        journal.durable().await.unwrap();
        let covered = journal.position();
        // Pending (not yet written) when the position is taken: still after it.
        record(&journal, put(3));
        journal.durable().await.unwrap();
        record(&journal, put(4));
        journal.durable().await.unwrap();
        covered
    };
    let (journal, replay) = Journal::open(dir.path(), Some(covered)).unwrap();
    assert_eq!(replay.collected(), vec![put(3), put(4)]);
    assert_eq!(journal.position().epoch, covered.epoch + 1);
    // Nothing covered: everything, as before positions were recorded.
    let (_, replay) = Journal::open(dir.path(), None).unwrap();
    assert_eq!(replay.collected(), (1..=4).map(put).collect::<Vec<_>>());
    // A position from a later epoch than the files hold (the files were lost): nothing of
    // theirs is replayed, and new writes go to an epoch past the position's.
    let far = Position {
        epoch: covered.epoch + 10,
        end: 0,
    };
    let (journal, replay) = Journal::open(dir.path(), Some(far)).unwrap();
    assert!(replay.collected().is_empty());
    assert_eq!(journal.position().epoch, far.epoch + 1);
}

/// What a checkpoint covered is not even read: a journal whose entries are all covered is
/// reopened holding no more than the file past the covered end (zeros written ahead), not the
/// entries before it.
#[tokio::test]
async fn entries_a_checkpoint_covered_are_not_read_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let covered = {
        let (journal, _) = Journal::open(dir.path(), None).unwrap();
        for n in 0..200u8 {
            record(
                &journal,
                Entry::Put {
                    tree: 0,
                    key: vec![n],
                    value: vec![n; 4096],
                },
            );
        }
        journal.durable().await.unwrap();
        journal.position()
    };
    let file = dir.path().join(format!("journal-{}", covered.epoch % 2));
    let size = std::fs::metadata(&file).unwrap().len();
    let (_, replay) = Journal::open(dir.path(), Some(covered)).unwrap();
    assert!(replay.collected().is_empty());
    assert!(covered.end > 800_000, "{covered:?}");
    assert_eq!(replay.bytes_held() as u64, size - covered.end);
    // Nothing covered: the whole file is read, and every entry replayed.
    let (_, replay) = Journal::open(dir.path(), None).unwrap();
    assert_eq!(replay.collected().len(), 200);
}
