//! [`BrokerMetrics`]: the metric state that lives with the broker (a field on
//! [`crate::broker::Broker`]): per-partition traffic counters, the active connection count, the
//! consumer-group view and the sampler's one-minute history.
//!
//! Traffic counters are plain atomics bumped on the produce and fetch paths and exported at
//! scrape time for the partitions that exist at that moment, so a deleted topic's series vanish
//! with it instead of lingering in a registry.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Mutex, RwLock};

use super::lag::GroupsView;
use super::sampler::Sampler;

/// Cumulative traffic of one partition since the broker started.
#[derive(Debug, Default)]
pub struct PartitionTraffic {
    pub bytes_in: AtomicU64,
    pub records_in: AtomicU64,
    pub batches_in: AtomicU64,
    pub bytes_out: AtomicU64,
    pub records_out: AtomicU64,
}

/// A consistent-enough copy of [`PartitionTraffic`] (each field read once).
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct TrafficSnapshot {
    pub bytes_in: u64,
    pub records_in: u64,
    pub batches_in: u64,
    pub bytes_out: u64,
    pub records_out: u64,
}

impl PartitionTraffic {
    pub fn snapshot(&self) -> TrafficSnapshot {
        TrafficSnapshot {
            bytes_in: self.bytes_in.load(Ordering::Relaxed),
            records_in: self.records_in.load(Ordering::Relaxed),
            batches_in: self.batches_in.load(Ordering::Relaxed),
            bytes_out: self.bytes_out.load(Ordering::Relaxed),
            records_out: self.records_out.load(Ordering::Relaxed),
        }
    }
}

/// topic -> partition -> counters.
type TrafficTable = HashMap<Arc<str>, HashMap<i32, Arc<PartitionTraffic>>>;

/// Metric state owned by the broker.
#[derive(Default)]
pub struct BrokerMetrics {
    /// topic -> partition -> counters. Entries are created on first traffic and pruned at scrape
    /// time when their topic or partition no longer exists.
    traffic: RwLock<TrafficTable>,
    active_connections: AtomicI64,
    /// Set by the group coordinator once it runs; lag metrics are absent until then.
    groups: RwLock<Option<Arc<dyn GroupsView>>>,
    /// Time spent opening logs before serving, in microseconds (0 until set).
    startup_micros: AtomicU64,
    pub(crate) sampler: Mutex<Sampler>,
}

impl BrokerMetrics {
    /// The counters of `topic`-`partition`, created on first use.
    pub fn partition(&self, topic: &Arc<str>, partition: i32) -> Arc<PartitionTraffic> {
        if let Some(t) = self.traffic.read().get(topic.as_ref()).and_then(|m| m.get(&partition)) {
            return t.clone();
        }
        self.traffic.write().entry(topic.clone()).or_default().entry(partition).or_default().clone()
    }

    /// Counts one appended produce batch (`records` > 0; deduplicated retries are not counted).
    pub fn record_produce(&self, topic: &Arc<str>, partition: i32, records: u64, bytes: usize) {
        if records == 0 {
            return;
        }
        let t = self.partition(topic, partition);
        t.bytes_in.fetch_add(bytes as u64, Ordering::Relaxed);
        t.records_in.fetch_add(records, Ordering::Relaxed);
        t.batches_in.fetch_add(1, Ordering::Relaxed);
        super::produce_batch(records, bytes);
    }

    /// Counts record batches returned by a fetch.
    pub fn record_fetch(&self, topic: &Arc<str>, partition: i32, records: u64, bytes: usize) {
        let t = self.partition(topic, partition);
        t.bytes_out.fetch_add(bytes as u64, Ordering::Relaxed);
        t.records_out.fetch_add(records, Ordering::Relaxed);
    }

    /// Counters of one partition if it has seen traffic.
    pub fn traffic_of(&self, topic: &str, partition: i32) -> TrafficSnapshot {
        self.traffic.read().get(topic).and_then(|m| m.get(&partition)).map(|t| t.snapshot()).unwrap_or_default()
    }

    /// Drops counters of partitions for which `exists` is false (deleted topics).
    pub fn retain_traffic(&self, mut exists: impl FnMut(&str, i32) -> bool) {
        let mut t = self.traffic.write();
        t.retain(|topic, parts| {
            parts.retain(|p, _| exists(topic, *p));
            !parts.is_empty()
        });
    }

    /// Counts an accepted connection until the guard is dropped.
    pub fn connection_opened(self: &Arc<Self>) -> ConnectionGuard {
        self.active_connections.fetch_add(1, Ordering::Relaxed);
        ::metrics::counter!("sluice_connections_opened_total").increment(1);
        ConnectionGuard { metrics: self.clone() }
    }

    pub fn active_connections(&self) -> i64 {
        self.active_connections.load(Ordering::Relaxed)
    }

    /// Installs the consumer-group view the lag metrics are computed from.
    pub fn set_groups_view(&self, view: Arc<dyn GroupsView>) {
        *self.groups.write() = Some(view);
    }

    pub fn groups_view(&self) -> Option<Arc<dyn GroupsView>> {
        self.groups.read().clone()
    }

    pub fn set_startup_duration(&self, d: Duration) {
        self.startup_micros.store(d.as_micros() as u64, Ordering::Relaxed);
    }

    pub fn startup_duration(&self) -> Duration {
        Duration::from_micros(self.startup_micros.load(Ordering::Relaxed))
    }
}

/// Keeps a connection counted in `sluice_connections_active`; dropping it un-counts it, so the
/// gauge cannot drift whichever way the connection task ends.
pub struct ConnectionGuard {
    metrics: Arc<BrokerMetrics>,
}

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        self.metrics.active_connections.fetch_sub(1, Ordering::Relaxed);
    }
}
