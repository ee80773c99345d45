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
            // TODO(replication): a single node leads every partition with itself as the whole
            // ISR; read the replica set and ISR from partition state once followers exist.
            let (replicas, isr) = (1i64, 1i64);
            e.sample("sluice_partition_replicas", &labels, replicas as f64);
            e.sample("sluice_partition_isr_size", &labels, isr as f64);
            e.sample("sluice_partition_min_isr", &labels, min_isr as f64);
            under_replicated += u64::from(isr < replicas);
            under_min_isr += u64::from(isr < min_isr);
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
    e.sample("sluice_log_io_backend_info", &[("backend", broker.io_backend_name())], 1.0);
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
