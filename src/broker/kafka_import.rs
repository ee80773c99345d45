//! Taking over an Apache Kafka single node's metadata: a Kafka log dir keeps its topics' data
//! in partition directories sluice reads as they are, but topic configs, dynamic broker configs
//! and producer-id blocks live in its KRaft metadata log (`__cluster_metadata-0`). On the first
//! start on such a dir, sluice replays that log ([`MetadataImage::replay_kafka_log_dir`]) and
//! writes what it holds into its own single-node files, so that a topic keeps its
//! `cleanup.policy` and retention, the broker its dynamic defaults, and no producer id Kafka
//! handed out is handed out again.
//!
//! # Invariants
//! - It happens once: [`MARKER`] is written after the import, and a dir that sluice already
//!   keeps topic or broker configs for (an earlier release served it) is never overwritten by
//!   Kafka's older ones.
//! - Kafka's files are only read.
//!
//! # Failure behaviour
//! A metadata log that cannot be read or replayed (a record kind sluice does not understand,
//! such as an ACL) stops startup with the record's offset and kind: serving the dir without
//! it could drop a setting that made the broker safer (fail closed). The config files are
//! written (fsynced) before the marker; a crash between them imports again on the next start.

use std::path::Path;

use crate::cluster::image::{MetadataImage, BROKER_RESOURCE, TOPIC_RESOURCE};
use crate::cluster::ClusterError;
use crate::metadata::{MetadataError, ProducerIdAllocator, TopicConfigStore};

/// Written in the first log dir once Kafka's metadata has been taken over.
pub const MARKER: &str = "sluice-kafka-metadata-imported";
const KAFKA_METADATA_DIR: &str = "__cluster_metadata-0";
/// The dynamic broker config entity for the cluster-wide default (as `Broker` keeps it).
const DEFAULT_ENTITY: &str = "<default>";

/// Why Kafka's metadata could not be taken over.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("reading Apache Kafka's metadata log in {dir} to take over its topic and broker configs")]
    Replay {
        dir: String,
        #[source]
        source: ClusterError,
    },
    #[error(transparent)]
    Store(#[from] MetadataError),
}

/// What was taken over.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Imported {
    pub topic_configs: usize,
    pub broker_configs: usize,
    pub next_producer_id: i64,
}

/// Takes over Kafka's metadata from `metadata_log_dir` into the stores of `first_log_dir`, if
/// there is a Kafka metadata log and it was not taken over before. `None`: nothing to do.
pub fn import(
    metadata_log_dir: &Path,
    first_log_dir: &Path,
    node_id: i32,
    topic_configs: &mut TopicConfigStore,
    broker_configs: &mut TopicConfigStore,
    producer_ids: &mut ProducerIdAllocator,
) -> Result<Option<Imported>, ImportError> {
    let dir = metadata_log_dir.join(KAFKA_METADATA_DIR);
    let marker = first_log_dir.join(MARKER);
    if !dir.is_dir() || marker.exists() {
        return Ok(None);
    }
    let write_marker = |offset: i64| crate::metadata::write_atomically(&marker, format!("{offset}\n").as_bytes());
    if !topic_configs.is_empty() || !broker_configs.is_empty() {
        tracing::warn!(
            dir = %dir.display(),
            "not taking over Kafka's topic and broker configs: sluice keeps configs for this log dir already"
        );
        write_marker(-1)?;
        return Ok(None);
    }
    let image = MetadataImage::replay_kafka_log_dir(&dir).map_err(|source| ImportError::Replay { dir: dir.display().to_string(), source })?;
    let mut imported = Imported { next_producer_id: image.next_producer_id, ..Imported::default() };
    for ((resource_type, name), kv) in &image.configs {
        if *resource_type == TOPIC_RESOURCE && image.topic_ids.contains_key(name) {
            topic_configs.set(name, kv.clone())?;
            imported.topic_configs += kv.len();
        } else if *resource_type == BROKER_RESOURCE && (name.is_empty() || *name == node_id.to_string()) {
            let entity = if name.is_empty() { DEFAULT_ENTITY } else { name.as_str() };
            broker_configs.set(entity, kv.clone())?;
            imported.broker_configs += kv.len();
        }
    }
    producer_ids.raise_to(image.next_producer_id)?;
    write_marker(image.offset)?;
    tracing::info!(
        dir = %dir.display(),
        offset = image.offset,
        topic_configs = imported.topic_configs,
        broker_configs = imported.broker_configs,
        next_producer_id = imported.next_producer_id,
        "took over Apache Kafka's topic configs, dynamic broker configs and producer ids"
    );
    Ok(Some(imported))
}
