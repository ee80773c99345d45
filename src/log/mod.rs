//! TEMPORARY in-memory stub of the partition log (replaced by the real module).
use std::path::{Path, PathBuf};
use std::sync::Arc;
use bytes::Bytes;
use crate::protocol::record_batch::*;
#[derive(Debug, Clone)]
pub struct LogConfig { pub segment_bytes: u64, pub segment_ms: i64, pub index_interval_bytes: u32, pub retention_ms: i64, pub retention_bytes: i64, pub flush_interval_messages: u64, pub flush_interval_ms: i64, pub max_message_bytes: usize, pub message_timestamp_type_log_append: bool }
impl Default for LogConfig { fn default() -> Self { LogConfig { segment_bytes: 1<<30, segment_ms: 604800000, index_interval_bytes: 4096, retention_ms: 604800000, retention_bytes: -1, flush_interval_messages: u64::MAX, flush_interval_ms: i64::MAX, max_message_bytes: 1048588, message_timestamp_type_log_append: false } } }
#[derive(Debug)]
pub struct AppendInfo { pub base_offset: i64, pub last_offset: i64, pub log_append_time: i64, pub log_start_offset: i64, pub record_count: u64, pub batch_count: u32, pub bytes: usize }
pub struct ReadResult { pub records: Bytes, pub log_start_offset: i64, pub log_end_offset: i64 }
#[derive(Debug, thiserror::Error)]
pub enum LogError { #[error("io {path}")] Io { path: PathBuf, #[source] source: std::io::Error, op: &'static str }, #[error("out of range {offset}")] OffsetOutOfRange { offset: i64, log_start: i64, log_end: i64 }, #[error(transparent)] Validation(#[from] ProduceValidationError), #[error("poisoned")] Poisoned { path: PathBuf } }
#[derive(Debug, Clone, Copy)] pub enum IoBackendChoice { Auto, Uring, Std }
pub trait IoBackend: Send + Sync + std::fmt::Debug { fn name(&self) -> &'static str; }
#[derive(Debug)] struct StdIo; impl IoBackend for StdIo { fn name(&self) -> &'static str { "std" } }
pub fn select_backend(_c: IoBackendChoice) -> std::io::Result<Arc<dyn IoBackend>> { Ok(Arc::new(StdIo)) }
pub struct PartitionLog { dir: PathBuf, batches: Vec<(i64, i64, i64, Bytes)>, start: i64, end: i64, config: LogConfig }
impl PartitionLog {
  pub fn open(dir: &Path, config: LogConfig, _io: Arc<dyn IoBackend>) -> Result<PartitionLog, LogError> { std::fs::create_dir_all(dir).map_err(|e| LogError::Io { path: dir.into(), source: e, op: "mkdir" })?; Ok(PartitionLog { dir: dir.into(), batches: vec![], start: 0, end: 0, config }) }
  pub fn log_start_offset(&self) -> i64 { self.start }
  pub fn log_end_offset(&self) -> i64 { self.end }
  pub fn set_log_start_offset(&mut self, o: i64) { self.start = o.clamp(self.start, self.end) }
  pub fn append_as_leader(&mut self, records: &mut [u8], epoch: i32, now_ms: i64) -> Result<AppendInfo, LogError> {
    let hs = validate_produce_records(records, self.config.max_message_bytes)?;
    let base = self.end; let mut pos = 0; let mut n = 0u64;
    for h in &hs { let b = &mut records[pos..pos + h.total_size()]; set_base_offset(b, self.end); b[12..16].copy_from_slice(&epoch.to_be_bytes());
      self.batches.push((self.end, self.end + h.last_offset_delta as i64, h.max_timestamp, Bytes::copy_from_slice(b))); self.end += h.last_offset_delta as i64 + 1; n += h.records_count as u64; pos += h.total_size(); }
    let _ = now_ms;
    Ok(AppendInfo { base_offset: base, last_offset: self.end - 1, log_append_time: -1, log_start_offset: self.start, record_count: n, batch_count: hs.len() as u32, bytes: records.len() })
  }
  pub fn read(&self, offset: i64, max_bytes: usize, max_offset: i64, min_one: bool) -> Result<ReadResult, LogError> {
    if offset < self.start || offset > self.end { return Err(LogError::OffsetOutOfRange { offset, log_start: self.start, log_end: self.end }) }
    let mut out = bytes::BytesMut::new();
    for (b, l, _, data) in &self.batches { if *l < offset { continue } if *l >= max_offset { break } if out.len() + data.len() > max_bytes && !(min_one && out.is_empty()) { break } let _ = b; out.extend_from_slice(data); }
    Ok(ReadResult { records: out.freeze(), log_start_offset: self.start, log_end_offset: self.end })
  }
  pub fn offset_for_timestamp(&self, ts: i64) -> Result<Option<(i64, i64)>, LogError> { Ok(self.batches.iter().find(|b| b.2 >= ts && b.1 >= self.start).map(|b| (b.0.max(self.start), b.2))) }
  pub fn max_timestamp_offset(&self) -> Result<Option<(i64, i64)>, LogError> { Ok(self.batches.iter().max_by_key(|b| b.2).map(|b| (b.1, b.2))) }
  pub fn delete_records_before(&mut self, o: i64) -> Result<i64, LogError> { if o > self.start { self.start = o.min(self.end) } Ok(self.start) }
  pub fn enforce_retention(&mut self, _now: i64) -> Result<usize, LogError> { Ok(0) }
  pub fn flush(&mut self) -> Result<(), LogError> { Ok(()) }
  pub fn size_bytes(&self) -> u64 { self.batches.iter().map(|b| b.3.len() as u64).sum() }
  pub fn segment_count(&self) -> usize { 1 }
  pub fn dir(&self) -> &Path { &self.dir }
  pub fn update_config(&mut self, c: LogConfig) { self.config = c }
  pub fn delete_files(self) -> Result<(), LogError> { let _ = std::fs::remove_dir_all(&self.dir); Ok(()) }
}
pub fn parse_partition_dir_name(name: &str) -> Option<(String, i32)> { let (t, p) = name.rsplit_once('-')?; if t.is_empty() { return None } let p: i32 = p.parse().ok()?; if p < 0 || p.to_string() != name[t.len()+1..] { return None } Some((t.to_string(), p)) }
pub mod partition_metadata {
  use std::path::Path;
  pub fn read(_dir: &Path) -> std::io::Result<Option<uuid::Uuid>> { Ok(None) }
  pub fn write(_dir: &Path, _id: uuid::Uuid) -> std::io::Result<()> { Ok(()) }
}
pub mod checkpoint {
  use std::path::Path;
  pub fn read(_path: &Path) -> std::io::Result<Vec<(String, i32, i64)>> { Ok(vec![]) }
  pub fn write(_path: &Path, _entries: &[(String, i32, i64)]) -> std::io::Result<()> { Ok(()) }
}
