//! Broker configuration: Kafka's `server.properties` keys, names and defaults.
//!
//! Owns parsing a properties file plus `--override key=value` pairs into a validated
//! [`BrokerConfig`], and the table of topic-level configs ([`topic`]) that topics may override.
//! It does not own applying configs to running state.
//!
//! # Invariants
//! - Every key sluice acts on is validated at startup; an invalid value stops startup with a
//!   [`ConfigError`] naming the key, the value and what would be accepted.
//! - Settings whose omission would make the broker less secure or less durable than configured
//!   (TLS and SASL listeners and keys, an authorizer, a multi-node quorum) stop startup with a
//!   [`ConfigError::Refused`] naming the key, the value and what sluice supports ([`refused`]);
//!   they are never ignored.
//! - Keys Kafka knows but sluice does not act on (thread counts, replication factors of internal
//!   topics, ...) are accepted so that a stock Kafka `server.properties` starts cleanly; they and
//!   truly unknown keys are reported back as ignored ([`Loaded::ignored_keys`]), unknown ones also
//!   as warnings, never silently dropped. `--strict-config` makes any ignored key an error.
//! - Later sources win: defaults < properties file < overrides, in order given.

pub mod properties;
pub mod refused;
pub mod topic;

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::log::IoBackendChoice;

pub use properties::parse_properties;

/// A configuration value that failed validation, or an unreadable config file.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("Invalid value {value} for configuration {key}: {expected}")]
    InvalidValue { key: String, value: String, expected: String },
    #[error("cannot read config file {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("malformed override {0:?}: expected key=value")]
    MalformedOverride(String),
    /// A setting sluice cannot honour and will not ignore (see [`refused`]).
    #[error("Refusing configuration {key}={value}: {reason}")]
    Refused { key: String, value: String, reason: String },
    /// `--strict-config` and keys sluice would ignore.
    #[error("--strict-config: {} configuration key(s) would be ignored: {}", .0.len(), .0.join(", "))]
    Ignored(Vec<String>),
}

/// A listener endpoint parsed from `listeners` / `advertised.listeners`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// Listener name, e.g. `PLAINTEXT`.
    pub name: String,
    /// Host to bind or advertise; empty means all interfaces (Kafka's `PLAINTEXT://:9092`).
    pub host: String,
    /// Port; 0 asks the OS for a free port (tests use this).
    pub port: u16,
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}://{}:{}", self.name, self.host, self.port)
    }
}

/// What this process runs (`process.roles`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Roles {
    /// Broker and controller in one process, a one-voter quorum of itself (the default).
    Combined,
    /// A voter of the metadata quorum only: it serves no clients' data.
    Controller,
    /// A broker that is not a voter: it observes the quorum of `controller.quorum.voters`.
    Broker,
}

impl Roles {
    /// Whether this process serves clients' data.
    pub fn has_broker(self) -> bool {
        self != Roles::Controller
    }
}

