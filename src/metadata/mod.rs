//! The log dirs' own metadata files: the cluster id (`meta.properties`), topic names and ids,
//! topic and dynamic broker config overrides, and a producer-id mark. The metadata log
//! (`crate::cluster`) is the truth for all but the cluster id: the config files are the broker's
//! copy of the log's configs, and a dir from before the metadata log (an earlier single-node
//! release's) has its files written into a new log at its first start.
//!
//! What is stored where (all in the log directories, so a Kafka log dir opens as it is):
//!
//! ```text
//! <log.dir>/meta.properties            Kafka's format: version=1, node.id, cluster.id, directory.id
//! <log.dir>/<topic>-<p>/partition.metadata   topic id (written by the log layer)
//! <first log.dir>/sluice-topic-configs  one line per override: topic<TAB>key=value
//! <first log.dir>/sluice-producer-ids   next unallocated producer id block
//! ```
//!
//! On open, the local topics and their partition counts are whatever partition directories
//! exist; the metadata log's image then decides which stay (`crate::broker::cluster`).
//!
//! # Failure behaviour
//! Files are replaced atomically (write to `.tmp`, fsync, rename, fsync the directory), so a crash
//! leaves either the old or the new version. A new topic's partition directories are made durable
//! by the broker in a way that a crash leaves the topic absent or whole (see `broker`, "Durability
//! of topic creation").

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use uuid::Uuid;

/// An I/O failure with the file it concerned.
#[derive(Debug, thiserror::Error)]
pub enum MetadataError {
    #[error("{op} {path}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {reason}")]
    Invalid { path: PathBuf, reason: String },
    #[error(transparent)]
    Log(#[from] crate::log::LogError),
}

fn io_err<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> MetadataError + 'a {
    move |source| MetadataError::Io { op, path: path.to_path_buf(), source }
}

/// Kafka's textual form of a topic id: URL-safe base64 of the 16 bytes, no padding.
pub use crate::log::partition_metadata::{topic_id_from_str as parse_kafka_uuid, topic_id_to_string as kafka_uuid_string};

/// A random id (for topics, the cluster and log dirs) that is neither nil nor Kafka's reserved
/// "metadata topic" id, and whose textual form does not start with '-' (Kafka's `Uuid.randomUuid`
/// rule, so `kafka-storage format -t <id>` and other tools never take it for a flag).
pub fn random_kafka_uuid() -> Uuid {
    loop {
        let id = Uuid::new_v4();
        if !id.is_nil() && !kafka_uuid_string(id).starts_with('-') && id.as_u128() != 1 {
            return id;
        }
    }
}

/// Writes `contents` to `path` atomically (temp file, fsync, rename, fsync the directory).
pub(crate) fn write_atomically(path: &Path, contents: &[u8]) -> Result<(), MetadataError> {
    Ok(crate::log::checkpoint::write_atomically(path, contents)?)
}

/// Loads the cluster id from the log dirs' `meta.properties`, writing the file where it is
/// missing ("formatting" an empty data dir). All dirs must agree on the cluster and node id.
pub fn load_or_format(log_dirs: &[PathBuf], node_id: i32) -> Result<String, MetadataError> {
    load_or_format_as(log_dirs, node_id, None)
}

/// [`load_or_format`], formatting empty dirs with `wanted` as the cluster id when given (Kafka's
/// `kafka-storage format -t`); a dir already formatted with another id is an error, as a node
/// must not join a cluster other than its log dirs'.
pub fn load_or_format_as(log_dirs: &[PathBuf], node_id: i32, wanted: Option<&str>) -> Result<String, MetadataError> {
    if let Some(w) = wanted {
        if parse_kafka_uuid(w).is_none() {
            return Err(MetadataError::Invalid {
                path: PathBuf::from("--cluster-id"),
                reason: format!("{w} is not a cluster id (22 characters of URL-safe base64, as kafka-storage random-uuid prints)"),
            });
        }
    }
    let mut cluster_id: Option<String> = wanted.map(String::from);
    let mut missing = Vec::new();
    for dir in log_dirs {
        std::fs::create_dir_all(dir).map_err(io_err("create log dir", dir))?;
        let path = dir.join("meta.properties");
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                let props: BTreeMap<String, String> = crate::config::parse_properties(&text).into_iter().collect();
                let id = props.get("cluster.id").cloned().ok_or_else(|| MetadataError::Invalid {
                    path: path.clone(),
                    reason: "no cluster.id".into(),
                })?;
                if let Some(stored) = props.get("node.id").or_else(|| props.get("broker.id")) {
                    if stored.trim() != node_id.to_string() {
                        return Err(MetadataError::Invalid {
                            path,
                            reason: format!("stored node.id {stored} does not match configured node.id {node_id}"),
                        });
                    }
                }
                if let Some(existing) = &cluster_id {
                    if existing != &id {
                        let other = if wanted == Some(existing.as_str()) { "the one asked for" } else { "another log dir's" };
                        return Err(MetadataError::Invalid {
                            path,
                            reason: format!("cluster.id {id} differs from {existing}, {other}"),
                        });
                    }
                }
                cluster_id = Some(id);
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => missing.push(dir.clone()),
            Err(e) => return Err(io_err("read", &path)(e)),
        }
    }
    let cluster_id = cluster_id.unwrap_or_else(|| kafka_uuid_string(random_kafka_uuid()));
    for dir in missing {
        let text = format!(
            "#\n#Written by sluice\nnode.id={node_id}\ndirectory.id={}\nversion=1\ncluster.id={cluster_id}\n",
            kafka_uuid_string(random_kafka_uuid())
        );
        write_atomically(&dir.join("meta.properties"), text.as_bytes())?;
        tracing::info!(dir = %dir.display(), %cluster_id, "formatted log dir");
    }
    Ok(cluster_id)
}

