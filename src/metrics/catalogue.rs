//! The catalogue: every metric sluice exports, with its type, labels, meaning and alerting advice.
//!
//! This table is the single source of truth for names and help text. The event-driven metrics
//! (recorded through the `metrics` facade) are described to the exporter from it at install time;
//! the scrape-time collector looks its help text up here; the tests check every name against
//! Prometheus conventions and check that every metric used by `grafana/` exists here.

/// Prometheus metric type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// Where a metric's value comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Recorded when something happens, through the `metrics` facade.
    Event,
    /// Computed from live broker state each time `/metrics` is scraped.
    Scrape,
}

/// One metric family.
#[derive(Debug)]
pub struct MetricDef {
    pub name: &'static str,
    pub kind: Kind,
    pub source: Source,
    /// Label names; every value set is bounded (see the module doc of [`crate::metrics`]).
    pub labels: &'static [&'static str],
    /// HELP text: what the value means and what changes it.
    pub help: &'static str,
    /// Whether and when to alert on it (documentation; `grafana/alerts.yml` implements it).
    pub alert: &'static str,
}

use Kind::*;
use Source::*;

macro_rules! m {
    ($name:literal, $kind:expr, $source:expr, [$($l:literal),*], $help:literal, $alert:literal) => {
        MetricDef { name: $name, kind: $kind, source: $source, labels: &[$($l),*], help: $help, alert: $alert }
    };
}

