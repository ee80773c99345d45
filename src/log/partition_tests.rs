use std::fs;
use std::path::Path;
use std::sync::Arc;

use proptest::prelude::*;

use super::*;
use crate::log::io::test_backends;
use crate::protocol::record_batch::{encode_uncompressed_batch, SimpleRecord};

fn batch_with(n: usize, ts0: i64, value_len: usize) -> Vec<u8> {
    let value = vec![b'x'; value_len];
    let recs: Vec<SimpleRecord<'_>> =
        (0..n).map(|i| SimpleRecord { timestamp: ts0 + i as i64, key: None, value: Some(&value) }).collect();
    encode_uncompressed_batch(&recs)
}

fn small_config() -> LogConfig {
    LogConfig { segment_bytes: 4096, index_interval_bytes: 256, ..LogConfig::default() }
}

fn open(dir: &Path, cfg: LogConfig, io: &Arc<dyn IoBackend>) -> PartitionLog {
    PartitionLog::open(dir, cfg, io.clone()).expect("open log")
}

/// Every batch in `records`, as (base offset, last offset).
fn batch_offsets(records: &[u8]) -> Vec<(i64, i64)> {
    BatchIter::new(records).map(|r| r.map(|(h, _)| (h.base_offset, h.last_offset()))).collect::<Result<_, _>>().unwrap()
}

fn read_all(log: &PartitionLog) -> Vec<(i64, i64)> {
    let mut out = Vec::new();
    let mut next = log.log_start_offset();
    while next < log.log_end_offset() {
        let r = log.read(next, 1 << 20, i64::MAX, true).unwrap();
        let got = batch_offsets(&r.records);
        assert!(!got.is_empty(), "read at {next} returned nothing before the log end");
        next = got.last().unwrap().1 + 1;
        out.extend(got);
    }
    out
}

#[test]
fn append_read_round_trip_assigns_offsets() {
    for io in test_backends() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = open(dir.path(), LogConfig::default(), &io);
        let a = log.append_as_leader(batch_with(3, 1000, 10).into(), 0, 1000).unwrap();
        assert_eq!((a.base_offset, a.last_offset, a.record_count, a.batch_count), (0, 2, 3, 1));
        let mut two = batch_with(2, 2000, 10);
        two.extend(batch_with(4, 2000, 10));
        let b = log.append_as_leader(two.clone().into(), 0, 2000).unwrap();
        assert_eq!((b.base_offset, b.last_offset, b.batch_count), (3, 8, 2));
        assert_eq!(log.log_end_offset(), 9);
        let r = log.read(0, 1 << 20, i64::MAX, false).unwrap();
        assert_eq!(batch_offsets(&r.records), vec![(0, 2), (3, 4), (5, 8)]);
        for (_, b) in BatchIter::new(&r.records).map(Result::unwrap) {
            assert!(crc_is_valid(b));
            assert_eq!(BatchHeader::parse(b).unwrap().partition_leader_epoch, 0);
        }
        // offset inside a batch returns the whole containing batch
        assert_eq!(batch_offsets(&log.read(4, 1 << 20, i64::MAX, false).unwrap().records), vec![(3, 4), (5, 8)]);
        // high watermark excludes batches whose last offset reaches it
        assert_eq!(batch_offsets(&log.read(0, 1 << 20, 5, false).unwrap().records), vec![(0, 2), (3, 4)]);
        assert!(log.read(9, 100, i64::MAX, false).unwrap().records.is_empty());
        assert!(matches!(log.read(10, 100, i64::MAX, false), Err(LogError::OffsetOutOfRange { .. })));
        // KIP-74: first batch larger than max_bytes comes back whole only with min_one_batch
        assert!(log.read(0, 10, i64::MAX, false).unwrap().records.is_empty());
        assert_eq!(batch_offsets(&log.read(0, 10, i64::MAX, true).unwrap().records), vec![(0, 2)]);
    }
}

#[test]
fn segments_roll_by_size_and_by_time() {
    for io in test_backends() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = open(dir.path(), small_config(), &io);
        for i in 0..20 {
            log.append_as_leader(batch_with(2, 1000 + i, 400).into(), 1, 1000 + i).unwrap();
        }
        assert!(log.segment_count() > 3, "size roll expected, got {}", log.segment_count());
        for base in log.segment_base_offsets() {
            assert!(dir.path().join(format!("{base:020}.log")).exists());
        }
        assert!(fs::metadata(dir.path().join("00000000000000000000.log")).unwrap().len() <= 4096);

        let dir = tempfile::tempdir().unwrap();
        let cfg = LogConfig { segment_ms: 1000, ..LogConfig::default() };
        let mut log = open(dir.path(), cfg, &io);
        log.append_as_leader(batch_with(1, 10_000, 10).into(), 0, 10_000).unwrap();
        log.append_as_leader(batch_with(1, 10_500, 10).into(), 0, 10_500).unwrap();
        assert_eq!(log.segment_count(), 1);
        log.append_as_leader(batch_with(1, 11_001, 10).into(), 0, 11_001).unwrap();
        assert_eq!(log.segment_base_offsets(), vec![0, 2]);
    }
}

#[test]
fn index_lookup_lands_on_the_right_batch_across_many_segments() {
    for io in test_backends() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = open(dir.path(), small_config(), &io);
        let mut expected = Vec::new();
        for i in 0..200i64 {
            let n = (i % 3 + 1) as usize;
            let a = log.append_as_leader(batch_with(n, i * 10, 50).into(), 0, i * 10).unwrap();
            expected.push((a.base_offset, a.last_offset));
        }
        assert!(log.segment_count() > 5);
        let seg0 = dir.path().join("00000000000000000000.index");
        assert!(fs::metadata(&seg0).unwrap().len() >= 8, "index entries expected");
        for &(base, last) in &expected {
            for off in base..=last {
                let r = log.read(off, 1, i64::MAX, true).unwrap();
                assert_eq!(batch_offsets(&r.records), vec![(base, last)], "offset {off}");
            }
        }
        assert_eq!(read_all(&log), expected);
    }
}

