//! Idle polling (`cpu.idle.poll.us`, off by default): trading CPU time for tail latency.
//!
//! Between two requests of a moderate stream the broker's CPU has nothing to do and halts. The
//! next request then waits for the CPU to wake, which on a virtual machine is an exit to the
//! hypervisor and back: on the bench VM it put about 25 µs on the median of the end-to-end
//! latency at 2,000 records/s, and on the p99 60 µs (medians of six alternating 15 s runs each
//! way) to 190 µs (the full bench of f5eff91; bench/METHOD.md, "Idle-polling session").
//!
//! With a window of N µs, one thread per CPU the process may run on keeps that CPU busy for N µs
//! after the last request arrived (on any connection), spinning at the lowest scheduling
//! priority there is (`SCHED_IDLE`): any broker thread that becomes runnable on that CPU takes
//! it at once, so the spinner only stands where the CPU would otherwise have halted. Once the
//! window has passed without a request, each spinner sleeps, waking after 1 ms, then 2, 4, ...
//! up to 64 ms to look for traffic again: an idle broker costs a few wake-ups per second, and the
//! first requests after a pause pay the wake-up as without polling.
//!
//! The cost is CPU time: while requests keep arriving within the window, every CPU of the broker
//! is busy all the time, and that time is counted as the broker's (so figures such as CPU
//! seconds per GiB produced get worse). Meant for a broker given CPUs of its own, where a low
//! latency tail is worth them.
//!
//! Requests only bump a counter ([`note_request`]: one relaxed atomic add while spinners run,
//! otherwise a read of a flag that never changes); nothing on the request path waits for or
//! wakes a spinner. If `SCHED_IDLE` or the CPU affinity cannot be set,
//! the spinners are not started and a warning says why: spinning at normal priority would
//! compete with the broker's own threads. Nor are they started, with a warning, where the
//! process's cgroup (or one above it) limits its CPU time (`cpu.max`, `cpu.cfs_quota_us`), as
//! containers often do: a spinner's time counts against that limit, and spinners on CPUs the
//! broker's threads are not using would spend the budget and get the broker throttled.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Whether spinners run: only then are requests counted (a read of a line no one writes, for a
/// broker without idle polling).
static ON: AtomicBool = AtomicBool::new(false);

/// Requests seen so far, by all connections, while spinners run.
static REQUESTS: AtomicU64 = AtomicU64::new(0);

/// Longest sleep between two looks for traffic once a window has passed.
const MAX_BACKOFF: Duration = Duration::from_millis(64);

/// Notes that a request arrived.
#[inline]
pub fn note_request() {
    if ON.load(Ordering::Relaxed) {
        REQUESTS.fetch_add(1, Ordering::Relaxed);
    }
}

/// Starts one spinner per CPU in this process's affinity mask, each keeping its CPU busy for
/// `window` after the last request. Returns how many were started.
pub fn start(window: Duration) -> usize {
    if let Some(limit) = cgroup_cpu_limit(&|p| std::fs::read_to_string(p).ok()) {
        tracing::warn!(
            limit = %limit,
            "cpu.idle.poll.us: the broker's cgroup limits its CPU time, and spinners would spend it, \
             leaving the broker throttled; idle polling is off"
        );
        return 0;
    }
    let cpus = match allowed_cpus() {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(error = %e, "cpu.idle.poll.us: cannot read the CPU affinity; idle polling is off");
            return 0;
        }
    };
    let mut started = 0;
    for cpu in cpus {
        let spawned = std::thread::Builder::new().name(format!("idle-poll-{cpu}")).spawn(move || {
            if let Err(e) = lower_and_pin(cpu) {
                tracing::warn!(cpu, error = %e, "cpu.idle.poll.us: cannot make the spinner SCHED_IDLE on its CPU; no idle polling there");
                return;
            }
            spin(window);
        });
        match spawned {
            Ok(_) => started += 1,
            Err(e) => tracing::warn!(cpu, error = %e, "cpu.idle.poll.us: cannot start a spinner"),
        }
    }
    ON.store(started > 0, Ordering::Relaxed);
    started
}