/// Every metric, grouped by subject.
pub static METRICS: &[MetricDef] = &[
    // ---- requests (network + api) ----
    m!("sluice_requests_total", Counter, Event, ["api", "version"],
       "Requests handled, by API key name and version; counted when the response is written (or dropped, for acks=0 produce).",
       "No; use its rate on dashboards. A version going to 0 after a client upgrade is worth a look."),
    m!("sluice_request_duration_seconds", Histogram, Event, ["api"],
       "Time from the last byte of a request arriving to its response being handed to the socket: queue + local + send.",
       "Yes, on the p99 of Produce above your latency objective. Fetch includes long-poll waits (max.wait.ms), so alert on Fetch only with that in mind."),
    m!("sluice_request_phase_seconds", Histogram, Event, ["api", "phase"],
       "Request time split by phase: queue (arrived, waiting behind earlier requests on the same connection), local (handler, including fetch long-poll waits and appends), send (writing the response).",
       "No; use to explain a latency alert."),
    m!("sluice_request_errors_total", Counter, Event, ["api", "error"],
       "Kafka error codes returned, per partition (Produce, Fetch) or per request, by error name.",
       "Yes on KAFKA_STORAGE_ERROR (any rate > 0 means a poisoned log); other codes are usually client mistakes."),
    m!("sluice_connections_opened_total", Counter, Event, [],
       "Client connections accepted.",
       "No; a high rate with few active connections means clients reconnect in a loop."),
    m!("sluice_connections_closed_total", Counter, Event, ["reason"],
       "Client connections closed, by reason: client (peer closed), io_error, protocol_error (malformed or unsupported request), limit (max.connections or max.connections.per.ip).",
       "Yes on a sustained rate of protocol_error or limit."),
    m!("sluice_connections_active", Gauge, Scrape, [],
       "Client connections currently open.",
       "Only against max.connections."),
    // ---- produce / fetch data path ----
    m!("sluice_produce_batch_records", Histogram, Event, [],
       "Records per appended record batch (produce requests carry one batch per partition).",
       "No; a median near 1 means producers do not batch (linger.ms=0) and cost far more CPU per record."),
    m!("sluice_produce_batch_bytes", Histogram, Event, [],
       "Bytes per appended record batch, as stored (compressed size).",
       "No."),
    m!("sluice_fetch_response_bytes", Histogram, Event, [],
       "Record bytes in each Fetch response (all partitions together).",
       "No."),
    m!("sluice_topic_bytes_in_total", Counter, Scrape, ["topic"],
       "Record batch bytes appended to the topic by producers.",
       "No; capacity planning."),
    m!("sluice_topic_records_in_total", Counter, Scrape, ["topic"],
       "Records appended to the topic by producers (idempotent retries that were deduplicated are not counted).",
       "Yes if a topic that should receive data stops (rate == 0 for your tolerance)."),
    m!("sluice_topic_batches_in_total", Counter, Scrape, ["topic"],
       "Record batches appended to the topic.",
       "No."),
    m!("sluice_topic_bytes_out_total", Counter, Scrape, ["topic"],
       "Record batch bytes returned by Fetch for the topic (consumers and, later, followers).",
       "No."),
    m!("sluice_topic_records_out_total", Counter, Scrape, ["topic"],
       "Records returned by Fetch for the topic (whole batches; a batch re-read by a retry counts again).",
       "No."),
    m!("sluice_partition_bytes_in_total", Counter, Scrape, ["topic", "partition"],
       "Record batch bytes appended to the partition by producers.",
       "No; see sluice_topic_partition_skew_ratio."),
    m!("sluice_partition_records_in_total", Counter, Scrape, ["topic", "partition"],
       "Records appended to the partition by producers.",
       "No."),
    m!("sluice_topic_records_per_batch", Gauge, Scrape, ["topic"],
       "Average records per appended batch over the last minute (since start until a minute has passed); 0 without traffic.",
       "No; low values mean producers do not batch."),
    m!("sluice_topic_partition_skew_ratio", Gauge, Scrape, ["topic"],
       "Max over mean of the per-partition produce byte rates over the last minute; 1 is perfectly even, the partition count means one partition takes everything. 1 without traffic.",
       "Warn when above 2 for a topic with several partitions: a hot key pins one partition and its consumer."),
    // ---- partition log state ----
    m!("sluice_partition_log_size_bytes", Gauge, Scrape, ["topic", "partition"],
       "Bytes in the partition's segment files.",
       "Against the disk size, per log dir."),
    m!("sluice_partition_log_segments", Gauge, Scrape, ["topic", "partition"],
       "Segment files in the partition.",
       "No; a count that only grows means retention is not deleting."),
    m!("sluice_partition_log_end_offset", Gauge, Scrape, ["topic", "partition"],
       "Offset the next appended record will get.",
       "No."),
    m!("sluice_partition_log_start_offset", Gauge, Scrape, ["topic", "partition"],
       "First offset still in the log (moves up with retention and DeleteRecords).",
       "No; compare with committed offsets (sluice_consumer_group_retention_used_ratio does)."),
    m!("sluice_partition_high_watermark", Gauge, Scrape, ["topic", "partition"],
       "Offset below which records are committed (replicated to every ISR member) and visible to consumers.",
       "No."),
    m!("sluice_partition_replicas", Gauge, Scrape, ["topic", "partition"],
       "Assigned replicas of the partition; reported by its leader only.",
       "No."),
    m!("sluice_partition_isr_size", Gauge, Scrape, ["topic", "partition"],
       "In-sync replicas of the partition (1 on a single node); reported by its leader only.",
       "Yes when it drops below sluice_partition_replicas (ISR shrink)."),
    m!("sluice_partition_min_isr", Gauge, Scrape, ["topic", "partition"],
       "The topic's min.insync.replicas: acks=all produce fails with NOT_ENOUGH_REPLICAS below it; reported by the partition's leader only.",
       "No; used by the under-min-ISR alert."),
    m!("sluice_partition_replica_lag_offsets", Gauge, Scrape, ["topic", "partition", "replica"],
       "How far a follower is behind: the leader's log end offset minus the follower's last fetch offset (the whole log before its first fetch); reported by the leader, one series per follower.",
       "No by itself (it is 0 only between appends); the ISR alerts say when a follower falls out."),
    m!("sluice_under_replicated_partitions", Gauge, Scrape, [],
       "Partitions this broker leads whose ISR is smaller than their replica set.",
       "Yes when > 0 for a few minutes: acks=all then means fewer copies than configured."),
    m!("sluice_under_min_isr_partitions", Gauge, Scrape, [],
       "Partitions this broker leads whose ISR is smaller than min.insync.replicas (or than the replica count, when that is smaller, as Kafka counts): acks=all produce to them fails.",
       "Page when > 0."),
    m!("sluice_offline_partitions", Gauge, Scrape, [],
       "Partitions without a leader in this node's copy of the cluster metadata (every node reports the same count; absent on nodes without a cluster view).",
       "Page when max over the nodes > 0: nobody can read or write those partitions."),
    m!("sluice_isr_shrinks_total", Counter, Event, [],
       "Times an ISR of a partition this broker leads lost a member (Kafka's IsrShrinksPerSec).",
       "Yes when shrinks and expands keep coming (ISR flapping): a follower keeps falling behind and catching up."),
    m!("sluice_isr_expands_total", Counter, Event, [],
       "Times an ISR of a partition this broker leads gained a member (Kafka's IsrExpandsPerSec).",
       "With sluice_isr_shrinks_total."),
    m!("sluice_partitions", Gauge, Scrape, [],
       "Partitions this broker hosts.",
       "No."),
    m!("sluice_topics", Gauge, Scrape, [],
       "Topics this broker hosts (internal ones included).",
       "No."),
    m!("sluice_log_fsync_duration_seconds", Histogram, Event, [],
       "Duration of each fdatasync of a segment's .log file (flush.messages / flush.ms, flush.acks.all, roll, shutdown).",
       "Yes when p99 exceeds ~100 ms: the disk is saturated or failing."),
    m!("sluice_log_io_backend_info", Gauge, Scrape, ["backend", "appends"],
       "Always 1; backend says which log I/O backend runs (io_uring or std), appends how segment appends reach the files (pwritev, io_uring, or mixed across log dirs' filesystems).",
       "No."),
    // ---- consumer groups (through GroupsView) ----
    m!("sluice_consumer_group_committed_offset", Gauge, Scrape, ["group", "topic", "partition"],
       "The group's committed offset for the partition (the next record it will read).",
       "No; used by the stalled-consumer alert (it stops changing while lag grows)."),
    m!("sluice_consumer_group_lag_records", Gauge, Scrape, ["group", "topic", "partition"],
       "Records between the committed offset and the high watermark: max(0, high_watermark - committed).",
       "Through lag_seconds and the trend rather than an absolute count, which depends on traffic."),
    m!("sluice_consumer_group_lag_seconds", Gauge, Scrape, ["group", "topic", "partition"],
       "Age of the oldest unconsumed record: now minus the timestamp of the batch holding the committed offset (its first record's CreateTime, or the LogAppendTime the broker stamped). 0 when caught up.",
       "Yes: warn when above 0.5 x retention.ms; the retention sweep deletes unread data at 1 x."),
    m!("sluice_consumer_group_lag_trend_records_per_second", Gauge, Scrape, ["group", "topic", "partition"],
       "d(lag)/dt: least-squares slope of lag_records over the last minute of samples (taken every 5 s). Positive means the consumer falls behind.",
       "Yes when positive for 10+ minutes together with a non-zero lag."),
    m!("sluice_consumer_group_retention_used_ratio", Gauge, Scrape, ["group", "topic", "partition"],
       "lag_seconds / retention.ms of the topic: the fraction of the retention window the oldest unread record has used. Absent when retention.ms is -1 (infinite).",
       "Yes above 0.5; at 1.0 unread records are being deleted."),
    m!("sluice_consumer_group_commit_age_seconds", Gauge, Scrape, ["group", "topic", "partition"],
       "Time since the group last committed an offset for the partition.",
       "Together with lag > 0: a stalled consumer (poison message, hung handler)."),
    m!("sluice_consumer_group_members", Gauge, Scrape, ["group"],
       "Members in the group.",
       "Yes when 0 for a group that still has lag (nobody is consuming)."),
    m!("sluice_consumer_group_generation", Gauge, Scrape, ["group"],
       "The group's generation id (increments with every completed rebalance).",
       "No."),
    m!("sluice_consumer_group_state", Gauge, Scrape, ["group", "state"],
       "1 for the group's current state (Empty, PreparingRebalance, CompletingRebalance, Stable, Dead; KIP-848 states for consumer groups).",
       "No; long stretches outside Stable show up in the rebalance alert."),
    m!("sluice_consumer_group_rebalances_total", Counter, Scrape, ["group"],
       "Rebalances the group has started since the broker started (or since the group was loaded).",
       "Yes on more than ~5 in 10 minutes: a rebalance storm (members flapping, session timeouts, max.poll.interval.ms)."),
    m!("sluice_consumer_group_last_rebalance_duration_seconds", Gauge, Scrape, ["group"],
       "How long the group's last completed rebalance took (no member consumes during it).",
       "Warn when above the session timeout."),
    m!("sluice_consumer_groups", Gauge, Scrape, [],
       "Consumer groups the coordinator knows.",
       "No."),
    m!("sluice_metrics_omitted_groups", Gauge, Scrape, [],
       "Groups left out of the per-group metrics because there are more than the cap (1000) on this broker; the cap keeps label cardinality bounded.",
       "No; if it is above 0, query the groups through the Kafka API instead."),
    // ---- process ----
    m!("sluice_build_info", Gauge, Scrape, ["version"],
       "Always 1; the version label is this binary's version.",
       "No."),
    m!("sluice_startup_duration_seconds", Gauge, Scrape, [],
       "Time the broker took to open its logs (recovery included) before serving.",
       "No; long values mean a recovery scanned a lot."),
    m!("process_cpu_seconds_total", Counter, Scrape, [],
       "User plus system CPU time of the broker process (/proc/self/stat). Standard Prometheus process name.",
       "Against the core count: a broker is CPU-bound long before disk."),
    m!("process_resident_memory_bytes", Gauge, Scrape, [],
       "Resident set size (/proc/self/statm). Standard Prometheus process name.",
       "Against the memory limit."),
    m!("process_virtual_memory_bytes", Gauge, Scrape, [],
       "Virtual memory size. Standard Prometheus process name.",
       "No."),
    m!("process_open_fds", Gauge, Scrape, [],
       "Open file descriptors (segments, indexes, sockets). Standard Prometheus process name.",
       "Yes above 80% of process_max_fds: accept fails and segments cannot roll."),
    m!("process_max_fds", Gauge, Scrape, [],
       "The RLIMIT_NOFILE soft limit. Standard Prometheus process name.",
       "No."),
    m!("process_start_time_seconds", Gauge, Scrape, [],
       "Unix time the process started. Standard Prometheus process name.",
       "No; changes() on it counts restarts."),
];

