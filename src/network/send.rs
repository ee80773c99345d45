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
//! What a reader of such ranges will likely fetch next, the bytes that follow each range it was
//! sent directly (as many as it was sent, to the end of the last 1 MiB piece they fall in), is
//! read directly too, starting as the response starts to be written, so that the device reads
//! while the socket takes this response and the client asks again: [`ResponseWriter`] keeps
//! those pieces for the connection's next response, which sends a piece of its own from one
//! that holds it. Without this the device idled between a consumer's fetches (the bench's
//! catch-up read with librdkafka ran at two thirds of the raw fetch loop's speed); starting it
//! only once the response was written left the device idle while it was written. At most
//! [`AHEAD_PER_CONNECTION`] pieces per connection are read ahead for the next response (the
//! pieces of the one being written, read ahead for it, are held until they are sent), and
//! [`AHEAD_PIECES_MAX`] in all; a response drops those of the files it reads that it does not
//! use (pieces of partitions it leaves out wait for the next one). A piece is only used for the
//! file it was read from, and not after the file was cut short (`SegmentFile::truncations`): an
//! appended log's bytes change only then.
//!
//! # Failure behaviour
//! Any error, including a file that ends before its range was sent (it was truncated under
//! the slice), is returned; the caller closes the connection, because the client cannot
//! resynchronise with a response cut short. A piece read ahead that failed is an error only for
//! the response that would send it; one that no response sends is dropped, failed or not.
use std::collections::VecDeque;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncWriteExt, BufWriter, Interest};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::TcpStream;
use tokio::sync::oneshot;

use crate::api::fetch_frame::ResponsePart;
use crate::log::io::direct_read::{self, DirectRead};
use crate::log::FileSlice;

/// A connection's buffered socket, with the pieces of files read ahead for its next fetch
/// response (see the module doc). Derefs to the buffered socket for everything else.
pub struct ResponseWriter {
    writer: BufWriter<OwnedWriteHalf>,
    ahead: Vec<Ahead>,
    /// Pieces sent from what was read ahead (for tests).
    ahead_used: u64,
}

impl ResponseWriter {
    pub fn new(writer: BufWriter<OwnedWriteHalf>) -> ResponseWriter {
        ResponseWriter { writer, ahead: Vec::new(), ahead_used: 0 }
    }
}

impl std::ops::Deref for ResponseWriter {
    type Target = BufWriter<OwnedWriteHalf>;
    fn deref(&self) -> &Self::Target {
        &self.writer
    }
}

impl std::ops::DerefMut for ResponseWriter {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.writer
    }
}

/// Most pieces one connection has read ahead: a consumer of 16 partitions fetching 1 MiB of
/// each (librdkafka's defaults) is read a whole response ahead.
const AHEAD_PER_CONNECTION: usize = 16;
/// Most pieces read ahead for all connections together (each holds a buffer of up to
/// [`direct_read::READ_CHUNK`]): one such consumer's next response and the one being written.
/// Past it, a response's pieces are read as it is written, [`DIRECT_READS_AHEAD`] ahead.
const AHEAD_PIECES_MAX: usize = 32;
static AHEAD_PIECES: AtomicUsize = AtomicUsize::new(0);

/// One piece read ahead, or being read: `[from, to)` of the file `reader` reads.
struct Ahead {
    reader: Arc<File>,
    truncations: u64,
    from: u64,
    to: u64,
    read: oneshot::Receiver<io::Result<DirectRead>>,
}

impl Ahead {
    /// Takes one of [`AHEAD_PIECES_MAX`] for an `Ahead` about to be made (its drop gives it
    /// back); `false` when all are taken.
    fn claim() -> bool {
        if AHEAD_PIECES.fetch_add(1, Ordering::Relaxed) >= AHEAD_PIECES_MAX {
            AHEAD_PIECES.fetch_sub(1, Ordering::Relaxed);
            return false;
        }
        true
    }

    fn holds(&self, reader: &Arc<File>, truncations: u64, from: u64, to: u64) -> bool {
        Arc::ptr_eq(&self.reader, reader) && self.truncations == truncations && self.from <= from && to <= self.to
    }
}