/// What a spinner does next, given the time and what it has seen: the pure core of [`spin`].
#[derive(Debug, PartialEq)]
enum Step {
    Spin,
    Sleep(Duration),
}

#[derive(Debug)]
struct Poller {
    window: Duration,
    seen: u64,
    until: Option<Instant>,
    backoff: Duration,
}

impl Poller {
    fn new(window: Duration, seen: u64) -> Poller {
        Poller { window, seen, until: None, backoff: Duration::from_millis(1) }
    }

    fn step(&mut self, requests: u64, now: Instant) -> Step {
        if requests != self.seen {
            self.seen = requests;
            self.until = Some(now + self.window);
            self.backoff = Duration::from_millis(1);
        }
        match self.until {
            Some(until) if now < until => Step::Spin,
            _ => {
                self.until = None;
                let sleep = self.backoff;
                self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
                Step::Sleep(sleep)
            }
        }
    }
}

fn spin(window: Duration) -> ! {
    let mut poller = Poller::new(window, REQUESTS.load(Ordering::Relaxed));
    loop {
        match poller.step(REQUESTS.load(Ordering::Relaxed), Instant::now()) {
            Step::Spin => std::hint::spin_loop(),
            Step::Sleep(d) => std::thread::sleep(d),
        }
    }
}

/// The CPU-time limit (CFS bandwidth) of this process's cgroup or of one above it, as the file
/// states it (`200000 100000` from cgroup v2's `cpu.max`, `cpu.cfs_quota_us=150000` from v1), or
/// `None` when no cgroup on the way to the root sets one. `read` returns a file's contents.
/// Only the usual mount points are looked at (`/sys/fs/cgroup`, `/sys/fs/cgroup/unified` for v2,
/// `/sys/fs/cgroup/cpu` and `/sys/fs/cgroup/cpu,cpuacct` for v1).
fn cgroup_cpu_limit(read: &dyn Fn(&std::path::Path) -> Option<String>) -> Option<String> {
    use std::path::Path;
    let membership = read(Path::new("/proc/self/cgroup"))?;
    for line in membership.lines() {
        // "hierarchy-id:controllers:path"; v2 is "0::path".
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next()) else { continue };
        let v2 = controllers.is_empty();
        let (mounts, file): (&[&str], &str) = if v2 {
            (&["/sys/fs/cgroup", "/sys/fs/cgroup/unified"], "cpu.max")
        } else if controllers.split(',').any(|c| c == "cpu") {
            (&["/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"], "cpu.cfs_quota_us")
        } else {
            continue;
        };
        for mount in mounts {
            let mut dir = Some(Path::new(path.trim_start_matches('/')));
            while let Some(d) = dir {
                if let Some(text) = read(&Path::new(mount).join(d).join(file)) {
                    let text = text.trim();
                    // v2: "max PERIOD" is no limit; v1: -1 is none.
                    if v2 && !text.starts_with("max") {
                        return Some(text.to_string());
                    }
                    if !v2 && text.parse::<i64>().is_ok_and(|q| q > 0) {
                        return Some(format!("{file}={text}"));
                    }
                }
                dir = d.parent();
            }
        }
    }
    None
}

fn allowed_cpus() -> std::io::Result<Vec<usize>> {
    // SAFETY: `set` is a plain bitmask the kernel fills; its size is passed with it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok((0..libc::CPU_SETSIZE as usize).filter(|&c| libc::CPU_ISSET(c, &set)).collect())
    }
}

