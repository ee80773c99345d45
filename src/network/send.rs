//! Writing a response made of parts: buffered bytes, and segment-file ranges sent with
//! `sendfile(2)` so fetched records go from the page cache to the socket without passing
//! through user space (what Kafka does with `FileChannel.transferTo`).
//!
//! The socket is corked (`TCP_CORK`) while such a response is written, so the small encoded
//! pieces between file ranges ride in the same segments as the records instead of going out as
//! packets of their own; uncorking at the end pushes the rest.
//!
//! Files whose appended data bypassed the page cache (`log.io.direct`) have the response's
//! ranges that are not in the page cache read with `O_DIRECT` into reused buffers and written
//! from there, a couple of pieces ahead of the socket (`log::io::direct_read`). Their other
//! ranges are asked to be read before the response is written, and what follows them once it
//! is written (on the blocking pool, a bounded number of tasks; see `log::io::direct`).
//!
//! # Failure behaviour
//! Any error, including a file that ends before its range was sent (it was truncated under
//! the slice), is returned; the caller closes the connection, because the client cannot
//! resynchronise with a response cut short.
use std::collections::VecDeque;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncWriteExt, BufWriter, Interest};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::TcpStream;

use crate::api::fetch_frame::ResponsePart;
use crate::log::io::direct_read::{self, DirectRead};
use crate::log::FileSlice;

/// Writes `parts` in order. A response with file parts is flushed (and the socket uncorked)
/// before this returns; one of bytes only stays buffered, like every other response, until the
/// connection flushes.
pub async fn send_parts(
    writer: &mut BufWriter<OwnedWriteHalf>,
    parts: Vec<ResponsePart>,
) -> io::Result<()> {
    let has_files = parts.iter().any(|p| matches!(p, ResponsePart::File(_)));
    if !has_files {
        for part in &parts {
            if let ResponsePart::Bytes(b) = part {
                writer.write_all(b).await?;
            }
        }
        return Ok(());
    }
    // Ranges of directly appended files that are not in the page cache are read with O_DIRECT,
    // a few pieces ahead of the socket; every other range starts reading from the disk now
    // (where it is not in the page cache), rather than one after the other as sendfile reaches
    // each.
    let direct: Vec<Option<Arc<File>>> = parts
        .iter()
        .map(|part| match part {
            ResponsePart::File(f) => {
                let reader = f.direct_reader();
                if reader.is_none() {
                    f.will_read();
                }
                reader
            }
            ResponsePart::Bytes(_) => None,
        })
        .collect();
    let mut reads = DirectReads::new(parts.iter().zip(&direct).filter_map(|(part, reader)| match (part, reader) {
        (ResponsePart::File(f), Some(r)) => Some((r, f)),
        _ => None,
    }));
    let fd = writer.get_ref().as_ref().as_raw_fd();
    set_cork(fd, true)?;
    let sent = async {
        for (part, reader) in parts.iter().zip(&direct) {
            match (part, reader) {
                (ResponsePart::Bytes(b), _) => writer.write_all(b).await?,
                (ResponsePart::File(f), Some(_)) => {
                    for _ in direct_read::chunks(f.position(), f.len()) {
                        writer.write_all(reads.next().await?.bytes()).await?;
                    }
                }
                (ResponsePart::File(f), None) => {
                    writer.flush().await?;
                    send_file(writer.get_ref().as_ref(), f).await?;
                }
            }
        }
        writer.flush().await
    }
    .await;
    let uncorked = set_cork(fd, false);
    // The device reads what these readers will likely fetch next while they take this response
    // in; on the blocking pool, as a long hint waits for the device's queue. Not for ranges read
    // directly: that would put what they read next in the page cache.
    if sent.is_ok() {
        let ahead: Vec<FileSlice> = parts
            .into_iter()
            .zip(direct)
            .filter_map(|(p, reader)| match p {
                ResponsePart::File(f) if reader.is_none() && f.reads_ahead() => Some(f),
                _ => None,
            })
            .collect();
        if !ahead.is_empty() {
            read_ahead(ahead);
        }
    }
    sent.and(uncorked)
}

/// Direct reads of one response's ranges, in order, each on the blocking pool, at most
/// [`DIRECT_READS_AHEAD`] running or done ahead of the socket: the device reads the next piece
/// while the socket takes this one, and a slow reader holds that many buffers, no more.
struct DirectReads {
    todo: VecDeque<(Arc<File>, u64, u64)>,
    running: VecDeque<tokio::task::JoinHandle<io::Result<DirectRead>>>,
}

const DIRECT_READS_AHEAD: usize = 2;

impl DirectReads {
    fn new<'a>(ranges: impl Iterator<Item = (&'a Arc<File>, &'a FileSlice)>) -> DirectReads {
        let todo = ranges
            .flat_map(|(reader, slice)| direct_read::chunks(slice.position(), slice.len()).map(move |(from, to)| (Arc::clone(reader), from, to)))
            .collect();
        let mut reads = DirectReads { todo, running: VecDeque::new() };
        reads.top_up();
        reads
    }

    fn top_up(&mut self) {
        while self.running.len() < DIRECT_READS_AHEAD {
            let Some((file, from, to)) = self.todo.pop_front() else { break };
            self.running.push_back(tokio::task::spawn_blocking(move || direct_read::read(&file, from, to)));
        }
    }

    /// The next piece, in the order the ranges were given.
    async fn next(&mut self) -> io::Result<DirectRead> {
        let Some(read) = self.running.pop_front() else {
            return Err(io::Error::other("a direct read was asked for past the response's last piece"));
        };
        self.top_up();
        read.await.map_err(io::Error::other)?
    }
}

