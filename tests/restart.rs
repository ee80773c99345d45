//! Durability across restarts of the real binary: clean stop, kill -9, and DeleteRecords.

mod common;

use bytes::Bytes;
use common::{Broker, Client};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::RecordBatchDecoder;

fn name(s: &str) -> TopicName {
    common::topic_name(s)
}

fn batch(first: usize, n: usize) -> Bytes {
    let recs: Vec<common::Rec> = (first..first + n)
        .map(|i| common::Rec { key: Some(format!("k{i}")), value: value(i), timestamp: 1_700_000_000_000 + i as i64 })
        .collect();
    common::encode_batch(&recs, None)
}

fn create(c: &mut Client, topic: &str, configs: &[(&str, &str)]) {
    let t = create_topics_request::CreatableTopic::default()
        .with_name(name(topic))
        .with_num_partitions(1)
        .with_replication_factor(1)
        .with_configs(
            configs
                .iter()
                .map(|(k, v)| {
                    create_topics_request::CreatableTopicConfig::default()
                        .with_name(StrBytes::from_string(k.to_string()))
                        .with_value(Some(StrBytes::from_string(v.to_string())))
                })
                .collect(),
        );
    let r = c.call(&CreateTopicsRequest::default().with_topics(vec![t]), 7);
    assert_eq!(r.topics[0].error_code, 0);
}

fn produce(c: &mut Client, topic: &str, data: Bytes) -> i64 {
    let req = ProduceRequest::default().with_acks(-1).with_timeout_ms(5000).with_topic_data(vec![
        produce_request::TopicProduceData::default()
            .with_name(name(topic))
            .with_partition_data(vec![produce_request::PartitionProduceData::default().with_index(0).with_records(Some(data))]),
    ]);
    let r = c.call(&req, 9);
    let p = &r.responses[0].partition_responses[0];
    assert_eq!(p.error_code, 0);
    p.base_offset
}

fn offsets(c: &mut Client, topic: &str, ts: i64) -> i64 {
    let req = ListOffsetsRequest::default().with_replica_id(BrokerId(-1)).with_topics(vec![
        list_offsets_request::ListOffsetsTopic::default()
            .with_name(name(topic))
            .with_partitions(vec![list_offsets_request::ListOffsetsPartition::default().with_partition_index(0).with_timestamp(ts)]),
    ]);
    let r = c.call(&req, 7);
    let p = &r.topics[0].partitions[0];
    assert_eq!(p.error_code, 0);
    p.offset
}

/// One fetch of up to 1 MiB from partition 0 at `offset`, without waiting.
fn fetch(c: &mut Client, topic: &str, offset: i64) -> fetch_response::PartitionData {
    let req = FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(0)
        .with_max_bytes(1 << 20)
        .with_session_epoch(-1)
        .with_topics(vec![fetch_request::FetchTopic::default().with_topic(name(topic)).with_partitions(vec![
            fetch_request::FetchPartition::default().with_partition(0).with_fetch_offset(offset).with_partition_max_bytes(1 << 20),
        ])]);
    let mut r = c.call(&req, 12);
    let p = r.responses.remove(0).partitions.remove(0);
    assert_eq!(p.error_code, 0);
    p
}

/// Reads every record from `from` to the high watermark: (offset, key, value).
fn read_all(c: &mut Client, topic: &str, from: i64) -> Vec<(i64, String, String)> {
    let mut out = Vec::new();
    let mut offset = from;
    loop {
        let p = fetch(c, topic, offset);
        let mut data = p.records.clone().unwrap_or_default();
        if data.is_empty() {
            return out;
        }
        for set in RecordBatchDecoder::decode_all(&mut data).unwrap() {
            for r in set.records {
                if r.offset >= offset {
                    out.push((
                        r.offset,
                        String::from_utf8(r.key.unwrap().to_vec()).unwrap(),
                        String::from_utf8(r.value.unwrap().to_vec()).unwrap(),
                    ));
                }
            }
        }
        offset = out.last().map(|(o, _, _)| o + 1).unwrap_or(offset);
        if offset >= p.high_watermark {
            return out;
        }
    }
}

/// ~1 KiB values so a few thousand records span several 1 MiB segments (Kafka's minimum).
fn value(i: usize) -> String {
    format!("value-{i}-{}", "x".repeat(1000))
}

