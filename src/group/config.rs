//! Group coordinator settings: Kafka's broker keys and defaults, read from the broker's raw
//! key/value pairs and validated (an invalid value names the key, the value and what is accepted).

use std::collections::BTreeMap;

use crate::config::ConfigError;

/// Validated group coordinator configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupConfig {
    /// `group.min.session.timeout.ms` (6000): shorter session timeouts get INVALID_SESSION_TIMEOUT.
    pub min_session_timeout_ms: i32,
    /// `group.max.session.timeout.ms` (1800000).
    pub max_session_timeout_ms: i32,
    /// `group.initial.rebalance.delay.ms` (3000): how long a new group waits for more members.
    pub initial_rebalance_delay_ms: i32,
    /// `group.max.size` (Integer.MAX_VALUE): members per classic group.
    pub max_size: usize,
    /// `offsets.topic.num.partitions` (50).
    pub offsets_partitions: i32,
    /// `offsets.topic.segment.bytes` (104857600).
    pub offsets_segment_bytes: i64,
    /// `offsets.retention.minutes` (10080 = 7 days), in ms.
    pub offsets_retention_ms: i64,
    /// `offsets.retention.check.interval.ms` (600000).
    pub offsets_retention_check_interval_ms: i64,
    /// `offset.metadata.max.bytes` (4096): larger commit metadata gets OFFSET_METADATA_TOO_LARGE.
    pub offset_metadata_max_bytes: usize,
    /// Bound on one member's protocol metadata (all protocols) or assignment. Kafka has no key
    /// for it; a larger member cannot be written to `__consumer_offsets` (1 MiB batches) and Kafka
    /// answers UNKNOWN_SERVER_ERROR for that write, which is what we answer up front.
    pub max_member_metadata_bytes: usize,
    /// `group.consumer.session.timeout.ms` (45000): KIP-848 member session timeout.
    pub consumer_session_timeout_ms: i64,
    /// `group.consumer.heartbeat.interval.ms` (5000): told to KIP-848 members.
    pub consumer_heartbeat_interval_ms: i32,
    /// `group.consumer.max.size` (Integer.MAX_VALUE).
    pub consumer_max_size: usize,
}

impl Default for GroupConfig {
    fn default() -> Self {
        GroupConfig {
            min_session_timeout_ms: 6000,
            max_session_timeout_ms: 1_800_000,
            initial_rebalance_delay_ms: 3000,
            max_size: i32::MAX as usize,
            offsets_partitions: 50,
            offsets_segment_bytes: 104_857_600,
            offsets_retention_ms: 10080 * 60_000,
            offsets_retention_check_interval_ms: 600_000,
            offset_metadata_max_bytes: 4096,
            max_member_metadata_bytes: 1 << 20,
            consumer_session_timeout_ms: 45_000,
            consumer_heartbeat_interval_ms: 5000,
            consumer_max_size: i32::MAX as usize,
        }
    }
}

pub(crate) fn get(raw: &BTreeMap<String, String>, key: &str, default: i64, min: i64, max: i64) -> Result<i64, ConfigError> {
    let Some(v) = raw.get(key) else { return Ok(default) };
    match v.trim().parse::<i64>() {
        Ok(n) if n >= min && n <= max => Ok(n),
        _ => Err(ConfigError::InvalidValue {
            key: key.to_string(),
            value: v.clone(),
            expected: format!("an integer in [{min}, {max}]"),
        }),
    }
}

impl GroupConfig {
    /// Reads the group keys from the broker's raw configuration.
    pub fn from_raw(raw: &BTreeMap<String, String>) -> Result<GroupConfig, ConfigError> {
        let d = GroupConfig::default();
        let int_max = i32::MAX as i64;
        let c = GroupConfig {
            min_session_timeout_ms: get(raw, "group.min.session.timeout.ms", 6000, 0, int_max)? as i32,
            max_session_timeout_ms: get(raw, "group.max.session.timeout.ms", 1_800_000, 0, int_max)? as i32,
            initial_rebalance_delay_ms: get(raw, "group.initial.rebalance.delay.ms", 3000, 0, int_max)? as i32,
            max_size: get(raw, "group.max.size", int_max, 1, int_max)? as usize,
            offsets_partitions: get(raw, "offsets.topic.num.partitions", 50, 1, int_max)? as i32,
            offsets_segment_bytes: get(raw, "offsets.topic.segment.bytes", 104_857_600, 1, int_max)?,
            offsets_retention_ms: get(raw, "offsets.retention.minutes", 10080, 1, int_max)? * 60_000,
            offsets_retention_check_interval_ms: get(raw, "offsets.retention.check.interval.ms", 600_000, 1, i64::MAX)?,
            offset_metadata_max_bytes: get(raw, "offset.metadata.max.bytes", 4096, 0, int_max)? as usize,
            max_member_metadata_bytes: d.max_member_metadata_bytes,
            consumer_session_timeout_ms: get(raw, "group.consumer.session.timeout.ms", 45_000, 1, int_max)?,
            consumer_heartbeat_interval_ms: get(raw, "group.consumer.heartbeat.interval.ms", 5000, 1, int_max)? as i32,
            consumer_max_size: get(raw, "group.consumer.max.size", int_max, 1, int_max)? as usize,
        };
        if c.min_session_timeout_ms > c.max_session_timeout_ms {
            return Err(ConfigError::InvalidValue {
                key: "group.min.session.timeout.ms".into(),
                value: c.min_session_timeout_ms.to_string(),
                expected: format!("at most group.max.session.timeout.ms ({})", c.max_session_timeout_ms),
            });
        }
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_kafkas_and_bad_values_name_the_key() {
        assert_eq!(GroupConfig::from_raw(&BTreeMap::new()).unwrap(), GroupConfig::default());
        let mut raw = BTreeMap::new();
        raw.insert("group.initial.rebalance.delay.ms".to_string(), "0".to_string());
        raw.insert("offsets.retention.minutes".to_string(), "2".to_string());
        let c = GroupConfig::from_raw(&raw).unwrap();
        assert_eq!((c.initial_rebalance_delay_ms, c.offsets_retention_ms), (0, 120_000));
        raw.insert("group.max.size".to_string(), "zero".to_string());
        let e = GroupConfig::from_raw(&raw).unwrap_err().to_string();
        assert!(e.contains("group.max.size") && e.contains("zero"), "{e}");
    }
}
