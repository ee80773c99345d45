//! TEMPORARY stub of the record-batch view (replaced by the real module).
pub const LOG_OVERHEAD: usize = 12;
pub const BATCH_HEADER_LEN: usize = 61;
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader { pub base_offset: i64, pub batch_length: i32, pub partition_leader_epoch: i32, pub magic: i8, pub crc: u32, pub attributes: i16, pub last_offset_delta: i32, pub base_timestamp: i64, pub max_timestamp: i64, pub producer_id: i64, pub producer_epoch: i16, pub base_sequence: i32, pub records_count: i32 }
#[derive(Debug, thiserror::Error)]
pub enum BatchError { #[error("truncated")] Truncated }
#[derive(Debug, thiserror::Error)]
pub enum ProduceValidationError { #[error("corrupt {0}")] CorruptMessage(String), #[error("too large {size} {max}")] MessageTooLarge { size: usize, max: usize }, #[error("invalid {0}")] InvalidRecord(String), #[error("codec {0}")] UnsupportedCompression(u8) }
fn be_i64(b: &[u8], at: usize) -> i64 { i64::from_be_bytes(b[at..at+8].try_into().unwrap()) }
fn be_i32(b: &[u8], at: usize) -> i32 { i32::from_be_bytes(b[at..at+4].try_into().unwrap()) }
fn be_i16(b: &[u8], at: usize) -> i16 { i16::from_be_bytes(b[at..at+2].try_into().unwrap()) }
impl BatchHeader {
  pub fn parse(b: &[u8]) -> Result<BatchHeader, BatchError> {
    if b.len() < 61 { return Err(BatchError::Truncated) }
    Ok(BatchHeader { base_offset: be_i64(b,0), batch_length: be_i32(b,8), partition_leader_epoch: be_i32(b,12), magic: b[16] as i8, crc: be_i32(b,17) as u32, attributes: be_i16(b,21), last_offset_delta: be_i32(b,23), base_timestamp: be_i64(b,27), max_timestamp: be_i64(b,35), producer_id: be_i64(b,43), producer_epoch: be_i16(b,51), base_sequence: be_i32(b,53), records_count: be_i32(b,57) })
  }
  pub fn total_size(&self) -> usize { 12 + self.batch_length as usize }
  pub fn last_offset(&self) -> i64 { self.base_offset + self.last_offset_delta as i64 }
  pub fn next_offset(&self) -> i64 { self.last_offset() + 1 }
  pub fn is_transactional(&self) -> bool { self.attributes & 0x10 != 0 }
  pub fn is_control(&self) -> bool { self.attributes & 0x20 != 0 }
}
pub struct BatchIter<'a> { buf: &'a [u8] }
impl<'a> BatchIter<'a> { pub fn new(buf: &'a [u8]) -> Self { BatchIter { buf } } }
impl<'a> Iterator for BatchIter<'a> {
  type Item = Result<(BatchHeader, &'a [u8]), BatchError>;
  fn next(&mut self) -> Option<Self::Item> {
    if self.buf.len() < 61 { return None }
    let h = match BatchHeader::parse(self.buf) { Ok(h) => h, Err(e) => return Some(Err(e)) };
    let n = h.total_size(); if n > self.buf.len() || n < 61 { return None }
    let (a, b) = self.buf.split_at(n); self.buf = b; Some(Ok((h, a)))
  }
}
pub fn set_base_offset(batch: &mut [u8], base_offset: i64) { batch[0..8].copy_from_slice(&base_offset.to_be_bytes()); }
pub fn validate_produce_records(records: &[u8], max: usize) -> Result<Vec<BatchHeader>, ProduceValidationError> {
  let mut out = vec![]; let mut rest = records;
  while !rest.is_empty() {
    let h = BatchHeader::parse(rest).map_err(|e| ProduceValidationError::CorruptMessage(e.to_string()))?;
    let n = h.total_size(); if n > rest.len() || n < 61 { return Err(ProduceValidationError::CorruptMessage("len".into())) }
    if n > max { return Err(ProduceValidationError::MessageTooLarge { size: n, max }) }
    if crc32c::crc32c(&rest[21..n]) != h.crc { return Err(ProduceValidationError::CorruptMessage("crc".into())) }
    out.push(h); rest = &rest[n..];
  }
  Ok(out)
}
