//! The log cleaner loop: every `log.cleaner.backoff.ms` (15000), each partition of a topic whose
//! `cleanup.policy` contains `compact` gets one compaction pass ([`crate::log::cleaner`]) with
//! the topic's `delete.retention.ms`, `min.cleanable.dirty.ratio` and `min.compaction.lag.ms`.
//! `log.cleaner.enable=false` turns it off.
//!
//! Where the previous pass stopped (Kafka's `cleaner-offset-checkpoint`) is kept in memory, so
//! the first pass after a restart treats the whole log as dirty; that costs one extra rewrite,
//! never correctness. A failure on one partition is logged with the partition and does not stop
//! the loop or other partitions.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use uuid::Uuid;

use super::{error_chain, Broker};
use crate::log::cleaner::CleanerConfig;

/// Compaction settings from a topic's effective configs; None when the topic is not compacted.
pub fn cleaner_config(effective: &std::collections::BTreeMap<String, String>) -> Option<CleanerConfig> {
    let policy = effective.get("cleanup.policy")?;
    if !policy.split(',').any(|p| p.trim() == "compact") {
        return None;
    }
    let d = CleanerConfig::default();
    let long = |k: &str, def: i64| effective.get(k).and_then(|v| v.trim().parse().ok()).unwrap_or(def);
    Some(CleanerConfig {
        delete_retention_ms: long("delete.retention.ms", d.delete_retention_ms),
        min_cleanable_dirty_ratio: effective
            .get("min.cleanable.dirty.ratio")
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(d.min_cleanable_dirty_ratio),
        min_compaction_lag_ms: long("min.compaction.lag.ms", d.min_compaction_lag_ms),
        max_map_bytes: d.max_map_bytes,
    })
}

/// Runs until the task is dropped.
pub async fn run(broker: Arc<Broker>) {
    let raw = &broker.config.raw;
    if raw.get("log.cleaner.enable").is_some_and(|v| v.trim() == "false") {
        tracing::info!("log cleaner disabled (log.cleaner.enable=false)");
        return;
    }
    let backoff = raw.get("log.cleaner.backoff.ms").and_then(|v| v.trim().parse::<u64>().ok()).unwrap_or(15_000).max(1);
    let mut tick = tokio::time::interval(Duration::from_millis(backoff));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut first_dirty: HashMap<(Uuid, i32), i64> = HashMap::new();
    loop {
        tick.tick().await;
        let b = broker.clone();
        let state = std::mem::take(&mut first_dirty);
        // Rewriting segments is file I/O; keep it off the request workers.
        match tokio::task::spawn_blocking(move || clean_all(&b, state)).await {
            Ok(state) => first_dirty = state,
            Err(e) => tracing::error!(error = %e, "log cleaner pass panicked"),
        }
    }
}

/// One pass over every compacted partition; returns the updated clean points.
pub fn clean_all(broker: &Broker, mut first_dirty: HashMap<(Uuid, i32), i64>) -> HashMap<(Uuid, i32), i64> {
    let now = broker.now_ms();
    for topic in broker.all_topics() {
        let Some(config) = cleaner_config(&broker.topic_effective_configs(&topic)) else { continue };
        for p in &topic.partitions {
            let key = (topic.id, p.index);
            let from = first_dirty.get(&key).copied().unwrap_or(0);
            match p.clean(&config, from, now) {
                Ok(Some(stats)) => {
                    if stats.segments_rewritten > 0 {
                        tracing::info!(
                            topic = %topic.name, partition = p.index, segments = stats.segments_rewritten,
                            bytes_before = stats.bytes_before, bytes_after = stats.bytes_after,
                            records_removed = stats.records_removed, "compacted"
                        );
                    }
                    first_dirty.insert(key, stats.clean_end);
                }
                Ok(None) => {}
                Err(e) => tracing::error!(topic = %topic.name, partition = p.index, error = %error_chain(&e), "compaction failed"),
            }
        }
    }
    first_dirty
}
