//! The command line: help, version, and configuration errors that stop startup with a message
//! naming the key, the value and what is accepted.

use std::process::Command;

use kafka_protocol::messages::ApiVersionsRequest;

mod common;

fn sluice(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_sluice")).args(args).output().expect("run sluice")
}

#[test]
fn help_and_version_work() {
    let out = sluice(&["--help"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("serve") && text.contains("format") && text.contains("version"), "{text}");
    let out = sluice(&["version"]);
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), format!("sluice {}", env!("CARGO_PKG_VERSION")));
}

#[test]
fn invalid_config_value_stops_startup_naming_key_value_and_range() {
    let dir = tempfile::tempdir().unwrap();
    let out = sluice(&[
        "serve",
        "--override",
        &format!("log.dirs={}", dir.path().display()),
        "--override",
        "log.segment.bytes=1000",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("Invalid value 1000 for configuration log.segment.bytes: Value must be at least 1048576"),
        "{err}"
    );
    let out = sluice(&["serve", "--override", "log.io.backend=fast"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("log.io.backend"));
}

#[test]
fn config_file_is_read_and_unknown_keys_only_warn() {
    let dir = tempfile::tempdir().unwrap();
    let props = dir.path().join("server.properties");
    std::fs::write(
        &props,
        format!(
            "# a Kafka-style file\nprocess.roles=broker,controller\nnode.id=1\nlog.dirs={}\nno.such.key=1\nnum.partitions=0\n",
            dir.path().join("data").display()
        ),
    )
    .unwrap();
    // num.partitions=0 is invalid: startup must stop, after warning about the unknown key.
    let out = sluice(&["format", "--config", props.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no.such.key"), "{err}");
    assert!(err.contains("num.partitions"), "{err}");

    let out = sluice(&["format", "--config", props.to_str().unwrap(), "--override", "num.partitions=3"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let meta = std::fs::read_to_string(dir.path().join("data/meta.properties")).unwrap();
    assert!(meta.contains("node.id=1") && meta.contains("cluster.id="), "{meta}");
}

/// `Max open files` soft and hard values from `/proc/<pid>/limits`.
fn open_files_limits(pid: u32) -> (String, String) {
    let text = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = text.lines().find(|l| l.starts_with("Max open files")).expect("open files line");
    let f: Vec<&str> = line.split_whitespace().collect();
    (f[3].to_string(), f[4].to_string())
}

#[test]
fn serve_raises_the_open_files_soft_limit_to_the_hard_limit() {
    use std::io::BufRead;
    use std::os::unix::process::CommandExt;
    let (_, hard) = open_files_limits(std::process::id());
    let hard: libc::rlim_t = match hard.parse() {
        Ok(h) if h > 256 => h,
        _ => return, // unlimited or tiny hard limit: nothing this test can show
    };
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sluice"));
    cmd.args(["serve", "--override", &format!("log.dirs={}", dir.path().display())])
        .args(["--override", "listeners=PLAINTEXT://127.0.0.1:0"])
        .stderr(std::process::Stdio::piped())
        .env("SLUICE_LOG", "warn");
    // SAFETY: setrlimit is async-signal-safe; it only lowers the child's soft limit.
    unsafe {
        cmd.pre_exec(move || {
            let low = libc::rlimit { rlim_cur: 256, rlim_max: hard };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &low) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().expect("start sluice");
    let mut lines = std::io::BufReader::new(child.stderr.take().unwrap()).lines();
    while !lines.next().expect("sluice exited before listening").unwrap().contains("listening on PLAINTEXT://") {}
    let (soft, hard_seen) = open_files_limits(child.id());
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(hard_seen, hard.to_string());
    assert_eq!(soft, hard.to_string(), "the soft limit was started at 256 and should be raised to the hard one");
}

/// The broker's threads named `idle-poll-*`: (tid, scheduling policy, state letters sampled
/// ten times 20 ms apart).
fn idle_pollers(pid: u32) -> Vec<(String, u32, String)> {
    let mut found = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let path = task.unwrap().path();
        let comm = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
        if !comm.starts_with("idle-poll-") {
            continue;
        }
        let sched = std::fs::read_to_string(path.join("sched")).unwrap();
        let policy = sched.lines().find(|l| l.starts_with("policy")).and_then(|l| l.split(':').nth(1)).unwrap();
        let mut states = String::new();
        for _ in 0..10 {
            let stat = std::fs::read_to_string(path.join("stat")).unwrap();
            // The state follows the parenthesised command name.
            states.push(stat.rsplit(") ").next().unwrap().chars().next().unwrap());
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        found.push((path.file_name().unwrap().to_string_lossy().into_owned(), policy.trim().parse().unwrap(), states));
    }
    found
}

/// A broker started with `overrides` after 200 ApiVersions requests (each answered without
/// error, with its own correlation id).
fn broker_after_requests(overrides: &[&str]) -> common::Broker {
    let broker = common::Broker::start(overrides);
    let mut client = broker.connect();
    for _ in 0..200 {
        assert_eq!(client.call(&ApiVersionsRequest::default(), 0).error_code, 0);
    }
    broker
}

#[test]
fn idle_polling_runs_one_sched_idle_spinner_per_cpu_that_sleeps_once_requests_stop() {
    let off = broker_after_requests(&[]);
    let none = idle_pollers(off.child.id());
    drop(off);
    assert!(none.is_empty(), "cpu.idle.poll.us defaults to 0 (off), yet: {none:?}");

    let on = broker_after_requests(&["cpu.idle.poll.us=2000"]);
    // 300 ms after the last request, well past the 2 ms window.
    std::thread::sleep(std::time::Duration::from_millis(300));
    let spinners = idle_pollers(on.child.id());
    drop(on);
    let cpus = std::thread::available_parallelism().unwrap().get();
    assert_eq!(spinners.len(), cpus, "one spinner per CPU the broker may run on: {spinners:?}");
    for (tid, policy, states) in &spinners {
        assert_eq!(*policy, libc::SCHED_IDLE as u32, "spinner {tid} must not compete with the broker's threads");
        // A spinner that kept spinning would be running or runnable in every sample.
        assert!(states.contains('S'), "spinner {tid} should sleep once requests stop, states sampled: {states}");
    }
}
