//! `partition.metadata`: binds a partition directory to its topic id.
//!
//! ```text
//!  version: 0
//!  topic_id: 8Bm3Jf0lQxSv0l1D0mLm2w      <- Kafka's Uuid.toString(): URL-safe base64, no padding
//! ```
//! Two ways to write it:
//! - [`write_partition_metadata`] replaces the file atomically and durably (see
//!   [`super::checkpoint::write_atomically`]): a crash leaves the old file or the new one.
//! - [`write_new_partition_metadata`] writes a brand-new partition's file in place, without
//!   fsync. A crash can leave it missing, empty or cut short; the caller must be able to rebuild
//!   it (the broker keeps one durable copy per topic and rewrites the others on open, see
//!   `broker::create_topic`). [`read_partition_metadata`] reports such a file as
//!   [`LogError::MalformedFile`].
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::Path;

use uuid::Uuid;

use super::checkpoint::write_atomically;
use super::error::LogError;

/// File name inside a partition directory.
pub const PARTITION_METADATA_FILE: &str = "partition.metadata";

const KIND: &str = "partition.metadata";
const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// Kafka's textual topic id: URL-safe base64 of the 16 bytes, without padding (22 chars).
pub fn topic_id_to_string(id: Uuid) -> String {
    let bytes = id.as_bytes();
    let mut out = String::with_capacity(22);
    for chunk in bytes.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        let chars = chunk.len() + 1;
        for i in 0..chars {
            out.push(ALPHABET[((n >> (18 - 6 * i)) & 0x3f) as usize] as char);
        }
    }
    out
}

/// Parses Kafka's textual topic id (accepts `=` padding too); `None` if it is not 16 bytes.
pub fn topic_id_from_str(s: &str) -> Option<Uuid> {
    let s = s.trim().trim_end_matches('=');
    if s.len() != 22 {
        return None;
    }
    let mut bits: u32 = 0;
    let mut nbits = 0;
    let mut out = Vec::with_capacity(16);
    for c in s.bytes() {
        let v = ALPHABET.iter().position(|&a| a == c)? as u32;
        bits = (bits << 6) | v;
        nbits += 6;
        if nbits >= 8 {
            nbits -= 8;
            out.push((bits >> nbits) as u8);
            bits &= (1 << nbits) - 1;
        }
    }
    if bits != 0 {
        return None; // non-canonical trailing bits
    }
    let arr: [u8; 16] = out.try_into().ok()?;
    Some(Uuid::from_bytes(arr))
}

fn render(topic_id: Uuid) -> String {
    format!("version: 0\ntopic_id: {}\n", topic_id_to_string(topic_id))
}

/// Writes `<dir>/partition.metadata` for `topic_id`, atomically and durably (the directory
/// entry included).
pub fn write_partition_metadata(dir: &Path, topic_id: Uuid) -> Result<(), LogError> {
    write_atomically(&dir.join(PARTITION_METADATA_FILE), render(topic_id).as_bytes())
}

/// Writes `<dir>/partition.metadata` for a partition created just now, with no fsync and no
/// temporary file: after a crash the file may be missing or torn (see the module doc).
pub fn write_new_partition_metadata(dir: &Path, topic_id: Uuid) -> Result<(), LogError> {
    let path = dir.join(PARTITION_METADATA_FILE);
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .map_err(|e| LogError::io(&path, "create", e))?;
    f.write_all(render(topic_id).as_bytes()).map_err(|e| LogError::io(&path, "write", e))
}

/// Reads `<dir>/partition.metadata`; `Ok(None)` if the file does not exist.
pub fn read_partition_metadata(dir: &Path) -> Result<Option<Uuid>, LogError> {
    let path = dir.join(PARTITION_METADATA_FILE);
    let text = match fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(LogError::io(&path, "read", e)),
    };
    let malformed = |reason: String| LogError::MalformedFile { path: path.clone(), kind: KIND, reason };
    let mut lines = text.lines();
    let version = lines.next().and_then(|l| l.strip_prefix("version:")).map(str::trim);
    if version != Some("0") {
        return Err(malformed(format!("expected \"version: 0\", got {version:?}")));
    }
    let id = lines
        .next()
        .and_then(|l| l.strip_prefix("topic_id:"))
        .ok_or_else(|| malformed("missing topic_id line".into()))?
        .trim();
    topic_id_from_str(id)
        .map(Some)
        .ok_or_else(|| malformed(format!("topic_id {id:?} is not a base64url uuid")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_id_text_matches_kafkas_uuid_to_string() {
        // Kafka: new Uuid(0x0123456789abcdefL, 0xfedcba9876543210L).toString()
        let id = Uuid::from_u128(0x0123456789abcdef_fedcba9876543210);
        assert_eq!(topic_id_to_string(id), "ASNFZ4mrze_-3LqYdlQyEA");
        assert_eq!(topic_id_to_string(Uuid::nil()), "AAAAAAAAAAAAAAAAAAAAAA");
        assert_eq!(topic_id_from_str("ASNFZ4mrze_-3LqYdlQyEA"), Some(id));
        assert_eq!(topic_id_from_str("ASNFZ4mrze_-3LqYdlQyEA=="), Some(id));
        assert_eq!(topic_id_from_str("short"), None);
        assert_eq!(topic_id_from_str("ASNFZ4mrze_-3LqYdlQyE+"), None);
        for _ in 0..100 {
            let id = Uuid::new_v4();
            assert_eq!(topic_id_from_str(&topic_id_to_string(id)), Some(id));
        }
    }

    #[test]
    fn partition_metadata_round_trips_in_kafkas_exact_text() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read_partition_metadata(dir.path()).unwrap(), None);
        let id = Uuid::from_u128(0x0123456789abcdef_fedcba9876543210);
        write_partition_metadata(dir.path(), id).unwrap();
        let text = fs::read_to_string(dir.path().join(PARTITION_METADATA_FILE)).unwrap();
        assert_eq!(text, "version: 0\ntopic_id: ASNFZ4mrze_-3LqYdlQyEA\n");
        assert_eq!(read_partition_metadata(dir.path()).unwrap(), Some(id));
        fs::write(dir.path().join(PARTITION_METADATA_FILE), "version: 0\ntopic_id: ASNFZ4mrze_-3LqYdlQyEA").unwrap();
        assert_eq!(read_partition_metadata(dir.path()).unwrap(), Some(id));
        fs::write(dir.path().join(PARTITION_METADATA_FILE), "version: 1\ntopic_id: x\n").unwrap();
        assert!(read_partition_metadata(dir.path()).is_err());
    }

    #[test]
    fn unsynced_partition_metadata_has_the_same_text_and_torn_files_read_as_malformed() {
        let dir = tempfile::tempdir().unwrap();
        let id = Uuid::from_u128(0x0123456789abcdef_fedcba9876543210);
        write_new_partition_metadata(dir.path(), id).unwrap();
        let path = dir.path().join(PARTITION_METADATA_FILE);
        assert_eq!(fs::read_to_string(&path).unwrap(), "version: 0\ntopic_id: ASNFZ4mrze_-3LqYdlQyEA\n");
        assert!(!dir.path().join("partition.metadata.tmp").exists());
        // What a crash before writeback can leave behind.
        for torn in ["", "version: 0\n", "version: 0\ntopic_id: ASNFZ4mrze"] {
            fs::write(&path, torn).unwrap();
            assert!(matches!(read_partition_metadata(dir.path()), Err(LogError::MalformedFile { .. })), "{torn:?}");
        }
    }
}
