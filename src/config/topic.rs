//! Topic-level configs: the keys a topic may override, their broker-level synonyms and
//! Kafka's defaults, and validation shared by CreateTopics, AlterConfigs and startup.
//!
//! # Invariants
//! - A topic's effective value is its override if set, else the broker default
//!   (`BrokerConfig::topic_defaults`), which is itself the broker key's value or Kafka's default.
//! - `validate` accepts exactly the values Kafka accepts for the keys sluice acts on; an
//!   unknown key is an error (Kafka answers INVALID_CONFIG).

use std::collections::BTreeMap;

use super::{invalid, ConfigError};
use crate::log::LogConfig;

/// How a config value is checked.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    Long { min: i64 },
    Int { min: i32 },
    Double { min: f64, max: f64 },
    Bool,
    /// One of the given strings.
    OneOf(&'static [&'static str]),
    /// A comma-separated list of the given strings.
    ListOf(&'static [&'static str]),
    /// Free-form string.
    Text,
    /// `*` or `partition:broker` pairs (the throttled replica lists).
    ThrottledReplicas,
}

/// One topic config key.
#[derive(Debug, Clone, Copy)]
pub struct TopicConfigDef {
    /// The broker key that sets the default, if any.
    pub broker_key: Option<&'static str>,
    pub default: &'static str,
    pub kind: Kind,
    /// Kafka's config type name for DescribeConfigs v3+ (1 BOOLEAN .. 9 PASSWORD).
    pub config_type: i8,
}

const LONG_MAX: &str = "9223372036854775807";
const BOOLEAN: i8 = 1;
const STRING: i8 = 2;
const INT: i8 = 3;
const LONG: i8 = 5;
const DOUBLE: i8 = 6;
const LIST: i8 = 7;

macro_rules! def {
    ($bk:expr, $d:expr, $k:expr, $t:expr) => {
        TopicConfigDef { broker_key: $bk, default: $d, kind: $k, config_type: $t }
    };
}