#[test]
fn reopen_after_clean_close_keeps_everything() {
    for io in test_backends() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = open(dir.path(), small_config(), &io);
        for i in 0..50 {
            log.append_as_leader(batch_with(2, 100 + i, 120).into(), (i / 10) as i32, 100 + i).unwrap();
        }
        log.flush().unwrap();
        let before = read_all(&log);
        let (leo, segs, epoch) = (log.log_end_offset(), log.segment_base_offsets(), log.latest_epoch());
        let max_ts = log.max_timestamp_offset().unwrap();
        drop(log);
        let log = open(dir.path(), small_config(), &io);
        assert_eq!(log.log_end_offset(), leo);
        assert_eq!(log.segment_base_offsets(), segs);
        assert_eq!(log.latest_epoch(), epoch);
        assert_eq!(read_all(&log), before);
        assert_eq!(log.max_timestamp_offset().unwrap(), max_ts);
        assert_eq!(max_ts, Some((99, 150)));
    }
}

fn active_log_path(log: &PartitionLog) -> std::path::PathBuf {
    let base = *log.segment_base_offsets().last().unwrap();
    log.dir().join(format!("{base:020}.log"))
}

fn append_bytes(path: &Path, bytes: &[u8]) {
    use std::io::Write;
    let mut f = fs::OpenOptions::new().append(true).open(path).unwrap();
    f.write_all(bytes).unwrap();
}

/// Files in `dir` whose names start with `prefix`.
fn kept_files(dir: &Path, prefix: &str) -> Vec<std::path::PathBuf> {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_str().unwrap().starts_with(prefix))
        .collect()
}

#[test]
fn torn_tail_is_truncated_on_recovery() {
    for io in test_backends() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = LogConfig { index_interval_bytes: 64, ..LogConfig::default() };
        let mut log = open(dir.path(), cfg.clone(), &io);
        for i in 0..10 {
            log.append_as_leader(batch_with(2, i, 30).into(), 0, i).unwrap();
        }
        let good_len = log.size_bytes();
        let path = active_log_path(&log);
        drop(log);

        let mut next = 20;
        let corruptions: Vec<Vec<u8>> = vec![
            vec![0xde, 0xad, 0xbe, 0xef, 1, 2, 3],        // garbage shorter than a header
            batch_with(3, 5, 30)[..40].to_vec(),           // partial batch
            {
                let mut b = batch_with(3, 5, 30);
                let last = b.len() - 1;
                b[last] ^= 0x55; // corrupted CRC
                set_base_offset(&mut b, 20);
                b
            },
            {
                let mut b = batch_with(1, 5, 30);
                set_base_offset(&mut b, 3); // offset going backwards
                b
            },
            vec![0u8; 5000],                               // preallocated zeros
        ];
        for (round, junk) in corruptions.iter().enumerate() {
            append_bytes(&path, junk);
            let before = fs::read(&path).unwrap();
            let mut log = open(dir.path(), cfg.clone(), &io);
            let expected_len = good_len + (round as u64) * batch_with(1, 0, 30).len() as u64;
            assert_eq!(log.size_bytes(), expected_len, "round {round}: exact truncation");
            assert_eq!(fs::metadata(&path).unwrap().len(), expected_len);
            // What was cut off is kept beside the segment, byte for byte.
            let kept = kept_files(dir.path(), &format!("00000000000000000000.log.cut-{expected_len}-"));
            assert_eq!(kept.len(), 1, "round {round}: {kept:?}");
            let got = fs::read(&kept[0]).unwrap();
            assert!(got[..] == before[expected_len as usize..], "round {round}: kept bytes differ");
            assert!(got.ends_with(junk), "round {round}: the junk is not among the kept bytes");
            assert_eq!(log.log_end_offset(), next);
            let a = log.append_as_leader(batch_with(1, 50, 30).into(), 0, 50).unwrap();
            assert_eq!(a.base_offset, next);
            next += 1;
            drop(log);
            let log = open(dir.path(), cfg.clone(), &io);
            assert_eq!(log.log_end_offset(), next);
            assert_eq!(read_all(&log).last().map(|b| b.1), Some(next - 1));
        }
    }
}

/// A log in a new directory holding ten batches of 10 records of 500 bytes, appended through
/// `io`; with the position of the sixth batch.
fn ten_big_batches(io: &Arc<dyn IoBackend>) -> (tempfile::TempDir, LogConfig, PartitionLog, u64) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = LogConfig { index_interval_bytes: 64, ..LogConfig::default() };
    let mut log = open(dir.path(), cfg.clone(), io);
    let mut sixth = 0;
    for i in 0..10 {
        if i == 5 {
            sixth = log.size_bytes();
        }
        log.append_as_leader(batch_with(10, i * 10, 500).into(), 0, i * 10).unwrap();
    }
    (dir, cfg, log, sixth)
}

#[test]
fn recovery_reads_the_disk_again_before_cutting_what_a_stale_page_cache_showed() {
    for io in test_backends() {
        let (dir, cfg, mut log, from) = ten_big_batches(&io);
        let (size, end, batches) = (log.size_bytes(), log.log_end_offset(), read_all(&log));
        log.write_out().unwrap();
        drop(log);
        assert!(size - from > 4096, "the stale bytes must not look like direct-I/O padding");

        // Reads through the page cache see zeros from the sixth batch on; the disk has it all.
        let faults = Faults::default();
        *faults.stale.lock() = Some(from);
        let stale: Arc<dyn IoBackend> = Arc::new(FaultyBackend(faults.clone(), io.clone()));
        let log = open(dir.path(), cfg.clone(), &stale);
        assert_eq!(*faults.stale.lock(), None, "{}: the cached pages were dropped", io.name());
        assert_eq!(log.size_bytes(), size, "{}: nothing is cut", io.name());
        assert_eq!(log.log_end_offset(), end);
        assert_eq!(read_all(&log), batches);
        assert!(kept_files(dir.path(), "00000000000000000000.log.cut-").is_empty());
        drop(log);

        // Bytes that stay wrong after the cached pages are dropped are cut after that one more
        // look, and kept, as any torn tail.
        *faults.stale.lock() = Some(from);
        Faults::set(&faults.stale_stuck, true);
        let log = open(dir.path(), cfg.clone(), &stale);
        assert_eq!(log.size_bytes(), from, "{}: cut where the scan kept reading zeros", io.name());
        assert_eq!(log.log_end_offset(), 50);
        let kept = kept_files(dir.path(), &format!("00000000000000000000.log.cut-{from}-"));
        assert_eq!(kept.len(), 1, "{kept:?}");
        assert_eq!(fs::metadata(&kept[0]).unwrap().len(), size - from);
    }
}