/// Pins the calling thread to `cpu` and gives it the `SCHED_IDLE` policy.
fn lower_and_pin(cpu: usize) -> std::io::Result<()> {
    // SAFETY: both calls act on the calling thread (pid 0) with fully initialised arguments.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let param = libc::sched_param { sched_priority: 0 };
        if libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn spins_for_the_window_after_each_request_then_backs_off_to_64_ms() {
        let t0 = Instant::now();
        let mut p = Poller::new(MS * 2, 0);
        // No request yet: sleep, doubling.
        assert_eq!(p.step(0, t0), Step::Sleep(MS));
        assert_eq!(p.step(0, t0), Step::Sleep(MS * 2));
        // A request: spin until the window has passed.
        assert_eq!(p.step(1, t0), Step::Spin);
        assert_eq!(p.step(1, t0 + MS), Step::Spin);
        // Another request inside the window moves its end.
        assert_eq!(p.step(2, t0 + MS), Step::Spin);
        assert_eq!(p.step(2, t0 + MS * 2), Step::Spin);
        assert_eq!(p.step(2, t0 + MS * 3), Step::Sleep(MS));
        let sleeps: Vec<_> = (0..8).map(|_| p.step(2, t0 + MS * 4)).collect();
        let want: Vec<_> = [2, 4, 8, 16, 32, 64, 64, 64].iter().map(|&n| Step::Sleep(MS * n)).collect();
        assert_eq!(sleeps, want);
        // Traffic after a long pause spins again, and the backoff starts over.
        assert_eq!(p.step(3, t0 + MS * 100), Step::Spin);
        assert_eq!(p.step(3, t0 + MS * 103), Step::Sleep(MS));
    }

    fn files(list: &'static [(&'static str, &'static str)]) -> impl Fn(&std::path::Path) -> Option<String> {
        move |p| list.iter().find(|(f, _)| std::path::Path::new(f) == p).map(|(_, t)| t.to_string())
    }

    #[test]
    fn a_cgroup_cpu_limit_on_the_way_to_the_root_is_found_in_v1_and_v2() {
        // v2, limit on the parent of the process's cgroup.
        let v2 = files(&[
            ("/proc/self/cgroup", "0::/kubepods/pod1/c1\n"),
            ("/sys/fs/cgroup/kubepods/pod1/c1/cpu.max", "max 100000\n"),
            ("/sys/fs/cgroup/kubepods/pod1/cpu.max", "200000 100000\n"),
        ]);
        assert_eq!(cgroup_cpu_limit(&v2).as_deref(), Some("200000 100000"));
        // v2 without a limit anywhere, as in a container whose cgroup is its namespace's root.
        let free = files(&[("/proc/self/cgroup", "0::/\n"), ("/sys/fs/cgroup/cpu.max", "max 100000\n")]);
        assert_eq!(cgroup_cpu_limit(&free), None);
        // Hybrid v1 + v2 (this project's VMs): the v1 cpu controller decides; -1 is no limit.
        let v1 = files(&[
            ("/proc/self/cgroup", "4:memory:/x\n1:cpu,cpuacct:/docker/abc\n0::/\n"),
            ("/sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "150000\n"),
            ("/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "-1\n"),
        ]);
        assert_eq!(cgroup_cpu_limit(&v1).as_deref(), Some("cpu.cfs_quota_us=150000"));
        let v1_free = files(&[("/proc/self/cgroup", "1:cpu:/\n0::/\n"), ("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "-1\n")]);
        assert_eq!(cgroup_cpu_limit(&v1_free), None);
        // Unreadable membership: nothing known, nothing refused.
        assert_eq!(cgroup_cpu_limit(&files(&[])), None);
    }

    #[test]
    fn a_spinner_thread_runs_sched_idle_on_its_one_cpu() {
        // SCHED_IDLE needs no privilege: the call that keeps a spinner out of the broker's way
        // works for any user.
        let cpu = *allowed_cpus().unwrap().last().unwrap();
        std::thread::spawn(move || {
            lower_and_pin(cpu).unwrap();
            // SAFETY: reads the calling thread's policy.
            assert_eq!(unsafe { libc::sched_getscheduler(0) }, libc::SCHED_IDLE);
            assert_eq!(allowed_cpus().unwrap(), vec![cpu]);
        })
        .join()
        .unwrap();
    }
}
