//! Process metrics read from `/proc/self` at scrape time (Linux only; elsewhere they are absent).

/// What one scrape reads about the process.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct ProcessStats {
    pub cpu_seconds: Option<f64>,
    pub resident_bytes: Option<u64>,
    pub virtual_bytes: Option<u64>,
    pub open_fds: Option<u64>,
    pub max_fds: Option<u64>,
    pub start_time_seconds: Option<f64>,
}

/// Fields of `/proc/<pid>/stat` after the `(comm)` field, which may itself hold spaces or parens.
fn stat_fields(stat: &str) -> Option<Vec<&str>> {
    let after = stat.rfind(')')?;
    Some(stat[after + 1..].split_whitespace().collect())
}

/// Parses `/proc/self/stat` (+ clock ticks, page size, boot time) into CPU, memory and start time.
pub fn parse_stat(stat: &str, ticks_per_second: f64, page_size: u64, boot_time_seconds: Option<f64>) -> ProcessStats {
    let mut s = ProcessStats::default();
    let Some(f) = stat_fields(stat) else { return s };
    // After the comm field, index 0 is field 3 (state): utime = field 14, stime = 15,
    // starttime = 22, vsize = 23, rss = 24 (proc(5)).
    let field = |n: usize| f.get(n - 3).and_then(|v| v.parse::<u64>().ok());
    if let (Some(u), Some(st)) = (field(14), field(15)) {
        s.cpu_seconds = Some((u + st) as f64 / ticks_per_second);
    }
    s.virtual_bytes = field(23);
    s.resident_bytes = field(24).map(|pages| pages * page_size);
    if let (Some(start), Some(boot)) = (field(22), boot_time_seconds) {
        s.start_time_seconds = Some(boot + start as f64 / ticks_per_second);
    }
    s
}

fn boot_time() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    text.lines().find_map(|l| l.strip_prefix("btime ")).and_then(|v| v.trim().parse().ok())
}

/// Reads the live process; missing files leave fields `None`.
pub fn read() -> ProcessStats {
    // SAFETY: sysconf and getrlimit only read process-wide values into locals.
    let (ticks, page) = unsafe { (libc::sysconf(libc::_SC_CLK_TCK), libc::sysconf(libc::_SC_PAGESIZE)) };
    let ticks = if ticks > 0 { ticks as f64 } else { 100.0 };
    let page = if page > 0 { page as u64 } else { 4096 };
    let mut s = match std::fs::read_to_string("/proc/self/stat") {
        Ok(stat) => parse_stat(&stat, ticks, page, boot_time()),
        Err(_) => ProcessStats::default(),
    };
    s.open_fds = std::fs::read_dir("/proc/self/fd").ok().map(|d| d.count() as u64);
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: `lim` is a valid, writable rlimit for the duration of the call.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 {
        s.max_fds = Some(lim.rlim_cur);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_with_spaces_in_comm_parses() {
        let stat = "4242 (sluice (x) y) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 50 0 0 20 0 9 0 1000 123456789 2048 18446744073709551615";
        let s = parse_stat(stat, 100.0, 4096, Some(1_700_000_000.0));
        assert_eq!(s.cpu_seconds, Some(3.0));
        assert_eq!(s.virtual_bytes, Some(123456789));
        assert_eq!(s.resident_bytes, Some(2048 * 4096));
        assert_eq!(s.start_time_seconds, Some(1_700_000_010.0));
    }

    #[test]
    fn live_process_is_readable() {
        let s = read();
        if std::path::Path::new("/proc/self/stat").exists() {
            assert!(s.resident_bytes.unwrap() > 0);
            assert!(s.open_fds.unwrap() >= 3);
            assert!(s.cpu_seconds.is_some());
        }
    }
}