/// The validated broker configuration.
#[derive(Debug, Clone)]
pub struct BrokerConfig {
    pub node_id: i32,
    pub roles: Roles,
    /// `controller.quorum.voters`: node id -> `host:port` of its controller listener.
    pub quorum_voters: BTreeMap<i32, String>,
    /// `controller.quorum.bootstrap.servers`: `host:port` of controllers to learn the voters
    /// from (a broker-only node without `controller.quorum.voters`).
    pub quorum_bootstrap_servers: Vec<String>,
    /// `controller.listener.names`.
    pub controller_listener_names: Vec<String>,
    /// `metadata.log.dir`, else the first of `log.dirs`: where the quorum keeps its files.
    pub metadata_log_dir: PathBuf,
    pub listeners: Vec<Endpoint>,
    /// Empty means "advertise what we bound".
    pub advertised_listeners: Vec<Endpoint>,
    pub log_dirs: Vec<PathBuf>,
    pub num_partitions: i32,
    pub default_replication_factor: i16,
    pub auto_create_topics_enable: bool,
    pub delete_topic_enable: bool,
    pub log_retention_check_interval_ms: u64,
    /// `producer.id.expiration.ms`: idempotent-producer state is forgotten this long after the
    /// producer's last batch (by its timestamp), as in Kafka.
    pub producer_id_expiration_ms: i64,
    pub socket_request_max_bytes: usize,
    pub max_connections: usize,
    pub max_connections_per_ip: usize,
    /// `socket.send.buffer.bytes`: SO_SNDBUF of accepted connections; `None` (-1) keeps the
    /// OS default (autotuned).
    pub socket_send_buffer_bytes: Option<usize>,
    /// `socket.receive.buffer.bytes`: SO_RCVBUF of accepted connections when set (-1: the OS
    /// default). Unset, the kernel autotunes it, where Kafka's default is 102400: rdkbench
    /// produce (2,000,000 x 1 KiB, 16 partitions, three alternating runs each, noisy) ran at
    /// 521 (acks=1) and 227 (acks=all) MiB/s median with 102400, 635 and 294 autotuned.
    pub socket_receive_buffer_bytes: Option<usize>,
    pub io_backend: IoBackendChoice,
    /// `log.io.direct`: appends bypass the page cache (`O_DIRECT`); see `log::io::direct`.
    pub io_direct: bool,
    /// `log.io.direct.reads`: fetches of uncached ranges of directly appended files read them
    /// with `O_DIRECT` rather than through the page cache; see `log::io::direct_read`.
    pub io_direct_reads: bool,
    /// `cpu.idle.poll.us`: after each request, keep the broker's CPUs from halting this long
    /// (0: off, the default); see `network::idle_poll`.
    pub cpu_idle_poll_us: u64,
    pub fetch_session_cache_slots: usize,
    /// `broker.session.timeout.ms`: the active controller fences a broker it has not heard a
    /// heartbeat from for this long.
    pub broker_session_timeout_ms: i64,
    /// `broker.heartbeat.interval.ms`: how often a broker heartbeats to the controller.
    pub broker_heartbeat_interval_ms: u64,
    /// `replica.lag.time.max.ms`: a follower not caught up for this long leaves the ISR.
    pub replica_lag_time_max_ms: i64,
    /// `replica.selector.class` is Kafka's `RackAwareReplicaSelector` (KIP-392): a leader names
    /// a follower in the consumer's rack as its preferred read replica. Unset: consumers read
    /// from leaders (a follower still serves a consumer that comes to it).
    pub replica_selector_rack_aware: bool,
    /// `auto.leader.rebalance.enable`: the active controller gives partitions back to their
    /// preferred leaders every `leader.imbalance.check.interval.seconds` where a broker's share
    /// of partitions it prefers but does not lead is over `leader.imbalance.per.broker.percentage`.
    pub auto_leader_rebalance_enable: bool,
    pub leader_imbalance_check_interval_seconds: i64,
    pub leader_imbalance_per_broker_percentage: i64,
    /// Broker-level defaults for topic configs, keyed by *topic* config name
    /// (`retention.ms`, `segment.bytes`, ...), already validated.
    pub topic_defaults: BTreeMap<String, String>,
    /// Where `/metrics` and `/healthz` are served (`metrics.listener`); `None` when disabled.
    pub metrics_listener: Option<MetricsListener>,
    /// `log.level`: a tracing filter (`info`, `sluice=debug,warn`); `SLUICE_LOG` overrides it.
    pub log_level: String,
    /// `log.format`: `text` or `json`; `SLUICE_LOG_FORMAT` overrides it.
    pub log_format: LogFormat,
    /// Every key/value as given (file + overrides), for DescribeConfigs on the broker.
    pub raw: BTreeMap<String, String>,
}

/// The metrics HTTP listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricsListener {
    /// `host:port` to bind (IPv6 hosts in brackets); port 0 picks a free port.
    pub addr: String,
    /// False for the built-in default: if its port is taken the broker warns and runs without
    /// metrics instead of failing, so several brokers (tests) can run on one host.
    pub explicit: bool,
}

/// Log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

/// Default `metrics.listener`: loopback only, so topic and group names are not published to the
/// network unless an operator opts in (e.g. `metrics.listener=0.0.0.0:9644`). 9644 is the port
/// Redpanda uses for its metrics, so existing scrape configs for Kafka-compatible brokers fit.
pub const DEFAULT_METRICS_LISTENER: &str = "127.0.0.1:9644";

/// A parsed config plus the keys it did not recognise (the caller logs them).
pub struct Loaded {
    pub config: BrokerConfig,
    pub unknown_keys: Vec<String>,
    /// Every key given that sluice does not act on: the unknown ones and the Kafka keys in
    /// [`IGNORED_KAFKA_KEYS`], sorted.
    pub ignored_keys: Vec<String>,
}

