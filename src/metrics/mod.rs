//! Metrics: every metric sluice exports, what it means, and whether to alert on it.
//!
//! Owns the metric catalogue ([`catalogue::METRICS`]: name, type, labels, help text, alerting
//! advice), recording events through the `metrics` facade, the scrape-time collector for state
//! gauges, the consumer-lag computation over the [`GroupsView`] the group coordinator provides,
//! and the `/metrics` HTTP endpoint. It does not own what it measures: handlers, the log and the
//! group coordinator call in here, never the other way round (the collector only reads).
//!
//! # Two sources, one exposition
//! ```text
//!  events (requests, errors, batches, fsyncs,    --> metrics facade --> PrometheusRecorder --+
//!          connections opened/closed)                                                         |
//!  live state (partitions, logs, ISR, traffic     --> collector at scrape time --------------+--> /metrics
//!          atomics, groups + lag, /proc/self)
//! ```
//! Counters and histograms of events go through the facade (`metrics` +
//! `metrics-exporter-prometheus`). Everything that describes *state* — log offsets and sizes, ISR,
//! per-topic traffic totals, lag, group membership, process stats — is computed from live state
//! right before rendering, so it cannot drift from it and series of deleted topics disappear
//! with them. The per-partition traffic counters are atomics in [`BrokerMetrics`] (a field of the
//! broker), exported by the collector for partitions that exist.
//!
//! # Naming
//! `sluice_` prefix, base units (`_seconds`, `_bytes`), `_total` for counters only. The process
//! metrics keep the standard `process_*` names every Prometheus client library uses, so generic
//! dashboards and alerts work unchanged.
//!
//! # Label cardinality (all bounded)
//! - `api`: Kafka API key names this broker implements (~20); `version`: 0..=31 or `other`.
//! - `error`: Kafka error names (a fixed table of ~130); `reason`, `phase`, `backend`, `appends`, `state`:
//!   small fixed sets.
//! - `topic`, `partition`: topics and partitions that exist on this broker (only existing ones
//!   are counted, so a client cannot mint labels by naming topics that do not exist).
//! - `replica`: the broker ids of a partition's replicas, on the partitions this broker leads
//!   (at most the replication factor less one series per partition).
//! - `group`: consumer group ids are client-chosen, so per-group series are capped at
//!   [`collector::MAX_GROUPS`] groups (in name order); `sluice_metrics_omitted_groups` says how
//!   many were left out. Client ids and hosts never become labels.
//!
//! # What to alert on
//! Each catalogue entry says; `grafana/alerts.yml` implements the queue-health alerts (lag near
//! retention, growing lag, ISR shrink, under-min-ISR, rebalance storms, stalled consumers).
//!
//! # Cost
//! Per request: one counter increment and four histogram observations through handles
//! registered on an API's first request (`RequestHandles`: no key hashing or lookup after that).
//! Per produced batch: a read-locked map lookup, three relaxed atomic adds and two histogram
//! observations. Scrape cost is proportional to partitions + committed offsets.

pub mod catalogue;
pub mod collector;
pub mod http;
pub mod lag;
pub mod process;
pub mod sampler;
pub mod state;
pub mod text;

use std::collections::HashMap;
use std::sync::OnceLock;
use std::time::Duration;

use kafka_protocol::messages::ApiKey;
use kafka_protocol::ResponseError;
use ::metrics::{Counter, Histogram};
use metrics_exporter_prometheus::{BuildError, Matcher, PrometheusBuilder, PrometheusHandle};
use parking_lot::Mutex;

pub use lag::{CommittedOffset, GroupSummary, GroupsView};
pub use state::{BrokerMetrics, ConnectionGuard};

use crate::broker::Broker;

/// Latency buckets: 100 µs (an in-page-cache produce) to 30 s (long fetch polls).
const SECONDS_BUCKETS: &[f64] =
    &[0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];
/// Records per batch: 1 (no batching) to the tens of thousands a tuned producer sends.
const RECORD_BUCKETS: &[f64] = &[1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0, 10000.0, 50000.0];
/// Sizes: 64 B to 64 MiB, powers of four.
const BYTE_BUCKETS: &[f64] = &[
    64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0, 4194304.0, 16777216.0, 67108864.0,
];

