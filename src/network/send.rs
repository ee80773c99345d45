//! Writing a response made of parts: buffered bytes, and segment-file ranges sent with
//! `sendfile(2)` so fetched records go from the page cache to the socket without passing
//! through user space (what Kafka does with `FileChannel.transferTo`).
//!
//! The socket is corked (`TCP_CORK`) while such a response is written, so the small encoded
//! pieces between file ranges ride in the same segments as the records instead of going out as
//! packets of their own; uncorking at the end pushes the rest.
//!
//! Files whose appended data bypassed the page cache (`log.io.direct`) are asked to read the
//! response's ranges before it is written, and what follows them once it is written (on the
//! blocking pool, a bounded number of tasks; see `log::io::direct`).
//!
//! # Failure behaviour
//! Any error, including a file that ends before its range was sent (it was truncated under
//! the slice), is returned; the caller closes the connection, because the client cannot
//! resynchronise with a response cut short.
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::io::{AsyncWriteExt, BufWriter, Interest};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::TcpStream;

use crate::api::fetch_frame::ResponsePart;
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
    // Every range the response sends starts reading from the disk now (where it is not in the
    // page cache, as with direct-I/O appends), rather than one after the other as sendfile
    // reaches each.
    for part in &parts {
        if let ResponsePart::File(f) = part {
            f.will_read();
        }
    }
    let fd = writer.get_ref().as_ref().as_raw_fd();
    set_cork(fd, true)?;
    let sent = async {
        for part in &parts {
            match part {
                ResponsePart::Bytes(b) => writer.write_all(b).await?,
                ResponsePart::File(f) => {
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
    // in; on the blocking pool, as a long hint waits for the device's queue.
    if sent.is_ok() {
        let ahead: Vec<FileSlice> = parts
            .into_iter()
            .filter_map(|p| match p {
                ResponsePart::File(f) if f.reads_ahead() => Some(f),
                _ => None,
            })
            .collect();
        if !ahead.is_empty() {
            read_ahead(ahead);
        }
    }
    sent.and(uncorked)
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