/// Broker keys sluice reads directly, with Kafka's default.
const BROKER_KEYS: &[(&str, &str)] = &[
    ("node.id", "1"),
    ("listeners", "PLAINTEXT://localhost:9092"),
    ("advertised.listeners", ""),
    ("log.dirs", ""),
    ("log.dir", "./data"),
    ("num.partitions", "1"),
    ("default.replication.factor", "1"),
    ("auto.create.topics.enable", "true"),
    ("delete.topic.enable", "true"),
    ("log.retention.check.interval.ms", "300000"),
    ("producer.id.expiration.ms", "86400000"),
    ("socket.request.max.bytes", "104857600"),
    ("max.connections", "2147483647"),
    ("max.connections.per.ip", "2147483647"),
    ("socket.send.buffer.bytes", "102400"),
    ("log.io.backend", "auto"),
    ("log.io.direct", "true"),
    ("log.io.direct.reads", "true"),
    ("cpu.idle.poll.us", "0"),
    ("max.incremental.fetch.session.cache.slots", "1000"),
    ("broker.session.timeout.ms", "9000"),
    ("broker.heartbeat.interval.ms", "2000"),
    ("replica.lag.time.max.ms", "30000"),
    ("replica.selector.class", ""),
    ("auto.leader.rebalance.enable", "true"),
    ("leader.imbalance.check.interval.seconds", "300"),
    ("leader.imbalance.per.broker.percentage", "10"),
    ("metrics.listener", DEFAULT_METRICS_LISTENER),
    ("log.level", "info"),
    ("log.format", "text"),
];

/// Keys from Kafka's broker config that sluice reads outside this module, or checks here.
const READ_ELSEWHERE_KEYS: &[&str] = &[
    "broker.id",
    // Checked by `refused` (one combined node, or a dedicated controller of a quorum) and read
    // into `roles`, `quorum_voters`, `controller_listener_names`, `metadata_log_dir`.
    "process.roles",
    "controller.quorum.voters",
    "controller.quorum.bootstrap.servers",
    "controller.listener.names",
    "listener.security.protocol.map",
    "metadata.log.dir",
    "socket.receive.buffer.bytes",
    // Read and validated by the group coordinator (`group::config`).
    "group.initial.rebalance.delay.ms",
    "group.min.session.timeout.ms",
    "group.max.session.timeout.ms",
    "group.max.size",
    "offsets.topic.num.partitions",
    "offsets.retention.minutes",
    "offsets.retention.check.interval.ms",
    "offset.metadata.max.bytes",
    "offsets.topic.segment.bytes",
    "group.consumer.session.timeout.ms",
    "group.consumer.heartbeat.interval.ms",
    "group.consumer.max.size",
    // Read by the log cleaner task.
    "log.cleaner.enable",
    "log.cleaner.backoff.ms",
    // Sent in the broker's registration; Metadata, DescribeCluster and the rack-aware replica
    // selector read it from the image.
    "broker.rack",
];

/// Keys from Kafka's broker config that sluice accepts without acting on them: tuning with no
/// meaning for sluice (thread counts, queue sizes) or for a single node (replication factors and
/// ISR sizes of internal topics, leader rebalancing). Listed as ignored at startup, and refused
/// by `--strict-config`.
pub const IGNORED_KAFKA_KEYS: &[&str] = &[
    "inter.broker.listener.name",
    "num.network.threads",
    "num.io.threads",
    "num.recovery.threads.per.data.dir",
    "num.replica.fetchers",
    "num.replica.alter.log.dirs.threads",
    "background.threads",
    "offsets.topic.replication.factor",
    "transaction.state.log.replication.factor",
    "transaction.state.log.min.isr",
    "transaction.state.log.num.partitions",
    "share.coordinator.state.topic.replication.factor",
    "share.coordinator.state.topic.min.isr",
    "log.cleaner.threads",
    "log.cleaner.dedupe.buffer.size",
    "log.cleaner.io.buffer.size",
    "queued.max.requests",
    "log.flush.scheduler.interval.ms",
    "log.flush.offset.checkpoint.interval.ms",
    "log.flush.start.offset.checkpoint.interval.ms",
    "connections.max.idle.ms",
    "group.coordinator.rebalance.protocols",
    "metric.reporters",
    "metrics.num.samples",
    "metrics.sample.window.ms",
    "metrics.recording.level",
    "zookeeper.connect",
    "zookeeper.connection.timeout.ms",
    "zookeeper.session.timeout.ms",
];

impl BrokerConfig {
    /// Whether this node's broker takes its topics from a metadata quorum: every broker does (a
    /// single node is the one voter of its own quorum); a dedicated controller has no broker.
    pub fn is_cluster_member(&self) -> bool {
        self.roles != Roles::Controller
    }

    /// Whether this node is the only voter of its quorum (a single node, configured or not).
    pub fn is_single_voter(&self) -> bool {
        self.roles == Roles::Combined && self.quorum_voters.len() <= 1
    }

