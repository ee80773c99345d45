//! Portable backend: `pread`/`pwrite` through `std::os::unix::fs::FileExt`, and `pwritev` for
//! appends made of several parts.
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

use bytes::Bytes;

use super::{IoBackend, SegmentFile};

/// Most iovecs one `pwritev` takes (Linux `UIO_MAXIOV`).
const IOV_MAX: usize = 1024;

/// Writes the concatenation of `parts` at `pos` with `pwritev`, at most [`IOV_MAX`] parts per
/// call, resuming after short writes.
pub(super) fn pwritev_all(file: &File, mut pos: u64, parts: &[Bytes]) -> io::Result<()> {
    let mut rest: Vec<&[u8]> = parts.iter().map(|p| &p[..]).filter(|p| !p.is_empty()).collect();
    let mut first = 0usize;
    while first < rest.len() {
        let window: Vec<io::IoSlice<'_>> = rest[first..].iter().take(IOV_MAX).map(|p| io::IoSlice::new(p)).collect();
        let mut n = match rustix::io::pwritev(file, &window, pos) {
            Ok(0) => return Err(io::Error::new(io::ErrorKind::WriteZero, "pwritev wrote nothing")),
            Ok(n) => n,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        };
        pos += n as u64;
        while n > 0 {
            let p = rest[first];
            if n >= p.len() {
                n -= p.len();
                first += 1;
            } else {
                rest[first] = &p[n..];
                n = 0;
            }
        }
    }
    Ok(())
}

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
    fn write_at(&self, pos: u64, parts: &[Bytes]) -> io::Result<()> {
        if let [one] = parts {
            return self.file.write_all_at(one, pos);
        }
        pwritev_all(&self.file, pos, parts)
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