/// Every topic config Kafka 4.x knows, sorted by name, and sluice's own `flush.acks.all`
/// (broker default `log.flush.acks.all`; listed beside Kafka's only where set, see [`listed`]).
pub const TOPIC_CONFIGS: &[(&str, TopicConfigDef)] = &[
    ("cleanup.policy", def!(Some("log.cleanup.policy"), "delete", Kind::ListOf(&["delete", "compact"]), LIST)),
    ("compression.gzip.level", def!(Some("compression.gzip.level"), "-1", Kind::Int { min: -1 }, INT)),
    ("compression.lz4.level", def!(Some("compression.lz4.level"), "9", Kind::Int { min: 1 }, INT)),
    (
        "compression.type",
        def!(
            Some("compression.type"),
            "producer",
            Kind::OneOf(&["uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"]),
            STRING
        ),
    ),
    ("compression.zstd.level", def!(Some("compression.zstd.level"), "3", Kind::Int { min: -131072 }, INT)),
    ("delete.retention.ms", def!(Some("log.cleaner.delete.retention.ms"), "86400000", Kind::Long { min: 0 }, LONG)),
    ("errors.deadletterqueue.group.enable", def!(None, "false", Kind::Bool, BOOLEAN)),
    ("file.delete.delay.ms", def!(Some("log.segment.delete.delay.ms"), "60000", Kind::Long { min: 0 }, LONG)),
    ("flush.acks.all", def!(Some("log.flush.acks.all"), "false", Kind::Bool, BOOLEAN)),
    ("flush.messages", def!(Some("log.flush.interval.messages"), LONG_MAX, Kind::Long { min: 1 }, LONG)),
    ("flush.ms", def!(Some("log.flush.interval.ms"), LONG_MAX, Kind::Long { min: 0 }, LONG)),
    ("follower.replication.throttled.replicas", def!(None, "", Kind::ThrottledReplicas, LIST)),
    ("index.interval.bytes", def!(Some("log.index.interval.bytes"), "4096", Kind::Int { min: 0 }, INT)),
    ("leader.replication.throttled.replicas", def!(None, "", Kind::ThrottledReplicas, LIST)),
    ("local.retention.bytes", def!(Some("log.local.retention.bytes"), "-2", Kind::Long { min: -2 }, LONG)),
    ("local.retention.ms", def!(Some("log.local.retention.ms"), "-2", Kind::Long { min: -2 }, LONG)),
    (
        "max.compaction.lag.ms",
        def!(Some("log.cleaner.max.compaction.lag.ms"), LONG_MAX, Kind::Long { min: 1 }, LONG),
    ),
    ("max.decompressed.message.bytes", def!(None, "2147483639", Kind::Int { min: 0 }, INT)),
    ("max.message.bytes", def!(Some("message.max.bytes"), "1048588", Kind::Int { min: 0 }, INT)),
    (
        "message.timestamp.after.max.ms",
        def!(Some("log.message.timestamp.after.max.ms"), "3600000", Kind::Long { min: 0 }, LONG),
    ),
    (
        "message.timestamp.before.max.ms",
        def!(Some("log.message.timestamp.before.max.ms"), LONG_MAX, Kind::Long { min: 0 }, LONG),
    ),
    (
        "message.timestamp.type",
        def!(Some("log.message.timestamp.type"), "CreateTime", Kind::OneOf(&["CreateTime", "LogAppendTime"]), STRING),
    ),
    (
        "min.cleanable.dirty.ratio",
        def!(Some("log.cleaner.min.cleanable.ratio"), "0.5", Kind::Double { min: 0.0, max: 1.0 }, DOUBLE),
    ),
    ("min.compaction.lag.ms", def!(Some("log.cleaner.min.compaction.lag.ms"), "0", Kind::Long { min: 0 }, LONG)),
    ("min.insync.replicas", def!(Some("min.insync.replicas"), "1", Kind::Int { min: 1 }, INT)),
    ("preallocate", def!(Some("log.preallocate"), "false", Kind::Bool, BOOLEAN)),
    // Tiered storage knobs Kafka 4.4 lists; accepted and reported, sluice has no remote tier yet.
    ("remote.copy.lag.bytes", def!(None, "-1", Kind::Long { min: -1 }, LONG)),
    ("remote.copy.lag.ms", def!(None, "0", Kind::Long { min: 0 }, LONG)),
    ("remote.log.copy.disable", def!(None, "false", Kind::Bool, BOOLEAN)),
    ("remote.log.delete.on.disable", def!(None, "false", Kind::Bool, BOOLEAN)),
    ("remote.storage.enable", def!(None, "false", Kind::Bool, BOOLEAN)),
    ("retention.bytes", def!(Some("log.retention.bytes"), "-1", Kind::Long { min: i64::MIN }, LONG)),
    ("retention.ms", def!(Some("log.retention.ms"), "604800000", Kind::Long { min: -1 }, LONG)),
    // Kafka 4.x raised the minimum to 1 MiB (KIP-1030).
    ("segment.bytes", def!(Some("log.segment.bytes"), "1073741824", Kind::Int { min: 1048576 }, INT)),
    ("segment.index.bytes", def!(Some("log.index.size.max.bytes"), "10485760", Kind::Int { min: 4 }, INT)),
    ("segment.jitter.ms", def!(Some("log.roll.jitter.ms"), "0", Kind::Long { min: 0 }, LONG)),
    ("segment.ms", def!(Some("log.roll.ms"), "604800000", Kind::Long { min: 1 }, LONG)),
    (
        "unclean.leader.election.enable",
        def!(Some("unclean.leader.election.enable"), "false", Kind::Bool, BOOLEAN),
    ),
];

/// Topic configs of sluice's own, not Kafka's. Listings of all of a topic's configs
/// (CreateTopics' echo, DescribeConfigs without key names) show them only where their value
/// differs from the built-in default, so clients and tools see exactly Kafka's set unless the
/// feature is in use; asked for by name, they are always answered.
const SLUICE_ONLY: &[&str] = &["flush.acks.all"];

/// Whether a listing of all of a topic's configs shows `key` with effective value `value`.
pub fn listed(key: &str, value: &str) -> bool {
    !SLUICE_ONLY.contains(&key) || lookup(key).is_none_or(|d| !d.default.eq_ignore_ascii_case(value.trim()))
}

/// The definition of a topic config key.
pub fn lookup(key: &str) -> Option<&'static TopicConfigDef> {
    TOPIC_CONFIGS.iter().find(|(k, _)| *k == key).map(|(_, d)| d)
}

/// Dynamic broker keys that are not topic defaults: the replication throttles (bytes per
/// second, Kafka's `DynamicReplicationConfig`), set by `kafka-reassign-partitions --throttle`.
pub const REPLICATION_THROTTLE_KEYS: [&str; 3] =
    ["leader.replication.throttled.rate", "follower.replication.throttled.rate", "replica.alter.log.dirs.io.max.bytes.per.second"];