impl Drop for Ahead {
    fn drop(&mut self) {
        AHEAD_PIECES.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Writes `parts` in order. A response with file parts is flushed (and the socket uncorked)
/// before this returns; one of bytes only stays buffered, like every other response, until the
/// connection flushes.
pub async fn send_parts(writer: &mut ResponseWriter, parts: Vec<ResponsePart>) -> io::Result<()> {
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
    let mut earlier = std::mem::take(&mut writer.ahead);
    let mut reads = DirectReads::new(
        parts.iter().zip(&direct).filter_map(|(part, reader)| match (part, reader) {
            (ResponsePart::File(f), Some(r)) => Some((r, f)),
            _ => None,
        }),
        &mut earlier,
    );
    writer.ahead_used += reads.from_ahead;
    // What was read ahead of a file this response reads, and not used, is no longer what its
    // reader asks for next. Pieces of other files (partitions left out of this response) stay.
    earlier.retain(|a| !direct.iter().flatten().any(|r| Arc::ptr_eq(r, &a.reader)));
    // What the readers of ranges read directly will likely fetch next starts reading now, while
    // this response goes out, so that the device does not wait for the socket.
    let next = read_direct_ahead(&parts, &direct);
    let ResponseWriter { writer, ahead, .. } = writer;
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
    // What the readers of ranges read directly will likely fetch next is being read (above);
    // for the other ranges the device reads it into the page cache while they take this
    // response in (a hint, on the blocking pool, as a long one waits for the device's queue).
    if sent.is_ok() {
        *ahead = next;
        let room = AHEAD_PER_CONNECTION.saturating_sub(ahead.len());
        ahead.extend(earlier.into_iter().take(room));
        let hints: Vec<FileSlice> = parts
            .into_iter()
            .zip(direct)
            .filter_map(|(p, reader)| match p {
                ResponsePart::File(f) if reader.is_none() && f.reads_ahead() => Some(f),
                _ => None,
            })
            .collect();
        if !hints.is_empty() {
            read_ahead(hints);
        }
    }
    sent.and(uncorked)
}

/// Starts reading ahead, for the connection's next response, what follows each range of
/// `parts` that was read directly: as many bytes as the range had, up to the end of its last
/// piece (the next range may be a little longer: its batches differ), one blocking task
/// reading them in order (the next response sends them in that order) and skipping those it no
/// longer wants.
fn read_direct_ahead(parts: &[ResponsePart], direct: &[Option<Arc<File>>]) -> Vec<Ahead> {
    let mut ahead = Vec::new();
    let mut jobs = Vec::new();
    'parts: for (part, reader) in parts.iter().zip(direct) {
        let (ResponsePart::File(f), Some(_)) = (part, reader) else { continue };
        let next = f.position() + f.len() as u64;
        let Some((reader, len)) = f.direct_ahead(direct_read::whole_chunks(next, f.len())) else { continue };
        let truncations = f.truncations();
        for (from, to) in direct_read::chunks(next, len as usize) {
            if ahead.len() == AHEAD_PER_CONNECTION || !Ahead::claim() {
                break 'parts;
            }
            let (tx, rx) = oneshot::channel();
            ahead.push(Ahead { reader: Arc::clone(&reader), truncations, from, to, read: rx });
            jobs.push((Arc::clone(&reader), from, to, tx));
        }
    }
    if !jobs.is_empty() {
        tokio::task::spawn_blocking(move || {
            for (file, from, to, tx) in jobs {
                if !tx.is_closed() {
                    let _ = tx.send(direct_read::read(&file, from, to));
                }
            }
        });
    }
    ahead
}

/// Direct reads of one response's ranges, in order, each on the blocking pool, at most
/// [`DIRECT_READS_AHEAD`] running or done ahead of the socket: the device reads the next piece
/// while the socket takes this one, and a slow reader holds that many buffers, no more. Pieces
/// that were read ahead (see the module doc) come from there instead.
struct DirectReads {
    todo: VecDeque<Piece>,
    running: VecDeque<Pending>,
    /// How many pieces come from what was read ahead.
    from_ahead: u64,
}

/// A piece to read, or one read ahead: the read covering it, and where it lies in that read.
enum Piece {
    Read(Arc<File>, u64, u64),
    Ahead(Ahead, usize, usize),
}

enum Pending {
    Read(tokio::task::JoinHandle<io::Result<DirectRead>>),
    Ahead(Ahead, usize, usize),
}

const DIRECT_READS_AHEAD: usize = 2;

impl DirectReads {
    fn new<'a>(ranges: impl Iterator<Item = (&'a Arc<File>, &'a FileSlice)>, ahead: &mut Vec<Ahead>) -> DirectReads {
        let mut todo = VecDeque::new();
        let mut from_ahead = 0;
        for (reader, slice) in ranges {
            let truncations = slice.truncations();
            for (from, to) in direct_read::chunks(slice.position(), slice.len()) {
                match ahead.iter().position(|a| a.holds(reader, truncations, from, to)) {
                    Some(i) => {
                        let a = ahead.swap_remove(i);
                        let at = (from - a.from) as usize;
                        todo.push_back(Piece::Ahead(a, at, (to - from) as usize));
                        from_ahead += 1;
                    }
                    None => todo.push_back(Piece::Read(Arc::clone(reader), from, to)),
                }
            }
        }
        let mut reads = DirectReads { todo, running: VecDeque::new(), from_ahead };
        reads.top_up();
        reads
    }

    fn top_up(&mut self) {
        while self.running.len() < DIRECT_READS_AHEAD {
            let Some(piece) = self.todo.pop_front() else { break };
            self.running.push_back(match piece {
                Piece::Read(file, from, to) => Pending::Read(tokio::task::spawn_blocking(move || direct_read::read(&file, from, to))),
                Piece::Ahead(a, at, len) => Pending::Ahead(a, at, len),
            });
        }
    }

