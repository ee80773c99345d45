//! The scrape-time collector: walks the broker's topics and partitions, the group view and the
//! process right before `/metrics` is rendered, so every state gauge is read from live state and
//! cannot drift from it.
//!
//! It reads partition state under each partition's own lock, one at a time, and one batch header
//! per committed group partition (see [`super::lag`]); callers run it on a blocking thread.

use std::collections::BTreeSet;

use super::lag;
use super::process;
use super::sampler;
use super::text::Exposition;
use crate::broker::Broker;

/// Groups beyond this many (in name order) are left out of per-group series.
pub const MAX_GROUPS: usize = 1000;

/// Every scrape-time family, from live state at `now_ms`.
pub fn collect(broker: &Broker, now_ms: i64) -> Exposition {
    let mut e = Exposition::default();
    collect_topics(broker, &mut e);
    collect_groups(broker, now_ms, &mut e);
    collect_process(broker, &mut e);
    e
}

fn collect_topics(broker: &Broker, e: &mut Exposition) {
    let m = &broker.metrics;
    let topics = broker.all_topics();
    let (mut partitions, mut under_replicated, mut under_min_isr) = (0u64, 0u64, 0u64);
    for topic in &topics {
        let name: &str = &topic.name;
        let configs = broker.topic_effective_configs(topic);
        let min_isr: i64 = configs.get("min.insync.replicas").and_then(|v| v.parse().ok()).unwrap_or(1);
        let mut total = super::state::TrafficSnapshot::default();
        let (mut window_records, mut window_batches, mut all_windowed) = (0u64, 0u64, true);
        let (mut window_rates, mut cumulative_bytes) = (Vec::new(), Vec::new());
        for p in &topic.partitions {
            partitions += 1;
            let idx = p.index.to_string();
            let labels = [("topic", name), ("partition", idx.as_str())];
            let snap = m.traffic_of(name, p.index);
            total.bytes_in += snap.bytes_in;
            total.records_in += snap.records_in;
            total.batches_in += snap.batches_in;
            total.bytes_out += snap.bytes_out;
            total.records_out += snap.records_out;
            cumulative_bytes.push(snap.bytes_in as f64);
            match m.sampler.lock().traffic_window(name, p.index) {
                Some((first, last, secs)) => {
                    window_rates.push(last.bytes_in.saturating_sub(first.bytes_in) as f64 / secs);
                    window_records += last.records_in.saturating_sub(first.records_in);
                    window_batches += last.batches_in.saturating_sub(first.batches_in);
                }
                None => all_windowed = false,
            }
            e.sample("sluice_partition_bytes_in_total", &labels, snap.bytes_in as f64);
            e.sample("sluice_partition_records_in_total", &labels, snap.records_in as f64);
            e.sample("sluice_partition_log_size_bytes", &labels, p.size_bytes() as f64);
            e.sample("sluice_partition_log_segments", &labels, p.segment_count() as f64);
            e.sample("sluice_partition_log_end_offset", &labels, p.log_end_offset() as f64);
            e.sample("sluice_partition_log_start_offset", &labels, p.log_start_offset() as f64);
            e.sample("sluice_partition_high_watermark", &labels, p.high_watermark() as f64);
            // The replica set, ISR and follower lag come from the leader only, as Kafka reports
            // them, so that a sum over brokers counts each partition once.
            if let Some(v) = p.leader_view() {
                let (replicas, isr) = (v.replicas as i64, v.isr as i64);
                e.sample("sluice_partition_replicas", &labels, replicas as f64);
                e.sample("sluice_partition_isr_size", &labels, isr as f64);
                e.sample("sluice_partition_min_isr", &labels, min_isr as f64);
                under_replicated += u64::from(isr < replicas);
                under_min_isr += u64::from(isr < min_isr.min(replicas));
                for (replica, lag) in v.follower_lag {
                    let r = replica.to_string();
                    let l = [("topic", name), ("partition", idx.as_str()), ("replica", r.as_str())];
                    e.sample("sluice_partition_replica_lag_offsets", &l, lag as f64);
                }
            }
        }
        let t = [("topic", name)];
        e.sample("sluice_topic_bytes_in_total", &t, total.bytes_in as f64);
        e.sample("sluice_topic_records_in_total", &t, total.records_in as f64);
        e.sample("sluice_topic_batches_in_total", &t, total.batches_in as f64);
        e.sample("sluice_topic_bytes_out_total", &t, total.bytes_out as f64);
        e.sample("sluice_topic_records_out_total", &t, total.records_out as f64);
        let (records, batches) =
            if all_windowed { (window_records, window_batches) } else { (total.records_in, total.batches_in) };
        let per_batch = if batches > 0 { records as f64 / batches as f64 } else { 0.0 };
        e.sample("sluice_topic_records_per_batch", &t, per_batch);
        let skew = if all_windowed { sampler::skew(&window_rates) } else { sampler::skew(&cumulative_bytes) };
        e.sample("sluice_topic_partition_skew_ratio", &t, skew);
    }
    e.sample("sluice_topics", &[], topics.len() as f64);
    e.sample("sluice_partitions", &[], partitions as f64);
    e.sample("sluice_under_replicated_partitions", &[], under_replicated as f64);
    e.sample("sluice_under_min_isr_partitions", &[], under_min_isr as f64);
    if let Some(view) = broker.cluster() {
        let image = view.image();
        let offline = image.topics.values().flat_map(|t| t.partitions.values()).filter(|p| p.leader < 0).count();
        e.sample("sluice_offline_partitions", &[], offline as f64);
    }
}