#[test]
fn the_disk_holds_what_the_page_cache_shows_of_appends_through_every_backend() {
    use crate::log::segment::DiskView;
    for io in test_backends() {
        let (dir, cfg, mut log, sixth) = ten_big_batches(&io);
        for pos in [0, 1, sixth, log.size_bytes() - 1] {
            assert_eq!(log.active().disk_view(pos), DiskView::Same, "{} at {pos}", io.name());
        }
        // The same once the appends are sealed (the last block's padding cut) and reopened.
        log.write_out().unwrap();
        drop(log);
        let log = open(dir.path(), cfg, &io);
        assert_eq!(log.active().disk_view(sixth), DiskView::Same, "{} after reopening", io.name());
    }
}

#[test]
fn missing_index_files_are_rebuilt() {
    for io in test_backends() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = open(dir.path(), small_config(), &io);
        for i in 0..60 {
            log.append_as_leader(batch_with(1, i, 100).into(), 0, i).unwrap();
        }
        let before = read_all(&log);
        let bases = log.segment_base_offsets();
        drop(log);
        let idx0 = dir.path().join("00000000000000000000.index");
        let original = fs::read(&idx0).unwrap();
        assert!(!original.is_empty());
        fs::remove_file(&idx0).unwrap();
        fs::remove_file(dir.path().join(format!("{:020}.timeindex", bases[1]))).unwrap();
        fs::write(dir.path().join(format!("{:020}.index", bases[2])), [1u8; 13]).unwrap();
        let log = open(dir.path(), small_config(), &io);
        assert_eq!(read_all(&log), before);
        assert_eq!(fs::read(&idx0).unwrap(), original, "rebuilt index matches the one written on append");
        assert_eq!(fs::metadata(dir.path().join(format!("{:020}.index", bases[2]))).unwrap().len() % 8, 0);
    }
}

#[test]
fn stray_files_from_interrupted_operations_are_removed() {
    let io = test_backends().remove(0);
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), LogConfig::default(), &io);
    log.append_as_leader(batch_with(1, 0, 10).into(), 0, 0).unwrap();
    drop(log);
    for name in ["00000000000000000005.log.deleted", "00000000000000000000.log.cleaned", "x.swap", "00000000000000000099.index"] {
        fs::write(dir.path().join(name), b"junk").unwrap();
    }
    let log = open(dir.path(), LogConfig::default(), &io);
    assert_eq!(log.log_end_offset(), 1);
    let mut names: Vec<String> = fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    names.sort();
    assert_eq!(
        names,
        vec!["00000000000000000000.index", "00000000000000000000.log", "00000000000000000000.timeindex", "leader-epoch-checkpoint"]
    );
}

#[test]
fn retention_by_time_and_size_deletes_whole_old_segments_but_never_the_active_one() {
    for io in test_backends() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = LogConfig { retention_ms: 10_000, ..small_config() };
        let mut log = open(dir.path(), cfg, &io);
        for i in 0..40i64 {
            log.append_as_leader(batch_with(1, i * 1000, 400).into(), 0, i * 1000).unwrap();
        }
        let segs = log.segment_count();
        assert!(segs > 4);
        // now = 45s: segments whose newest record is older than 35s go
        let deleted = log.enforce_retention(45_000).unwrap();
        assert!(deleted > 0 && deleted < segs);
        assert_eq!(log.log_start_offset(), log.segment_base_offsets()[0]);
        assert!(log.log_start_offset() > 0);
        for (b, _) in read_all(&log) {
            assert!(b >= log.log_start_offset());
        }
        // far future: everything but the active segment
        log.enforce_retention(10_000_000).unwrap();
        assert_eq!(log.segment_count(), 1);
        assert_eq!(log.log_end_offset(), 40);

        let dir = tempfile::tempdir().unwrap();
        let cfg = LogConfig { retention_bytes: 5000, retention_ms: -1, ..small_config() };
        let mut log = open(dir.path(), cfg, &io);
        for i in 0..40i64 {
            log.append_as_leader(batch_with(1, i, 400).into(), 0, i).unwrap();
        }
        log.enforce_retention(100).unwrap();
        assert!(log.size_bytes() >= 5000 - 4096 && log.size_bytes() < 5000 + 4096, "size {}", log.size_bytes());
        assert!(log.segment_count() >= 1);
        assert!(log.read(0, 100, i64::MAX, true).is_err());
    }
}

#[test]
fn delete_records_before_moves_log_start_and_deletes_segments() {
    for io in test_backends() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = open(dir.path(), small_config(), &io);
        for i in 0..40i64 {
            log.append_as_leader(batch_with(1, i, 400).into(), 0, i).unwrap();
        }
        let segs = log.segment_count();
        assert_eq!(log.delete_records_before(25).unwrap(), 25);
        assert_eq!(log.log_start_offset(), 25);
        assert!(log.segment_count() < segs);
        assert!(log.segment_base_offsets()[0] <= 25);
        assert!(matches!(log.read(24, 100, i64::MAX, true), Err(LogError::OffsetOutOfRange { .. })));
        assert_eq!(batch_offsets(&log.read(25, 1, i64::MAX, true).unwrap().records), vec![(25, 25)]);
        assert_eq!(log.delete_records_before(1000).unwrap(), 40);
        assert_eq!(log.segment_count(), 1);
        drop(log);
        let mut log = open(dir.path(), small_config(), &io);
        log.set_log_start_offset(40);
        assert_eq!(log.log_start_offset(), 40);
        assert_eq!(log.append_as_leader(batch_with(1, 0, 1).into(), 0, 0).unwrap().base_offset, 40);
    }
}