    /// Builds and validates a config from `(key, value)` pairs in precedence order.
    pub fn from_pairs<I>(pairs: I) -> Result<Loaded, ConfigError>
    where
        I: IntoIterator<Item = (String, String)>,
    {
        let mut raw = BTreeMap::new();
        for (k, v) in pairs {
            raw.insert(k, v);
        }
        let get = |key: &str| -> String {
            raw.get(key).cloned().unwrap_or_else(|| {
                BROKER_KEYS.iter().find(|(k, _)| *k == key).map(|(_, d)| d.to_string()).unwrap_or_default()
            })
        };

        let unknown_keys = unknown_keys(raw.keys().map(String::as_str));
        let ignored_keys = ignored_keys(raw.keys().map(String::as_str));

        let node_id = match raw.get("node.id").or_else(|| raw.get("broker.id")) {
            Some(v) => parse_int::<i32>("node.id", v, 0, i32::MAX)?,
            None => 1,
        };
        let listeners = parse_listeners("listeners", &get("listeners"))?;
        if listeners.is_empty() {
            return Err(invalid("listeners", "", "at least one listener such as PLAINTEXT://localhost:9092"));
        }
        let advertised_listeners = parse_listeners("advertised.listeners", &get("advertised.listeners"))?;
        refused::check(&raw, &listeners, node_id)?;
        let dirs = {
            let d = get("log.dirs");
            if d.trim().is_empty() { get("log.dir") } else { d }
        };
        let log_dirs: Vec<PathBuf> =
            dirs.split(',').map(str::trim).filter(|s| !s.is_empty()).map(PathBuf::from).collect();
        if log_dirs.is_empty() {
            return Err(invalid("log.dirs", &dirs, "a comma-separated list of directories"));
        }

        let io_backend = match get("log.io.backend").as_str() {
            "auto" => IoBackendChoice::Auto,
            "uring" | "io_uring" => IoBackendChoice::Uring,
            "std" => IoBackendChoice::Std,
            other => return Err(invalid("log.io.backend", other, "one of auto, uring, std")),
        };

        let topic_defaults = topic::defaults_from_broker(&raw)?;
        let metrics_listener = parse_metrics_listener(&get("metrics.listener"), raw.contains_key("metrics.listener"))?;
        let log_level = get("log.level").trim().to_string();
        if tracing_subscriber::EnvFilter::try_new(&log_level).is_err() || log_level.is_empty() {
            return Err(invalid("log.level", &log_level, "a level (error, warn, info, debug, trace) or a tracing filter such as sluice=debug,info"));
        }
        let log_format = match get("log.format").trim() {
            "text" => LogFormat::Text,
            "json" => LogFormat::Json,
            other => return Err(invalid("log.format", other, "text or json")),
        };

        let roles = match raw.get("process.roles").map(|r| refused::list(r)) {
            Some(r) if r == ["controller"] => Roles::Controller,
            Some(r) if r == ["broker"] => Roles::Broker,
            _ => Roles::Combined,
        };
        let config = BrokerConfig {
            node_id,
            roles,
            quorum_voters: refused::parse_voters(raw.get("controller.quorum.voters").map(String::as_str).unwrap_or(""))?,
            quorum_bootstrap_servers: refused::list(raw.get("controller.quorum.bootstrap.servers").map(String::as_str).unwrap_or("")),
            controller_listener_names: refused::list(raw.get("controller.listener.names").map(String::as_str).unwrap_or("")),
            metadata_log_dir: raw
                .get("metadata.log.dir")
                .filter(|d| !d.trim().is_empty())
                .map(|d| PathBuf::from(d.trim()))
                .unwrap_or_else(|| log_dirs[0].clone()),
            listeners,
            advertised_listeners,
            log_dirs,
            num_partitions: parse_int("num.partitions", &get("num.partitions"), 1, i32::MAX)?,
            default_replication_factor: parse_int(
                "default.replication.factor",
                &get("default.replication.factor"),
                1,
                i16::MAX,
            )?,
            auto_create_topics_enable: parse_bool("auto.create.topics.enable", &get("auto.create.topics.enable"))?,
            delete_topic_enable: parse_bool("delete.topic.enable", &get("delete.topic.enable"))?,
            log_retention_check_interval_ms: parse_int(
                "log.retention.check.interval.ms",
                &get("log.retention.check.interval.ms"),
                1,
                u64::MAX,
            )?,
            producer_id_expiration_ms: parse_int(
                "producer.id.expiration.ms",
                &get("producer.id.expiration.ms"),
                1,
                i32::MAX as i64,
            )?,
            socket_request_max_bytes: parse_int(
                "socket.request.max.bytes",
                &get("socket.request.max.bytes"),
                1,
                i32::MAX as usize,
            )?,
            max_connections: parse_int("max.connections", &get("max.connections"), 0, i32::MAX as usize)?,
            max_connections_per_ip: parse_int(
                "max.connections.per.ip",
                &get("max.connections.per.ip"),
                0,
                i32::MAX as usize,
            )?,
            socket_send_buffer_bytes: parse_socket_buffer("socket.send.buffer.bytes", &get("socket.send.buffer.bytes"))?,
            // Only when set: unlike Kafka (102400), sluice leaves the receive buffer to the
            // kernel's autotuning by default (see the field).
            socket_receive_buffer_bytes: match raw.get("socket.receive.buffer.bytes") {
                Some(v) => parse_socket_buffer("socket.receive.buffer.bytes", v)?,
                None => None,
            },
            io_backend,
            io_direct: parse_bool("log.io.direct", &get("log.io.direct"))?,
            io_direct_reads: parse_bool("log.io.direct.reads", &get("log.io.direct.reads"))?,
            cpu_idle_poll_us: parse_int("cpu.idle.poll.us", &get("cpu.idle.poll.us"), 0, 1_000_000)?,
            fetch_session_cache_slots: parse_int(
                "max.incremental.fetch.session.cache.slots",
                &get("max.incremental.fetch.session.cache.slots"),
                0,
                i32::MAX as usize,
            )?,
            broker_session_timeout_ms: parse_int("broker.session.timeout.ms", &get("broker.session.timeout.ms"), 1, i32::MAX as i64)?,
            replica_lag_time_max_ms: parse_int("replica.lag.time.max.ms", &get("replica.lag.time.max.ms"), 1, i64::MAX)?,
            replica_selector_rack_aware: parse_replica_selector(&get("replica.selector.class"))?,
            auto_leader_rebalance_enable: parse_bool("auto.leader.rebalance.enable", &get("auto.leader.rebalance.enable"))?,
            leader_imbalance_check_interval_seconds: parse_int(
                "leader.imbalance.check.interval.seconds",
                &get("leader.imbalance.check.interval.seconds"),
                1,
                i32::MAX as i64,
            )?,
            leader_imbalance_per_broker_percentage: parse_int(
                "leader.imbalance.per.broker.percentage",
                &get("leader.imbalance.per.broker.percentage"),
                0,
                100,
            )?,
            broker_heartbeat_interval_ms: parse_int(
                "broker.heartbeat.interval.ms",
                &get("broker.heartbeat.interval.ms"),
                1,
                i32::MAX as u64,
            )?,
            topic_defaults,
            metrics_listener,
            log_level,
            log_format,
            raw,
        };
        Ok(Loaded { config, unknown_keys, ignored_keys })
    }