fn collect_groups(broker: &Broker, now_ms: i64, e: &mut Exposition) {
    let Some(view) = broker.metrics.groups_view() else { return };
    let groups = view.groups();
    let committed = view.committed_offsets();
    let mut names: BTreeSet<&str> = groups.iter().map(|g| g.group.as_str()).collect();
    names.extend(committed.iter().map(|c| c.group.as_str()));
    let total = names.len();
    let kept: BTreeSet<String> = names.into_iter().take(MAX_GROUPS).map(str::to_string).collect();
    e.sample("sluice_consumer_groups", &[], total as f64);
    e.sample("sluice_metrics_omitted_groups", &[], total.saturating_sub(MAX_GROUPS) as f64);
    for g in groups.iter().filter(|g| kept.contains(&g.group)) {
        let l = [("group", g.group.as_str())];
        e.sample("sluice_consumer_group_members", &l, f64::from(g.members));
        e.sample("sluice_consumer_group_generation", &l, f64::from(g.generation));
        e.sample("sluice_consumer_group_state", &[("group", g.group.as_str()), ("state", g.state.as_str())], 1.0);
        e.sample("sluice_consumer_group_rebalances_total", &l, g.rebalances_total as f64);
        if let Some(ms) = g.last_rebalance_duration_ms {
            e.sample("sluice_consumer_group_last_rebalance_duration_seconds", &l, ms as f64 / 1000.0);
        }
    }
    let committed: Vec<_> = committed.into_iter().filter(|c| kept.contains(&c.group)).collect();
    let lags = lag::collect(broker, &committed, now_ms);
    let sampler = broker.metrics.sampler.lock();
    for l in &lags {
        let p = l.partition.to_string();
        let labels = [("group", l.group.as_str()), ("topic", l.topic.as_str()), ("partition", p.as_str())];
        e.sample("sluice_consumer_group_committed_offset", &labels, l.committed as f64);
        e.sample("sluice_consumer_group_lag_records", &labels, l.lag_records as f64);
        if let Some(s) = l.lag_seconds {
            e.sample("sluice_consumer_group_lag_seconds", &labels, s);
        }
        if let Some(r) = l.retention_used_ratio {
            e.sample("sluice_consumer_group_retention_used_ratio", &labels, r);
        }
        e.sample("sluice_consumer_group_commit_age_seconds", &labels, l.commit_age_seconds);
        if let Some(t) = sampler.lag_trend(&l.group, &l.topic, l.partition) {
            e.sample("sluice_consumer_group_lag_trend_records_per_second", &labels, t);
        }
    }
}