#[test]
fn offset_for_timestamp_is_exact_for_uncompressed_batches() {
    for io in test_backends() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = open(dir.path(), small_config(), &io);
        // batch i holds 5 records with timestamps 100*i .. 100*i+4
        for i in 0..60i64 {
            log.append_as_leader(batch_with(5, i * 100, 60).into(), 0, 0).unwrap();
        }
        assert!(log.segment_count() > 2);
        assert_eq!(log.offset_for_timestamp(0).unwrap(), Some((0, 0)));
        assert_eq!(log.offset_for_timestamp(3).unwrap(), Some((3, 3)));
        assert_eq!(log.offset_for_timestamp(5).unwrap(), Some((5, 100)));
        assert_eq!(log.offset_for_timestamp(4202).unwrap(), Some((212, 4202)));
        assert_eq!(log.offset_for_timestamp(5904).unwrap(), Some((299, 5904)));
        assert_eq!(log.offset_for_timestamp(5905).unwrap(), None);
        assert_eq!(log.max_timestamp_offset().unwrap(), Some((299, 5904)));
        for ts in (0..5905).step_by(37) {
            let (off, found) = log.offset_for_timestamp(ts).unwrap().unwrap();
            let expect_off = if ts % 100 < 5 { (ts / 100) * 5 + ts % 100 } else { (ts / 100 + 1) * 5 };
            assert_eq!(off, expect_off, "ts {ts}");
            assert!(found >= ts);
        }
        log.delete_records_before(12).unwrap();
        assert_eq!(log.offset_for_timestamp(0).unwrap(), Some((12, 202)));
    }
}

#[test]
fn log_append_time_stamps_batches() {
    let io = test_backends().remove(0);
    let dir = tempfile::tempdir().unwrap();
    let cfg = LogConfig { message_timestamp_type_log_append: true, ..LogConfig::default() };
    let mut log = open(dir.path(), cfg, &io);
    let a = log.append_as_leader(batch_with(3, 5, 10).into(), 0, 777).unwrap();
    assert_eq!(a.log_append_time, 777);
    let r = log.read(0, 1 << 20, i64::MAX, false).unwrap();
    let h = BatchHeader::parse(&r.records).unwrap();
    assert!(h.is_log_append_time() && h.max_timestamp == 777 && crc_is_valid(&r.records));
    assert_eq!(log.offset_for_timestamp(700).unwrap(), Some((0, 777)));
}

#[test]
fn leader_append_writes_patched_headers_and_leaves_the_request_bytes_alone() {
    for log_append in [false, true] {
        for io in test_backends() {
            let dir = tempfile::tempdir().unwrap();
            let cfg = LogConfig { message_timestamp_type_log_append: log_append, ..LogConfig::default() };
            let mut log = open(dir.path(), cfg, &io);
            log.append_as_leader(batch_with(2, 5, 10).into(), 0, 100).unwrap();
            let mut three = batch_with(1, 10, 30);
            three.extend(batch_with(4, 20, 10));
            three.extend(batch_with(2, 30, 50));
            let request = Bytes::from(three.clone());
            let a = log.append_as_leader(request.clone(), 7, 999).unwrap();
            assert_eq!((a.base_offset, a.last_offset, a.batch_count), (2, 8, 3));
            assert!(request[..] == three[..], "the request buffer must not change");
            let r = log.read(2, 1 << 20, i64::MAX, false).unwrap();
            assert_eq!(r.records.len(), three.len());
            assert_eq!(batch_offsets(&r.records), vec![(2, 2), (3, 6), (7, 8)]);
            for ((_, written), (_, sent)) in BatchIter::new(&r.records).map(Result::unwrap).zip(BatchIter::new(&three).map(Result::unwrap)) {
                assert!(crc_is_valid(written), "{} {log_append}", io.name());
                let h = BatchHeader::parse(written).unwrap();
                assert_eq!(h.partition_leader_epoch, 7);
                assert_eq!(h.is_log_append_time(), log_append);
                if log_append {
                    assert_eq!(h.max_timestamp, 999);
                }
                // Everything after the header is the client's bytes, unchanged.
                assert_eq!(written[BATCH_HEADER_LEN..], sent[BATCH_HEADER_LEN..]);
            }
        }
    }
}

#[test]
fn oversized_and_corrupt_batches_are_rejected_with_kafka_errors() {
    let io = test_backends().remove(0);
    let dir = tempfile::tempdir().unwrap();
    let cfg = LogConfig { max_message_bytes: 200, ..LogConfig::default() };
    let mut log = open(dir.path(), cfg, &io);
    let err = log.append_as_leader(batch_with(1, 0, 300).into(), 0, 0).unwrap_err();
    assert!(matches!(err, LogError::Validation(ProduceValidationError::MessageTooLarge { max: 200, .. })), "{err}");
    let mut bad = batch_with(1, 0, 10);
    let last = bad.len() - 1;
    bad[last] ^= 1;
    let err = log.append_as_leader(bad.into(), 0, 0).unwrap_err();
    assert!(matches!(err, LogError::Validation(ProduceValidationError::CorruptMessage(_))), "{err}");
    assert_eq!(log.log_end_offset(), 0);
    assert_eq!(log.size_bytes(), 0);
}