fn expected(range: std::ops::Range<usize>) -> Vec<(i64, String, String)> {
    range.map(|i| (i as i64, format!("k{i}"), value(i))).collect()
}

/// Every restart test runs on each log I/O backend: std, io_uring for every operation, the
/// default (io_uring, with appends inline where the filesystem would hand them to a kernel
/// thread), the first three with direct-I/O appends (the default), and the default with every
/// append through the page cache.
const BACKENDS: [&str; 4] = ["log.io.backend=std", "log.io.backend=uring", "log.io.backend=auto", "log.io.direct=false"];

/// Walks the batch lengths of a `.log` file and checks that the last batch ends where the file
/// does: no zero padding or other bytes after it.
fn assert_ends_at_last_batch(path: &std::path::Path, what: &str) {
    let bytes = std::fs::read(path).unwrap();
    let mut pos = 0usize;
    while pos < bytes.len() {
        assert!(pos + 12 <= bytes.len(), "{what}: {} ends with {} stray bytes", path.display(), bytes.len() - pos);
        let len = i32::from_be_bytes(bytes[pos + 8..pos + 12].try_into().unwrap());
        assert!(len >= 49, "{what}: {} holds a batch length of {len} at {pos}", path.display());
        pos += 12 + len as usize;
    }
    assert_eq!(pos, bytes.len(), "{what}: {} ends inside a batch", path.display());
}

#[test]
fn records_survive_a_clean_restart_across_segments() {
    for backend in BACKENDS {
        clean_restart_across_segments(backend);
    }
}

fn clean_restart_across_segments(backend: &str) {
    let b = Broker::start(&[backend]);
    let mut c = b.connect();
    create(&mut c, "t", &[("segment.bytes", "1048576")]);
    for i in 0..300 {
        assert_eq!(produce(&mut c, "t", batch(i * 10, 10)), (i * 10) as i64);
    }
    let dir = b.stop();
    let segments = std::fs::read_dir(dir.path().join("data/t-0"))
        .unwrap()
        .filter(|e| e.as_ref().unwrap().path().extension().map(|x| x == "log").unwrap_or(false))
        .count();
    assert!(segments > 2, "expected several segments, got {segments}");
    // The stop wrote out the index entries held in memory: each ~10 KiB batch of the active
    // segment has one (they wait for 1 KiB of them, or a flush, to be written).
    let data = dir.path().join("data/t-0");
    for base in segment_bases(&data) {
        assert_ends_at_last_batch(&data.join(format!("{base:020}.log")), backend);
    }
    let active = *segment_bases(&data).last().unwrap();
    for (ext, entry) in [("index", 8), ("timeindex", 12)] {
        let len = std::fs::metadata(data.join(format!("{active:020}.{ext}"))).unwrap().len();
        assert!(len > 0 && len % entry == 0, "{backend}: .{ext} of the active segment holds {len} bytes");
    }
    let b = Broker::start_in(dir, &[backend]);
    let mut c = b.connect();
    assert_eq!(offsets(&mut c, "t", -2), 0);
    assert_eq!(offsets(&mut c, "t", -1), 3000);
    assert_eq!(read_all(&mut c, "t", 0), expected(0..3000));
    // Appends continue at the right offset.
    assert_eq!(produce(&mut c, "t", batch(3000, 1)), 3000);
}

/// Pages of the file resident in the page cache, and pages in all.
fn resident_pages(path: &std::path::Path) -> (usize, usize) {
    let pages = residency(path);
    (pages.iter().filter(|&&r| r).count(), pages.len())
}

/// Whether each page of the file is in the page cache (mmap + mincore).
fn residency(path: &std::path::Path) -> Vec<bool> {
    use std::os::fd::AsRawFd;
    let file = std::fs::File::open(path).unwrap();
    let len = file.metadata().unwrap().len() as usize;
    let pages = len.div_ceil(4096);
    // SAFETY: a shared read-only mapping of an open file, unmapped before returning; mincore
    // writes one byte per page into a vector of exactly that many bytes.
    unsafe {
        let map = libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ, libc::MAP_SHARED, file.as_raw_fd(), 0);
        assert_ne!(map, libc::MAP_FAILED);
        let mut vec = vec![0u8; pages];
        assert_eq!(libc::mincore(map, len, vec.as_mut_ptr()), 0);
        libc::munmap(map, len);
        vec.iter().map(|&b| b & 1 == 1).collect()
    }
}

