//! Measures the partition log's append and read throughput on each I/O backend, so the choice
//! of default backend rests on numbers from this machine. Run:
//! `cargo run --release --example log_append -- [batches] [records-per-batch] [value-bytes]`.

use std::sync::Arc;
use std::time::Instant;

use sluice::log::io::{StdBackend, UringBackend, WritePath};
use sluice::log::{IoBackend, LogConfig, PartitionLog};
use sluice::protocol::record_batch::{encode_uncompressed_batch, SimpleRecord};

fn main() {
    let args: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let batches = *args.first().unwrap_or(&20_000);
    let per_batch = *args.get(1).unwrap_or(&16);
    let value_len = *args.get(2).unwrap_or(&1024);
    let value = vec![b'x'; value_len];
    let records: Vec<SimpleRecord> =
        (0..per_batch).map(|_| SimpleRecord { timestamp: 1_700_000_000_000, key: None, value: Some(&value) }).collect();
    let batch = bytes::Bytes::from(encode_uncompressed_batch(&records));
    let mut backends: Vec<(&str, Arc<dyn IoBackend>)> = vec![("std", Arc::new(StdBackend))];
    for (label, writes) in [("uring", WritePath::Ring), ("auto", WritePath::Auto)] {
        match UringBackend::new(writes) {
            Ok(b) => backends.push((label, Arc::new(b))),
            Err(e) => eprintln!("io_uring unavailable: {e}"),
        }
    }
    for round in 0..3 {
        for (label, io) in &backends {
            let dir = tempfile::tempdir().expect("tempdir");
            let mut log = PartitionLog::open(dir.path(), LogConfig::default(), io.clone()).expect("open");
            let started = Instant::now();
            for _ in 0..batches {
                log.append_as_leader(batch.clone(), 0, 1_700_000_000_000).expect("append");
            }
            let append = started.elapsed();
            let started = Instant::now();
            let mut offset = 0;
            let end = log.log_end_offset();
            while offset < end {
                let r = log.read(offset, 1 << 20, end, true).expect("read");
                let mut last = offset;
                for (h, _) in sluice::protocol::record_batch::BatchIter::new(&r.records).flatten() {
                    last = h.next_offset();
                }
                offset = last;
            }
            let read = started.elapsed();
            let bytes = (batch.len() * batches) as f64;
            println!(
                "round {round} backend {:<8} append {:>8.1} MiB/s {:>9.0} batches/s   read {:>8.1} MiB/s",
                label,
                bytes / append.as_secs_f64() / (1 << 20) as f64,
                batches as f64 / append.as_secs_f64(),
                bytes / read.as_secs_f64() / (1 << 20) as f64,
            );
        }
    }
}