#[test]
fn leader_epochs_are_persisted_reloaded_and_truncated() {
    for io in test_backends() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = open(dir.path(), LogConfig::default(), &io);
        log.append_as_leader(batch_with(2, 0, 10).into(), 0, 0).unwrap();
        log.append_as_leader(batch_with(2, 0, 10).into(), 0, 0).unwrap();
        log.append_as_leader(batch_with(2, 0, 10).into(), 3, 0).unwrap();
        log.append_as_leader(batch_with(2, 0, 10).into(), 5, 0).unwrap();
        assert_eq!(fs::read_to_string(dir.path().join("leader-epoch-checkpoint")).unwrap(), "0\n3\n0 0\n3 4\n5 6\n");
        assert_eq!(log.end_offset_for_epoch(0), Some((0, 4)));
        assert_eq!(log.end_offset_for_epoch(4), Some((3, 6)));
        assert_eq!(log.end_offset_for_epoch(5), Some((5, 8)));
        drop(log);
        let mut log = open(dir.path(), LogConfig::default(), &io);
        assert_eq!(log.latest_epoch(), Some(5));
        log.truncate_to(5).unwrap();
        assert_eq!(log.log_end_offset(), 4);
        assert_eq!(log.latest_epoch(), Some(0));
        assert_eq!(fs::read_to_string(dir.path().join("leader-epoch-checkpoint")).unwrap(), "0\n1\n0 0\n");
        assert_eq!(log.append_as_leader(batch_with(1, 0, 10).into(), 6, 0).unwrap().base_offset, 4);
        assert_eq!(log.end_offset_for_epoch(0), Some((0, 4)));
    }
}

#[test]
fn a_new_leader_starts_its_epoch_at_the_log_end_and_a_follower_drops_it_unwritten() {
    let io: Arc<dyn IoBackend> = Arc::new(crate::log::io::StdBackend);
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), LogConfig::default(), &io);
    log.append_as_leader(batch_with(2, 0, 10).into(), 1, 0).unwrap();
    // Leader in epoch 4 before any append in it: a follower that last fetched in epoch 2 (led
    // elsewhere) is told epoch 1 ends at 2, not that the epoch is unknown.
    log.start_leader_epoch(4).unwrap();
    log.start_leader_epoch(3).unwrap(); // never lowered
    assert_eq!(log.latest_epoch(), Some(4));
    assert_eq!(log.end_offset_for_epoch(2), Some((1, 2)));
    assert_eq!(log.end_offset_for_epoch(4), Some((4, 2)));
    // Its first append in the epoch adds nothing to the cache.
    log.append_as_leader(batch_with(1, 0, 10).into(), 4, 0).unwrap();
    assert_eq!(fs::read_to_string(dir.path().join("leader-epoch-checkpoint")).unwrap(), "0\n2\n1 0\n4 2\n");
    // Leader in epoch 6, then a follower before writing in it: truncating at the log end still
    // drops the unwritten epoch, so the follower no longer names it as its last.
    log.start_leader_epoch(6).unwrap();
    log.truncate_to(3).unwrap();
    assert_eq!((log.log_end_offset(), log.latest_epoch()), (3, Some(4)));
}

#[test]
fn leader_epochs_lost_before_a_flush_are_restored_from_the_batches() {
    let io: Arc<dyn IoBackend> = Arc::new(crate::log::io::StdBackend);
    let checkpoint = |d: &Path| d.join("leader-epoch-checkpoint");
    // A small segment size so that epoch 0 starts in a rolled segment and 3 and 5 in the active one.
    let cfg = LogConfig { segment_bytes: 2048, ..LogConfig::default() };
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), cfg.clone(), &io);
    log.append_as_leader(batch_with(2, 0, 1500).into(), 0, 0).unwrap();
    log.append_as_leader(batch_with(2, 0, 10).into(), 3, 0).unwrap();
    log.append_as_leader(batch_with(2, 0, 10).into(), 3, 0).unwrap();
    log.append_as_leader(batch_with(2, 0, 10).into(), 5, 0).unwrap();
    assert!(log.segment_base_offsets().len() >= 2, "{:?}", log.segment_base_offsets());
    drop(log);
    // What a crash can leave: the checkpoint as it was at the roll (epoch 0 only), or none.
    for lost in ["0\n1\n0 0\n", ""] {
        if lost.is_empty() {
            fs::remove_file(checkpoint(dir.path())).unwrap();
        } else {
            fs::write(checkpoint(dir.path()), lost).unwrap();
        }
        let log = open(dir.path(), cfg.clone(), &io);
        assert_eq!(log.latest_epoch(), Some(5), "after {lost:?}");
        assert_eq!(log.end_offset_for_epoch(3), Some((3, 6)), "after {lost:?}");
        drop(log);
        // The restored entries were written back.
        let text = fs::read_to_string(checkpoint(dir.path())).unwrap();
        assert!(text.ends_with("3 2\n5 6\n"), "after {lost:?}: {text:?}");
    }
}

#[test]
fn follower_append_keeps_offsets_and_rejects_going_backwards() {
    for io in test_backends() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = open(dir.path(), LogConfig::default(), &io);
        let mut b = batch_with(3, 0, 10);
        set_base_offset(&mut b, 100);
        set_partition_leader_epoch(&mut b, 2);
        let a = log.append_as_follower(b.clone().into()).unwrap();
        assert_eq!((a.base_offset, a.last_offset), (100, 102));
        assert_eq!(log.log_start_offset(), 100);
        assert_eq!(log.segment_base_offsets(), vec![100]);
        assert_eq!(log.latest_epoch(), Some(2));
        assert!(matches!(log.append_as_follower(b.clone().into()), Err(LogError::NonMonotonicOffset { .. })));
        let mut c = batch_with(1, 0, 10);
        set_base_offset(&mut c, 110);
        log.append_as_follower(c.into()).unwrap();
        assert_eq!(log.log_end_offset(), 111);
        assert_eq!(batch_offsets(&log.read(105, 1000, i64::MAX, false).unwrap().records), vec![(110, 110)]);
        drop(log);
        assert_eq!(open(dir.path(), LogConfig::default(), &io).log_end_offset(), 111);
    }
}

#[test]
fn truncate_below_log_start_restarts_the_log_there() {
    let io = test_backends().remove(0);
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), small_config(), &io);
    for i in 0..30 {
        log.append_as_leader(batch_with(1, i, 400).into(), 0, i).unwrap();
    }
    log.truncate_to(12).unwrap();
    assert_eq!(log.log_end_offset(), 12);
    assert_eq!(read_all(&log).len(), 12);
    log.delete_records_before(10).unwrap();
    log.truncate_to(5).unwrap();
    assert_eq!((log.log_start_offset(), log.log_end_offset(), log.segment_count()), (5, 5, 1));
}

