//! Direct-I/O reads of fetched ranges (`log.io.direct=true`): a range of a directly appended
//! file that is not in the page cache goes from the device into a reused, aligned buffer and
//! from there to the socket, instead of into fresh page-cache pages that `sendfile` then sends.
//!
//! # Why
//! Directly appended data is not in the page cache, so a catch-up read of it would put every
//! page of it there. On a VM whose hypervisor takes freed guest memory back (virtio-balloon free
//! page reporting) each fresh page costs a host fault, paid by the first CPU that touches it: the
//! consumer copying the data out of the socket. With 8 GiB written through the page cache first
//! and then 2 GiB appended directly, `sendfile` of those 2 GiB to a loopback reader ran at 317
//! MiB/s with 6.3 s of the reader's CPU in the kernel; an `O_DIRECT` read into one reused 1 MiB
//! buffer and a `write` to the same socket ran at 1,132 MiB/s with 0.3 s (bench VM, one run
//! each). The price is one copy into the socket per byte sent, instead of none, and the device's
//! read bandwidth instead of the page cache's for data that was cached after all.
//!
//! # How
//! [`is_mostly_uncached`] asks the kernel (`cachestat(2)`, Linux 6.5) how much of a range is
//! cached: a fetch reads it directly only when less than half of it is and none of it is dirty
//! (an `O_DIRECT` read of dirty pages would first wait for their writeback). Ranges are read in
//! [`READ_CHUNK`] pieces ([`chunks`]), each covering whole [`BLOCK`]s, into buffers from a pool
//! of at most [`POOLED`] that are never freed back to the OS, so the memory is warm after the
//! first reads.
//!
//! `log.io.direct.reads=false` ([`super::DirectBackend::direct_reads`]) turns this off: every
//! range then goes through the page cache, as where `cachestat` is missing. bench/METHOD.md ("Measurement
//! history", "The log on disk") has the measurements for each.
//!
//! # Failure behaviour
//! A kernel without `cachestat` (or a seccomp filter that refuses it) makes every range look
//! cached, once said in a `debug!` line, so fetches use `sendfile` as for buffered files. A file
//! that ends before the range does is `UnexpectedEof`, like a short `sendfile`.
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;

use super::direct::{Block, BLOCK};

/// The largest piece one direct read covers.
pub const READ_CHUNK: usize = 1 << 20;
/// Read buffers kept for reuse; more are allocated while more reads run at once, and freed.
/// Room for what fetch responses read ahead (`network::send`, at most 32 pieces) and a few
/// responses' reads in progress.
pub const POOLED: usize = 40;

static POOL: Mutex<Vec<Vec<Block>>> = Mutex::new(Vec::new());

/// What one direct read brought in: `len` bytes from `skip` in an aligned buffer that goes back
/// to the pool when this is dropped.
pub struct DirectRead {
    blocks: Vec<Block>,
    skip: usize,
    len: usize,
}

impl DirectRead {
    /// The bytes asked for.
    pub fn bytes(&self) -> &[u8] {
        &super::direct::bytes(&self.blocks)[self.skip..self.skip + self.len]
    }

    /// The `len` bytes from `at` of the ones read, in the same buffer.
    pub fn narrow(mut self, at: usize, len: usize) -> DirectRead {
        assert!(at + len <= self.len, "narrowing a direct read of {} bytes to {at}+{len}", self.len);
        self.skip += at;
        self.len = len;
        self
    }
}

impl Drop for DirectRead {
    fn drop(&mut self) {
        let mut pool = POOL.lock();
        if pool.len() < POOLED {
            pool.push(std::mem::take(&mut self.blocks));
        }
    }
}

/// The whole blocks holding `[from, to)`: where they start and how many bytes they take.
fn block_cover(from: u64, to: u64) -> (u64, u64) {
    let start = from - from % BLOCK as u64;
    (start, to.next_multiple_of(BLOCK as u64) - start)
}

/// Splits `[pos, pos + len)` into pieces whose block-aligned cover is at most [`READ_CHUNK`].
pub fn chunks(pos: u64, len: usize) -> impl Iterator<Item = (u64, u64)> {
    let end = pos + len as u64;
    let mut at = pos;
    std::iter::from_fn(move || {
        if at >= end {
            return None;
        }
        let to = end.min(block_cover(at, at).0 + READ_CHUNK as u64);
        let piece = (at, to);
        at = to;
        Some(piece)
    })
}

/// How far from `pos` the last of the [`chunks`] of `[pos, pos + len)` would reach if it were a
/// whole [`READ_CHUNK`]: every range from `pos` up to there splits into the same pieces, but
/// perhaps a shorter last one.
pub fn whole_chunks(pos: u64, len: usize) -> usize {
    let start = block_cover(pos, pos).0;
    let end = (pos + len as u64 - start).next_multiple_of(READ_CHUNK as u64) + start;
    (end - pos) as usize
}