    /// The value of a broker key as configured, or its default when sluice knows one.
    pub fn broker_value(&self, key: &str) -> Option<String> {
        if let Some(v) = self.raw.get(key) {
            return Some(v.clone());
        }
        if let Some(topic_key) = topic::broker_key_to_topic(key) {
            return self.topic_defaults.get(topic_key).cloned();
        }
        BROKER_KEYS.iter().find(|(k, _)| *k == key).map(|(_, d)| d.to_string())
    }

    /// Every broker key with a known value, for DescribeConfigs.
    pub fn broker_entries(&self) -> Vec<(String, String, bool)> {
        let mut out: BTreeMap<String, (String, bool)> = BTreeMap::new();
        for (k, d) in BROKER_KEYS {
            out.insert(k.to_string(), (d.to_string(), false));
        }
        for (topic_key, def) in topic::TOPIC_CONFIGS {
            if let Some(bk) = def.broker_key {
                let v = self.topic_defaults.get(*topic_key).cloned().unwrap_or_default();
                out.insert(bk.to_string(), (v, false));
            }
        }
        // Kafka's coarser synonyms of log.retention.ms / log.roll.ms, listed as Kafka lists them.
        for (k, d) in [("log.retention.hours", "168"), ("log.roll.hours", "168"), ("log.roll.jitter.hours", "0")] {
            out.insert(k.to_string(), (d.to_string(), false));
        }
        for (k, v) in &self.raw {
            out.insert(k.clone(), (v.clone(), true));
        }
        out.insert("node.id".into(), (self.node_id.to_string(), self.raw.contains_key("node.id")));
        out.into_iter().map(|(k, (v, set))| (k, v, set)).collect()
    }
}