#[test]
fn delete_files_removes_the_partition_directory() {
    let io = test_backends().remove(0);
    let parent = tempfile::tempdir().unwrap();
    let dir = parent.path().join("t-0");
    let mut log = open(&dir, LogConfig::default(), &io);
    log.append_as_leader(batch_with(1, 0, 1).into(), 0, 0).unwrap();
    log.delete_files().unwrap();
    assert!(!dir.exists());
}

#[derive(Debug, Clone)]
enum Step {
    Append { batches: u8, records: u8, value_len: u16 },
    Reopen,
    TearTail(u16),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (1u8..3, 1u8..5, 0u16..600).prop_map(|(batches, records, value_len)| Step::Append { batches, records, value_len }),
        1 => Just(Step::Reopen),
        1 => (1u16..200).prop_map(Step::TearTail),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn appends_and_reopens_never_lose_acknowledged_batches(steps in proptest::collection::vec(step(), 1..40)) {
        for io in test_backends() {
            let dir = tempfile::tempdir().unwrap();
            let cfg = LogConfig { segment_bytes: 2048, index_interval_bytes: 128, ..LogConfig::default() };
            let mut log = open(dir.path(), cfg.clone(), &io);
            let mut acked: Vec<(i64, i64)> = Vec::new();
            for s in &steps {
                match s {
                    Step::Append { batches, records, value_len } => {
                        let mut buf = Vec::new();
                        for _ in 0..*batches {
                            buf.extend(batch_with(*records as usize, 1000, *value_len as usize));
                        }
                        let a = log.append_as_leader(buf.clone().into(), 0, 1000).unwrap();
                        prop_assert_eq!(a.base_offset, acked.last().map_or(0, |b| b.1 + 1));
                        acked.extend(batch_offsets(&log.read(a.base_offset, 1 << 20, i64::MAX, false).unwrap().records));
                    }
                    Step::Reopen => {
                        drop(log);
                        log = open(dir.path(), cfg.clone(), &io);
                    }
                    Step::TearTail(n) => {
                        let path = active_log_path(&log);
                        drop(log);
                        append_bytes(&path, &batch_with(3, 0, 100)[..*n as usize % 120 + 1]);
                        log = open(dir.path(), cfg.clone(), &io);
                    }
                }
                prop_assert_eq!(log.log_end_offset(), acked.last().map_or(0, |b| b.1 + 1));
            }
            let got = read_all(&log);
            prop_assert_eq!(&got, &acked);
            for w in got.windows(2) {
                prop_assert_eq!(w[0].1 + 1, w[1].0, "offsets must be contiguous");
            }
        }
    }
}

/// Wraps a backend and, on demand, fails writes and/or fsyncs, or reads zeros from a position
/// on (`stale`), as a page cache holding stale pages over what the disk has would, until the
/// file's cached pages are dropped (with `stale_stuck`, even then).
#[derive(Debug, Clone, Default)]
struct Faults {
    write: Arc<std::sync::atomic::AtomicBool>,
    sync: Arc<std::sync::atomic::AtomicBool>,
    stale: Arc<parking_lot::Mutex<Option<u64>>>,
    stale_stuck: Arc<std::sync::atomic::AtomicBool>,
}

impl Faults {
    fn set(flag: &std::sync::atomic::AtomicBool, on: bool) {
        flag.store(on, std::sync::atomic::Ordering::SeqCst);
    }
    fn check(flag: &std::sync::atomic::AtomicBool) -> std::io::Result<()> {
        if flag.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(std::io::Error::other("injected I/O failure"));
        }
        Ok(())
    }
}

#[derive(Debug)]
struct FaultyBackend(Faults, Arc<dyn IoBackend>);

impl FaultyBackend {
    fn over_std(faults: &Faults) -> Arc<dyn IoBackend> {
        Arc::new(FaultyBackend(faults.clone(), Arc::new(crate::log::io::StdBackend)))
    }
}

#[derive(Debug)]
struct FaultyFile {
    inner: Box<dyn crate::log::SegmentFile>,
    faults: Faults,
}

impl IoBackend for FaultyBackend {
    fn name(&self) -> &'static str {
        "faulty"
    }
    fn open(&self, path: &Path) -> std::io::Result<Box<dyn crate::log::SegmentFile>> {
        Ok(Box::new(FaultyFile { inner: self.1.open(path)?, faults: self.0.clone() }))
    }
}

impl crate::log::SegmentFile for FaultyFile {
    fn write_at(&self, pos: u64, data: &[bytes::Bytes]) -> std::io::Result<()> {
        Faults::check(&self.faults.write)?;
        self.inner.write_at(pos, data)
    }
    fn read_at(&self, pos: u64, len: usize) -> std::io::Result<bytes::Bytes> {
        let b = self.inner.read_at(pos, len)?;
        match *self.faults.stale.lock() {
            Some(from) if pos + len as u64 > from => {
                let mut v = b.to_vec();
                v[from.saturating_sub(pos) as usize..].fill(0);
                Ok(v.into())
            }
            _ => Ok(b),
        }
    }
    fn sync_data(&self) -> std::io::Result<()> {
        Faults::check(&self.faults.sync)?;
        self.inner.sync_data()
    }
    fn set_len(&self, len: u64) -> std::io::Result<()> {
        self.inner.set_len(len)
    }
    fn len(&self) -> std::io::Result<u64> {
        self.inner.len()
    }
    fn std_file(&self) -> &std::fs::File {
        self.inner.std_file()
    }
    fn drop_cached(&self, from: u64) {
        if !self.faults.stale_stuck.load(std::sync::atomic::Ordering::SeqCst) {
            *self.faults.stale.lock() = None;
        }
        self.inner.drop_cached(from);
    }
}