/// Why the recorder could not be installed.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    #[error("configuring the Prometheus recorder")]
    Build(#[source] BuildError),
    #[error("a global metrics recorder is already installed")]
    AlreadyInstalled,
}

/// Installs the Prometheus recorder as the global `metrics` recorder and describes every event
/// metric from the catalogue. Call once, before serving. Without it the facade calls are no-ops.
pub fn install() -> Result<PrometheusHandle, InstallError> {
    let builder = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), SECONDS_BUCKETS)
        .and_then(|b| b.set_buckets_for_metric(Matcher::Full("sluice_produce_batch_records".into()), RECORD_BUCKETS))
        .and_then(|b| b.set_buckets_for_metric(Matcher::Suffix("_bytes".into()), BYTE_BUCKETS))
        .map_err(InstallError::Build)?;
    let recorder = builder.build_recorder();
    let handle = recorder.handle();
    ::metrics::set_global_recorder(recorder).map_err(|_| InstallError::AlreadyInstalled)?;
    for m in catalogue::METRICS.iter().filter(|m| m.source == catalogue::Source::Event) {
        match m.kind {
            catalogue::Kind::Counter => ::metrics::describe_counter!(m.name, m.help),
            catalogue::Kind::Gauge => ::metrics::describe_gauge!(m.name, m.help),
            catalogue::Kind::Histogram => ::metrics::describe_histogram!(m.name, m.help),
        }
    }
    Ok(handle)
}

/// The full exposition: facade metrics (if installed) then the scrape-time families.
pub fn render(broker: &Broker, handle: Option<&PrometheusHandle>) -> String {
    let mut out = handle.map(|h| h.render()).unwrap_or_default();
    if !out.is_empty() && !out.ends_with('\n') {
        out.push('\n');
    }
    collector::collect(broker, broker.now_ms()).write_to(&mut out);
    out
}

/// The `api` label: the API key's name, interned once per key.
pub fn api_name(api: ApiKey) -> &'static str {
    static NAMES: OnceLock<HashMap<i16, &'static str>> = OnceLock::new();
    let names = NAMES.get_or_init(|| {
        ApiKey::iter().map(|k| (k as i16, &*Box::leak(format!("{k:?}").into_boxed_str()))).collect()
    });
    names.get(&(api as i16)).copied().unwrap_or("Unknown")
}

const VERSION_LABELS: [&str; 32] = [
    "0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12", "13", "14", "15", "16", "17", "18", "19", "20",
    "21", "22", "23", "24", "25", "26", "27", "28", "29", "30", "31",
];

fn version_label(version: i16) -> &'static str {
    usize::try_from(version).ok().and_then(|v| VERSION_LABELS.get(v)).copied().unwrap_or("other")
}

/// `KafkaStorageError` -> `KAFKA_STORAGE_ERROR` (Kafka's own spelling of error names).
fn upper_snake(camel: &str) -> String {
    let mut out = String::with_capacity(camel.len() + 8);
    for (i, c) in camel.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_uppercase());
    }
    out
}

/// The `error` label for a Kafka error code, interned (codes form a fixed, small set).
pub fn error_name(code: i16) -> &'static str {
    static NAMES: OnceLock<Mutex<HashMap<i16, &'static str>>> = OnceLock::new();
    let mut names = NAMES.get_or_init(|| Mutex::new(HashMap::new())).lock();
    names.entry(code).or_insert_with(|| {
        let name = match ResponseError::try_from_code(code) {
            Some(e) => upper_snake(&format!("{e:?}")),
            None => format!("CODE_{code}"),
        };
        Box::leak(name.into_boxed_str())
    })
}

/// Time a request spent in each phase (see `sluice_request_phase_seconds`).
#[derive(Debug, Clone, Copy, Default)]
pub struct RequestTimes {
    pub queue: Duration,
    pub local: Duration,
    pub send: Duration,
}

/// The per-request metrics of one API, registered on its first request. The facade's macros
/// build, hash and look up their key on every call, which cost about 5% of broker CPU with small
/// produce requests; these handles are looked up once per API and version instead. A handle taken
/// before [`install`] stays a no-op, which is why `main` installs the recorder before serving.
struct RequestHandles {
    duration: Histogram,
    queue: Histogram,
    local: Histogram,
    send: Histogram,
    /// `sluice_requests_total` by version label (last slot: "other").
    total: [OnceLock<Counter>; VERSION_LABELS.len() + 1],
}