/// The keys neither sluice nor Kafka's broker config knows (reported as warnings, also when
/// another key's value is invalid).
pub fn unknown_keys<'a>(keys: impl Iterator<Item = &'a str>) -> Vec<String> {
    keys.filter(|key| {
        !(BROKER_KEYS.iter().any(|(k, _)| k == key)
            || READ_ELSEWHERE_KEYS.contains(key)
            || IGNORED_KAFKA_KEYS.contains(key)
            || refused::is_checked_key(key)
            || topic::broker_key_to_topic(key).is_some())
    })
    .map(String::from)
    .collect()
}

/// The keys sluice does not act on: unknown ones and [`IGNORED_KAFKA_KEYS`], sorted, each once.
pub fn ignored_keys<'a>(keys: impl Iterator<Item = &'a str>) -> Vec<String> {
    let keys: std::collections::BTreeSet<&str> = keys.collect();
    let mut out = unknown_keys(keys.iter().copied());
    out.extend(keys.iter().filter(|k| IGNORED_KAFKA_KEYS.contains(k)).map(|k| k.to_string()));
    out.sort();
    out
}

/// Kafka's rack-aware replica selector, the one `replica.selector.class` sluice implements.
pub const RACK_AWARE_REPLICA_SELECTOR: &str = "org.apache.kafka.common.replica.RackAwareReplicaSelector";

/// `replica.selector.class`: unset (leaders serve consumers) or Kafka's rack-aware selector; a
/// custom class cannot be loaded into sluice, so it is refused rather than ignored.
fn parse_replica_selector(value: &str) -> Result<bool, ConfigError> {
    match value.trim() {
        "" => Ok(false),
        RACK_AWARE_REPLICA_SELECTOR => Ok(true),
        other => Err(invalid(
            "replica.selector.class",
            other,
            &format!("{RACK_AWARE_REPLICA_SELECTOR}, or unset (custom selector classes are not supported)"),
        )),
    }
}

pub(crate) fn invalid(key: &str, value: &str, expected: &str) -> ConfigError {
    ConfigError::InvalidValue { key: key.to_string(), value: value.to_string(), expected: expected.to_string() }
}

/// Parses an integer within `[min, max]`, naming the key on failure.
pub(crate) fn parse_int<T>(key: &str, value: &str, min: T, max: T) -> Result<T, ConfigError>
where
    T: std::str::FromStr + PartialOrd + std::fmt::Display + Copy,
{
    let v = value.trim();
    match v.parse::<T>() {
        Ok(n) if n >= min && n <= max => Ok(n),
        _ => Err(invalid(key, value, &format!("Value must be an integer in [{min}, {max}]"))),
    }
}

/// A socket buffer size as Kafka takes it: -1 for the OS default, else a positive byte count.
fn parse_socket_buffer(key: &str, value: &str) -> Result<Option<usize>, ConfigError> {
    match parse_int(key, value, -1i64, i32::MAX as i64)? {
        -1 => Ok(None),
        0 => Err(invalid(key, value, "Value must be -1 (the OS default) or a positive number of bytes")),
        n => Ok(Some(n as usize)),
    }
}

pub(crate) fn parse_bool(key: &str, value: &str) -> Result<bool, ConfigError> {
    match value.trim().to_ascii_lowercase().as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(invalid(key, value, "Expected value to be either true or false")),
    }
}

/// Parses `metrics.listener`: `host:port` (IPv6 in brackets, empty host = all interfaces), or
/// `none` / empty to disable.
pub fn parse_metrics_listener(value: &str, explicit: bool) -> Result<Option<MetricsListener>, ConfigError> {
    let v = value.trim();
    if v.is_empty() || v.eq_ignore_ascii_case("none") {
        return Ok(None);
    }
    let expected = "host:port (e.g. 127.0.0.1:9644, 0.0.0.0:9644, [::1]:9644; port 0 picks one), or none to disable";
    let (host, port) = v.rsplit_once(':').ok_or_else(|| invalid("metrics.listener", value, expected))?;
    let port: u16 = port.parse().map_err(|_| invalid("metrics.listener", value, expected))?;
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let host = if bare.is_empty() {
        "0.0.0.0".to_string()
    } else if bare.parse::<std::net::Ipv6Addr>().is_ok() {
        format!("[{bare}]")
    } else if bare.contains(['/', ' ', '[', ']', ':']) || bare.contains("://") {
        return Err(invalid("metrics.listener", value, expected));
    } else {
        bare.to_string()
    };
    Ok(Some(MetricsListener { addr: format!("{host}:{port}"), explicit }))
}

