//! `/metrics` on the real broker: start it with `metrics.listener=127.0.0.1:0`, produce and
//! fetch over the wire, scrape, and check the numbers against what was sent.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;

use bytes::Bytes;
use kafka_protocol::messages::*;

/// The broker plus the metrics address it printed.
struct Running {
    broker: common::Broker,
    metrics: String,
}

fn start(overrides: &[&str]) -> Running {
    let broker = common::Broker::start(overrides);
    let metrics = broker.metrics.clone().unwrap_or_default();
    Running { broker, metrics }
}

fn http_get(addr: &str, path: &str) -> (String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: text/plain\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let (head, body) = out.split_once("\r\n\r\n").unwrap();
    (head.to_string(), body.to_string())
}

fn value(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(series).and_then(|r| r.strip_prefix(' ')).map(|v| v.parse().unwrap()))
}

fn name(s: &str) -> TopicName {
    common::topic_name(s)
}

fn create_topic(c: &mut common::Client, topic: &str, partitions: i32) {
    let resp = c.call(
        &CreateTopicsRequest::default().with_topics(vec![create_topics_request::CreatableTopic::default()
            .with_name(name(topic))
            .with_num_partitions(partitions)
            .with_replication_factor(1)]),
        7,
    );
    assert_eq!(resp.topics[0].error_code, 0);
}

fn batch(n: usize) -> Bytes {
    let recs: Vec<common::Rec> =
        (0..n).map(|i| common::Rec { key: None, value: "v".repeat(50), timestamp: 1_700_000_000_000 + i as i64 }).collect();
    common::encode_batch(&recs, None)
}