#[test]
fn failed_write_or_fsync_poisons_the_log_until_reopen() {
    let faults = Faults::default();
    let io = FaultyBackend::over_std(&faults);
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), LogConfig::default(), &io);
    log.append_as_leader(batch_with(2, 0, 10).into(), 0, 0).unwrap();
    Faults::set(&faults.write, true);
    match log.append_as_leader(batch_with(1, 0, 10).into(), 0, 0) {
        Err(LogError::Io { path, op, .. }) => {
            assert!(path.ends_with("00000000000000000000.log"), "{path:?}");
            assert_eq!(op, "append");
        }
        other => panic!("expected an I/O error, got {other:?}"),
    }
    Faults::set(&faults.write, false);
    assert!(log.is_poisoned());
    assert!(matches!(log.append_as_leader(batch_with(1, 0, 10).into(), 0, 0), Err(LogError::Poisoned { .. })));
    assert!(matches!(log.flush(), Err(LogError::Poisoned { .. })));
    drop(log);

    let mut log = open(dir.path(), LogConfig::default(), &io);
    Faults::set(&faults.sync, true);
    assert!(matches!(log.flush(), Err(LogError::Io { op: "fsync", .. })));
    Faults::set(&faults.sync, false);
    assert!(matches!(log.append_as_leader(batch_with(1, 0, 10).into(), 0, 0), Err(LogError::Poisoned { .. })));
    drop(log);
    let mut log = open(dir.path(), LogConfig::default(), &io);
    assert_eq!(log.log_end_offset(), 2);
    assert_eq!(log.append_as_leader(batch_with(1, 0, 10).into(), 0, 0).unwrap().base_offset, 2);
}

#[test]
fn flush_messages_marks_the_append_that_reaches_it_without_fsyncing_inline() {
    let faults = Faults::default();
    let io = FaultyBackend::over_std(&faults);
    let dir = tempfile::tempdir().unwrap();
    let cfg = LogConfig { flush_interval_messages: 3, ..LogConfig::default() };
    let mut log = open(dir.path(), cfg, &io);
    // Any fsync in an append would fail and poison the log.
    Faults::set(&faults.sync, true);
    let due: Vec<bool> = [2, 2, 1, 1, 1, 5].iter().map(|&n| log.append_as_leader(batch_with(n, 0, 10).into(), 0, 0).unwrap().flush_due).collect();
    // Records so far: 2 | 4 (due, count starts over) | 1 | 2 | 3 (due) | 5 (due).
    assert_eq!(due, [false, true, false, false, true, true]);
    assert!(!log.is_poisoned(), "the appends themselves never fsynced");
    // The caller's fsync is the one that runs (and here fails).
    let point = log.sync_point().unwrap();
    assert!(matches!(point.run(), Err(LogError::Io { op: "fsync", .. })));
}

#[test]
fn flush_ms_marks_the_first_append_after_the_interval() {
    let dir = tempfile::tempdir().unwrap();
    let io: Arc<dyn IoBackend> = Arc::new(crate::log::io::StdBackend);
    let cfg = LogConfig { flush_interval_ms: 1_000, ..LogConfig::default() };
    let mut log = open(dir.path(), cfg, &io);
    let mut due = |now_ms| log.append_as_leader(batch_with(1, 0, 10).into(), 0, now_ms).unwrap().flush_due;
    // The interval counts from the log's opening (wall clock, after time 0), then from the
    // append that was due.
    let t = i64::MAX / 2;
    assert_eq!([due(0), due(t), due(t + 999), due(t + 1_000)], [false, true, false, true]);
}

#[test]
fn a_failed_flush_of_a_rolled_segment_poisons_the_log() {
    let faults = Faults::default();
    let io = FaultyBackend::over_std(&faults);
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), small_config(), &io);
    Faults::set(&faults.sync, true);
    // Two batches of ~2.5 KiB in 4 KiB segments: the second rolls the first away.
    log.append_as_leader(batch_with(2, 0, 1200).into(), 0, 0).unwrap();
    log.append_as_leader(batch_with(2, 0, 1200).into(), 0, 0).unwrap();
    assert_eq!(log.segment_count(), 2, "the roll itself does not wait for the fsync");
    // The next roll (or any flush) waits for the failed one and reports it.
    let r = log.append_as_leader(batch_with(2, 0, 1200).into(), 0, 0);
    assert!(matches!(r, Err(LogError::Io { op: "fsync", .. })), "{r:?}");
    assert!(log.is_poisoned());
    Faults::set(&faults.sync, false);
    assert!(matches!(log.append_as_leader(batch_with(1, 0, 10).into(), 0, 0), Err(LogError::Poisoned { .. })));
    drop(log);
    let log = open(dir.path(), small_config(), &io);
    assert_eq!(log.log_end_offset(), 4, "both acknowledged batches are there after a reopen");
}

#[test]
fn a_flush_waits_for_the_rolled_segment_before_syncing_the_active_one() {
    for io in test_backends() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = open(dir.path(), small_config(), &io);
        for i in 0..6 {
            log.append_as_leader(batch_with(2, i, 1200).into(), 0, i).unwrap();
        }
        assert!(log.pending_flush.is_some(), "{}: the last roll's flush is tracked", io.name());
        log.flush().unwrap();
        assert!(log.pending_flush.is_none(), "{}", io.name());
    }
}

/// Cuts `bytes` off the end of segment `base` in `dir`, as an OS crash before its fsync would.
fn tear_segment(dir: &Path, base: i64, bytes: u64) {
    let path = dir.join(format!("{base:020}.log"));
    let f = fs::OpenOptions::new().write(true).open(&path).unwrap();
    let len = f.metadata().unwrap().len();
    f.set_len(len - bytes).unwrap();
}