/// Whether the kernel answers `cachestat(2)` (Linux 6.5) for `path`: without it the broker cannot
/// tell what is cached and sends every fetched range from the page cache.
fn has_cachestat(path: &std::path::Path) -> bool {
    use std::os::fd::AsRawFd;
    let file = std::fs::File::open(path).unwrap();
    let (range, mut stat) = ([0u64; 2], [0u64; 5]);
    // SAFETY: cachestat reads two u64s and writes five, both live locals.
    unsafe { libc::syscall(451, file.as_raw_fd(), range.as_ptr(), stat.as_mut_ptr(), 0) == 0 }
}

/// Starts a broker with `overrides` and appends 20 MiB to topic `t` in ~100 KiB batches, all
/// directly (none of it in the page cache, which this checks): the broker, a connection, the
/// next offset and the partition's log file.
fn direct_appended_20_mib(overrides: &[&str]) -> (Broker, Client, usize, std::path::PathBuf) {
    let b = Broker::start(overrides);
    let mut c = b.connect();
    create(&mut c, "t", &[]);
    let mut next = 0;
    while next < 20_000 {
        assert_eq!(produce(&mut c, "t", batch(next, 100)), next as i64);
        next += 100;
    }
    let log = b.dir.path().join("data/t-0").join(format!("{:020}.log", 0));
    let (resident, pages) = resident_pages(&log);
    assert!(resident * 20 < pages, "{resident} of {pages} pages in the page cache before any fetch");
    (b, c, next, log)
}

/// One fetch of up to 1 MiB from the start of `t` through the page cache: once it is sent, the
/// broker asks for the 8 MiB behind it, which the consumer's next fetches will read.
fn assert_a_fetch_reads_8_mib_ahead_into_the_page_cache(c: &mut Client, log: &std::path::Path) {
    let r = fetch(c, "t", 0);
    let sent = r.records.as_ref().map_or(0, |r| r.len());
    assert!(sent > 900 << 10, "fetched {sent} bytes");
    let want = (sent + (8 << 20)) / 4096;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut pages = residency(log);
    while !pages[..want].iter().all(|&r| r) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
        pages = residency(log);
    }
    // The read-ahead is advice the kernel may take in part (a shared machine's memory pressure
    // or a busy device drops some pages); without it only the fetched MiB (~1/9) would be cached.
    let missing = pages[..want].iter().filter(|&&r| !r).count();
    assert!(missing * 20 < want, "{missing} of the first {want} pages not read ahead");
    // Not the whole log: the read-ahead ends some way past the fetch.
    let beyond = pages[want + 256..].iter().filter(|&&r| r).count();
    assert!(beyond * 20 < pages.len() - want, "{beyond} pages read past the read-ahead");
}

#[test]
fn a_catch_up_read_of_direct_appended_data_comes_from_the_disk_without_filling_the_page_cache() {
    let (_b, mut c, next, log) = direct_appended_20_mib(&["log.io.direct=true"]);
    if has_cachestat(&log) {
        // Every fetch reads its range with O_DIRECT into the broker's own buffers: the records
        // arrive whole and in order, and the page cache still holds next to none of the log.
        assert_eq!(read_all(&mut c, "t", 0), expected(0..next));
        let (resident, pages) = resident_pages(&log);
        assert!(resident * 20 < pages, "{resident} of {pages} pages in the page cache after the read");
        return;
    }
    // Without cachestat every fetched range goes through the page cache.
    assert_a_fetch_reads_8_mib_ahead_into_the_page_cache(&mut c, &log);
}

#[test]
fn with_direct_reads_off_a_catch_up_read_of_direct_appended_data_goes_through_the_page_cache() {
    let (_b, mut c, next, log) = direct_appended_20_mib(&["log.io.direct=true", "log.io.direct.reads=false"]);
    assert_a_fetch_reads_8_mib_ahead_into_the_page_cache(&mut c, &log);
    // The whole read: every record whole and in order, and the log now in the page cache.
    assert_eq!(read_all(&mut c, "t", 0), expected(0..next));
    let (resident, pages) = resident_pages(&log);
    assert!(resident * 2 > pages, "only {resident} of {pages} pages in the page cache after the read");
}