    /// The next piece, in the order the ranges were given.
    async fn next(&mut self) -> io::Result<DirectRead> {
        let Some(read) = self.running.pop_front() else {
            return Err(io::Error::other("a direct read was asked for past the response's last piece"));
        };
        self.top_up();
        match read {
            Pending::Read(task) => task.await.map_err(io::Error::other)?,
            Pending::Ahead(mut a, at, len) => {
                let read = (&mut a.read).await.map_err(|_| io::Error::other("a read ahead ended without its piece"))?;
                Ok(read?.narrow(at, len))
            }
        }
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
    super::set_int_option(fd, libc::IPPROTO_TCP, libc::TCP_CORK, on.into())
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

    /// A response writer on a loopback connection, and the task that reads everything sent.
    async fn loopback() -> (ResponseWriter, tokio::task::JoinHandle<Vec<u8>>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let reader = tokio::spawn(async move {
            let (mut sock, _) = listener.accept().await.unwrap();
            let mut got = Vec::new();
            sock.read_to_end(&mut got).await.unwrap();
            got
        });
        let (_, write) = TcpStream::connect(addr).await.unwrap().into_split();
        (ResponseWriter::new(BufWriter::new(write)), reader)
    }

    /// Closes the connection and returns what the reader got.
    async fn finish(mut writer: ResponseWriter, reader: tokio::task::JoinHandle<Vec<u8>>) -> Vec<u8> {
        writer.shutdown().await.unwrap();
        drop(writer);
        reader.await.unwrap()
    }

    /// A direct backend's file in `dir` holding `data`, or `None` where this machine reads none
    /// of it directly (the filesystem refuses `O_DIRECT`, or the kernel has no `cachestat`).
    fn direct_file(dir: &std::path::Path, data: &[u8]) -> Option<Arc<dyn SegmentFile>> {
        let backend = DirectBackend::new(Arc::new(StdBackend));
        backend.prepare_dir(dir);
        let file: Arc<dyn SegmentFile> = Arc::from(backend.open(&dir.join("f.log")).unwrap());
        file.write_at(0, &[Bytes::copy_from_slice(data)]).unwrap();
        if backend.append_path() != "direct" || file.direct_reader(0, 4096).is_none() {
            eprintln!("no direct reads here; not tested");
            return None;
        }
        Some(file)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_catch_up_fetch_sends_what_was_read_ahead_while_the_last_response_went_out_unless_the_file_was_cut() {
        let dir = tempfile::tempdir().unwrap();
        // Far longer than the reads below, so that they do not count as following the end.
        let data: Vec<u8> = (0..(12usize << 20) + 77).map(|i| (i % 239) as u8 + 1).collect();
        let Some(file) = direct_file(dir.path(), &data) else { return };
        let slice = |pos: usize, len: usize| ResponsePart::File(FileSlice::new(Arc::clone(&file), pos as u64, len));
        let (mut writer, reader) = loopback().await;
        // Three fetches of one partition, each going on where the last one ended, the next one a
        // little longer than the last (batches differ in size).
        let (a, b, c) = (9_000usize, 9_000 + 900_000, 9_000 + 900_000 + 950_000);
        let mut expected = Vec::new();
        for (from, to) in [(a, b), (b, c), (c, c + 700_000)] {
            send_parts(&mut writer, vec![ResponsePart::Bytes(Bytes::from_static(b"hdr")), slice(from, to - from)]).await.unwrap();
            expected.extend_from_slice(b"hdr");
            expected.extend_from_slice(&data[from..to]);
        }
        // The first one read its range; the next two each found theirs read ahead.
        assert_eq!(writer.ahead_used, 2, "pieces sent from what was read ahead");

        // What was read ahead behind `c + 700_000` is stale once the log is cut there and
        // other bytes are appended: the next fetch must send those.
        let d = c + 700_000;
        file.set_len(d as u64).unwrap();
        let other: Vec<u8> = (0..1usize << 20).map(|i| (i % 233) as u8 + 2).collect();
        file.write_at(d as u64, &[Bytes::from(other.clone())]).unwrap();
        assert!(file.direct_reader(d as u64, 600_000).is_some(), "the appended bytes are read directly");
        send_parts(&mut writer, vec![slice(d, 600_000)]).await.unwrap();
        expected.extend_from_slice(&other[..600_000]);
        assert_eq!(writer.ahead_used, 2, "a piece read before the cut was sent after it");

        let got = finish(writer, reader).await;
        assert_eq!(got.len(), expected.len());
        assert!(got == expected, "the responses' bytes differ");
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
        let (mut writer, reader) = loopback().await;
        send_parts(&mut writer, parts).await.unwrap();
        let got = finish(writer, reader).await;
        assert_eq!(got.len(), expected.len());
        assert!(got == expected, "the response's bytes differ");
        if reads_directly {
            // Read from the device into reused buffers: the page cache holds none of it.
            assert_eq!(resident(file.std_file(), a.0, b.0 + b.1), 0, "the ranges went through the page cache");
        }
    }
}
