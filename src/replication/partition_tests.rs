//! Tests of `replication/partition.rs` (kept beside it to keep that file readable).

use super::*;
use crate::log::io::StdBackend;
use crate::log::IoBackend;
use crate::protocol::record_batch::{encode_uncompressed_batch, reseal, SimpleRecord};

/// An uncompressed batch of `n` ~600-byte records from `producer_id` (epoch 0) at `seq`.
fn idempotent_batch(producer_id: i64, seq: i32, n: usize) -> Vec<u8> {
    let value = vec![b'v'; 600];
    let recs: Vec<SimpleRecord<'_>> =
        (0..n).map(|i| SimpleRecord { timestamp: 1_000 + i as i64, key: None, value: Some(&value) }).collect();
    let mut b = encode_uncompressed_batch(&recs);
    b[43..51].copy_from_slice(&producer_id.to_be_bytes());
    b[51..53].copy_from_slice(&0i16.to_be_bytes());
    b[53..57].copy_from_slice(&seq.to_be_bytes());
    reseal(&mut b);
    b
}

const DAY_MS: i64 = 86_400_000;

/// Opens the partition in `dir` at wall time `now_ms`, with 4 KiB segments so that a few
/// batches span several of them.
fn open_at(dir: &Path, now_ms: i64) -> Partition {
    open_with_segments(dir, now_ms, 4096)
}

fn open_with_segments(dir: &Path, now_ms: i64, segment_bytes: u64) -> Partition {
    let io: Arc<dyn IoBackend> = Arc::new(StdBackend);
    let cfg = LogConfig { segment_bytes, ..LogConfig::default() };
    let log = PartitionLog::open(dir, cfg, io).unwrap();
    Partition::new("t".into(), 0, Uuid::nil(), log, now_ms, DAY_MS).unwrap()
}