/// Kafka's topic name rules; returns the reason a name is invalid.
pub fn validate_topic_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("Topic name is illegal, it can't be empty".into());
    }
    if name == "." || name == ".." {
        return Err("Topic name cannot be \".\" or \"..\"".into());
    }
    if name.len() > 249 {
        return Err(format!("Topic name is illegal, it can't be longer than 249 characters, topic name: {name}"));
    }
    if !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '_' || c == '-') {
        return Err(format!(
            "Topic name \"{name}\" is illegal, it contains a character other than ASCII alphanumerics, '.', '_' and '-'"
        ));
    }
    Ok(())
}

/// Config overrides per entity (a topic, or a broker for dynamic broker configs), persisted in
/// one file of `entity<TAB>key=value` lines.
#[derive(Debug)]
pub struct TopicConfigStore {
    path: PathBuf,
    overrides: BTreeMap<String, BTreeMap<String, String>>,
}

impl TopicConfigStore {
    /// Topic overrides: `<first log dir>/sluice-topic-configs`.
    pub fn open(first_log_dir: &Path) -> Result<TopicConfigStore, MetadataError> {
        Self::open_file(first_log_dir.join("sluice-topic-configs"))
    }

    /// Dynamic broker configs: `<first log dir>/sluice-broker-configs`, entity `<default>` for
    /// the cluster-wide default and the node id for this broker.
    pub fn open_broker(first_log_dir: &Path) -> Result<TopicConfigStore, MetadataError> {
        Self::open_file(first_log_dir.join("sluice-broker-configs"))
    }

    fn open_file(path: PathBuf) -> Result<TopicConfigStore, MetadataError> {
        let mut overrides: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                for line in text.lines().filter(|l| !l.trim().is_empty()) {
                    let parsed = line.split_once('\t').and_then(|(t, kv)| kv.split_once('=').map(|(k, v)| (t, k, v)));
                    match parsed {
                        Some((t, k, v)) => {
                            overrides.entry(t.to_string()).or_default().insert(k.to_string(), v.to_string());
                        }
                        None => tracing::warn!(path = %path.display(), line, "ignoring malformed topic config line"),
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err("read", &path)(e)),
        }
        Ok(TopicConfigStore { path, overrides })
    }

    pub fn get(&self, topic: &str) -> BTreeMap<String, String> {
        self.overrides.get(topic).cloned().unwrap_or_default()
    }

    /// No entity has overrides.
    pub fn is_empty(&self) -> bool {
        self.overrides.is_empty()
    }

    /// Replaces a topic's overrides (empty removes the topic) and persists them before
    /// returning. Setting what is already stored writes nothing (creating a topic without
    /// overrides costs no fsync). On a failed write the stored overrides stay as they were,
    /// in memory and on disk.
    pub fn set(&mut self, topic: &str, configs: BTreeMap<String, String>) -> Result<(), MetadataError> {
        let current = self.overrides.get(topic);
        if current == Some(&configs) || (current.is_none() && configs.is_empty()) {
            return Ok(());
        }
        let mut next = self.overrides.clone();
        if configs.is_empty() {
            next.remove(topic);
        } else {
            next.insert(topic.to_string(), configs);
        }
        let mut text = String::new();
        for (t, kvs) in &next {
            for (k, v) in kvs {
                text.push_str(&format!("{t}\t{k}={}\n", v.replace('\n', " ")));
            }
        }
        write_atomically(&self.path, text.as_bytes())?;
        self.overrides = next;
        Ok(())
    }
}

/// Hands out producer ids in blocks; the end of the current block is persisted before any id in
/// it is used, so ids are never reused across restarts.
#[derive(Debug)]
pub struct ProducerIdAllocator {
    path: PathBuf,
    next: i64,
    block_end: i64,
}

const PRODUCER_ID_BLOCK: i64 = 1000;