/// The definition of `name`.
///
/// # Panics
/// If `name` is not in [`METRICS`]: every caller passes a literal, and the tests render every
/// family, so a typo fails the test suite rather than a scrape.
pub fn def(name: &str) -> &'static MetricDef {
    METRICS.iter().find(|m| m.name == name).unwrap_or_else(|| panic!("metric {name} is not in the catalogue"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_prometheus_conventions() {
        let mut seen = std::collections::HashSet::new();
        for m in METRICS {
            assert!(seen.insert(m.name), "duplicate {}", m.name);
            assert!(m.name.starts_with("sluice_") || m.name.starts_with("process_"), "{}", m.name);
            assert!(m.name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'), "{}", m.name);
            assert_eq!(m.kind == Kind::Counter, m.name.ends_with("_total"), "{}: only counters end in _total", m.name);
            assert!(!m.help.is_empty() && !m.alert.is_empty(), "{}", m.name);
            for unit in ["_ms", "_millis", "_kb", "_mb", "_percent"] {
                assert!(!m.name.contains(unit), "{}: use base units", m.name);
            }
            for l in m.labels {
                assert!(["api", "version", "phase", "error", "reason", "topic", "partition", "group", "state", "backend", "appends", "replica"]
                    .contains(l), "{}: label {l} is not in the bounded set", m.name);
            }
        }
    }

    #[test]
    fn every_metric_in_grafana_dashboards_and_alerts_exists() {
        let files = [
            include_str!("../../grafana/alerts.yml"),
            include_str!("../../grafana/alerts_test.yml"),
            include_str!("../../grafana/dashboards/sluice-overview.json"),
            include_str!("../../grafana/dashboards/sluice-topics.json"),
            include_str!("../../grafana/dashboards/sluice-consumer-groups.json"),
            include_str!("../../grafana/dashboards/sluice-requests.json"),
        ];
        let mut used = 0;
        for text in files {
            let bytes = text.as_bytes();
            let mut i = 0;
            while i < bytes.len() {
                let Some(rest) = text.get(i..) else {
                    i += 1;
                    continue;
                };
                let starts = (rest.starts_with("sluice_") || rest.starts_with("process_"))
                    && (i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_'));
                if !starts {
                    i += 1;
                    continue;
                }
                let len = rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(rest.len());
                let name = &rest[..len];
                i += len;
                if name.starts_with("sluice_e2e") {
                    continue;
                }
                let base = ["_bucket", "_sum", "_count"]
                    .iter()
                    .find_map(|s| name.strip_suffix(s).filter(|b| METRICS.iter().any(|m| m.name == *b && m.kind == Kind::Histogram)))
                    .unwrap_or(name);
                assert!(METRICS.iter().any(|m| m.name == base), "grafana/ uses {name}, which sluice does not export");
                used += 1;
            }
        }
        assert!(used > 50, "only {used} metric references found");
    }
}
