//! Compaction tests on a real partition directory (both I/O backends).

use std::sync::Arc;

use super::*;
use crate::log::io::test_backends;
use crate::log::{IoBackend, LogConfig};
use crate::protocol::record_batch::{encode_uncompressed_batch, BatchIter, SimpleRecord};

fn small() -> LogConfig {
    LogConfig { segment_bytes: 600, index_interval_bytes: 128, ..LogConfig::default() }
}

fn append(log: &mut PartitionLog, key: &str, value: Option<&str>, ts: i64) {
    let b = encode_uncompressed_batch(&[SimpleRecord { timestamp: ts, key: Some(key.as_bytes()), value: value.map(str::as_bytes) }]);
    log.append_as_leader(b.into(), 0, ts).unwrap();
}

/// (offset, key, value) of every record, in log order.
fn records(log: &PartitionLog) -> Vec<(i64, String, Option<String>)> {
    let mut out = Vec::new();
    let mut next = log.log_start_offset();
    while next < log.log_end_offset() {
        let r = log.read(next, 1 << 20, i64::MAX, true).unwrap();
        if r.records.is_empty() {
            break;
        }
        for (h, bytes) in BatchIter::new(&r.records).map(Result::unwrap) {
            let mut b = Bytes::copy_from_slice(bytes);
            for rec in RecordBatchDecoder::decode(&mut b).unwrap().records {
                if rec.offset >= next {
                    out.push((
                        rec.offset,
                        String::from_utf8(rec.key.unwrap().to_vec()).unwrap(),
                        rec.value.map(|v| String::from_utf8(v.to_vec()).unwrap()),
                    ));
                }
            }
            next = h.last_offset() + 1;
        }
    }
    out
}

fn open(dir: &std::path::Path, io: &Arc<dyn IoBackend>) -> PartitionLog {
    PartitionLog::open(dir, small(), io.clone()).unwrap()
}

#[test]
fn compaction_keeps_the_latest_value_per_key_and_never_the_active_segment() {
    for io in test_backends() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = open(dir.path(), &io);
        for round in 0..6 {
            for k in 0..4 {
                append(&mut log, &format!("k{k}"), Some(&format!("v{round}")), 1000 + round);
            }
        }
        let segments = log.segment_base_offsets();
        assert!(segments.len() >= 3, "test needs several segments: {segments:?}");
        let active_base = *segments.last().unwrap();
        let active_before: Vec<_> = records(&log).into_iter().filter(|r| r.0 >= active_base).collect();
        let stats = log.clean(&CleanerConfig::default(), 0, 10_000).unwrap().expect("cleaned");
        assert!(stats.records_removed > 0 && stats.bytes_after < stats.bytes_before, "{stats:?}");
        let after = records(&log);
        let active_after: Vec<_> = after.iter().filter(|r| r.0 >= active_base).cloned().collect();
        assert_eq!(active_after, active_before, "active segment untouched");
        for k in 0..4 {
            let key = format!("k{k}");
            let latest = after.iter().rev().find(|r| r.1 == key).unwrap();
            assert_eq!(latest.2.as_deref(), Some("v5"), "{key}");
            let in_rolled = after.iter().filter(|r| r.1 == key && r.0 < active_base).count();
            assert!(in_rolled <= 1, "{key} appears {in_rolled} times in cleaned segments");
        }
        assert!(after.windows(2).all(|w| w[0].0 < w[1].0), "offsets keep their order");
        assert_eq!(log.log_end_offset(), 24);
        // Reopening (index rebuild, leftover handling) reads the same records.
        drop(log);
        let log = open(dir.path(), &io);
        assert_eq!(records(&log), after);
    }
}

#[test]
fn tombstones_survive_delete_retention_then_disappear() {
    for io in test_backends() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = open(dir.path(), &io);
        append(&mut log, "gone", Some("x"), 1000);
        append(&mut log, "gone", None, 1001);
        for i in 0..12 {
            append(&mut log, &format!("filler{i}"), Some("y"), 1002 + i);
        }
        let config = CleanerConfig { delete_retention_ms: 5000, ..CleanerConfig::default() };
        log.clean(&config, 0, 2000).unwrap();
        let gone: Vec<_> = records(&log).into_iter().filter(|r| r.1 == "gone").collect();
        assert_eq!(gone, vec![(1, "gone".to_string(), None)], "only the tombstone is left while it is young");
        log.clean(&config, 0, 100_000).unwrap();
        assert!(records(&log).iter().all(|r| r.1 != "gone"), "expired tombstone removed");
    }
}

#[test]
fn dirty_ratio_and_compaction_lag_gate_the_pass() {
    for io in test_backends() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = open(dir.path(), &io);
        for i in 0..20 {
            append(&mut log, "same", Some(&format!("v{i}")), 1000 + i);
        }
        let lagged = CleanerConfig { min_compaction_lag_ms: 60_000, ..CleanerConfig::default() };
        assert_eq!(log.clean(&lagged, 0, 2000).unwrap(), None, "everything is inside the lag");
        let stats = log.clean(&CleanerConfig::default(), 0, 2000).unwrap().unwrap();
        assert_eq!(log.clean(&CleanerConfig::default(), stats.clean_end, 2000).unwrap(), None, "nothing dirty since");
    }
}