/// Read-ahead tasks queued or running on the blocking pool, at most [`MAX_READ_AHEADS`]: past
/// that, responses skip the hint rather than queue work without bound behind a slow device.
static READ_AHEADS: AtomicUsize = AtomicUsize::new(0);
const MAX_READ_AHEADS: usize = 32;

fn read_ahead(slices: Vec<FileSlice>) {
    if READ_AHEADS.fetch_add(1, Ordering::Relaxed) >= MAX_READ_AHEADS {
        READ_AHEADS.fetch_sub(1, Ordering::Relaxed);
        return;
    }
    tokio::task::spawn_blocking(move || {
        slices.iter().for_each(FileSlice::read_ahead);
        READ_AHEADS.fetch_sub(1, Ordering::Relaxed);
    });
}

/// Sends the whole slice with sendfile, waiting for the socket whenever it is full.
async fn send_file(stream: &TcpStream, slice: &FileSlice) -> io::Result<()> {
    let sock = stream.as_raw_fd();
    let file = slice.file().as_raw_fd();
    let end = slice.position() + slice.len() as u64;
    let mut offset = slice.position() as libc::off_t;
    while (offset as u64) < end {
        let want = (end - offset as u64).min(1 << 30) as usize;
        stream.writable().await?;
        let r = stream.try_io(Interest::WRITABLE, || {
            // SAFETY: both descriptors are open for the duration of the call (the slice holds
            // its file, the stream its socket) and `offset` is a valid, exclusive pointer.
            let n = unsafe { libc::sendfile(sock, file, &mut offset, want) };
            if n < 0 {
                Err(io::Error::last_os_error())
            } else {
                Ok(n as usize)
            }
        });
        match r {
            Ok(0) => return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "segment file ended at {offset} before the fetched range up to {end} was sent"
                ),
            )),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn set_cork(fd: RawFd, on: bool) -> io::Result<()> {
    let v: libc::c_int = on.into();
    // SAFETY: setsockopt reads `size_of::<c_int>()` bytes from a live local.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_CORK,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::io::{residency, DirectBackend, IoBackend, SegmentFile, StdBackend};
    use bytes::Bytes;
    use tokio::io::AsyncReadExt;

    /// Pages of `file` in `[from, to)` resident in the page cache.
    fn resident(file: &File, from: usize, to: usize) -> usize {
        residency(file)[from / 4096..to.div_ceil(4096)].iter().filter(|&&r| r).count()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_response_sends_its_parts_in_order_reading_uncached_direct_appends_directly() {
        let dir = tempfile::tempdir().unwrap();
        let backend = DirectBackend::new(Arc::new(StdBackend));
        backend.prepare_dir(dir.path());
        let direct_ok = backend.append_path() == "direct";
        let file: Arc<dyn SegmentFile> = Arc::from(backend.open(&dir.path().join("f.log")).unwrap());
        let data: Vec<u8> = (0..(5usize << 20) + 333).map(|i| (i % 241) as u8 + 1).collect();
        file.write_at(0, &[Bytes::from(data.clone())]).unwrap();
        // Two unaligned ranges of the file (one spanning several direct reads) between encoded
        // bytes, as a fetch response of two partitions would be.
        let (a, b) = ((4001usize, (3 << 20) + 999), ((4 << 20) + 5, 70_000));
        let parts = vec![
            ResponsePart::Bytes(Bytes::from_static(b"head")),
            ResponsePart::File(FileSlice::new(Arc::clone(&file), a.0 as u64, a.1)),
            ResponsePart::Bytes(Bytes::from_static(b"middle")),
            ResponsePart::File(FileSlice::new(Arc::clone(&file), b.0 as u64, b.1)),
            ResponsePart::Bytes(Bytes::from_static(b"tail")),
        ];
        let mut expected = b"head".to_vec();
        expected.extend_from_slice(&data[a.0..a.0 + a.1]);
        expected.extend_from_slice(b"middle");
        expected.extend_from_slice(&data[b.0..b.0 + b.1]);
        expected.extend_from_slice(b"tail");

        // Where the kernel cannot tell what is cached (no cachestat), ranges go by sendfile.
        let reads_directly = direct_ok && file.direct_reader(a.0 as u64, a.1).is_some();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let reader = tokio::spawn(async move {
            let (mut sock, _) = listener.accept().await.unwrap();
            let mut got = Vec::new();
            sock.read_to_end(&mut got).await.unwrap();
            got
        });
        let (_, write) = TcpStream::connect(addr).await.unwrap().into_split();
        let mut writer = BufWriter::new(write);
        send_parts(&mut writer, parts).await.unwrap();
        writer.shutdown().await.unwrap();
        drop(writer);
        let got = reader.await.unwrap();
        assert_eq!(got.len(), expected.len());
        assert!(got == expected, "the response's bytes differ");
        if reads_directly {
            // Read from the device into reused buffers: the page cache holds none of it.
            assert_eq!(resident(file.std_file(), a.0, b.0 + b.1), 0, "the ranges went through the page cache");
        }
    }
}