fn request_handles(api: ApiKey) -> &'static RequestHandles {
    static BY_KEY: OnceLock<Box<[OnceLock<RequestHandles>]>> = OnceLock::new();
    let slots = BY_KEY.get_or_init(|| {
        let keys = ApiKey::iter().map(|k| k as i16 as usize).max().unwrap_or(0) + 1;
        (0..keys).map(|_| OnceLock::new()).collect()
    });
    // Every ApiKey has a slot (the table is sized by the largest one).
    slots[api as i16 as usize].get_or_init(|| {
        let api = api_name(api);
        RequestHandles {
            duration: ::metrics::histogram!("sluice_request_duration_seconds", "api" => api),
            queue: ::metrics::histogram!("sluice_request_phase_seconds", "api" => api, "phase" => "queue"),
            local: ::metrics::histogram!("sluice_request_phase_seconds", "api" => api, "phase" => "local"),
            send: ::metrics::histogram!("sluice_request_phase_seconds", "api" => api, "phase" => "send"),
            total: [const { OnceLock::new() }; VERSION_LABELS.len() + 1],
        }
    })
}

/// Records one handled request.
pub fn request_completed(api: ApiKey, version: i16, t: RequestTimes) {
    let h = request_handles(api);
    let v = usize::try_from(version).ok().filter(|&v| v < VERSION_LABELS.len()).unwrap_or(VERSION_LABELS.len());
    h.total[v]
        .get_or_init(|| ::metrics::counter!("sluice_requests_total", "api" => api_name(api), "version" => version_label(version)))
        .increment(1);
    h.duration.record((t.queue + t.local + t.send).as_secs_f64());
    h.queue.record(t.queue.as_secs_f64());
    h.local.record(t.local.as_secs_f64());
    h.send.record(t.send.as_secs_f64());
}

/// Records a non-zero Kafka error code returned for `api` (per partition where the API has them).
pub fn response_error(api: ApiKey, code: i16) {
    if code != 0 {
        ::metrics::counter!("sluice_request_errors_total", "api" => api_name(api), "error" => error_name(code)).increment(1);
    }
}

/// Why a client connection ended (the `reason` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseReason {
    Client,
    IoError,
    ProtocolError,
    Limit,
}

/// Records a closed (or refused) client connection.
pub fn connection_closed(reason: CloseReason) {
    let reason = match reason {
        CloseReason::Client => "client",
        CloseReason::IoError => "io_error",
        CloseReason::ProtocolError => "protocol_error",
        CloseReason::Limit => "limit",
    };
    ::metrics::counter!("sluice_connections_closed_total", "reason" => reason).increment(1);
}

/// Records one appended produce batch's size.
pub fn produce_batch(records: u64, bytes: usize) {
    // Registered once, as the request handles are (see `RequestHandles`).
    static HANDLES: OnceLock<(Histogram, Histogram)> = OnceLock::new();
    let (r, b) = HANDLES.get_or_init(|| {
        (::metrics::histogram!("sluice_produce_batch_records"), ::metrics::histogram!("sluice_produce_batch_bytes"))
    });
    r.record(records as f64);
    b.record(bytes as f64);
}

/// Records the record bytes of one Fetch response.
pub fn fetch_response(bytes: usize) {
    static HANDLE: OnceLock<Histogram> = OnceLock::new();
    HANDLE.get_or_init(|| ::metrics::histogram!("sluice_fetch_response_bytes")).record(bytes as f64);
}

/// Records one fdatasync of a segment `.log` file.
pub fn fsync_completed(elapsed: Duration) {
    ::metrics::histogram!("sluice_log_fsync_duration_seconds").record(elapsed.as_secs_f64());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_interned_kafka_names() {
        assert_eq!(api_name(ApiKey::Produce), "Produce");
        assert_eq!(api_name(ApiKey::DescribeTopicPartitions), "DescribeTopicPartitions");
        assert_eq!(error_name(56), "KAFKA_STORAGE_ERROR");
        assert_eq!(error_name(3), "UNKNOWN_TOPIC_OR_PARTITION");
        assert!(std::ptr::eq(error_name(3), error_name(3)));
        assert_eq!(version_label(12), "12");
        assert_eq!(version_label(-1), "other");
        assert_eq!(version_label(99), "other");
    }
}