/// Broker keys that can be changed at runtime: the broker-level defaults of topic configs
/// (Kafka's `DynamicLogConfig` set) and the replication throttles.
pub fn is_dynamic_broker_key(key: &str) -> bool {
    TOPIC_CONFIGS.iter().any(|(_, d)| d.broker_key == Some(key)) || REPLICATION_THROTTLE_KEYS.contains(&key)
}

/// Checks a dynamic broker config's value with the rules of the topic key it sets; the error
/// names the broker key.
pub fn validate_broker_value(key: &str, value: &str) -> Result<(), String> {
    if REPLICATION_THROTTLE_KEYS.contains(&key) {
        return check_kind(key, value, Kind::Long { min: 0 }).map_err(|e| e.to_string());
    }
    let topic_key = broker_key_to_topic(key).unwrap_or(key);
    validate(topic_key, value).map_err(|e| e.to_string().replace(&format!("configuration {topic_key}"), &format!("configuration {key}")))
}

/// Maps a broker key (`log.retention.hours`, `log.segment.bytes`...) to the topic key it sets.
pub fn broker_key_to_topic(key: &str) -> Option<&'static str> {
    match key {
        "log.retention.hours" | "log.retention.minutes" => return Some("retention.ms"),
        "log.roll.hours" => return Some("segment.ms"),
        "log.roll.jitter.hours" => return Some("segment.jitter.ms"),
        _ => {}
    }
    TOPIC_CONFIGS.iter().find(|(_, d)| d.broker_key == Some(key)).map(|(k, _)| *k)
}

/// Checks one topic config value; the error names the key, the value and what is accepted.
pub fn validate(key: &str, value: &str) -> Result<(), ConfigError> {
    let def = lookup(key).ok_or_else(|| invalid(key, value, "a known topic config"))?;
    check_kind(key, value, def.kind)
}

fn check_kind(key: &str, value: &str, kind: Kind) -> Result<(), ConfigError> {
    let v = value.trim();
    let ok = match kind {
        Kind::Long { min } => v.parse::<i64>().map(|n| n >= min).unwrap_or(false),
        Kind::Int { min } => v.parse::<i32>().map(|n| n >= min).unwrap_or(false),
        Kind::Double { min, max } => v.parse::<f64>().map(|n| n >= min && n <= max).unwrap_or(false),
        Kind::Bool => matches!(v.to_ascii_lowercase().as_str(), "true" | "false"),
        Kind::OneOf(opts) => opts.iter().any(|o| o.eq_ignore_ascii_case(v)),
        Kind::ListOf(opts) => {
            !v.is_empty() && v.split(',').map(str::trim).all(|p| opts.iter().any(|o| o.eq_ignore_ascii_case(p)))
        }
        Kind::Text => true,
        Kind::ThrottledReplicas => crate::replication::throttle::valid_replica_list(v),
    };
    if ok {
        return Ok(());
    }
    // Kafka's own wording, so clients and tools show the same message.
    let expected = match kind {
        Kind::Long { min } => format!("Value must be at least {min}"),
        Kind::Int { min } => format!("Value must be at least {min}"),
        Kind::Double { min, max } => format!("Value must be a number between {min} and {max}"),
        Kind::Bool => "Expected value to be either true or false".into(),
        Kind::OneOf(opts) => format!("String must be one of: {}", opts.join(", ")),
        Kind::ListOf(opts) => format!("Value must be a comma-separated list of: {}", opts.join(", ")),
        Kind::Text => String::new(),
        Kind::ThrottledReplicas => {
            "Must be the literal '*' or a list of replicas in the following format: [partitionId]:[brokerId],[partitionId]:[brokerId],...".into()
        }
    };
    Err(invalid(key, value, &expected))
}

/// Computes the broker-level default of every topic config from broker keys, following Kafka's
/// precedence (`log.retention.ms` > `.minutes` > `.hours`; `log.roll.ms` > `.hours`).
pub fn defaults_from_broker(raw: &BTreeMap<String, String>) -> Result<BTreeMap<String, String>, ConfigError> {
    let mut out = BTreeMap::new();
    for (topic_key, def) in TOPIC_CONFIGS {
        let mut value = def.default.to_string();
        if let Some(bk) = def.broker_key {
            if let Some(v) = raw.get(bk) {
                check_kind(bk, v, def.kind)?;
                value = v.trim().to_string();
            }
        }
        out.insert(topic_key.to_string(), value);
    }
    let scaled = |key: &str, factor: i64| -> Result<Option<String>, ConfigError> {
        match raw.get(key) {
            Some(v) => {
                let n: i64 = super::parse_int(key, v, -1, i64::MAX / factor)?;
                Ok(Some(if n < 0 { "-1".into() } else { (n * factor).to_string() }))
            }
            None => Ok(None),
        }
    };
    if !raw.contains_key("log.retention.ms") {
        if let Some(v) = scaled("log.retention.minutes", 60_000)? {
            out.insert("retention.ms".into(), v);
        } else if let Some(v) = scaled("log.retention.hours", 3_600_000)? {
            out.insert("retention.ms".into(), v);
        }
    }
    if !raw.contains_key("log.roll.ms") {
        if let Some(v) = scaled("log.roll.hours", 3_600_000)? {
            out.insert("segment.ms".into(), v);
        }
    }
    Ok(out)
}

