//! Portable backend: `pread`/`pwrite` through `std::os::unix::fs::FileExt`.
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

use super::{IoBackend, SegmentFile};

/// Blocking positional I/O on the calling thread.
#[derive(Debug, Default, Clone, Copy)]
pub struct StdBackend;

impl IoBackend for StdBackend {
    fn name(&self) -> &'static str {
        "std"
    }

    fn open(&self, path: &Path) -> io::Result<Box<dyn SegmentFile>> {
        let file = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path)?;
        Ok(Box::new(StdSegmentFile { file }))
    }
}

#[derive(Debug)]
struct StdSegmentFile {
    file: File,
}

impl SegmentFile for StdSegmentFile {
    fn write_at(&self, pos: u64, data: &[u8]) -> io::Result<()> {
        self.file.write_all_at(data, pos)
    }

    fn read_at(&self, pos: u64, len: usize) -> io::Result<bytes::Bytes> {
        let mut buf = vec![0u8; len];
        self.file.read_exact_at(&mut buf, pos)?;
        Ok(bytes::Bytes::from(buf))
    }

    fn sync_data(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.file.set_len(len)
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    fn std_file(&self) -> &File {
        &self.file
    }
}