#[test]
fn a_compacted_topic_refuses_keyless_records_reporting_at_most_max_record_errors() {
    let dir = tempfile::tempdir().unwrap();
    let p = open_at(dir.path(), 2_000);
    let value = [b'v'; 8];
    let keyless: Vec<SimpleRecord<'_>> = (0..1500).map(|i| SimpleRecord { timestamp: i, key: None, value: Some(&value) }).collect();
    // Not compacted: appended.
    p.append(encode_uncompressed_batch(&keyless[..1]).into(), 0).unwrap();
    p.update_config(LogConfig { segment_bytes: 4096, compacted: true, ..LogConfig::default() });
    match p.append(encode_uncompressed_batch(&keyless).into(), 0) {
        Err(AppendError::RecordErrors { message, records, .. }) => {
            assert_eq!(records.len(), MAX_RECORD_ERRORS);
            assert_eq!(records[999].0, 999);
            assert!(message.starts_with("One or more records have been rejected due to 1500 record errors"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    let keyed = [SimpleRecord { timestamp: 0, key: Some(&b"k"[..]), value: Some(&value) }];
    assert_eq!(p.append(encode_uncompressed_batch(&keyed).into(), 0).unwrap().base_offset, 1, "nothing refused was written");
}

#[test]
fn producer_state_is_rebuilt_from_batch_headers_after_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let open = || open_at(dir.path(), 2_000);
    let p = open();
    let mut offsets = Vec::new();
    for seq in 0..6 {
        offsets.push(p.append(idempotent_batch(7, seq * 3, 3).into(), 0).unwrap().base_offset);
    }
    assert_eq!(p.append(idempotent_batch(9, 0, 2).into(), 0).unwrap().base_offset, 18);
    assert!(p.segment_count() > 2, "{} segments", p.segment_count());
    drop(p);

    let p = open();
    // A retry of producer 7's last batch is acknowledged at its original offsets, unwritten.
    let dup = p.append(idempotent_batch(7, 15, 3).into(), 0).unwrap();
    assert_eq!((dup.base_offset, dup.records), (offsets[5], 0));
    assert_eq!(p.log_end_offset(), 20);
    // A gap is refused; the next sequence of each producer is appended.
    assert!(matches!(p.append(idempotent_batch(7, 19, 1).into(), 0), Err(AppendError::OutOfOrderSequence)));
    assert_eq!(p.append(idempotent_batch(7, 18, 1).into(), 0).unwrap().base_offset, 20);
    assert_eq!(p.append(idempotent_batch(9, 2, 1).into(), 0).unwrap().base_offset, 21);
}

/// `b` with its producer epoch set.
fn with_epoch(mut b: Vec<u8>, epoch: i16) -> Vec<u8> {
    b[51..53].copy_from_slice(&epoch.to_be_bytes());
    reseal(&mut b);
    b
}

#[test]
fn producer_snapshots_are_taken_at_rolls_and_shutdown_and_opening_starts_from_the_newest() {
    let dir = tempfile::tempdir().unwrap();
    let open = || open_at(dir.path(), 2_000);
    let p = open();
    for seq in 0..6 {
        p.append(idempotent_batch(7, seq * 3, 3).into(), 0).unwrap();
    }
    let bases = p.state.lock().log.segment_base_offsets();
    let taken = snapshot_offsets(dir.path());
    assert!(bases.len() >= 3 && taken.len() == SNAPSHOTS_KEPT, "{bases:?} {taken:?}");
    assert_eq!(taken[..], bases[bases.len() - 2..], "one per roll, named by the new segment; two kept");
    drop(p);

    // With larger segments, the active one grows past what a start replays cheaply, so a
    // clean shutdown takes a snapshot at the log end.
    let p = open_with_segments(dir.path(), 2_000, 4 << 20);
    p.append(idempotent_batch(7, 18, 1000).into(), 0).unwrap();
    p.append(idempotent_batch(7, 1018, 1000).into(), 0).unwrap();
    assert!(p.state.lock().log.active_size() > SHUTDOWN_SNAPSHOT_MIN_REPLAY_BYTES);
    p.flush().unwrap();
    let end = p.log_end_offset();
    assert_eq!(snapshot_offsets(dir.path()), vec![bases[bases.len() - 1], end], "and one at shutdown");
    drop(p);

    // Opening starts from the newest snapshot: one that says producer 42 is at epoch 5
    // fences its epoch 4, which the log itself knows nothing about.
    let newest = snapshot_path(dir.path(), end);
    let mut table = ProducerStateTable::decode_snapshot(&std::fs::read(&newest).unwrap()).unwrap();
    let mut h = BatchHeader::parse(&with_epoch(idempotent_batch(42, 0, 1), 5)).unwrap();
    h.base_offset = end - 1;
    table.record(&h);
    std::fs::write(&newest, table.encode_snapshot()).unwrap();
    std::fs::write(snapshot_path(dir.path(), end + 100), table.encode_snapshot()).unwrap();
    let p = open();
    assert!(!snapshot_path(dir.path(), end + 100).exists(), "a snapshot beyond the log end is removed");
    let fenced = p.append(with_epoch(idempotent_batch(42, 0, 1), 4).into(), 0);
    assert!(matches!(fenced, Err(AppendError::InvalidProducerEpoch)), "{fenced:?}");
    drop(p);

    // A torn newest snapshot is removed and the one before it (taken at the last roll) used,
    // with the batches after it replayed: producer 7's last batch is still a duplicate.
    let mut torn = std::fs::read(&newest).unwrap();
    let last = torn.len() - 1;
    torn[last] ^= 0x5a;
    std::fs::write(&newest, torn).unwrap();
    let p = open();
    assert!(!newest.exists());
    assert_eq!(p.append(with_epoch(idempotent_batch(42, 0, 1), 4).into(), 0).unwrap().records, 1);
    let dup = p.append(idempotent_batch(7, 1018, 1000).into(), 0).unwrap();
    assert_eq!(dup.records, 0, "a retry of producer 7's last batch is acknowledged unwritten");
}

#[test]
fn a_snapshot_is_taken_every_interval_so_a_start_after_a_kill_replays_at_most_that() {
    let dir = tempfile::tempdir().unwrap();
    let open = || open_with_segments(dir.path(), 2_000, 64 << 20);
    let p = open();
    let (mut seq, mut ends) = (0, Vec::new());
    while p.state.lock().log.active_size() < SNAPSHOT_INTERVAL_BYTES + (4 << 20) {
        p.append(idempotent_batch(7, seq, 1000).into(), 0).unwrap();
        seq += 1000;
        ends.push(p.log_end_offset());
    }
    assert_eq!(p.segment_count(), 1, "no roll: any snapshot is the interval's");
    let taken = snapshot_offsets(dir.path());
    assert_eq!(taken.len(), 1, "{taken:?}");
    assert!(ends.contains(&taken[0]), "taken at the log end after an append: {taken:?}");
    let size = p.state.lock().log.active_size();
    drop(p); // as kill -9: no shutdown snapshot

    let p = open();
    let replayed = p.state.lock().unsnapshotted_bytes;
    assert!(replayed > 0 && replayed < size - SNAPSHOT_INTERVAL_BYTES + (1 << 20), "replayed {replayed} of {size}");
    let dup = p.append(idempotent_batch(7, seq - 1000, 1000).into(), 0).unwrap();
    assert_eq!(dup.records, 0, "the snapshot and the replay after it know producer 7's last batch");
    assert_eq!(p.append(idempotent_batch(7, seq, 1).into(), 0).unwrap().records, 1);
}

#[test]
fn a_clean_shutdown_skips_the_snapshot_when_the_start_replays_little_or_one_is_at_the_end() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let p = open_with_segments(dir.path(), 2_000, 4 << 20);
    p.append(idempotent_batch(7, 0, 3).into(), 0).unwrap();
    p.flush().unwrap();
    assert_eq!(snapshot_offsets(dir.path()), Vec::<i64>::new(), "a few KiB in the only segment: no snapshot");
    drop(p);
    let p = open_with_segments(dir.path(), 2_000, 4 << 20);
    assert_eq!(p.append(idempotent_batch(7, 0, 3).into(), 0).unwrap().records, 0, "the replay found producer 7");
    p.append(idempotent_batch(7, 3, 1000).into(), 0).unwrap();
    p.append(idempotent_batch(7, 1003, 1000).into(), 0).unwrap();
    p.flush().unwrap();
    let end = p.log_end_offset();
    assert_eq!(snapshot_offsets(dir.path()), vec![end], "over 1 MiB to replay: a snapshot");
    let written = std::fs::metadata(snapshot_path(dir.path(), end)).unwrap().ino();
    drop(p);
    let p = open_with_segments(dir.path(), 2_000, 4 << 20);
    p.flush().unwrap();
    let again = std::fs::metadata(snapshot_path(dir.path(), end)).unwrap().ino();
    assert_eq!(written, again, "nothing appended since: the snapshot at the log end is kept as it is");
    assert_eq!(p.append(idempotent_batch(7, 1003, 1000).into(), 0).unwrap().records, 0);
}

#[test]
fn producers_older_than_the_expiration_window_are_not_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let p = open_at(dir.path(), 2_000);
    // Producer 7 writes several segments at t=1 s; producer 9 writes at t=1 s and one
    // more batch at t=1 day + 1 s, in the last segment.
    for seq in 0..6 {
        p.append(idempotent_batch(7, seq * 3, 3).into(), 0).unwrap();
    }
    p.append(idempotent_batch(9, 0, 2).into(), 0).unwrap();
    let mut late = idempotent_batch(9, 2, 1);
    late[35..43].copy_from_slice(&(DAY_MS + 1_000).to_be_bytes()); // max timestamp
    reseal(&mut late);
    p.append(late.into(), 0).unwrap();
    assert!(p.segment_count() > 2);
    drop(p);

    // Reopened 1 day + 1.5 s in: producer 7's batches are all over a day old.
    let p = open_at(dir.path(), DAY_MS + 1_500);
    assert!(matches!(p.append(idempotent_batch(7, 18, 1).into(), 0), Err(AppendError::UnknownProducerId)));
    assert_eq!(p.append(idempotent_batch(9, 3, 1).into(), 0).unwrap().records, 1, "producer 9 is live");
    // The periodic pass forgets producer 9 a day after its last batch (timestamp 1 s).
    assert_eq!(p.expire_producers(DAY_MS + 999, DAY_MS), 0);
    assert_eq!(p.expire_producers(DAY_MS + 1_000, DAY_MS), 1);
}

/// Hooks that count fdatasyncs, hold them until the test opens the gate, and can fail them.
#[derive(Debug, Default)]
struct SyncGate {
    syncs: std::sync::atomic::AtomicUsize,
    open: parking_lot::Mutex<bool>,
    opened: parking_lot::Condvar,
    fail: AtomicBool,
}

impl crate::log::io::IoHooks for SyncGate {
    fn before_sync(&self) -> std::io::Result<()> {
        self.syncs.fetch_add(1, Ordering::SeqCst);
        let mut open = self.open.lock();
        while !*open {
            self.opened.wait(&mut open);
        }
        if self.fail.load(Ordering::SeqCst) {
            return Err(std::io::Error::other("injected fsync failure"));
        }
        Ok(())
    }
}

/// Opens a partition in `dir` on a gated backend (gate open while it opens); also returns
/// the fsyncs counted so far.
fn open_gated(dir: &Path) -> (Arc<Partition>, Arc<SyncGate>, usize) {
    open_gated_with(dir, LogConfig::default())
}

fn open_gated_with(dir: &Path, config: LogConfig) -> (Arc<Partition>, Arc<SyncGate>, usize) {
    let gate = Arc::new(SyncGate::default());
    set_gate(&gate, true);
    let log = PartitionLog::open(dir, config, crate::log::io::hooked(Arc::clone(&gate) as Arc<dyn crate::log::io::IoHooks>)).unwrap();
    let p = Arc::new(Partition::new("t".into(), 0, Uuid::nil(), log, 2_000, DAY_MS).unwrap());
    let base = gate.syncs.load(Ordering::SeqCst);
    (p, gate, base)
}

fn set_gate(gate: &SyncGate, open: bool) {
    *gate.open.lock() = open;
    gate.opened.notify_all();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appends_made_during_an_fsync_share_the_next_one() {
    let dir = tempfile::tempdir().unwrap();
    let (p, gate, base) = open_gated(dir.path());
    set_gate(&gate, false);

    let first = p.append(idempotent_batch(7, 0, 1).into(), 0).unwrap();
    let waiter = |end: i64| {
        let p = Arc::clone(&p);
        tokio::spawn(async move { p.sync_to(end).await })
    };
    let first_wait = waiter(first.next_offset);
    while gate.syncs.load(Ordering::SeqCst) == base {
        tokio::task::yield_now().await;
    }
    // The first fsync is running (held by the gate): three more appends and their waiters.
    let mut later = Vec::new();
    for seq in 1..4 {
        let a = p.append(idempotent_batch(7, seq, 1).into(), 0).unwrap();
        later.push(waiter(a.next_offset));
    }
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    assert!(!first_wait.is_finished() && later.iter().all(|w| !w.is_finished()), "nobody is answered before the fsync ends");

    set_gate(&gate, true);
    first_wait.await.unwrap().unwrap();
    for w in later {
        w.await.unwrap().unwrap();
    }
    assert_eq!(gate.syncs.load(Ordering::SeqCst) - base, 2, "one fsync for the first append, one for the three after it");
    // Everything up to the log end is known to be on disk: no further fsync.
    p.sync_to(4).await.unwrap();
    assert_eq!(gate.syncs.load(Ordering::SeqCst) - base, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_append_due_for_flush_messages_returns_before_the_fsync_it_asks_for() {
    let dir = tempfile::tempdir().unwrap();
    let (p, gate, base) = open_gated_with(dir.path(), LogConfig { flush_interval_messages: 2, ..LogConfig::default() });
    set_gate(&gate, false);
    // On the blocking pool and bounded, so that an append stuck in the held fsync fails the
    // test instead of hanging it.
    let append = |seq: i32| {
        let (p, gate) = (Arc::clone(&p), Arc::clone(&gate));
        let task = tokio::task::spawn_blocking(move || p.append(idempotent_batch(7, seq, 1).into(), 0).unwrap());
        async move {
            match tokio::time::timeout(std::time::Duration::from_secs(10), task).await {
                Ok(appended) => appended,
                Err(_) => {
                    set_gate(&gate, true); // lets the stuck thread end with the runtime
                    panic!("append {seq} waited for the held fsync")
                }
            }
        }
    };
    let first = append(0).await.unwrap();
    let second = append(1).await.unwrap();
    assert_eq!((first.flush_due, second.flush_due), (false, true), "the second record reaches flush.messages=2");
    assert_eq!(gate.syncs.load(Ordering::SeqCst), base, "no append fsyncs by itself");
    // The acknowledgement waits for the fsync, which the gate holds.
    let wait = {
        let p = Arc::clone(&p);
        tokio::spawn(async move { p.sync_to(second.next_offset).await })
    };
    while gate.syncs.load(Ordering::SeqCst) == base {
        tokio::task::yield_now().await;
    }
    // Appends go on while it runs; this one is not due (the count started over).
    assert!(!append(2).await.unwrap().flush_due);
    assert!(!wait.is_finished());
    set_gate(&gate, true);
    wait.await.unwrap().unwrap();
    assert_eq!(gate.syncs.load(Ordering::SeqCst) - base, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_fsync_fails_the_waiters_and_poisons_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let (p, gate, _) = open_gated(dir.path());
    let a = p.append(idempotent_batch(7, 0, 1).into(), 0).unwrap();
    gate.fail.store(true, Ordering::SeqCst);
    let e = p.sync_to(a.next_offset).await.unwrap_err();
    assert!(e.to_string().contains("injected fsync failure"), "{e}");
    assert!(matches!(p.append(idempotent_batch(7, 1, 1).into(), 0), Err(AppendError::Log(LogError::Poisoned { .. }))));
    assert!(matches!(p.sync_to(a.next_offset).await, Err(LogError::Poisoned { .. })));
}

/// What a follower's fetch from `offset` gets: the leader's batches to its log end.
fn replica_read(leader: &Partition, offset: i64) -> Bytes {
    leader.read_slice_for_replica(offset, 1 << 20, true).unwrap().map(|r| r.slice.to_bytes().unwrap()).unwrap_or_default()
}

/// Fetches as a follower does until it has the leader's whole log (a read stops at the end
/// of a segment); returns everything it copied.
fn catch_up(follower: &Partition, leader: &Partition) -> Vec<u8> {
    let mut copied = Vec::new();
    while follower.log_end_offset() < leader.log_end_offset() {
        let bytes = replica_read(leader, follower.log_end_offset());
        copied.extend_from_slice(&bytes);
        follower.append_from_leader(bytes, leader.high_watermark()).unwrap();
    }
    copied
}

#[test]
fn a_follower_copies_the_leaders_batches_byte_for_byte_with_their_producer_state() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let leader = open_at(a.path(), 2_000);
    let follower = open_at(b.path(), 2_000);
    leader.become_leader(1, 3, 0, vec![1, 2], vec![1, 2], 2_000);
    follower.become_follower(1, 3);
    for seq in 0..4 {
        leader.append(idempotent_batch(7, seq * 2, 2).into(), 2_000).unwrap();
    }
    // Follower 2 has fetched nothing: the high watermark waits for it.
    assert_eq!((leader.log_end_offset(), leader.high_watermark()), (8, 0));
    let copied = catch_up(&follower, &leader);
    assert_eq!(follower.log_end_offset(), 8);
    let mut again = Vec::new();
    let mut at = 0;
    while at < 8 {
        let b = replica_read(&follower, at);
        at = BatchIter::new(&b).flatten().last().unwrap().0.next_offset();
        again.extend_from_slice(&b);
    }
    assert_eq!(again, copied, "same bytes: offsets, epochs, CRCs");
    assert_eq!(follower.latest_epoch(), Some(3));
    // Its next fetch says it has everything: the leader's high watermark moves, and the
    // follower takes it with the next response.
    assert!(leader.follower_fetched(2, 10, 8, 2_100));
    assert_eq!(leader.high_watermark(), 8);
    follower.append_from_leader(Bytes::new(), leader.high_watermark()).unwrap();
    assert_eq!(follower.high_watermark(), 8);
    // Taking over, the follower knows producer 7: a retry of its last batch is a duplicate.
    follower.become_leader(2, 4, 1, vec![1, 2], vec![2], 2_200);
    let dup = follower.append(idempotent_batch(7, 6, 2).into(), 2_200).unwrap();
    assert_eq!((dup.base_offset, dup.records), (6, 0));
    assert!(!leader.follower_fetched(9, 1, 8, 2_300), "not a replica");
}

#[test]
fn a_truncated_follower_forgets_the_batches_it_dropped() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let leader = open_at(a.path(), 2_000);
    let follower = open_at(b.path(), 2_000);
    for seq in 0..4 {
        leader.append(idempotent_batch(7, seq * 2, 2).into(), 2_000).unwrap();
    }
    catch_up(&follower, &leader);
    follower.append_from_leader(Bytes::new(), 8).unwrap();
    assert_eq!(follower.high_watermark(), 8);
    follower.truncate_to(4, 2_000).unwrap();
    assert_eq!((follower.log_end_offset(), follower.high_watermark()), (4, 4));
    // Sequences 4.. are no longer in its producer state: the batch at sequence 4 is new.
    let again = follower.append(idempotent_batch(7, 4, 2).into(), 2_000).unwrap();
    assert_eq!((again.base_offset, again.records), (4, 2));
    // Behind the leader's log start: emptied, starting there.
    follower.restart_at(100).unwrap();
    assert_eq!((follower.log_start_offset(), follower.log_end_offset(), follower.high_watermark()), (100, 100, 100));
}

#[test]
fn a_checkpointed_high_watermark_is_kept_within_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let p = open_at(dir.path(), 2_000);
    for seq in 0..3 {
        p.append(idempotent_batch(7, seq, 1).into(), 2_000).unwrap();
    }
    p.restore_high_watermark(1);
    assert_eq!(p.high_watermark(), 1);
    p.restore_high_watermark(50);
    assert_eq!(p.high_watermark(), 3);
}

#[tokio::test]
async fn acks_all_waits_for_the_isr_and_fails_when_leadership_moves_or_time_runs_out() {
    use std::time::Duration;
    let dir = tempfile::tempdir().unwrap();
    let p = Arc::new(open_at(dir.path(), 2_000));
    p.update_config(LogConfig { segment_bytes: 4096, min_insync_replicas: 2, ..LogConfig::default() });
    p.become_leader(1, 1, 0, vec![1, 2, 3], vec![1, 2, 3], 2_000);
    assert!(p.has_min_isr());
    let end = p.append(idempotent_batch(7, 0, 1).into(), 2_000).unwrap().next_offset;
    let waiting = {
        let p = p.clone();
        tokio::spawn(async move { p.wait_replicated(end, Duration::from_secs(30)).await })
    };
    p.follower_fetched(2, 10, end, 2_100);
    tokio::task::yield_now().await;
    assert!(!waiting.is_finished(), "follower 3 has not fetched it");
    p.follower_fetched(3, 11, end, 2_100);
    assert_eq!(waiting.await.unwrap(), Ok(()));

    let end = p.append(idempotent_batch(7, 1, 1).into(), 2_000).unwrap().next_offset;
    assert_eq!(p.wait_replicated(end, Duration::from_millis(20)).await, Err(ReplicationWait::TimedOut));
    // The ISR shrinks below min.insync.replicas while a produce waits.
    let waiting = {
        let p = p.clone();
        tokio::spawn(async move { p.wait_replicated(end, Duration::from_secs(30)).await })
    };
    p.become_leader(1, 1, 1, vec![1, 2, 3], vec![1], 2_200);
    assert_eq!(waiting.await.unwrap(), Err(ReplicationWait::NotEnoughReplicasAfterAppend));
    assert!(!p.has_min_isr());
    let waiting = {
        let p = p.clone();
        tokio::spawn(async move { p.wait_replicated(end, Duration::from_secs(30)).await })
    };
    p.become_follower(2, 2);
    assert_eq!(waiting.await.unwrap(), Err(ReplicationWait::NotLeader));
}

#[test]
fn the_leader_view_gives_each_followers_lag_and_a_follower_has_none() {
    let dir = tempfile::tempdir().unwrap();
    let p = open_at(dir.path(), 2_000);
    p.become_leader(1, 1, 0, vec![1, 2, 3], vec![1, 2, 3], 2_000);
    let end = p.append(idempotent_batch(7, 0, 3).into(), 2_000).unwrap().next_offset;
    p.follower_fetched(2, 10, end, 2_100);
    let v = p.leader_view().unwrap();
    // Follower 3 has not fetched yet: all of the log is its lag.
    assert_eq!((v.replicas, v.isr, v.follower_lag), (3, 3, vec![(2, 0), (3, end)]));
    p.become_leader(1, 1, 1, vec![1, 2, 3], vec![1, 2], 2_200);
    assert_eq!(p.leader_view().unwrap().isr, 2);
    p.become_follower(2, 2);
    assert_eq!(p.leader_view(), None);
}

#[test]
fn a_fetch_from_a_diverged_log_is_not_a_followers_progress() {
    let dir = tempfile::tempdir().unwrap();
    let p = open_at(dir.path(), 2_000);
    p.become_leader(1, 3, 0, vec![1, 2], vec![1], 2_000);
    let end = p.append(idempotent_batch(7, 0, 4).into(), 2_000).unwrap().next_offset;
    assert_eq!(p.latest_epoch(), Some(3));
    assert!(p.follower_fetch_is_consistent(end, 3), "caught up in the leader's epoch");
    assert!(p.follower_fetch_is_consistent(2, 3));
    assert!(p.follower_fetch_is_consistent(end, -1), "an older fetch that names no epoch");
    // An old leader back with records of epoch 2 this log does not have past offset 0, or
    // with more records than this log: not progress (it gets the diverging epoch).
    assert!(!p.follower_fetch_is_consistent(end, 2));
    assert!(!p.follower_fetch_is_consistent(end + 3, 3));
    assert!(!p.follower_fetch_is_consistent(end + 3, -1));
    assert!(!p.follower_fetch_is_consistent(end, 9), "an epoch this log never had");
}

/// A transactional batch of `n` small records from `producer_id` at `epoch` and `seq`.
fn txn_batch(producer_id: i64, epoch: i16, seq: i32, n: usize) -> Vec<u8> {
    let recs: Vec<SimpleRecord<'_>> = (0..n).map(|i| SimpleRecord { timestamp: 1_000 + i as i64, key: None, value: Some(b"t") }).collect();
    let mut b = encode_uncompressed_batch(&recs);
    b[21..23].copy_from_slice(&0x10i16.to_be_bytes());
    b[43..51].copy_from_slice(&producer_id.to_be_bytes());
    b[51..53].copy_from_slice(&epoch.to_be_bytes());
    b[53..57].copy_from_slice(&seq.to_be_bytes());
    reseal(&mut b);
    b
}

fn marker(kind: crate::protocol::control::MarkerKind, coordinator_epoch: i32) -> EndMarker {
    EndMarker { kind, coordinator_epoch }
}

/// A read_committed read: `(first offset, next offset)` of what it returns, the last stable
/// offset, and the aborted transactions `(producer, first offset)`.
type CommittedRead = (Option<(i64, i64)>, i64, Vec<(i64, i64)>);

fn committed_read(p: &Partition, offset: i64) -> CommittedRead {
    let (read, lso, aborted) = p.read_slice_committed(offset, 1 << 20, true).unwrap();
    (read.map(|r| (r.first_offset, r.next_offset)), lso, aborted.iter().map(|t| (t.producer_id, t.first_offset)).collect())
}

#[test]
fn a_read_committed_reader_stops_at_the_first_open_transaction_and_is_told_of_aborts() {
    use crate::protocol::control::MarkerKind::{Abort, Commit};
    let dir = tempfile::tempdir().unwrap();
    let p = open_with_segments(dir.path(), 2_000, 1 << 20);
    p.append(idempotent_batch(1, 0, 1).into(), 2_000).unwrap(); // 0
    p.append(txn_batch(7, 0, 0, 2).into(), 2_000).unwrap(); // 1-2
    p.append(txn_batch(8, 0, 0, 1).into(), 2_000).unwrap(); // 3
    p.append(idempotent_batch(1, 1, 1).into(), 2_000).unwrap(); // 4
    assert_eq!((p.high_watermark(), p.last_stable_offset()), (5, 1));
    assert_eq!(committed_read(&p, 0), (Some((0, 1)), 1, vec![]), "nothing of the open transaction");
    assert_eq!(committed_read(&p, 1), (None, 1, vec![]));
    // A non-transactional write from a producer in a transaction is refused.
    let mut plain = idempotent_batch(7, 2, 1);
    plain[51..53].copy_from_slice(&0i16.to_be_bytes());
    assert!(matches!(p.append(plain.into(), 2_000), Err(AppendError::InvalidTxnState)));

    assert_eq!(p.append_marker(7, 0, marker(Abort, 3), 2_000).unwrap(), 6); // 5
    assert_eq!(p.last_stable_offset(), 3, "producer 8's transaction is still open");
    assert_eq!(p.append_marker(8, 0, marker(Commit, 3), 2_000).unwrap(), 7); // 6
    assert_eq!(p.last_stable_offset(), 7);
    assert_eq!(committed_read(&p, 0), (Some((0, 7)), 7, vec![(7, 1)]));
    assert_eq!(committed_read(&p, 6), (Some((6, 7)), 7, vec![]), "the abort ended before offset 6");

    // Refused markers write nothing: an older producer epoch, a replaced coordinator.
    assert!(matches!(p.append_marker(8, -1, marker(Abort, 3), 2_000), Err(AppendError::InvalidProducerEpoch)));
    assert!(matches!(p.append_marker(8, 0, marker(Abort, 2), 2_000), Err(AppendError::CoordinatorFenced)));
    // A client may not write a marker itself.
    let forged = crate::protocol::control::encode_marker_batch(8, 0, marker(Commit, 3), 2_000);
    assert!(matches!(p.append(forged, 2_000), Err(AppendError::InvalidRecord(_))));
    assert_eq!(p.log_end_offset(), 7);

    // Another transaction is left open; a restart finds it, and the abort, again.
    p.append(txn_batch(9, 0, 0, 1).into(), 2_000).unwrap(); // 7
    let index = dir.path().join("00000000000000000000.txnindex");
    assert_eq!(std::fs::read(&index).unwrap().len(), 34);
    drop(p);
    let p = open_with_segments(dir.path(), 2_000, 1 << 20);
    assert_eq!((p.high_watermark(), p.last_stable_offset()), (8, 7));
    assert_eq!(committed_read(&p, 0), (Some((0, 7)), 7, vec![(7, 1)]));
    assert!(matches!(p.append_marker(8, 0, marker(Abort, 2), 2_000), Err(AppendError::CoordinatorFenced)), "coordinator epoch survives");
    p.append_marker(9, 0, marker(Abort, 3), 2_000).unwrap(); // 8
    assert_eq!(committed_read(&p, 0), (Some((0, 9)), 9, vec![(7, 1), (9, 7)]));

    // An index entry lost with a killed process (marker written, index not) is re-added from
    // the log on the next start.
    drop(p);
    std::fs::remove_file(&index).unwrap();
    let p = open_with_segments(dir.path(), 2_000, 1 << 20);
    assert_eq!(committed_read(&p, 0), (Some((0, 9)), 9, vec![(7, 1), (9, 7)]));
    assert_eq!(std::fs::read(&index).unwrap().len(), 68);
}

#[test]
fn a_follower_copies_markers_and_its_truncation_forgets_the_aborts_it_cut() {
    use crate::protocol::control::MarkerKind::Abort;
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let leader = open_with_segments(a.path(), 2_000, 1 << 20);
    let follower = open_with_segments(b.path(), 2_000, 1 << 20);
    leader.become_leader(1, 3, 0, vec![1, 2], vec![1, 2], 2_000);
    follower.become_follower(1, 3);
    leader.append(txn_batch(7, 0, 0, 2).into(), 2_000).unwrap(); // 0-1
    leader.append_marker(7, 0, marker(Abort, 0), 2_000).unwrap(); // 2
    leader.append(txn_batch(7, 1, 0, 1).into(), 2_000).unwrap(); // 3
    // The marker is not replicated yet: the leader's last stable offset waits for it.
    assert_eq!((leader.high_watermark(), leader.last_stable_offset()), (0, 0));
    catch_up(&follower, &leader);
    assert!(leader.follower_fetched(2, 10, 4, 2_100));
    assert_eq!((leader.high_watermark(), leader.last_stable_offset()), (4, 3));
    follower.append_from_leader(Bytes::new(), leader.high_watermark()).unwrap();
    assert_eq!(committed_read(&follower, 0), (Some((0, 3)), 3, vec![(7, 0)]), "the follower indexed the abort too");
    follower.truncate_to(2, 2_000).unwrap();
    assert_eq!(follower.last_stable_offset(), 0, "producer 7's transaction is open again");
    assert!(!b.path().join("00000000000000000000.txnindex").exists());
    catch_up(&follower, &leader);
    follower.append_from_leader(Bytes::new(), leader.high_watermark()).unwrap();
    assert_eq!(committed_read(&follower, 0), (Some((0, 3)), 3, vec![(7, 0)]));
}
