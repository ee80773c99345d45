//! Text checkpoint files and the atomic-replace helper every small file in the log uses.
//!
//! Log-dir-level offset checkpoints (`recovery-point-offset-checkpoint`,
//! `log-start-offset-checkpoint`, `replication-offset-checkpoint`) use Kafka's format:
//! ```text
//!  0                      <- version
//!  2                      <- number of entries
//!  orders 0 1234          <- topic partition offset
//!  orders 1 99
//! ```
//! Writes go to `<file>.tmp`, are fsynced, renamed over the target, and the directory is
//! fsynced, so a crash leaves either the old or the new file, never a mix. Readers split on
//! any whitespace, as Kafka's do, and reject a count that does not match the lines.
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use super::error::LogError;

const CHECKPOINT_VERSION: u32 = 0;

/// `<path>.tmp`: where a replacement is written before it is renamed over `path`.
fn tmp_path(path: &Path) -> PathBuf {
    let mut tmp_name = path.as_os_str().to_owned();
    tmp_name.push(".tmp");
    PathBuf::from(tmp_name)
}

/// Atomically replaces `path` with `contents` (tmp file + fsync + rename + directory fsync).
pub fn write_atomically(path: &Path, contents: &[u8]) -> Result<(), LogError> {
    let tmp = tmp_path(path);
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&tmp)
        .map_err(|e| LogError::io(&tmp, "create", e))?;
    f.write_all(contents).map_err(|e| LogError::io(&tmp, "write", e))?;
    f.sync_all().map_err(|e| LogError::io(&tmp, "fsync", e))?;
    drop(f);
    fs::rename(&tmp, path).map_err(|e| LogError::io(path, "rename", e))?;
    if let Some(dir) = path.parent() {
        sync_dir(dir)?;
    }
    Ok(())
}

/// Replaces `path` with `contents` through a rename, without fsync: readers see the old or the
/// new file, never a mix, but a crash may bring back the old one (or leave none, for a file
/// created this way). For files that can be rebuilt, made durable later with
/// [`write_atomically`].
pub fn write_replacing(path: &Path, contents: &[u8]) -> Result<(), LogError> {
    let tmp = tmp_path(path);
    fs::write(&tmp, contents).map_err(|e| LogError::io(&tmp, "write", e))?;
    fs::rename(&tmp, path).map_err(|e| LogError::io(path, "rename", e))
}

/// fsyncs a directory so that creations, renames and deletions in it are durable.
pub fn sync_dir(dir: &Path) -> Result<(), LogError> {
    let d = File::open(dir).map_err(|e| LogError::io(dir, "open directory", e))?;
    d.sync_all().map_err(|e| LogError::io(dir, "fsync directory", e))
}

/// Writes every file of the filesystem holding `dir` that has changes in memory, waits for the
/// writes and commits the journal (`syncfs(2)`): one call in place of an fsync per file and per
/// directory. It also writes other programs' dirty data on that filesystem.
pub fn sync_filesystem(dir: &Path) -> Result<(), LogError> {
    let d = File::open(dir).map_err(|e| LogError::io(dir, "open directory", e))?;
    rustix::fs::syncfs(&d).map_err(|e| LogError::io(dir, "syncfs", e.into()))
}

/// Reads a versioned "count then lines" file; returns the entry lines split on whitespace.
/// A missing file is `Ok(None)`.
pub(crate) fn read_entry_lines(
    path: &Path,
    kind: &'static str,
) -> Result<Option<Vec<Vec<String>>>, LogError> {
    let text = match fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(LogError::io(path, "read", e)),
    };
    let malformed = |reason: String| LogError::MalformedFile { path: path.to_path_buf(), kind, reason };
    let mut lines = text.lines();
    let version = lines.next().ok_or_else(|| malformed("empty file".into()))?.trim();
    if version.parse::<u32>().ok() != Some(CHECKPOINT_VERSION) {
        return Err(malformed(format!("unsupported version {version:?}")));
    }
    let count_line = lines.next().ok_or_else(|| malformed("missing entry count".into()))?.trim();
    let count: usize = count_line.parse().map_err(|_| malformed(format!("bad entry count {count_line:?}")))?;
    let mut entries = Vec::new();
    for line in lines {
        let fields: Vec<String> = line.split_whitespace().map(str::to_string).collect();
        if fields.is_empty() {
            continue;
        }
        entries.push(fields);
    }
    if entries.len() != count {
        return Err(malformed(format!("header says {count} entries, found {}", entries.len())));
    }
    Ok(Some(entries))
}

pub(crate) fn render_entry_lines(lines: &[String]) -> String {
    let mut out = format!("{CHECKPOINT_VERSION}\n{}\n", lines.len());
    for l in lines {
        out.push_str(l);
        out.push('\n');
    }
    out
}

/// Reads an offset checkpoint: `(topic, partition, offset)` per entry. Missing file = empty.
pub fn read_offset_checkpoint(path: &Path) -> Result<Vec<(String, i32, i64)>, LogError> {
    const KIND: &str = "offset checkpoint";
    let Some(entries) = read_entry_lines(path, KIND)? else { return Ok(Vec::new()) };
    let mut out = Vec::with_capacity(entries.len());
    for fields in entries {
        let bad = || LogError::MalformedFile {
            path: path.to_path_buf(),
            kind: KIND,
            reason: format!("bad entry {:?}", fields.join(" ")),
        };
        if fields.len() != 3 {
            return Err(bad());
        }
        let partition: i32 = fields[1].parse().map_err(|_| bad())?;
        let offset: i64 = fields[2].parse().map_err(|_| bad())?;
        out.push((fields[0].clone(), partition, offset));
    }
    Ok(out)
}

/// Atomically writes an offset checkpoint in Kafka's format.
pub fn write_offset_checkpoint(path: &Path, entries: &[(String, i32, i64)]) -> Result<(), LogError> {
    let lines: Vec<String> = entries.iter().map(|(t, p, o)| format!("{t} {p} {o}")).collect();
    write_atomically(path, render_entry_lines(&lines).as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_checkpoint_round_trips_in_kafkas_exact_text() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("recovery-point-offset-checkpoint");
        let entries = vec![("orders".to_string(), 0, 1234), ("my-topic".to_string(), 12, 0)];
        write_offset_checkpoint(&path, &entries).unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), "0\n2\norders 0 1234\nmy-topic 12 0\n");
        assert_eq!(read_offset_checkpoint(&path).unwrap(), entries);
        assert!(!dir.path().join("recovery-point-offset-checkpoint.tmp").exists());
    }

    #[test]
    fn offset_checkpoint_reads_kafka_written_file_and_rejects_bad_counts() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log-start-offset-checkpoint");
        assert!(read_offset_checkpoint(&path).unwrap().is_empty());
        fs::write(&path, "0\n1\n__consumer_offsets  7   42\n").unwrap();
        assert_eq!(read_offset_checkpoint(&path).unwrap(), vec![("__consumer_offsets".into(), 7, 42)]);
        fs::write(&path, "0\n2\nt 0 1\n").unwrap();
        assert!(matches!(read_offset_checkpoint(&path), Err(LogError::MalformedFile { .. })));
        fs::write(&path, "1\n0\n").unwrap();
        assert!(read_offset_checkpoint(&path).is_err());
        fs::write(&path, "0\n1\nt x 1\n").unwrap();
        assert!(read_offset_checkpoint(&path).is_err());
    }
}