/// Parses `NAME://host:port[,NAME://host:port]`; IPv6 hosts in brackets.
pub fn parse_listeners(key: &str, value: &str) -> Result<Vec<Endpoint>, ConfigError> {
    let mut out = Vec::new();
    for part in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let expected = "a list of NAME://host:port, e.g. PLAINTEXT://localhost:9092";
        let (name, rest) = part.split_once("://").ok_or_else(|| invalid(key, value, expected))?;
        let (host, port) = rest.rsplit_once(':').ok_or_else(|| invalid(key, value, expected))?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let port: u16 = port.parse().map_err(|_| invalid(key, value, expected))?;
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(invalid(key, value, expected));
        }
        if out.iter().any(|e: &Endpoint| e.name == name) {
            return Err(invalid(key, value, "listener names to be unique"));
        }
        out.push(Endpoint { name: name.to_string(), host: host.to_string(), port });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(pairs: &[(&str, &str)]) -> Result<Loaded, ConfigError> {
        BrokerConfig::from_pairs(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())))
    }

    #[test]
    fn defaults_give_a_usable_single_node_broker() {
        let c = load(&[]).unwrap().config;
        assert_eq!(c.node_id, 1);
        assert_eq!(c.listeners, vec![Endpoint { name: "PLAINTEXT".into(), host: "localhost".into(), port: 9092 }]);
        assert_eq!(c.log_dirs, vec![PathBuf::from("./data")]);
        assert_eq!(c.num_partitions, 1);
        assert!(c.auto_create_topics_enable);
        assert_eq!(c.socket_request_max_bytes, 104857600);
        assert_eq!(c.topic_defaults.get("segment.bytes").unwrap(), "1073741824");
        assert_eq!(c.topic_defaults.get("retention.ms").unwrap(), "604800000");
        assert_eq!(c.producer_id_expiration_ms, 86_400_000);
        assert!(c.io_direct);
        assert!(c.io_direct_reads);
    }

    #[test]
    fn only_kafkas_rack_aware_replica_selector_is_accepted() {
        assert!(!load(&[]).unwrap().config.replica_selector_rack_aware);
        assert!(load(&[("replica.selector.class", RACK_AWARE_REPLICA_SELECTOR)]).unwrap().config.replica_selector_rack_aware);
        let err = load(&[("replica.selector.class", "com.example.Nearest")]).err().unwrap().to_string();
        assert!(err.contains("replica.selector.class") && err.contains("com.example.Nearest"), "{err}");
    }

    #[test]
    fn invalid_value_names_key_value_and_what_is_accepted() {
        let err = load(&[("num.partitions", "zero")]).err().unwrap().to_string();
        assert!(err.contains("num.partitions") && err.contains("zero") && err.contains("integer"), "{err}");
        let err = load(&[("log.io.backend", "fast")]).err().unwrap().to_string();
        assert!(err.contains("log.io.backend") && err.contains("auto, uring, std"), "{err}");
        let err = load(&[("log.io.direct", "yes")]).err().unwrap().to_string();
        assert!(err.contains("log.io.direct") && err.contains("yes"), "{err}");
        assert!(!load(&[("log.io.direct", "false")]).unwrap().config.io_direct);
        let err = load(&[("log.io.direct.reads", "off")]).err().unwrap().to_string();
        assert!(err.contains("log.io.direct.reads") && err.contains("off"), "{err}");
        assert!(!load(&[("log.io.direct.reads", "false")]).unwrap().config.io_direct_reads);
        assert_eq!(load(&[]).unwrap().config.cpu_idle_poll_us, 0);
        assert_eq!(load(&[("cpu.idle.poll.us", "1000")]).unwrap().config.cpu_idle_poll_us, 1000);
        let err = load(&[("cpu.idle.poll.us", "2000000")]).err().unwrap().to_string();
        assert!(err.contains("cpu.idle.poll.us") && err.contains("2000000"), "{err}");
        let err = load(&[("listeners", "localhost:9092")]).err().unwrap().to_string();
        assert!(err.contains("listeners") && err.contains("NAME://host:port"), "{err}");
        let err = load(&[("log.segment.bytes", "10")]).err().unwrap().to_string();
        assert!(err.contains("log.segment.bytes"), "{err}");
        let err = load(&[("producer.id.expiration.ms", "0")]).err().unwrap().to_string();
        assert!(err.contains("producer.id.expiration.ms") && err.contains('0'), "{err}");
    }

    #[test]
    fn socket_buffers_take_set_values_and_minus_one_keeps_the_os_default() {
        type Field = fn(&BrokerConfig) -> Option<usize>;
        // The receive buffer is autotuned unless set (see the field).
        let keys: [(&str, Field, Option<usize>); 2] = [
            ("socket.send.buffer.bytes", |c| c.socket_send_buffer_bytes, Some(102_400)),
            ("socket.receive.buffer.bytes", |c| c.socket_receive_buffer_bytes, None),
        ];
        for (key, field, default) in keys {
            assert_eq!(field(&load(&[]).unwrap().config), default, "{key}");
            assert_eq!(field(&load(&[(key, "102400")]).unwrap().config), Some(102_400), "{key}");
            assert_eq!(field(&load(&[(key, "-1")]).unwrap().config), None, "{key}");
            assert_eq!(field(&load(&[(key, "1048576")]).unwrap().config), Some(1 << 20), "{key}");
            for bad in ["0", "-2", "lots"] {
                let err = load(&[(key, bad)]).err().unwrap().to_string();
                assert!(err.contains(key) && err.contains(bad), "{err}");
            }
        }
    }

    #[test]
    fn unknown_keys_are_reported_and_kafka_keys_are_accepted() {
        let l = load(&[("process.roles", "broker,controller"), ("no.such.key", "1")]).unwrap();
        assert_eq!(l.unknown_keys, vec!["no.such.key".to_string()]);
    }

    #[test]
    fn ignored_keys_list_unknown_and_unused_kafka_keys_once_and_not_those_acted_on() {
        let l = load(&[
            ("num.io.threads", "8"),
            ("no.such.key", "1"),
            ("offsets.topic.replication.factor", "1"),
            ("process.roles", "broker,controller"),
            ("num.partitions", "3"),
            ("group.max.size", "10"),
            ("log.retention.hours", "1"),
        ])
        .unwrap();
        assert_eq!(l.ignored_keys, vec!["no.such.key", "num.io.threads", "offsets.topic.replication.factor"]);
    }

    #[test]
    fn retention_hours_and_minutes_follow_kafka_precedence() {
        let c = load(&[("log.retention.hours", "1")]).unwrap().config;
        assert_eq!(c.topic_defaults.get("retention.ms").unwrap(), "3600000");
        let c = load(&[("log.retention.hours", "1"), ("log.retention.minutes", "2")]).unwrap().config;
        assert_eq!(c.topic_defaults.get("retention.ms").unwrap(), "120000");
        let c = load(&[("log.retention.minutes", "2"), ("log.retention.ms", "5")]).unwrap().config;
        assert_eq!(c.topic_defaults.get("retention.ms").unwrap(), "5");
    }

    #[test]
    fn metrics_listener_defaults_to_loopback_and_can_be_disabled() {
        let c = load(&[]).unwrap().config;
        assert_eq!(c.metrics_listener, Some(MetricsListener { addr: "127.0.0.1:9644".into(), explicit: false }));
        assert_eq!(load(&[("metrics.listener", "none")]).unwrap().config.metrics_listener, None);
        assert_eq!(load(&[("metrics.listener", "")]).unwrap().config.metrics_listener, None);
        let c = load(&[("metrics.listener", "127.0.0.1:0")]).unwrap().config;
        assert_eq!(c.metrics_listener, Some(MetricsListener { addr: "127.0.0.1:0".into(), explicit: true }));
        assert_eq!(load(&[("metrics.listener", "[::1]:9")]).unwrap().config.metrics_listener.unwrap().addr, "[::1]:9");
        assert_eq!(load(&[("metrics.listener", ":9644")]).unwrap().config.metrics_listener.unwrap().addr, "0.0.0.0:9644");
        for bad in ["9644", "localhost:http", "http://localhost:9644", "h:70000"] {
            let err = load(&[("metrics.listener", bad)]).err().unwrap().to_string();
            assert!(err.contains("metrics.listener") && err.contains(bad) && err.contains("host:port"), "{err}");
        }
        assert!(load(&[("metrics.listener", "x:1")]).unwrap().unknown_keys.is_empty());
    }

    #[test]
    fn log_level_and_format_are_validated() {
        let c = load(&[("log.level", "sluice=debug,warn"), ("log.format", "json")]).unwrap().config;
        assert_eq!((c.log_level.as_str(), c.log_format), ("sluice=debug,warn", LogFormat::Json));
        let err = load(&[("log.format", "xml")]).err().unwrap().to_string();
        assert!(err.contains("log.format") && err.contains("text or json"), "{err}");
        let err = load(&[("log.level", "loud[")]).err().unwrap().to_string();
        assert!(err.contains("log.level"), "{err}");
    }

    #[test]
    fn listeners_parse_port_zero_and_ipv6() {
        let l = parse_listeners("listeners", "PLAINTEXT://127.0.0.1:0,INTERNAL://[::1]:9093").unwrap();
        assert_eq!(l[0].port, 0);
        assert_eq!(l[1].host, "::1");
    }
}