#[test]
fn direct_appends_bypass_the_page_cache_and_survive_kill_9_and_a_clean_restart() {
    // ~100 KiB batches go to the disk directly; every third batch is small and goes through
    // the page cache.
    let b = Broker::start(&["log.io.direct=true"]);
    let mut c = b.connect();
    create(&mut c, "t", &[("segment.bytes", "1048576")]);
    let produce_some = |c: &mut Client, next: &mut usize, rounds: usize| {
        for i in 0..rounds {
            let n = if i % 3 == 2 { 5 } else { 100 };
            assert_eq!(produce(c, "t", batch(*next, n)), *next as i64);
            *next += n;
        }
    };
    let mut next = 0;
    produce_some(&mut c, &mut next, 29); // the last one direct
    let data = b.dir.path().join("data/t-0");
    let bases = segment_bases(&data);
    assert!(bases.len() > 2, "expected several segments, got {bases:?}");
    let (resident, pages) = bases
        .iter()
        .map(|base| resident_pages(&data.join(format!("{base:020}.log"))))
        .fold((0, 0), |(r, p), (r1, p1)| (r + r1, p + p1));
    assert!(resident * 4 < pages, "{resident} of {pages} pages of the log are in the page cache");
    // The active segment ends in zero padding to the block, which a crash leaves behind.
    let active = data.join(format!("{:020}.log", bases.last().unwrap()));
    assert_eq!(std::fs::metadata(&active).unwrap().len() % 4096, 0, "active segment not padded");
    let dir = b.kill9();
    let b = Broker::start_in(dir, &["log.io.direct=true"]);
    let mut c = b.connect();
    assert_eq!(read_all(&mut c, "t", 0), expected(0..next));
    // Restart cuts the padding without calling it a torn tail or a damaged segment.
    let warned: Vec<String> = b.warnings().into_iter().filter(|l| l.contains("sluice::log")).collect();
    assert!(warned.is_empty(), "{warned:?}");
    produce_some(&mut c, &mut next, 6);
    let dir = b.stop();
    let data = dir.path().join("data/t-0");
    for base in segment_bases(&data) {
        assert_ends_at_last_batch(&data.join(format!("{base:020}.log")), "log.io.direct=true");
    }
    // Without direct appends the same files serve as they are.
    let b = Broker::start_in(dir, &["log.io.direct=false"]);
    let mut c = b.connect();
    assert_eq!(read_all(&mut c, "t", 0), expected(0..next));
}

#[test]
fn acknowledged_records_survive_kill_9() {
    for backend in BACKENDS {
        records_survive_kill_9(backend);
    }
}

fn records_survive_kill_9(backend: &str) {
    let b = Broker::start(&["log.flush.interval.messages=1", backend]);
    let mut c = b.connect();
    create(&mut c, "t", &[]);
    for i in 0..100 {
        produce(&mut c, "t", batch(i * 3, 3));
    }
    let dir = b.kill9();
    let b = Broker::start_in(dir, &[backend]);
    let mut c = b.connect();
    assert_eq!(read_all(&mut c, "t", 0), expected(0..300));
    assert_eq!(produce(&mut c, "t", batch(300, 1)), 300);
}

#[test]
fn delete_records_moves_log_start_and_survives_restart() {
    let b = Broker::start(&[]);
    let mut c = b.connect();
    create(&mut c, "t", &[("segment.bytes", "1048576")]);
    for i in 0..500 {
        produce(&mut c, "t", batch(i * 5, 5));
    }
    let req = DeleteRecordsRequest::default().with_timeout_ms(5000).with_topics(vec![
        delete_records_request::DeleteRecordsTopic::default()
            .with_name(name("t"))
            .with_partitions(vec![delete_records_request::DeleteRecordsPartition::default().with_partition_index(0).with_offset(123)]),
    ]);
    let r = c.call(&req, 2);
    assert_eq!(r.topics[0].partitions[0].error_code, 0);
    assert_eq!(r.topics[0].partitions[0].low_watermark, 123);
    // Deleting past a whole segment removes its files.
    let mut far = req.clone();
    far.topics[0].partitions[0].offset = 1500;
    assert_eq!(c.call(&far, 2).topics[0].partitions[0].low_watermark, 1500);
    let logs = std::fs::read_dir(b.dir.path().join("data/t-0"))
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().extension().map(|x| x == "log").unwrap_or(false))
        .map(|e| e.file_name().to_string_lossy().to_string())
        .collect::<Vec<_>>();
    assert!(!logs.contains(&format!("{:020}.log", 0)), "first segment should be gone: {logs:?}");
    // Beyond the high watermark is refused.
    let over = req.clone();
    let mut over = over;
    over.topics[0].partitions[0].offset = 2501;
    assert_eq!(c.call(&over, 2).topics[0].partitions[0].error_code, kafka_protocol::ResponseError::OffsetOutOfRange.code());

    assert_eq!(offsets(&mut c, "t", -2), 1500);
    let dir = b.kill9();
    let b = Broker::start_in(dir, &[]);
    let mut c = b.connect();
    assert_eq!(offsets(&mut c, "t", -2), 1500);
    assert_eq!(read_all(&mut c, "t", 1500), expected(1500..2500));
}