/// A topic's effective configs: broker defaults overlaid with the topic's overrides.
pub fn effective(defaults: &BTreeMap<String, String>, overrides: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    let mut out = defaults.clone();
    for (k, v) in overrides {
        out.insert(k.clone(), v.clone());
    }
    out
}

/// Builds the log layer's config from effective topic configs (already validated).
pub fn log_config(effective: &BTreeMap<String, String>) -> LogConfig {
    let long = |k: &str, d: i64| effective.get(k).and_then(|v| v.trim().parse::<i64>().ok()).unwrap_or(d);
    let defaults = LogConfig::default();
    let deletes = effective.get("cleanup.policy").is_none_or(|p| p.split(',').any(|x| x.trim() == "delete"));
    LogConfig {
        segment_bytes: long("segment.bytes", defaults.segment_bytes as i64).max(14) as u64,
        segment_ms: long("segment.ms", defaults.segment_ms),
        index_interval_bytes: long("index.interval.bytes", 4096).clamp(0, u32::MAX as i64) as u32,
        // Kafka deletes by time/size only when cleanup.policy includes "delete"; a compact-only
        // topic (__consumer_offsets) keeps every segment the cleaner has not emptied.
        retention_ms: if deletes { long("retention.ms", defaults.retention_ms) } else { -1 },
        retention_bytes: if deletes { long("retention.bytes", -1) } else { -1 },
        flush_interval_messages: long("flush.messages", i64::MAX).max(1) as u64,
        flush_interval_ms: long("flush.ms", i64::MAX),
        flush_acks_all: effective.get("flush.acks.all").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")),
        max_message_bytes: long("max.message.bytes", 1048588).max(0) as usize,
        message_timestamp_type_log_append: effective
            .get("message.timestamp.type")
            .map(|v| v.eq_ignore_ascii_case("LogAppendTime"))
            .unwrap_or(false),
        compacted: effective.get("cleanup.policy").is_some_and(|p| p.split(',').any(|x| x.trim() == "compact")),
        min_insync_replicas: effective.get("min.insync.replicas").and_then(|v| v.trim().parse().ok()).unwrap_or(1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_sorted_and_defaults_validate() {
        let keys: Vec<_> = TOPIC_CONFIGS.iter().map(|(k, _)| *k).collect();
        let mut sorted = keys.clone();
        sorted.sort();
        assert_eq!(keys, sorted);
        for (k, d) in TOPIC_CONFIGS {
            if !matches!(d.kind, Kind::Text) {
                validate(k, d.default).unwrap_or_else(|e| panic!("default of {k}: {e}"));
            }
        }
    }

    #[test]
    fn bad_topic_values_are_rejected_with_the_accepted_range() {
        assert_eq!(
            validate("retention.ms", "-2").unwrap_err().to_string(),
            "Invalid value -2 for configuration retention.ms: Value must be at least -1"
        );
        assert!(validate("segment.bytes", "16384").unwrap_err().to_string().contains("at least 1048576"));
        assert!(validate("cleanup.policy", "compact,delete").is_ok());
        assert!(validate("cleanup.policy", "forever").is_err());
        assert!(validate("no.such.config", "1").is_err());
        assert!(validate("min.cleanable.dirty.ratio", "1.5").is_err());
    }

    #[test]
    fn log_config_reflects_overrides() {
        let mut o = BTreeMap::new();
        o.insert("segment.bytes".to_string(), "2097152".to_string());
        o.insert("message.timestamp.type".to_string(), "LogAppendTime".to_string());
        let d = defaults_from_broker(&BTreeMap::new()).unwrap();
        let lc = log_config(&effective(&d, &o));
        assert_eq!(lc.segment_bytes, 2097152);
        assert!(lc.message_timestamp_type_log_append);
        assert_eq!(lc.retention_ms, 604800000);
    }
}