fn collect_process(broker: &Broker, e: &mut Exposition) {
    e.sample("sluice_connections_active", &[], broker.metrics.active_connections() as f64);
    e.sample(
        "sluice_log_io_backend_info",
        &[("backend", broker.io_backend_name()), ("appends", broker.io_append_path())],
        1.0,
    );
    e.sample("sluice_build_info", &[("version", env!("CARGO_PKG_VERSION"))], 1.0);
    e.sample("sluice_startup_duration_seconds", &[], broker.metrics.startup_duration().as_secs_f64());
    let p = process::read();
    let pairs = [
        ("process_cpu_seconds_total", p.cpu_seconds),
        ("process_resident_memory_bytes", p.resident_bytes.map(|v| v as f64)),
        ("process_virtual_memory_bytes", p.virtual_bytes.map(|v| v as f64)),
        ("process_open_fds", p.open_fds.map(|v| v as f64)),
        ("process_max_fds", p.max_fds.map(|v| v as f64)),
        ("process_start_time_seconds", p.start_time_seconds),
    ];
    for (name, v) in pairs {
        if let Some(v) = v {
            e.sample(name, &[], v);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use super::*;
    use crate::config::BrokerConfig;
    use crate::metrics::{CommittedOffset, GroupSummary, GroupsView};
    use crate::protocol::record_batch::{encode_uncompressed_batch, SimpleRecord};

    struct FakeGroups {
        committed: Vec<CommittedOffset>,
        groups: Vec<GroupSummary>,
    }

    impl GroupsView for FakeGroups {
        fn committed_offsets(&self) -> Vec<CommittedOffset> {
            self.committed.clone()
        }
        fn groups(&self) -> Vec<GroupSummary> {
            self.groups.clone()
        }
    }

    fn broker(dir: &std::path::Path) -> Broker {
        let pairs = [("log.dirs".to_string(), dir.display().to_string()), ("log.io.backend".into(), "std".into())];
        Broker::open(BrokerConfig::from_pairs(pairs).unwrap().config).unwrap()
    }

    /// Appends one batch of `n` records stamped `ts` (CreateTime) to `topic`-`p`.
    fn append(b: &Broker, topic: &str, p: i32, n: usize, ts: i64) {
        let value = [7u8; 10];
        let records: Vec<SimpleRecord> = (0..n).map(|_| SimpleRecord { timestamp: ts, key: None, value: Some(&value) }).collect();
        let batch = encode_uncompressed_batch(&records);
        let t = b.topic(topic).unwrap();
        let part = t.partition(p).unwrap();
        let a = part.append(batch.into(), ts).unwrap();
        b.metrics.record_produce(&t.name, p, a.records, a.bytes);
    }

    fn value(text: &str, series: &str) -> Option<f64> {
        text.lines().find_map(|l| l.strip_prefix(series).and_then(|r| r.strip_prefix(' ')).map(|v| v.parse().unwrap()))
    }

    fn render(b: &Broker, now_ms: i64) -> String {
        let mut out = String::new();
        collect(b, now_ms).write_to(&mut out);
        out
    }

    #[test]
    fn partition_gauges_and_traffic_follow_live_state() {
        let dir = tempfile::tempdir().unwrap();
        let b = broker(dir.path());
        b.create_topic("orders", 2, 1, BTreeMap::new()).unwrap();
        append(&b, "orders", 0, 10, 1_000);
        append(&b, "orders", 0, 30, 2_000);
        let text = render(&b, 3_000);
        assert_eq!(value(&text, r#"sluice_partition_log_end_offset{topic="orders",partition="0"}"#), Some(40.0));
        assert_eq!(value(&text, r#"sluice_partition_high_watermark{topic="orders",partition="0"}"#), Some(40.0));
        assert_eq!(value(&text, r#"sluice_partition_log_end_offset{topic="orders",partition="1"}"#), Some(0.0));
        assert_eq!(value(&text, r#"sluice_topic_records_in_total{topic="orders"}"#), Some(40.0));
        assert_eq!(value(&text, r#"sluice_topic_batches_in_total{topic="orders"}"#), Some(2.0));
        assert_eq!(value(&text, r#"sluice_topic_records_per_batch{topic="orders"}"#), Some(20.0));
        // All bytes on one of two partitions: max/mean = 2.
        assert_eq!(value(&text, r#"sluice_topic_partition_skew_ratio{topic="orders"}"#), Some(2.0));
        let size = value(&text, r#"sluice_partition_log_size_bytes{topic="orders",partition="0"}"#).unwrap();
        assert_eq!(value(&text, r#"sluice_topic_bytes_in_total{topic="orders"}"#), Some(size));
        assert_eq!(value(&text, "sluice_partitions"), Some(2.0));
        assert_eq!(value(&text, "sluice_under_min_isr_partitions"), Some(0.0));
        // The broker registers the group coordinator's view at startup; with no groups there are
        // no group series.
        assert!(!text.contains("sluice_consumer_group_members{"), "no group series without groups");

        let topic = b.topic("orders").unwrap();
        b.delete_topic(&topic).unwrap();
        let text = render(&b, 4_000);
        assert!(!text.contains(r#"topic="orders""#), "a deleted topic's series vanish:\n{text}");
    }

    #[test]
    fn lag_metrics_come_from_committed_offsets_and_batch_timestamps() {
        let dir = tempfile::tempdir().unwrap();
        let b = broker(dir.path());
        let configs = BTreeMap::from([("retention.ms".to_string(), "100000".to_string())]);
        b.create_topic("t", 1, 1, configs).unwrap();
        append(&b, "t", 0, 10, 10_000); // offsets 0..9
        append(&b, "t", 0, 10, 20_000); // offsets 10..19
        append(&b, "t", 0, 10, 30_000); // offsets 20..29
        let view = FakeGroups {
            committed: vec![
                // Mid-way through the second batch: the oldest unread batch is stamped 20 s.
                CommittedOffset { group: "slow".into(), topic: "t".into(), partition: 0, offset: 15, commit_timestamp_ms: 50_000 },
                CommittedOffset { group: "fast".into(), topic: "t".into(), partition: 0, offset: 30, commit_timestamp_ms: 69_000 },
                // Unknown partitions and "no offset" are skipped, not reported as lag.
                CommittedOffset { group: "fast".into(), topic: "gone".into(), partition: 0, offset: 3, commit_timestamp_ms: 0 },
                CommittedOffset { group: "fast".into(), topic: "t".into(), partition: 7, offset: 3, commit_timestamp_ms: 0 },
                CommittedOffset { group: "new".into(), topic: "t".into(), partition: 0, offset: -1, commit_timestamp_ms: 0 },
            ],
            groups: vec![GroupSummary {
                group: "slow".into(),
                state: "Stable".into(),
                members: 2,
                generation: 5,
                rebalances_total: 4,
                last_rebalance_duration_ms: Some(1500),
            }],
        };
        b.metrics.set_groups_view(Arc::new(view));
        // Lag samples 5 s apart, growing by 10 records each: trend 2 records/s.
        let mut sampler = crate::metrics::sampler::Sampler::default();
        for i in 0..4 {
            sampler.record_lag("slow", "t", 0, 50_000 + i * 5_000, (i * 10) as f64);
        }
        *b.metrics.sampler.lock() = sampler;

        let text = render(&b, 80_000);
        let slow = r#"{group="slow",topic="t",partition="0"}"#;
        let fast = r#"{group="fast",topic="t",partition="0"}"#;
        let v = |name: &str, labels: &str| value(&text, &format!("{name}{labels}"));
        assert_eq!(v("sluice_consumer_group_lag_records", slow), Some(15.0));
        assert_eq!(v("sluice_consumer_group_lag_seconds", slow), Some(60.0));
        assert_eq!(v("sluice_consumer_group_retention_used_ratio", slow), Some(0.6));
        assert_eq!(v("sluice_consumer_group_commit_age_seconds", slow), Some(30.0));
        assert_eq!(v("sluice_consumer_group_committed_offset", slow), Some(15.0));
        assert_eq!(v("sluice_consumer_group_lag_trend_records_per_second", slow), Some(2.0));
        assert_eq!(v("sluice_consumer_group_lag_records", fast), Some(0.0));
        assert_eq!(v("sluice_consumer_group_lag_seconds", fast), Some(0.0));
        assert_eq!(v("sluice_consumer_group_lag_trend_records_per_second", fast), None);
        assert_eq!(v("sluice_consumer_group_members", r#"{group="slow"}"#), Some(2.0));
        assert_eq!(v("sluice_consumer_group_state", r#"{group="slow",state="Stable"}"#), Some(1.0));
        assert_eq!(v("sluice_consumer_group_rebalances_total", r#"{group="slow"}"#), Some(4.0));
        assert_eq!(v("sluice_consumer_group_last_rebalance_duration_seconds", r#"{group="slow"}"#), Some(1.5));
        assert_eq!(value(&text, "sluice_consumer_groups"), Some(3.0));
        assert!(!text.contains(r#"topic="gone""#) && !text.contains(r#"partition="7""#) && !text.contains(r#"group="new",topic"#));

        // Retention deletes the first segment's worth: lag now dates from the oldest remaining
        // record, and the committed offset below the log start still counts as lag.
        b.topic("t").unwrap().partition(0).unwrap().delete_records_before(20).unwrap();
        let text = render(&b, 80_000);
        assert_eq!(value(&text, &format!("sluice_consumer_group_lag_records{slow}")), Some(15.0));
        assert_eq!(value(&text, &format!("sluice_consumer_group_lag_seconds{slow}")), Some(50.0));
    }

    #[test]
    fn sampler_fills_windows_used_by_the_trend_and_rates() {
        let dir = tempfile::tempdir().unwrap();
        let b = broker(dir.path());
        b.create_topic("t", 1, 1, BTreeMap::new()).unwrap();
        let view = FakeGroups {
            committed: vec![CommittedOffset { group: "g".into(), topic: "t".into(), partition: 0, offset: 0, commit_timestamp_ms: 0 }],
            groups: vec![],
        };
        b.metrics.set_groups_view(Arc::new(view));
        for i in 0..5 {
            append(&b, "t", 0, 5, 1_000 + i * 5_000);
            sampler::sample(&b, 1_000 + i * 5_000);
        }
        let text = render(&b, 30_000);
        // Lag grows by 5 records every 5 s.
        let trend = value(&text, r#"sluice_consumer_group_lag_trend_records_per_second{group="g",topic="t",partition="0"}"#);
        assert!((trend.unwrap() - 1.0).abs() < 1e-9, "{trend:?}");
        assert_eq!(value(&text, r#"sluice_topic_records_per_batch{topic="t"}"#), Some(5.0));
        assert_eq!(value(&text, r#"sluice_topic_partition_skew_ratio{topic="t"}"#), Some(1.0));
    }
}
