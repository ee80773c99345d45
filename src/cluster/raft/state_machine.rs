//! The state machine behind the metadata quorum: committed entries applied to the
//! [`MetadataImage`], and snapshots of it, for openraft's `RaftStateMachine`.
//!
//! A normal entry is one proposal: a batch of metadata records in Kafka's encoding. Each record
//! gets the next metadata offset (the image's offset + 1), the same on every voter since every
//! voter applies the same entries in the same order.
//!
//! # Snapshots
//! A snapshot is the image written as records (`MetadataImage::to_records`), as Kafka's
//! snapshots are, plus the offset it stands for; kept in `raft-snapshot` (JSON of the openraft
//! snapshot meta and the data; written to a temporary file, fsynced, renamed). Opening loads it,
//! and openraft applies the committed entries after it again. A follower that is too far behind
//! gets it from the leader in place of the entries it lacks.
//!
//! # Failure behaviour
//! A committed record that does not decode or does not apply to the image is a storage error:
//! openraft stops this node, and the error names the record's offset and kind. Proposals are
//! checked against the image before they are written, so this only happens with a log written by
//! something else, or a bug.

use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use openraft::storage::RaftStateMachine;
use openraft::{
    Entry, EntryPayload, LogId, RaftSnapshotBuilder, Snapshot, SnapshotMeta, StorageError, StorageIOError, StoredMembership,
};
use parking_lot::Mutex;
use tokio::sync::watch;

use super::log_store::write_file_durably;
use super::{MetadataBatch, TypeConfig};
use crate::cluster::image::MetadataImage;
use crate::cluster::records;
use crate::cluster::ClusterError;

#[derive(serde::Serialize, serde::Deserialize)]
struct SnapshotData {
    /// The metadata offset of the image's last record.
    offset: i64,
    records: Vec<Vec<u8>>,
}

#[derive(Clone, serde::Serialize, serde::Deserialize)]
struct StoredSnapshot {
    meta: SnapshotMeta<u64, openraft::BasicNode>,
    data: Vec<u8>,
}

struct Inner {
    dir: PathBuf,
    image: MetadataImage,
    last_applied: Option<LogId<u64>>,
    membership: StoredMembership<u64, openraft::BasicNode>,
    snapshot: Option<StoredSnapshot>,
    snapshots_built: u64,
}

/// The state machine; clones share it (one is the snapshot builder).
#[derive(Clone)]
pub struct StateMachine {
    inner: Arc<Mutex<Inner>>,
    published: Arc<watch::Sender<Arc<MetadataImage>>>,
}

fn sm_err(e: impl std::fmt::Display) -> StorageError<u64> {
    StorageIOError::write_state_machine(openraft::AnyError::error(e.to_string())).into()
}

fn image_from_snapshot(data: &[u8]) -> Result<MetadataImage, ClusterError> {
    let snap: SnapshotData = serde_json::from_slice(data).map_err(|e| ClusterError::Malformed {
        offset: -1,
        kind: "metadata snapshot",
        reason: e.to_string(),
    })?;
    image_from_records(snap.offset, &snap.records)
}

/// The image that encoded records (a snapshot's, or an observed image's) stand for, at
/// metadata offset `offset`.
pub fn image_from_records(offset: i64, encoded: &[Vec<u8>]) -> Result<MetadataImage, ClusterError> {
    let mut image = MetadataImage::default();
    for (i, bytes) in encoded.iter().enumerate() {
        image.apply(i as i64, &records::decode(bytes, i as i64)?.record)?;
    }
    image.offset = image.offset.max(offset);
    Ok(image)
}