/// (topic id, partition count) as Metadata reports them.
fn describe(c: &mut Client, topic: &str) -> (uuid::Uuid, usize) {
    let req = MetadataRequest::default().with_topics(Some(vec![metadata_request::MetadataRequestTopic::default().with_name(Some(name(topic)))]));
    let r = c.call(&req, 12);
    assert_eq!(r.topics[0].error_code, 0);
    (r.topics[0].topic_id, r.topics[0].partitions.len())
}

#[test]
fn created_and_grown_topics_survive_kill_9_with_their_ids() {
    let b = Broker::start(&[]);
    let mut c = b.connect();
    let topics = (0..3)
        .map(|i| create_topics_request::CreatableTopic::default().with_name(name(&format!("many{i}"))).with_num_partitions(50).with_replication_factor(1))
        .collect();
    let r = c.call(&CreateTopicsRequest::default().with_topics(topics), 7);
    assert!(r.topics.iter().all(|t| t.error_code == 0));
    let grow = CreatePartitionsRequest::default().with_timeout_ms(5000).with_topics(vec![
        create_partitions_request::CreatePartitionsTopic::default().with_name(name("many1")).with_count(80),
    ]);
    assert_eq!(c.call(&grow, 3).results[0].error_code, 0);
    let before: Vec<_> = (0..3).map(|i| describe(&mut c, &format!("many{i}"))).collect();
    assert_eq!(before.iter().map(|d| d.1).collect::<Vec<_>>(), vec![50, 80, 50]);
    let dir = b.kill9();
    let b = Broker::start_in(dir, &[]);
    let mut c = b.connect();
    let after: Vec<_> = (0..3).map(|i| describe(&mut c, &format!("many{i}"))).collect();
    assert_eq!(after, before);
}

/// Writes 300 records (100 batches) to `t-0`, kills the broker and returns the data dir.
fn killed_after_300_records() -> tempfile::TempDir {
    let b = Broker::start(&[]);
    let mut c = b.connect();
    create(&mut c, "t", &[]);
    for i in 0..100 {
        produce(&mut c, "t", batch(i * 3, 3));
    }
    b.kill9()
}

/// [`killed_after_300_records`], then one byte inside record 150's value flipped in the active
/// segment.
fn killed_with_record_150_corrupted() -> tempfile::TempDir {
    let dir = killed_after_300_records();
    let log = dir.path().join("data/t-0/00000000000000000000.log");
    let mut bytes = std::fs::read(&log).unwrap();
    let at = bytes.windows(10).position(|w| w == b"value-150-").expect("record 150 in the active segment") + 20;
    bytes[at] ^= 0x01;
    std::fs::write(&log, bytes).unwrap();
    dir
}

fn boot_marker(dir: &tempfile::TempDir) -> std::path::PathBuf {
    dir.path().join("data").join(sluice::broker::boot::MARKER)
}

#[test]
fn without_a_marker_from_this_boot_restart_verifies_crcs_and_cuts_at_the_bad_batch() {
    let dir = killed_with_record_150_corrupted();
    // As after an OS restart: the marker names another boot.
    std::fs::write(boot_marker(&dir), "00000000-0000-0000-0000-000000000000\n").unwrap();
    let b = Broker::start_in(dir, &[]);
    let mut c = b.connect();
    assert_eq!(read_all(&mut c, "t", 0), expected(0..150), "the log ends before the corrupt batch");
    assert_eq!(produce(&mut c, "t", batch(150, 1)), 150);
    let dir = b.kill9();
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
    assert_eq!(std::fs::read_to_string(boot_marker(&dir)).unwrap().trim(), boot.trim(), "startup records this boot");
}

