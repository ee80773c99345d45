//! The command line: help, version, and configuration errors that stop startup with a message
//! naming the key, the value and what is accepted.

use std::process::Command;

use kafka_protocol::messages::ApiVersionsRequest;

mod common;
use common::free_port;

/// Held by the tests that start broker processes: the idle-polling test samples its spinners'
/// scheduler states, and a spinner (SCHED_IDLE) waiting for a CPU that other tests' brokers keep
/// busy shows as runnable when it would be asleep on an idle machine.
static ONE_BROKER_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_broker_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_BROKER_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

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
    let _serial = one_broker_at_a_time();
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
    let _serial = one_broker_at_a_time();
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


/// Runs `sluice serve` with `settings` (as overrides, on three free ports: two Kafka listeners
/// and the metrics listener) and expects it to refuse to start: a non-zero exit within 20 s,
/// with no port ever accepting a connection. Returns stderr.
fn refused_startup(settings: &[&str]) -> String {
    let _serial = one_broker_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let (plain, other, metrics) = (free_port(), free_port(), free_port());
    let mut args: Vec<String> = vec![
        "serve".into(),
        "--override".into(),
        format!("log.dirs={}", dir.path().join("data").display()),
        "--override".into(),
        format!("metrics.listener=127.0.0.1:{metrics}"),
    ];
    for s in settings {
        args.push("--override".into());
        args.push(s.replace("{plain}", &plain.to_string()).replace("{other}", &other.to_string()));
    }
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(&args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let status = loop {
        for port in [plain, other, metrics] {
            assert!(
                std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
                "port {port} accepted a connection with {settings:?}"
            );
        }
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("sluice kept running with {settings:?}");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert!(!status.success(), "{err}");
    assert!(!err.contains("listening on"), "{err}");
    assert!(!dir.path().join("data").exists(), "log dirs were written before the refusal: {err}");
    err
}

#[test]
fn a_sasl_ssl_listener_is_refused_not_served_as_plaintext() {
    let listeners = "listeners=PLAINTEXT://127.0.0.1:{plain},SASL_SSL://127.0.0.1:{other}";
    let err = refused_startup(&[listeners, "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL"]);
    assert!(err.contains("Refusing configuration listeners=PLAINTEXT://127.0.0.1:"), "{err}");
    assert!(err.contains("uses security protocol SASL_SSL") && err.contains("only PLAINTEXT"), "{err}");
}

#[test]
fn an_ssl_listener_is_refused_also_when_named_otherwise() {
    let err = refused_startup(&["listeners=PLAINTEXT://127.0.0.1:{plain},SSL://127.0.0.1:{other}"]);
    assert!(err.contains("listeners=") && err.contains("uses security protocol SSL"), "{err}");
    let err = refused_startup(&[
        "listeners=PLAINTEXT://127.0.0.1:{plain},EXTERNAL://127.0.0.1:{other}",
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,EXTERNAL:SSL",
    ]);
    assert!(err.contains("listener EXTERNAL://127.0.0.1:") && err.contains("uses security protocol SSL"), "{err}");
    let err = refused_startup(&["listeners=PLAINTEXT://127.0.0.1:{plain}", "ssl.keystore.location=/etc/kafka/broker.jks"]);
    assert!(err.contains("ssl.keystore.location=/etc/kafka/broker.jks") && err.contains("TLS"), "{err}");
}

#[test]
fn a_sasl_mechanism_is_refused_naming_key_and_value() {
    let err = refused_startup(&["listeners=PLAINTEXT://127.0.0.1:{plain}", "sasl.enabled.mechanisms=SCRAM-SHA-512"]);
    assert!(err.contains("Refusing configuration sasl.enabled.mechanisms=SCRAM-SHA-512"), "{err}");
    assert!(err.contains("does not implement SASL"), "{err}");
    let err = refused_startup(&[
        "listeners=PLAINTEXT://127.0.0.1:{plain}",
        "listener.name.plaintext.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required;",
    ]);
    assert!(err.contains("listener.name.plaintext.plain.sasl.jaas.config="), "{err}");
}

#[test]
fn an_authorizer_is_refused_naming_key_and_value() {
    let err = refused_startup(&[
        "listeners=PLAINTEXT://127.0.0.1:{plain}",
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    ]);
    assert!(
        err.contains("Refusing configuration authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer"),
        "{err}"
    );
    assert!(err.contains("no authorizer"), "{err}");
}

#[test]
fn a_quorum_without_this_node_or_a_broker_role_without_controllers_is_refused() {
    let err = refused_startup(&[
        "listeners=PLAINTEXT://127.0.0.1:{plain},CONTROLLER://127.0.0.1:{other}",
        "controller.listener.names=CONTROLLER",
        "process.roles=broker,controller",
        "controller.quorum.voters=2@127.0.0.1:{other},3@127.0.0.1:1,4@127.0.0.1:2",
    ]);
    assert!(err.contains("controller.quorum.voters") && err.contains("includes this node (1@host:port)"), "{err}");
    let err = refused_startup(&["listeners=PLAINTEXT://127.0.0.1:{plain}", "process.roles=broker"]);
    assert!(err.contains("Refusing configuration process.roles=broker") && err.contains("needs controller.quorum.voters or controller.quorum.bootstrap.servers"), "{err}");
}

/// Kafka 4.x's `config/server.properties` as shipped (single-node KRaft, combined roles), with
/// only the ports, `log.dirs` and the listeners' bind address (loopback, not every interface)
/// changed so the test can run beside other brokers. `config::refused`'s unit tests load the
/// file unchanged.
fn stock_kraft_properties(dir: &std::path::Path, port: u16, controller_port: u16) -> std::path::PathBuf {
    let text = format!(
        "process.roles=broker,controller\n\
         node.id=1\n\
         controller.quorum.bootstrap.servers=localhost:{controller_port}\n\
         listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}\n\
         inter.broker.listener.name=PLAINTEXT\n\
         advertised.listeners=PLAINTEXT://localhost:{port},CONTROLLER://localhost:{controller_port}\n\
         controller.listener.names=CONTROLLER\n\
         listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL\n\
         num.network.threads=3\n\
         num.io.threads=8\n\
         socket.send.buffer.bytes=102400\n\
         socket.receive.buffer.bytes=102400\n\
         socket.request.max.bytes=104857600\n\
         log.dirs={}\n\
         num.partitions=1\n\
         num.recovery.threads.per.data.dir=1\n\
         offsets.topic.replication.factor=1\n\
         share.coordinator.state.topic.replication.factor=1\n\
         share.coordinator.state.topic.min.isr=1\n\
         transaction.state.log.replication.factor=1\n\
         transaction.state.log.min.isr=1\n\
         log.retention.hours=168\n\
         log.segment.bytes=1073741824\n\
         log.retention.check.interval.ms=300000\n",
        dir.join("data").display()
    );
    let path = dir.join("server.properties");
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn kafkas_stock_kraft_config_starts_and_lists_the_keys_it_ignores_once() {
    let _serial = one_broker_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let (port, controller_port) = (free_port(), free_port());
    let props = stock_kraft_properties(dir.path(), port, controller_port);
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["serve", "--config", props.to_str().unwrap(), "--override", "metrics.listener=none"])
        .env("SLUICE_LOG", "info")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(child.stderr.take().unwrap()));
    let mut seen = Vec::new();
    while !seen.iter().any(|l: &String| l.contains(&format!("listening on PLAINTEXT://127.0.0.1:{port}"))) {
        match lines.next() {
            Some(line) => seen.push(line.unwrap()),
            None => panic!("sluice exited: {seen:#?}"),
        }
    }
    let mut client = common::Client::connect_to(&format!("127.0.0.1:{port}"));
    assert_eq!(client.call(&ApiVersionsRequest::default(), 3).error_code, 0);
    let _ = child.kill();
    let _ = child.wait();
    let summary: Vec<&String> = seen.iter().filter(|l| l.contains("configuration keys ignored")).collect();
    assert_eq!(summary.len(), 1, "{seen:#?}");
    for key in ["num.network.threads", "num.io.threads", "offsets.topic.replication.factor", "inter.broker.listener.name"] {
        assert_eq!(summary[0].matches(key).count(), 1, "{key} in {}", summary[0]);
    }
    for acted_on in ["num.partitions", "log.segment.bytes", "process.roles", "socket.receive.buffer.bytes"] {
        assert!(!summary[0].contains(&format!("{acted_on},")), "{acted_on} is not ignored: {}", summary[0]);
    }
    assert!(!seen.iter().any(|l| l.contains("unknown configuration key")), "{seen:#?}");
}

#[test]
fn strict_config_refuses_every_key_that_would_be_ignored() {
    let _serial = one_broker_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let props = stock_kraft_properties(dir.path(), free_port(), free_port());
    let out = sluice(&["serve", "--strict-config", "--config", props.to_str().unwrap(), "--override", "no.such.key=1"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--strict-config: 10 configuration key(s) would be ignored"), "{err}");
    for key in ["no.such.key", "num.network.threads", "transaction.state.log.min.isr"] {
        assert!(err.contains(key), "{key}: {err}");
    }
    assert!(!dir.path().join("data").exists(), "{err}");
    // Without ignored keys, strict mode starts as usual (format: same loading, no server).
    let data = dir.path().join("plain");
    let out = sluice(&["format", "--strict-config", "--override", &format!("log.dirs={}", data.display())]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// A base port P with P..P+2, P+100..P+102 and P+200..P+202 all free (dev-cluster's layout).
fn free_port_block() -> u16 {
    loop {
        let base = free_port();
        // The whole block stays below the ephemeral range, as free_port's ports do.
        if base > 32768 - 203 {
            continue;
        }
        let all_free = [0u16, 1, 2, 100, 101, 102, 200, 201, 202]
            .iter()
            .all(|off| std::net::TcpListener::bind(("127.0.0.1", base + off)).is_ok());
        if all_free {
            return base;
        }
    }
}

#[test]
fn dev_cluster_starts_one_cluster_of_three_nodes_and_stops_them_all_on_sigterm() {
    use kafka_protocol::messages::MetadataRequest;
    let _serial = one_broker_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port_block();
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["dev-cluster", "3", "--dir"])
        .arg(dir.path())
        .args(["--port", &port.to_string()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut printed = String::new();
    while !printed.contains("bootstrap.servers=") {
        let mut line = String::new();
        assert!(std::io::BufRead::read_line(&mut out, &mut line).unwrap() > 0, "dev-cluster exited: {printed}");
        printed.push_str(&line);
    }
    let expected = format!("bootstrap.servers=127.0.0.1:{},127.0.0.1:{},127.0.0.1:{}", port, port + 1, port + 2);
    assert!(printed.contains(&expected), "{printed}");
    // Every node registers: each lists all three brokers.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    for node in 0..3 {
        loop {
            let seen = std::net::TcpStream::connect(("127.0.0.1", port + node))
                .ok()
                .map(|_| common::Client::connect_to(&format!("127.0.0.1:{}", port + node)).call(&MetadataRequest::default().with_topics(Some(vec![])), 12).brokers.len());
            if seen == Some(3) {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "node {} sees {seen:?} brokers", node + 1);
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    }
    let status = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status().unwrap();
    assert!(status.success());
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    assert!(child.wait().unwrap().success(), "{rest}");
    for i in 1..=3 {
        assert!(rest.contains(&format!("node {i} stopped (exit status: 0)")), "{rest}");
    }
    for port in [port, port + 100, port + 200] {
        assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_err(), "port {port} still served after the stop");
    }
}

/// SIGTERM is caught from the start: one that arrives while the node still opens its logs (an
/// orchestrator stopping a node as soon as it appears) ends in the same clean shutdown as one
/// that arrives while it serves, not in death by the signal's default action.
#[test]
fn sigterm_during_startup_still_shuts_down_cleanly() {
    use std::io::BufRead;
    let _serial = one_broker_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["serve", "--override"])
        .arg(format!("log.dirs={}", dir.path().display()))
        .args(["--override", &format!("listeners=PLAINTEXT://127.0.0.1:{}", free_port()), "--override", "metrics.listener=none"])
        .env("SLUICE_LOG", "info")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut printed = String::new();
    // "opened logs" comes before the quorum starts and before any listener is bound.
    while !printed.contains("opened logs") {
        assert!(err.read_line(&mut printed).unwrap() > 0, "sluice exited: {printed}");
    }
    assert!(!printed.contains("listening on"), "{printed}");
    assert!(Command::new("kill").arg("-TERM").arg(child.id().to_string()).status().unwrap().success());
    std::io::Read::read_to_string(&mut err, &mut printed).unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?}: {printed}");
    assert!(printed.contains("shutting down: flushing logs") && printed.contains("stopped"), "{printed}");
}

/// A single node's data dir holds topics outside any metadata quorum until its first start as
/// the one voter of its own quorum, which writes them into the new metadata log. Started
/// instead as one voter of several, whose log another voter may begin, it is refused: the
/// topics would be missing from that log and their logs removed.
#[test]
fn a_single_nodes_topics_are_refused_into_a_new_quorum_of_several_voters_and_kept_by_its_own() {
    use kafka_protocol::messages::{create_topics_request::CreatableTopic, CreateTopicsRequest, MetadataRequest};
    let topics = |b: &common::Broker| -> Vec<String> {
        let md = b.connect().call(&MetadataRequest::default().with_topics(None), 12);
        md.topics.iter().filter_map(|t| t.name.as_ref().map(|n| n.to_string())).collect()
    };
    let dir = {
        let _serial = one_broker_at_a_time();
        let b = common::Broker::start(&[]);
        let created = b.connect().call(
            &CreateTopicsRequest::default().with_topics(vec![CreatableTopic::default()
                .with_name(common::topic_name("kept"))
                .with_num_partitions(2)
                .with_replication_factor(1)]),
            7,
        );
        assert_eq!(created.topics[0].error_code, 0);
        let dir = b.stop();
        // A single node's first start as a voter: what a dir of an earlier release looks like.
        std::fs::remove_dir_all(dir.path().join("data/__sluice_metadata")).unwrap();
        dir
    };
    let data = dir.path().join("data");
    let (plain, controller) = (free_port(), free_port());
    let out = sluice(&[
        "serve",
        "--override",
        &format!("log.dirs={}", data.display()),
        "--override",
        &format!("listeners=PLAINTEXT://127.0.0.1:{plain},CONTROLLER://127.0.0.1:{controller}"),
        "--override",
        "controller.listener.names=CONTROLLER",
        "--override",
        "process.roles=broker,controller",
        "--override",
        &format!("controller.quorum.voters=1@127.0.0.1:{controller},2@127.0.0.1:1,3@127.0.0.1:2"),
        "--override",
        "metrics.listener=none",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("the log dirs hold 1 topics made outside a metadata quorum") && err.contains("start it first as the only voter"), "{err}");
    assert!(!data.join("__sluice_metadata").exists(), "{err}");
    // As the one voter of its own quorum it writes the topic into its new metadata log, which
    // then has it after a restart too.
    let _serial = one_broker_at_a_time();
    let b = common::Broker::start_in(dir, &[]);
    assert_eq!(topics(&b), vec!["kept".to_string()]);
    let dir = b.stop();
    assert!(dir.path().join("data/__sluice_metadata").exists());
    let b = common::Broker::start_in(dir, &[]);
    assert_eq!(topics(&b), vec!["kept".to_string()]);
}