impl StateMachine {
    /// Opens the state machine in `dir`, from its snapshot if it has one.
    pub fn open(dir: &Path) -> Result<StateMachine, ClusterError> {
        let path = dir.join("raft-snapshot");
        let (image, last_applied, membership, snapshot) = match std::fs::read(&path) {
            Ok(bytes) => {
                let stored: StoredSnapshot = serde_json::from_slice(&bytes).map_err(|e| ClusterError::Malformed {
                    offset: -1,
                    kind: "metadata snapshot",
                    reason: format!("{}: {e}", path.display()),
                })?;
                let image = image_from_snapshot(&stored.data)?;
                (image, stored.meta.last_log_id, stored.meta.last_membership.clone(), Some(stored))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => (MetadataImage::default(), None, StoredMembership::default(), None),
            Err(source) => return Err(ClusterError::Read { path, source }),
        };
        let (tx, _) = watch::channel(Arc::new(image.clone()));
        Ok(StateMachine {
            inner: Arc::new(Mutex::new(Inner {
                dir: dir.to_path_buf(),
                image,
                last_applied,
                membership,
                snapshot,
                snapshots_built: 0,
            })),
            published: Arc::new(tx),
        })
    }

    /// The image as entries apply.
    pub fn subscribe(&self) -> watch::Receiver<Arc<MetadataImage>> {
        self.published.subscribe()
    }

    /// The image now.
    pub fn image(&self) -> Arc<MetadataImage> {
        self.published.borrow().clone()
    }

    fn publish(&self, image: &MetadataImage) {
        self.published.send_replace(Arc::new(image.clone()));
    }
}

/// Applies one proposal's records to `image`, numbering them from the image's offset on.
pub fn apply_batch(image: &mut MetadataImage, batch: &MetadataBatch) -> Result<i64, ClusterError> {
    for bytes in &batch.records {
        let offset = image.offset + 1;
        let rec = records::decode(bytes, offset)?;
        image.apply(offset, &rec.record)?;
    }
    Ok(image.offset)
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachine {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError<u64>> {
        let mut inner = self.inner.lock();
        let data = SnapshotData {
            offset: inner.image.offset,
            records: inner.image.to_records().iter().map(records::encode).collect(),
        };
        let data = serde_json::to_vec(&data).expect("snapshots serialise");
        inner.snapshots_built += 1;
        let meta = SnapshotMeta {
            last_log_id: inner.last_applied,
            last_membership: inner.membership.clone(),
            snapshot_id: format!("{}-{}", inner.last_applied.map(|l| l.index).unwrap_or(0), inner.snapshots_built),
        };
        let stored = StoredSnapshot { meta: meta.clone(), data: data.clone() };
        let bytes = serde_json::to_vec(&stored).expect("snapshots serialise");
        tokio::task::block_in_place(|| write_file_durably(&inner.dir, "raft-snapshot", &bytes))
            .map_err(|e| StorageError::from(StorageIOError::write_snapshot(Some(meta.signature()), openraft::AnyError::new(&e))))?;
        inner.snapshot = Some(stored);
        Ok(Snapshot { meta, snapshot: Box::new(Cursor::new(data)) })
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = StateMachine;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<u64>>, StoredMembership<u64, openraft::BasicNode>), StorageError<u64>> {
        let inner = self.inner.lock();
        Ok((inner.last_applied, inner.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<i64>, StorageError<u64>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + openraft::OptionalSend,
        I::IntoIter: openraft::OptionalSend,
    {
        let mut inner = self.inner.lock();
        let mut out = Vec::new();
        for entry in entries {
            inner.last_applied = Some(entry.log_id);
            match entry.payload {
                EntryPayload::Blank => {}
                EntryPayload::Normal(batch) => {
                    apply_batch(&mut inner.image, &batch).map_err(|e| {
                        tracing::error!(error = %e, raft_index = entry.log_id.index, "a committed metadata record does not apply; stopping");
                        sm_err(e)
                    })?;
                }
                EntryPayload::Membership(m) => inner.membership = StoredMembership::new(Some(entry.log_id), m),
            }
            out.push(inner.image.offset);
        }
        // One copy for readers per applied batch (the image is cloned, not shared, so that
        // applying never waits for a reader).
        let image = Arc::new(inner.image.clone());
        drop(inner);
        self.published.send_replace(image);
        Ok(out)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, StorageError<u64>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<u64, openraft::BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError<u64>> {
        let data = snapshot.into_inner();
        let image = image_from_snapshot(&data).map_err(sm_err)?;
        let stored = StoredSnapshot { meta: meta.clone(), data };
        let bytes = serde_json::to_vec(&stored).expect("snapshots serialise");
        let mut inner = self.inner.lock();
        tokio::task::block_in_place(|| write_file_durably(&inner.dir, "raft-snapshot", &bytes))
            .map_err(|e| StorageError::from(StorageIOError::write_snapshot(Some(meta.signature()), openraft::AnyError::new(&e))))?;
        inner.image = image.clone();
        inner.last_applied = meta.last_log_id;
        inner.membership = meta.last_membership.clone();
        inner.snapshot = Some(stored);
        drop(inner);
        self.publish(&image);
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageError<u64>> {
        Ok(self
            .inner
            .lock()
            .snapshot
            .clone()
            .map(|s| Snapshot { meta: s.meta, snapshot: Box::new(Cursor::new(s.data)) }))
    }
}
