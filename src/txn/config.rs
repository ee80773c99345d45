//! The transaction coordinator's settings, under Kafka's broker config names and defaults.
//!
//! # Failure behaviour
//! A value that is not an integer in its range is a [`ConfigError`] naming the key and the
//! value: the broker does not start.

use std::collections::BTreeMap;

use crate::config::ConfigError;
use crate::group::config::get;

/// Settings of the transaction coordinator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnConfig {
    /// `transaction.state.log.num.partitions` (50).
    pub state_partitions: i32,
    /// `transaction.state.log.segment.bytes` (100 MiB).
    pub state_segment_bytes: i64,
    /// `transaction.max.timeout.ms` (15 minutes): the longest `transaction.timeout.ms` a producer
    /// may ask for (InitProducerId answers INVALID_TRANSACTION_TIMEOUT above it).
    pub max_timeout_ms: i32,
    /// `transactional.id.expiration.ms` (7 days): an id idle this long is forgotten.
    pub id_expiration_ms: i64,
    /// `transaction.abort.timed.out.transaction.cleanup.interval.ms` (10 s).
    pub abort_timed_out_interval_ms: i64,
    /// `transaction.remove.expired.transaction.cleanup.interval.ms` (1 hour).
    pub remove_expired_interval_ms: i64,
}

impl Default for TxnConfig {
    fn default() -> Self {
        TxnConfig {
            state_partitions: 50,
            state_segment_bytes: 104_857_600,
            max_timeout_ms: 900_000,
            id_expiration_ms: 604_800_000,
            abort_timed_out_interval_ms: 10_000,
            remove_expired_interval_ms: 3_600_000,
        }
    }
}

impl TxnConfig {
    /// Reads the transaction keys from the broker's raw configuration.
    pub fn from_raw(raw: &BTreeMap<String, String>) -> Result<TxnConfig, ConfigError> {
        let d = TxnConfig::default();
        let int_max = i64::from(i32::MAX);
        Ok(TxnConfig {
            state_partitions: get(raw, "transaction.state.log.num.partitions", d.state_partitions.into(), 1, int_max)? as i32,
            state_segment_bytes: get(raw, "transaction.state.log.segment.bytes", d.state_segment_bytes, 1, int_max)?,
            max_timeout_ms: get(raw, "transaction.max.timeout.ms", d.max_timeout_ms.into(), 1, int_max)? as i32,
            id_expiration_ms: get(raw, "transactional.id.expiration.ms", d.id_expiration_ms, 1, int_max)?,
            abort_timed_out_interval_ms: get(raw, "transaction.abort.timed.out.transaction.cleanup.interval.ms", d.abort_timed_out_interval_ms, 1, int_max)?,
            remove_expired_interval_ms: get(raw, "transaction.remove.expired.transaction.cleanup.interval.ms", d.remove_expired_interval_ms, 1, int_max)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_kafkas_and_a_bad_value_names_its_key() {
        assert_eq!(TxnConfig::from_raw(&BTreeMap::new()).unwrap(), TxnConfig::default());
        let mut raw = BTreeMap::new();
        raw.insert("transaction.max.timeout.ms".to_string(), "60000".to_string());
        assert_eq!(TxnConfig::from_raw(&raw).unwrap().max_timeout_ms, 60_000);
        raw.insert("transaction.state.log.num.partitions".to_string(), "0".to_string());
        let e = TxnConfig::from_raw(&raw).unwrap_err().to_string();
        assert!(e.contains("transaction.state.log.num.partitions") && e.contains('0'), "{e}");
    }
}