impl ProducerIdAllocator {
    pub fn open(first_log_dir: &Path) -> Result<ProducerIdAllocator, MetadataError> {
        let path = first_log_dir.join("sluice-producer-ids");
        let next = match std::fs::read_to_string(&path) {
            Ok(t) => t.trim().parse::<i64>().map_err(|e| MetadataError::Invalid { path: path.clone(), reason: e.to_string() })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
            Err(e) => return Err(io_err("read", &path)(e)),
        };
        Ok(ProducerIdAllocator { path, next, block_end: next })
    }

    /// Never hands out an id below `next` (ids another broker handed out), persisting that
    /// before returning.
    pub fn raise_to(&mut self, next: i64) -> Result<(), MetadataError> {
        if next > self.next {
            write_atomically(&self.path, next.to_string().as_bytes())?;
            self.next = next;
            self.block_end = next;
        }
        Ok(())
    }

    /// No id at or above this was handed out (the persisted end of the current block).
    pub fn high_mark(&self) -> i64 {
        self.block_end.max(self.next)
    }

    pub fn allocate(&mut self) -> Result<i64, MetadataError> {
        if self.next >= self.block_end {
            let end = self.next + PRODUCER_ID_BLOCK;
            write_atomically(&self.path, end.to_string().as_bytes())?;
            self.block_end = end;
        }
        let id = self.next;
        self.next += 1;
        Ok(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kafka_uuid_text_round_trips() {
        let id = random_kafka_uuid();
        let s = kafka_uuid_string(id);
        assert_eq!(s.len(), 22);
        assert_eq!(parse_kafka_uuid(&s), Some(id));
        // Kafka's example id from its docs.
        assert!(parse_kafka_uuid("zJXwnWbVQvWzSCeDUoYtaw").is_some());
    }

    #[test]
    fn random_ids_never_start_with_a_dash() {
        // One raw v4 id in 64 encodes with a leading '-'; 5,000 draws would all but surely hit one.
        for _ in 0..5000 {
            let s = kafka_uuid_string(random_kafka_uuid());
            assert!(!s.starts_with('-'), "{s}");
        }
    }

    #[test]
    fn topic_names_follow_kafka_rules() {
        assert!(validate_topic_name("orders.v1_x-2").is_ok());
        assert!(validate_topic_name("").is_err());
        assert!(validate_topic_name("..").is_err());
        assert!(validate_topic_name("a b").is_err());
        assert!(validate_topic_name(&"a".repeat(250)).is_err());
    }

    #[test]
    fn format_then_reload_keeps_cluster_id_and_checks_node_id() {
        let d = tempfile::tempdir().unwrap();
        let dirs = vec![d.path().join("a")];
        let id = load_or_format(&dirs, 1).unwrap();
        assert_eq!(load_or_format(&dirs, 1).unwrap(), id);
        let err = load_or_format(&dirs, 2).unwrap_err().to_string();
        assert!(err.contains("node.id"), "{err}");
    }

    #[test]
    fn producer_ids_are_not_reused_after_restart() {
        let d = tempfile::tempdir().unwrap();
        let mut a = ProducerIdAllocator::open(d.path()).unwrap();
        let first = a.allocate().unwrap();
        let second = a.allocate().unwrap();
        assert_eq!(second, first + 1);
        let mut b = ProducerIdAllocator::open(d.path()).unwrap();
        assert!(b.allocate().unwrap() > second);
    }

    #[test]
    fn topic_config_overrides_persist() {
        let d = tempfile::tempdir().unwrap();
        let mut s = TopicConfigStore::open(d.path()).unwrap();
        let mut c = BTreeMap::new();
        c.insert("retention.ms".to_string(), "1000".to_string());
        s.set("t", c.clone()).unwrap();
        assert_eq!(TopicConfigStore::open(d.path()).unwrap().get("t"), c);
        s.set("t", BTreeMap::new()).unwrap();
        assert!(TopicConfigStore::open(d.path()).unwrap().get("t").is_empty());
    }

    #[test]
    fn setting_unchanged_overrides_writes_nothing_and_a_failed_write_changes_nothing() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("sluice-topic-configs");
        let mut s = TopicConfigStore::open(d.path()).unwrap();
        s.set("plain", BTreeMap::new()).unwrap();
        assert!(!path.exists(), "a topic without overrides needs no write");
        let c: BTreeMap<String, String> = [("retention.ms".to_string(), "1000".to_string())].into();
        s.set("t", c.clone()).unwrap();
        assert!(path.exists());
        std::fs::remove_file(&path).unwrap();
        s.set("t", c.clone()).unwrap();
        assert!(!path.exists(), "unchanged overrides are not rewritten");
        // A write that cannot happen (the store's directory is gone) leaves the old value.
        let mut gone = TopicConfigStore::open(&d.path().join("missing")).unwrap();
        assert!(gone.set("t", c).is_err());
        assert!(gone.get("t").is_empty());
    }
}