#[test]
fn scrape_reports_what_was_produced_and_fetched() {
    let r = start(&["metrics.listener=127.0.0.1:0", "log.flush.interval.messages=1"]);
    assert!(!r.metrics.is_empty(), "no metrics listening line");
    let mut c = r.broker.connect();
    create_topic(&mut c, "m", 2);
    let mut bytes_in = 0;
    for (partition, n) in [(0, 10), (0, 20), (1, 5)] {
        let data = batch(n);
        bytes_in += data.len();
        let req = ProduceRequest::default().with_acks(1).with_timeout_ms(5000).with_topic_data(vec![
            produce_request::TopicProduceData::default().with_name(name("m")).with_partition_data(vec![
                produce_request::PartitionProduceData::default().with_index(partition).with_records(Some(data)),
            ]),
        ]);
        let resp = c.call(&req, 9);
        assert_eq!(resp.responses[0].partition_responses[0].error_code, 0);
    }
    // One produce to a missing partition: counted as an error, not as traffic.
    let req = ProduceRequest::default().with_acks(1).with_timeout_ms(5000).with_topic_data(vec![
        produce_request::TopicProduceData::default().with_name(name("m")).with_partition_data(vec![
            produce_request::PartitionProduceData::default().with_index(9).with_records(Some(batch(1))),
        ]),
    ]);
    assert_eq!(c.call(&req, 9).responses[0].partition_responses[0].error_code, 3);
    let fetch = FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(0)
        .with_max_bytes(1 << 20)
        .with_session_epoch(-1)
        .with_topics(vec![fetch_request::FetchTopic::default().with_topic(name("m")).with_partitions(vec![
            fetch_request::FetchPartition::default().with_partition(0).with_fetch_offset(0).with_partition_max_bytes(1 << 20),
        ])]);
    let resp = c.call(&fetch, 12);
    let fetched = resp.responses[0].partitions[0].records.as_ref().unwrap().len();

    // A request is counted once its response has been sent, a moment after the client has
    // read it: scrape until the fetch shows up (bounded).
    let mut scrape = http_get(&r.metrics, "/metrics");
    for _ in 0..100 {
        if value(&scrape.1, r#"sluice_requests_total{api="Fetch",version="12"}"#).is_some() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
        scrape = http_get(&r.metrics, "/metrics");
    }
    let (head, text) = scrape;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(head.contains("text/plain; version=0.0.4"), "{head}");
    let v = |s: &str| value(&text, s).unwrap_or_else(|| panic!("{s} missing from\n{text}"));
    assert_eq!(v(r#"sluice_topic_records_in_total{topic="m"}"#), 35.0);
    assert_eq!(v(r#"sluice_topic_batches_in_total{topic="m"}"#), 3.0);
    assert_eq!(v(r#"sluice_topic_bytes_in_total{topic="m"}"#), bytes_in as f64);
    assert_eq!(v(r#"sluice_topic_records_out_total{topic="m"}"#), 30.0);
    assert_eq!(v(r#"sluice_topic_bytes_out_total{topic="m"}"#), fetched as f64);
    assert_eq!(v(r#"sluice_partition_log_end_offset{topic="m",partition="0"}"#), 30.0);
    assert_eq!(v(r#"sluice_partition_log_end_offset{topic="m",partition="1"}"#), 5.0);
    assert_eq!(v(r#"sluice_partition_high_watermark{topic="m",partition="0"}"#), 30.0);
    assert_eq!(v(r#"sluice_partition_log_start_offset{topic="m",partition="0"}"#), 0.0);
    assert_eq!(v(r#"sluice_topic_records_per_batch{topic="m"}"#), 35.0 / 3.0);
    assert_eq!(v(r#"sluice_requests_total{api="Produce",version="9"}"#), 4.0);
    assert_eq!(v(r#"sluice_requests_total{api="Fetch",version="12"}"#), 1.0);
    assert_eq!(v(r#"sluice_request_errors_total{api="Produce",error="UNKNOWN_TOPIC_OR_PARTITION"}"#), 1.0);
    assert_eq!(v(r#"sluice_request_duration_seconds_count{api="Produce"}"#), 4.0);
    for phase in ["queue", "local", "send"] {
        assert_eq!(v(&format!(r#"sluice_request_phase_seconds_count{{api="Produce",phase="{phase}"}}"#)), 4.0, "{phase}");
    }
    assert_eq!(v(r#"sluice_request_duration_seconds_count{api="Fetch"}"#), 1.0);
    assert_eq!(v("sluice_produce_batch_records_count"), 3.0);
    assert_eq!(v("sluice_produce_batch_records_sum"), 35.0);
    assert_eq!(v(r#"sluice_produce_batch_records_bucket{le="10"}"#), 2.0);
    assert_eq!(v("sluice_fetch_response_bytes_sum"), fetched as f64);
    assert!(v("sluice_log_fsync_duration_seconds_count") >= 3.0, "flush.messages=1 fsyncs every append");
    assert_eq!(v("sluice_connections_active"), 1.0);
    assert_eq!(v("sluice_connections_opened_total"), 1.0);
    assert_eq!(v("sluice_under_min_isr_partitions"), 0.0);
    assert_eq!(v(r#"sluice_partition_isr_size{topic="m",partition="0"}"#), 1.0);
    assert_eq!(v(&format!(r#"sluice_build_info{{version="{}"}}"#, env!("CARGO_PKG_VERSION"))), 1.0);
    let backend = text.lines().find(|l| l.starts_with("sluice_log_io_backend_info{")).expect("backend info series");
    // Appends are direct by default, buffered where the filesystem refuses O_DIRECT (tmpfs).
    let consistent = [
        r#"{backend="io_uring",appends="direct"} 1"#,
        r#"{backend="std",appends="direct"} 1"#,
        r#"{backend="io_uring",appends="pwritev"} 1"#,
        r#"{backend="io_uring",appends="io_uring"} 1"#,
        r#"{backend="std",appends="pwritev"} 1"#,
    ];
    assert!(consistent.iter().any(|s| backend.ends_with(s)), "{backend}");
    assert!(v("process_resident_memory_bytes") > 0.0);
    assert!(v("process_open_fds") > 0.0);
    assert!(text.contains("# HELP sluice_partition_high_watermark "), "help text present");
    assert!(text.contains("# TYPE sluice_request_duration_seconds histogram"));

    drop(c);
    let (head, body) = http_get(&r.metrics, "/healthz");
    // A single node is the one voter of its quorum: healthy once its broker is unfenced.
    assert!(head.starts_with("HTTP/1.1 200") && body.contains(r#""fenced":false"#), "{head}{body}");
    let (head, _) = http_get(&r.metrics, "/nope");
    assert!(head.starts_with("HTTP/1.1 404"), "{head}");
}

#[test]
fn explicit_metrics_listener_that_cannot_bind_stops_startup_with_the_key() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .arg("serve")
        .arg("--override")
        .arg(format!("log.dirs={}", dir.path().join("data").display()))
        .arg("--override")
        .arg("listeners=PLAINTEXT://127.0.0.1:0")
        .arg("--override")
        .arg(format!("metrics.listener={addr}"))
        .env("SLUICE_LOG", "warn")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("metrics.listener"), "{err}");
}

/// One acks=`acks` produce of 5 records to each of `partitions` of topic "d": (partition,
/// error code, base offset) per partition.
fn produce_d(c: &mut common::Client, acks: i16, partitions: &[i32]) -> Vec<(i32, i16, i64)> {
    let req = ProduceRequest::default().with_acks(acks).with_timeout_ms(5000).with_topic_data(vec![
        produce_request::TopicProduceData::default().with_name(name("d")).with_partition_data(
            partitions
                .iter()
                .map(|&p| produce_request::PartitionProduceData::default().with_index(p).with_records(Some(batch(5))))
                .collect(),
        ),
    ]);
    let resp = c.call(&req, 9);
    resp.responses[0].partition_responses.iter().map(|p| (p.index, p.error_code, p.base_offset)).collect()
}

/// `log.flush.acks.all=true` (the broker default of the topic config `flush.acks.all`): an
/// acks=all produce is answered after an fsync (counted by `sluice_log_fsync_duration_seconds`),
/// an acks=1 produce without one. Without the key, acks=all does not fsync (Kafka's default),
/// until the topic's own `flush.acks.all` is set.
#[test]
fn acks_all_produce_waits_for_an_fsync_only_under_flush_acks_all() {
    use kafka_protocol::protocol::StrBytes;
    for flush_acks_all in [true, false] {
        let flag = format!("log.flush.acks.all={flush_acks_all}");
        let r = start(&["metrics.listener=127.0.0.1:0", &flag]);
        let mut c = r.broker.connect();
        create_topic(&mut c, "d", 2);
        let fsyncs = || value(&http_get(&r.metrics, "/metrics").1, "sluice_log_fsync_duration_seconds_count").unwrap_or(0.0);
        let before = fsyncs();
        assert_eq!(produce_d(&mut c, 1, &[0]), vec![(0, 0, 0)]);
        assert_eq!(fsyncs(), before, "{flag}: acks=1 never waits for an fsync");
        assert_eq!(produce_d(&mut c, -1, &[0]), vec![(0, 0, 5)]);
        let expected = if flush_acks_all { before + 1.0 } else { before };
        assert_eq!(fsyncs(), expected, "{flag}: one acks=all produce to one partition");
        // Two partitions in one request: one fsync each, and both answered.
        assert_eq!(produce_d(&mut c, -1, &[0, 1]), vec![(0, 0, 10), (1, 0, 0)]);
        let expected = if flush_acks_all { before + 3.0 } else { before };
        assert_eq!(fsyncs(), expected, "{flag}: an acks=all produce to two partitions");
        if flush_acks_all {
            continue;
        }
        // Set on the topic alone, it takes effect for the next produce.
        let alter = IncrementalAlterConfigsRequest::default().with_resources(vec![
            incremental_alter_configs_request::AlterConfigsResource::default()
                .with_resource_type(2)
                .with_resource_name(StrBytes::from_static_str("d"))
                .with_configs(vec![incremental_alter_configs_request::AlterableConfig::default()
                    .with_name(StrBytes::from_static_str("flush.acks.all"))
                    .with_config_operation(0)
                    .with_value(Some(StrBytes::from_static_str("true")))]),
        ]);
        // A listing of the topic's configs shows this key of sluice's own only once it is set,
        // so that clients see exactly Kafka's set otherwise.
        let listed = |c: &mut common::Client| {
            let describe = DescribeConfigsRequest::default().with_resources(vec![
                describe_configs_request::DescribeConfigsResource::default()
                    .with_resource_type(2)
                    .with_resource_name(StrBytes::from_static_str("d"))
                    .with_configuration_keys(None),
            ]);
            let resp = c.call(&describe, 4);
            let configs = &resp.results[0].configs;
            assert!(configs.iter().any(|e| e.name.as_str() == "retention.ms"), "a full listing");
            configs.iter().find(|e| e.name.as_str() == "flush.acks.all").map(|e| e.value.as_ref().map(|v| v.to_string()))
        };
        assert_eq!(listed(&mut c), None, "not listed at its default");
        assert_eq!(c.call(&alter, 1).responses[0].error_code, 0);
        assert_eq!(listed(&mut c), Some(Some("true".to_string())));
        assert_eq!(produce_d(&mut c, -1, &[1]), vec![(1, 0, 5)]);
        assert_eq!(fsyncs(), before + 1.0, "topic flush.acks.all=true");
    }
}