/// Reads `[from, to)` of `file`, a descriptor opened with `O_DIRECT`, by reading the whole
/// blocks that cover it (at most [`READ_CHUNK`] bytes; see [`chunks`]). Blocks on the device.
pub fn read(file: &File, from: u64, to: u64) -> io::Result<DirectRead> {
    let (start, cover) = block_cover(from, to);
    let cover = cover as usize;
    assert!(from <= to && cover <= READ_CHUNK, "direct read of {from}..{to} is not one chunk");
    let mut blocks = POOL.lock().pop().unwrap_or_default();
    blocks.resize(READ_CHUNK / BLOCK, Block([0; BLOCK]));
    let mut read = DirectRead { blocks, skip: (from - start) as usize, len: (to - from) as usize };
    let buf = &mut super::direct::bytes_mut(&mut read.blocks)[..cover];
    let mut got = 0usize;
    while start + (got as u64) < to {
        let n = file.read_at(&mut buf[got..], start + got as u64)?;
        // A read short of a block boundary is the end of the file: the next one could not be
        // aligned, and there is nothing behind it anyway.
        if n == 0 || (n % BLOCK != 0 && start + ((got + n) as u64) < to) {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("segment file ended at {} before the fetched range up to {to}", start + (got + n) as u64),
            ));
        }
        got += n;
    }
    Ok(read)
}

/// `cachestat(2)`'s syscall number, the same on every architecture (it came after the tables
/// were unified); the `libc` crate does not name it for every target yet.
const SYS_CACHESTAT: libc::c_long = 451;
static NO_CACHESTAT: AtomicBool = AtomicBool::new(false);

#[repr(C)]
struct CachestatRange {
    off: u64,
    len: u64,
}

#[repr(C)]
#[derive(Default)]
struct Cachestat {
    nr_cache: u64,
    nr_dirty: u64,
    nr_writeback: u64,
    nr_evicted: u64,
    nr_recently_evicted: u64,
}

/// Whether less than half of the pages holding `[pos, pos + len)` are in the page cache and none
/// of them is dirty or under writeback: such a range is worth reading directly. `false` where
/// the kernel cannot tell (see the module doc).
pub fn is_mostly_uncached(file: &File, pos: u64, len: usize) -> bool {
    if len == 0 || NO_CACHESTAT.load(Ordering::Relaxed) {
        return false;
    }
    let (start, cover) = block_cover(pos, pos + len as u64);
    let range = CachestatRange { off: start, len: cover };
    let mut stat = Cachestat::default();
    // SAFETY: cachestat reads one `cachestat_range` and writes one `cachestat`, both live locals
    // laid out as the kernel's structs (two and five u64s).
    let r = unsafe {
        libc::syscall(SYS_CACHESTAT, file.as_raw_fd(), &range as *const CachestatRange, &mut stat as *mut Cachestat, 0)
    };
    if r != 0 {
        let e = io::Error::last_os_error();
        if matches!(e.raw_os_error(), Some(libc::ENOSYS) | Some(libc::EPERM)) && !NO_CACHESTAT.swap(true, Ordering::Relaxed) {
            tracing::debug!(error = %e, "cachestat unavailable: fetches of directly appended data go through the page cache");
        }
        return false;
    }
    let pages = cover / BLOCK as u64;
    stat.nr_dirty == 0 && stat.nr_writeback == 0 && stat.nr_cache * 2 < pages
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_cover_the_range_in_order_each_within_one_aligned_read() {
        for (pos, len) in [(0u64, 0usize), (0, 1), (4095, 2), (100, READ_CHUNK), (5000, 3 * READ_CHUNK + 17), (4096, READ_CHUNK)] {
            let pieces: Vec<(u64, u64)> = chunks(pos, len).collect();
            let mut at = pos;
            for &(from, to) in &pieces {
                assert_eq!(from, at, "{pos}+{len}: pieces not contiguous");
                assert!(to > from);
                let (_, cover) = block_cover(from, to);
                assert!(cover <= READ_CHUNK as u64, "{pos}+{len}: piece {from}..{to} covers {cover}");
                at = to;
            }
            assert_eq!(at, pos + len as u64, "{pos}+{len}: pieces end short");
            // Only the first piece may start off a block boundary.
            assert!(pieces.iter().skip(1).all(|&(from, _)| from % BLOCK as u64 == 0), "{pieces:?}");
        }
    }

    #[test]
    fn whole_chunks_reach_the_end_of_the_last_piece_and_hold_every_shorter_range_in_them() {
        for (pos, len) in [(0u64, 1usize), (4095, 2), (100, READ_CHUNK), (5000, 3 * READ_CHUNK + 17), (4096, READ_CHUNK)] {
            let whole = whole_chunks(pos, len);
            assert!(whole >= len && whole < len + READ_CHUNK, "{pos}+{len}: {whole}");
            let outer: Vec<(u64, u64)> = chunks(pos, whole).collect();
            assert_eq!(outer.len(), chunks(pos, len).count(), "{pos}+{len}: more pieces");
            assert_eq!(block_cover(outer[outer.len() - 1].0, pos + whole as u64).1, READ_CHUNK as u64, "{pos}+{len}: last piece short");
            // A range a little longer or shorter, as the next fetch's is, splits into pieces each
            // inside one of these.
            for other in [len / 2, len + 1, whole].into_iter().filter(|&o| o <= whole) {
                for (from, to) in chunks(pos, other) {
                    assert!(outer.iter().any(|&(f, t)| f <= from && to <= t), "{pos}+{other}: {from}..{to} not in {outer:?}");
                }
            }
        }
    }
}