#[test]
fn a_torn_rolled_segment_is_cut_and_the_segments_after_it_are_dropped() {
    for io in test_backends() {
        for check in [ActiveCheck::Crc, ActiveCheck::Structure] {
            let dir = tempfile::tempdir().unwrap();
            let mut log = open(dir.path(), small_config(), &io);
            for i in 0..7 {
                log.append_as_leader(batch_with(2, i, 1200).into(), 0, i).unwrap();
            }
            let bases = log.segment_base_offsets();
            assert!(bases.len() >= 3, "{bases:?}");
            let (last_rolled, active) = (bases[bases.len() - 2], bases[bases.len() - 1]);
            // The roll's flush runs on the flusher thread; were it still running, it could
            // restore the size cut below (its trim of preallocated blocks).
            log.write_out().unwrap();
            drop(log);
            let active_bytes = fs::read(dir.path().join(format!("{active:020}.log"))).unwrap();
            tear_segment(dir.path(), last_rolled, 100);

            let log = PartitionLog::open_with(dir.path(), small_config(), io.clone(), check).unwrap();
            let what = format!("{} {check:?}", io.name());
            // The torn last batch of the rolled segment is gone, and with it the active segment.
            assert_eq!(log.segment_base_offsets(), bases[..bases.len() - 1].to_vec(), "{what}");
            assert!(!dir.path().join(format!("{active:020}.log")).exists(), "{what}");
            // Kept whole beside the others, under a name the next open does not take for a segment.
            let kept = kept_files(dir.path(), &format!("{active:020}.log.cut-all-"));
            assert_eq!(kept.len(), 1, "{what}: {kept:?}");
            assert!(fs::read(&kept[0]).unwrap() == active_bytes, "{what}: kept segment differs");
            drop(log);
            let again = PartitionLog::open_with(dir.path(), small_config(), io.clone(), check).unwrap();
            assert_eq!(again.segment_base_offsets(), bases[..bases.len() - 1].to_vec(), "{what}: reopened");
            let log = again;
            assert_eq!(log.log_end_offset(), active - 2, "{what}");
            let all = read_all(&log);
            assert_eq!(all.len() as i64, (active - 2) / 2, "{what}");
            assert!(all.windows(2).all(|w| w[1].0 == w[0].1 + 1), "{what}: no gaps: {all:?}");
        }
    }
}

#[test]
fn a_growing_segment_reserves_blocks_ahead_and_a_roll_gives_them_back() {
    use std::os::unix::fs::MetadataExt;
    for io in test_backends() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = LogConfig { segment_bytes: 3 << 20, ..LogConfig::default() };
        let mut log = open(dir.path(), cfg.clone(), &io);
        let first = dir.path().join("00000000000000000000.log");
        let mut n = 0;
        while fs::metadata(&first).unwrap().len() < (1 << 20) + (64 << 10) {
            log.append_as_leader(batch_with(16, n, 1000).into(), 0, n).unwrap();
            n += 1;
        }
        let meta = fs::metadata(&first).unwrap();
        if meta.blocks() * 512 < meta.len() + (4 << 20) {
            eprintln!("{}: no preallocation on this filesystem ({} blocks); skipping", io.name(), meta.blocks());
            return;
        }
        while log.segment_count() < 2 {
            log.append_as_leader(batch_with(16, n, 1000).into(), 0, n).unwrap();
            n += 1;
        }
        log.flush().unwrap(); // waits for the rolled segment's flush
        let meta = fs::metadata(&first).unwrap();
        assert!(meta.blocks() * 512 < meta.len() + (64 << 10), "{}: {} bytes, {} blocks", io.name(), meta.len(), meta.blocks());
        let before = read_all(&log);
        drop(log);
        let log = PartitionLog::open_with(dir.path(), cfg, io.clone(), ActiveCheck::Crc).unwrap();
        assert_eq!(read_all(&log), before, "{}", io.name());
    }
}

#[test]
fn index_entries_lost_with_a_crash_are_restored_on_reopen() {
    for io in test_backends() {
        for check in [ActiveCheck::Crc, ActiveCheck::Structure] {
            let dir = tempfile::tempdir().unwrap();
            let cfg = LogConfig { index_interval_bytes: 128, ..LogConfig::default() };
            let mut log = open(dir.path(), cfg.clone(), &io);
            for i in 0..300 {
                log.append_as_leader(batch_with(1, i, 100).into(), 0, i).unwrap();
            }
            let (offsets, times) = {
                let seg = log.segments.last().unwrap();
                (seg.offset_index().entries().to_vec(), seg.time_index().entries().to_vec())
            };
            let what = format!("{} {check:?}", io.name());
            assert!(offsets.len() > crate::log::index::PENDING_WRITE_BYTES / 8, "{what}: {} entries", offsets.len());
            let before = read_all(&log);
            drop(log); // no flush: entries still in memory are lost, as with kill -9
            let on_file = fs::metadata(dir.path().join("00000000000000000000.index")).unwrap().len();
            assert!(on_file < offsets.len() as u64 * 8, "{what}: the crash lost the unwritten entries");

            let log = PartitionLog::open_with(dir.path(), cfg.clone(), io.clone(), check).unwrap();
            let seg = log.segments.last().unwrap();
            assert_eq!(seg.offset_index().entries(), &offsets[..], "{what}");
            assert_eq!(seg.time_index().entries(), &times[..], "{what}");
            assert_eq!(read_all(&log), before, "{what}");
        }
    }
}

#[test]
fn index_entries_reach_the_file_before_the_batches_behind_them_span_a_few_mib() {
    use crate::log::segment::INDEX_WRITE_SPAN;
    for io in test_backends() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = open(dir.path(), LogConfig::default(), &io);
        // Batches of ~200 KiB, as a loaded producer sends: each gets an index entry, and 60 of
        // them are far from a full group of entries but span 12 MiB.
        let batch = 200_000;
        for i in 0..60 {
            log.append_as_leader(batch_with(1, i, batch).into(), 0, i).unwrap();
        }
        let size = log.segments.last().unwrap().size();
        assert!(log.segments.last().unwrap().offset_index().entries().len() < crate::log::index::PENDING_WRITE_BYTES / 8);
        drop(log); // no flush, as with kill -9
        let on_file = fs::read(dir.path().join("00000000000000000000.index")).unwrap();
        let last = on_file.chunks_exact(8).last().map_or(0, |e| u64::from(u32::from_be_bytes([e[4], e[5], e[6], e[7]])));
        // What a start after the kill re-reads: from the last entry on file to the end, at most
        // the span and the batch that crossed it, here a third of the log.
        let behind = size - last;
        assert!(INDEX_WRITE_SPAN * 2 < size, "the test's log is too short to show the bound");
        assert!(behind <= INDEX_WRITE_SPAN + batch as u64 + 100, "{}: {behind} bytes behind the last entry on file", io.name());
    }
}