#[test]
fn after_kill_9_in_the_same_boot_restart_does_not_reread_active_segment_crcs() {
    // The marker from this boot means the OS kept every write whole, so the active segment's
    // CRCs are not re-read: a flipped bit (which only a failing disk could cause) goes unseen,
    // as it does in a rolled segment.
    let dir = killed_with_record_150_corrupted();
    assert!(boot_marker(&dir).exists());
    let b = Broker::start_in(dir, &[]);
    let mut c = b.connect();
    // Nothing was cut: the corrupt batch is still there (a client's CRC check would refuse it).
    assert_eq!(offsets(&mut c, "t", -1), 300, "CRCs of the active segment were not verified");
    assert_eq!(produce(&mut c, "t", batch(300, 1)), 300);
    assert_eq!(read_all(&mut c, "t", 300), expected(300..301));
}

#[test]
fn after_kill_9_in_the_same_boot_a_torn_last_batch_is_cut_off() {
    let dir = killed_after_300_records();
    assert!(boot_marker(&dir).exists());
    // What a broker killed in the middle of a write leaves: part of a batch.
    let log = dir.path().join("data/t-0/00000000000000000000.log");
    let torn = batch(300, 3)[..500].to_vec();
    let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
    std::io::Write::write_all(&mut f, &torn).unwrap();
    drop(f);
    let b = Broker::start_in(dir, &[]);
    let mut c = b.connect();
    assert_eq!(read_all(&mut c, "t", 0), expected(0..300));
    let warned = b.warnings();
    // The disk, read past the page cache, holds the same torn bytes the scan read.
    let same = "disk=the same bytes as the page cache";
    assert!(
        warned.iter().any(|l| l.contains("torn tail") && l.contains("bytes_dropped=500") && l.contains("kept_in=") && l.contains(same)),
        "{warned:?}"
    );
    // The bytes cut off are kept beside the segment.
    let kept: Vec<_> = std::fs::read_dir(b.dir.path().join("data/t-0"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_str().unwrap().starts_with("00000000000000000000.log.cut-"))
        .collect();
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert_eq!(std::fs::read(&kept[0]).unwrap(), torn);
    assert_eq!(produce(&mut c, "t", batch(300, 1)), 300);
    assert_eq!(read_all(&mut c, "t", 300), expected(300..301));
}

/// Base offsets of the `.log` files in a partition directory, sorted.
fn segment_bases(dir: &std::path::Path) -> Vec<i64> {
    let mut bases: Vec<i64> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.strip_suffix(".log")?.parse().ok())
        .collect();
    bases.sort_unstable();
    bases
}

#[test]
fn after_an_os_restart_a_torn_rolled_segment_is_cut_and_the_segments_after_it_dropped() {
    // Rolled segments are flushed in the background, so an OS crash just after a roll can
    // leave the rolled segment's tail unwritten while the new segment already holds data.
    let b = Broker::start(&[]);
    let mut c = b.connect();
    create(&mut c, "t", &[("segment.bytes", "1048576")]);
    let mut n = 0;
    while segment_bases(&b.dir.path().join("data/t-0")).len() < 3 {
        assert_eq!(produce(&mut c, "t", batch(n, 5)), n as i64);
        n += 5;
    }
    let dir = b.kill9();
    let part = dir.path().join("data/t-0");
    let bases = segment_bases(&part);
    let (rolled, active) = (bases[1], bases[2]);
    let f = std::fs::OpenOptions::new().write(true).open(part.join(format!("{rolled:020}.log"))).unwrap();
    f.set_len(f.metadata().unwrap().len() - 100).unwrap();
    drop(f);
    std::fs::write(boot_marker(&dir), "00000000-0000-0000-0000-000000000000\n").unwrap();

    let b = Broker::start_in(dir, &[]);
    let mut c = b.connect();
    // The torn batch held the five records before `active`; nothing after it survives.
    let end = active as usize - 5;
    assert_eq!(offsets(&mut c, "t", -1), end as i64);
    assert_eq!(read_all(&mut c, "t", 0), expected(0..end));
    assert_eq!(segment_bases(&b.dir.path().join("data/t-0")), bases[..2].to_vec());
    assert_eq!(produce(&mut c, "t", batch(end, 1)), end as i64);
    assert_eq!(read_all(&mut c, "t", end as i64), expected(end..end + 1));
}
