//! The `sluice` binary: `serve`, `format`, `metadata-image`, `version`.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::{Parser, Subcommand};

use sluice::broker::{self, Broker};
use sluice::config::{self, BrokerConfig, ConfigError, LogFormat};
use sluice::network::Server;

#[derive(Parser)]
#[command(name = "sluice", about = "A drop-in replacement for an Apache Kafka 4.x broker", version)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(clap::Args, Default)]
struct ConfigArgs {
    /// A Kafka-style server.properties file.
    #[arg(long, short = 'c')]
    config: Option<PathBuf>,
    /// Override one property: --override key=value (repeatable; later wins).
    #[arg(long = "override", value_name = "KEY=VALUE")]
    overrides: Vec<String>,
    /// Refuse to start when any configuration key would be ignored (unknown keys, and Kafka
    /// keys sluice does not act on), instead of listing them at startup.
    #[arg(long)]
    strict_config: bool,
}

#[derive(clap::Args)]
struct FormatArgs {
    #[command(flatten)]
    config: ConfigArgs,
    /// The cluster id to format with (Kafka's `kafka-storage format -t`): every node of one
    /// cluster needs the same; a random one when not given.
    #[arg(long, short = 't')]
    cluster_id: Option<String>,
}

#[derive(Subcommand)]
enum Command {
    /// Run the broker (the default when no command is given).
    Serve(ConfigArgs),
    /// Prepare empty log directories (meta.properties) and exit; `serve` does this itself.
    Format(FormatArgs),
    /// Replay a KRaft metadata log directory (Kafka's `__cluster_metadata-0`, snapshots and
    /// segments) and print the metadata image it builds as JSON.
    MetadataImage {
        /// The `__cluster_metadata-0` directory.
        dir: PathBuf,
        /// List the records of every snapshot and segment file instead, one JSON object a line:
        /// file, offset, kind, version, and whether sluice's encoding of the decoded record is
        /// byte for byte the one in the file.
        #[arg(long)]
        records: bool,
    },
    /// Start a local cluster of N nodes (each broker and controller) on 127.0.0.1 with its data
    /// under one folder, print the bootstrap list, and stop them all on Ctrl-C / SIGTERM.
    DevCluster(DevClusterArgs),
    /// Print the version.
    Version,
}

#[derive(clap::Args)]
struct DevClusterArgs {
    /// How many nodes (every one a voter of the metadata quorum: 3 or 5 tolerate 1 or 2 failures).
    #[arg(default_value_t = 3)]
    nodes: u16,
    /// Where the nodes keep their data, one folder each, and their logs.
    #[arg(long, default_value = "data/dev-cluster")]
    dir: PathBuf,
    /// The first node's client port; node i listens on PORT+i-1, its controller listener on
    /// PORT+100+i-1 and its metrics (`/metrics`, `/healthz`) on PORT+200+i-1.
    #[arg(long, default_value_t = 9092)]
    port: u16,
}

/// Loads and validates the config, then starts logging as it says (env vars win).
fn load_config(args: &ConfigArgs) -> Result<BrokerConfig, ConfigError> {
    let mut pairs = Vec::new();
    if let Some(path) = &args.config {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.clone(), source })?;
        pairs.extend(config::parse_properties(&text));
    }
    for o in &args.overrides {
        let (k, v) = o.split_once('=').ok_or_else(|| ConfigError::MalformedOverride(o.clone()))?;
        pairs.push((k.trim().to_string(), v.trim().to_string()));
    }
    // Logging needs the config (log.level/log.format); an invalid config still gets its
    // unknown-key warnings and its error through the default logger.
    let loaded = BrokerConfig::from_pairs(pairs.clone());
    init_logging(loaded.as_ref().ok().map(|l| &l.config));
    let mut seen = std::collections::BTreeSet::new();
    for key in config::unknown_keys(pairs.iter().map(|(k, _)| k.as_str())) {
        if seen.insert(key.clone()) {
            tracing::warn!(key = %key, "unknown configuration key ignored");
        }
    }
    let loaded = loaded?;
    if !loaded.ignored_keys.is_empty() {
        if args.strict_config {
            return Err(ConfigError::Ignored(loaded.ignored_keys));
        }
        tracing::info!(
            count = loaded.ignored_keys.len(),
            keys = %loaded.ignored_keys.join(", "),
            "configuration keys ignored (sluice does not act on them; --strict-config refuses them)"
        );
    }
    Ok(loaded.config)
}

/// `SLUICE_LOG` / `SLUICE_LOG_FORMAT` override `log.level` / `log.format`.
fn init_logging(config: Option<&BrokerConfig>) {
    use tracing_subscriber::EnvFilter;
    let level = config.map(|c| c.log_level.as_str()).unwrap_or("info");
    // openraft logs every vote and append at INFO; only its warnings unless asked for by name.
    let level = if level.contains("openraft") { level.to_string() } else { format!("{level},openraft=warn") };
    let filter = EnvFilter::try_from_env("SLUICE_LOG").unwrap_or_else(|_| EnvFilter::new(level));
    let json = match std::env::var("SLUICE_LOG_FORMAT") {
        Ok(v) => v == "json",
        Err(_) => config.map(|c| c.log_format == LogFormat::Json).unwrap_or(false),
    };
    use std::io::IsTerminal;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    if json {
        builder.json().init();
    } else {
        builder.init();
    }
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command.unwrap_or(Command::Serve(ConfigArgs::default())) {
        Command::Version => {
            println!("sluice {}", env!("CARGO_PKG_VERSION"));
            Ok(())
        }
        Command::MetadataImage { dir, records: false } => {
            let image = sluice::cluster::image::MetadataImage::replay_kafka_log_dir(&dir)
                .with_context(|| format!("replaying the metadata log in {}", dir.display()))?;
            println!("{}", serde_json::to_string_pretty(&image.to_json())?);
            Ok(())
        }
        Command::MetadataImage { dir, records: true } => {
            use sluice::cluster::{records, ClusterError};
            let (snapshots, segments) = sluice::cluster::image::kafka_log_files(&dir)?;
            let mut files: Vec<PathBuf> = snapshots.into_iter().chain(segments).map(|(_, p)| p).collect();
            files.sort();
            for path in files {
                let bytes = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
                let file = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                let mut out = std::io::stdout().lock();
                records::decode_batches(&bytes, |offset, value, rec| {
                    let line = serde_json::json!({
                        "file": file,
                        "offset": offset,
                        "kind": records::kind_name(rec.record.api_key()),
                        "version": rec.version,
                        "same_bytes": records::encode(&rec) == value,
                    });
                    use std::io::Write;
                    writeln!(out, "{line}").map_err(|source| ClusterError::Read { path: "<stdout>".into(), source })
                })
                .with_context(|| format!("reading {}", path.display()))?;
            }
            Ok(())
        }
        Command::Format(args) => {
            let config = load_config(&args.config)?;
            let id = sluice::metadata::load_or_format_as(&config.log_dirs, config.node_id, args.cluster_id.as_deref())?;
            println!("cluster.id={id}");
            Ok(())
        }
        Command::DevCluster(args) => dev_cluster(args),
        Command::Serve(args) => {
            let config = load_config(&args)?;
            let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().thread_name("sluice").build()?;
            match config.roles {
                config::Roles::Combined | config::Roles::Broker => runtime.block_on(serve(config)),
                config::Roles::Controller => runtime.block_on(serve_controller(config)),
            }
        }
    }
}

async fn serve(config: BrokerConfig) -> anyhow::Result<()> {
    let started = std::time::Instant::now();
    let shutdown = ShutdownSignal::install();
    raise_open_files_limit();
    // Installed before the logs open so fsyncs during recovery are measured too.
    let metrics_handle = match config.metrics_listener {
        Some(_) => Some(sluice::metrics::install().context("installing the metrics recorder")?),
        None => None,
    };
    let broker = Arc::new(tokio::task::block_in_place(|| Broker::open(config)).context("starting the broker")?);
    // A voter (the quorum's voter and the active controller run beside the broker, which takes
    // its topics from their metadata image; a single node is the one voter of its own quorum),
    // or a broker-only node observing the controllers' quorum.
    let (controller, observer) = if broker.config.roles == config::Roles::Broker {
        (None, Some(observe_cluster(&broker)))
    } else {
        (Some(join_cluster(&broker).await?), None)
    };
    // Bound before the Kafka listeners so its stderr line precedes theirs (tests wait for those).
    let metrics_server = serve_metrics(&broker, metrics_handle.clone()).await?;
    let sampler = tokio::spawn(sluice::metrics::sampler::run(broker.clone(), metrics_handle));
    let server = Server::bind(broker.clone()).await?;
    if broker.config.cpu_idle_poll_us > 0 {
        let window = std::time::Duration::from_micros(broker.config.cpu_idle_poll_us);
        let spinners = sluice::network::idle_poll::start(window);
        if spinners > 0 {
            tracing::info!(spinners, window_us = broker.config.cpu_idle_poll_us, "idle polling on (cpu.idle.poll.us)");
        }
    }
    let retention = tokio::spawn(broker::retention::run(broker.clone()));
    let groups = tokio::spawn(sluice::group::driver::run(broker.clone()));
    let txns = tokio::spawn(sluice::txn::driver::run(broker.clone()));
    let cleaner = tokio::spawn(broker::cleaner::run(broker.clone()));
    let lifecycle = broker.cluster().map(|view| {
        let listeners = broker
            .advertised()
            .into_iter()
            .filter(|e| !broker.config.controller_listener_names.contains(&e.name))
            .map(|e| (e.name, e.host, e.port))
            .collect();
        let rack = broker.config.raw.get("broker.rack").map(|r| r.trim().to_string()).filter(|r| !r.is_empty());
        let interval = std::time::Duration::from_millis(broker.config.broker_heartbeat_interval_ms);
        let previous = sluice::cluster::lifecycle::take_clean_shutdown(&broker.config.log_dirs);
        Arc::new(
            sluice::cluster::lifecycle::BrokerLifecycle::new(view.clone(), broker.cluster_id.clone(), listeners, rack, interval)
                .with_previous_epoch(previous),
        )
    });
    let cluster_tasks = lifecycle.as_ref().map(|l| {
        [
            tokio::spawn(l.clone().run()),
            tokio::spawn(broker::cluster::run(broker.clone())),
            tokio::spawn(broker::cluster::run_isr_changes(broker.clone())),
        ]
    });
    // A single node answers no request before its broker is registered, unfenced and its
    // local logs follow the metadata: until then it would list no broker and place no topic.
    // (A voter among several cannot wait: its quorum may need the nodes started after it.)
    if let (true, Some(view)) = (broker.config.is_single_voter(), broker.cluster()) {
        if tokio::time::timeout(SINGLE_NODE_READY_TIMEOUT, view.wait_synced()).await.is_err() {
            tracing::warn!(timeout = ?SINGLE_NODE_READY_TIMEOUT, "the broker is not unfenced by its own controller yet; serving anyway");
        }
    }
    broker.metrics.set_startup_duration(started.elapsed());
    tracing::info!(
        cluster_id = %broker.cluster_id,
        node_id = broker.node_id,
        startup_ms = started.elapsed().as_millis() as u64,
        "sluice serving"
    );
    // Controlled shutdown while still serving: the controller moves this broker's leaderships
    // away, and clients are told NOT_LEADER_OR_FOLLOWER and find the new leaders.
    let stop = {
        let lifecycle = lifecycle.clone();
        async move {
            shutdown.recv().await;
            if let Some(l) = lifecycle {
                tracing::info!("controlled shutdown: asking the controller to move this broker's leaderships");
                l.shut_down(CONTROLLED_SHUTDOWN_TIMEOUT).await;
            }
        }
    };
    server.run(stop).await;
    for task in cluster_tasks.iter().flatten() {
        task.abort();
    }
    retention.abort();
    groups.abort();
    txns.abort();
    cleaner.abort();
    sampler.abort();
    if let Some(m) = metrics_server {
        m.abort();
    }
    tracing::info!("shutting down: flushing logs");
    let b = broker.clone();
    let epoch = lifecycle.as_ref().map_or(-1, |l| l.epoch());
    tokio::task::spawn_blocking(move || {
        b.flush_all();
        b.write_checkpoints(true);
        if epoch >= 0 {
            sluice::cluster::lifecycle::mark_clean_shutdown(&b.config.log_dirs, epoch);
        }
    })
    .await?;
    if let Some(node) = controller {
        node.shutdown().await;
    }
    if let Some(o) = observer {
        o.abort();
    }
    tracing::info!("stopped");
    Ok(())
}

/// `sluice dev-cluster`: N child processes of this binary, one cluster.
fn dev_cluster(args: DevClusterArgs) -> anyhow::Result<()> {
    anyhow::ensure!((1..=9).contains(&args.nodes), "dev-cluster runs 1 to 9 nodes, not {}", args.nodes);
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    // Before any child starts: a stop while they start still stops every one started.
    let shutdown = {
        let _in_runtime = runtime.enter();
        ShutdownSignal::install()
    };
    let exe = std::env::current_exe().context("finding the sluice binary")?;
    std::fs::create_dir_all(&args.dir).with_context(|| format!("creating {}", args.dir.display()))?;
    let ids: Vec<u16> = (1..=args.nodes).collect();
    let port = |base: u16, i: u16| base + i - 1;
    let voters = ids.iter().map(|i| format!("{i}@127.0.0.1:{}", port(args.port + 100, *i))).collect::<Vec<_>>().join(",");
    let settings = |i: u16| -> Vec<String> {
        [
            "process.roles=broker,controller".to_string(),
            format!("node.id={i}"),
            format!("controller.quorum.voters={voters}"),
            format!("listeners=PLAINTEXT://127.0.0.1:{},CONTROLLER://127.0.0.1:{}", port(args.port, i), port(args.port + 100, i)),
            "controller.listener.names=CONTROLLER".to_string(),
            format!("log.dirs={}", args.dir.join(format!("node{i}")).display()),
            format!("metrics.listener=127.0.0.1:{}", port(args.port + 200, i)),
        ]
        .into_iter()
        .flat_map(|kv| ["--override".to_string(), kv])
        .collect()
    };
    // One cluster id for every node: the one a node was formatted with before, or a new one.
    let existing = ids.iter().find_map(|i| {
        let text = std::fs::read_to_string(args.dir.join(format!("node{i}")).join("meta.properties")).ok()?;
        config::parse_properties(&text).into_iter().find(|(k, _)| k == "cluster.id").map(|(_, v)| v)
    });
    let cluster_id = existing.unwrap_or_else(|| sluice::metadata::kafka_uuid_string(sluice::metadata::random_kafka_uuid()));
    let mut children = Vec::new();
    for &i in &ids {
        let format = std::process::Command::new(&exe).args(["format", "-t", &cluster_id]).args(settings(i)).output()?;
        anyhow::ensure!(format.status.success(), "formatting node {i}: {}", String::from_utf8_lossy(&format.stderr));
        let log = std::fs::File::create(args.dir.join(format!("node{i}.log")))?;
        let child = std::process::Command::new(&exe)
            .arg("serve")
            .args(settings(i))
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting node {i}"))?;
        children.push((i, child));
    }
    let bootstrap = ids.iter().map(|i| format!("127.0.0.1:{}", port(args.port, *i))).collect::<Vec<_>>().join(",");
    println!("sluice dev-cluster: {} nodes, cluster id {cluster_id}, data and logs in {}", args.nodes, args.dir.display());
    println!("bootstrap.servers={bootstrap}");
    println!("Ctrl-C stops every node.");
    runtime.block_on(async {
        let stop = shutdown.recv();
        tokio::pin!(stop);
        let mut check = tokio::time::interval(std::time::Duration::from_secs(1));
        let mut reported = std::collections::BTreeSet::new();
        loop {
            tokio::select! {
                _ = &mut stop => break,
                _ = check.tick() => {
                    for (i, child) in &mut children {
                        if let Ok(Some(status)) = child.try_wait() {
                            if reported.insert(*i) {
                                eprintln!("node {i} exited ({status}); see {}", args.dir.join(format!("node{i}.log")).display());
                            }
                        }
                    }
                }
            }
        }
    });
    for (_, child) in &children {
        // SAFETY: kill(2) on a child's pid with SIGTERM; the child is not yet reaped.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    }
    for (i, mut child) in children {
        let status = child.wait()?;
        println!("node {i} stopped ({status})");
    }
    Ok(())
}

/// How long a single node waits for its own controller to unfence its broker before serving.
const SINGLE_NODE_READY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// How long a broker's controlled shutdown waits for the controller to move its leaderships.
const CONTROLLED_SHUTDOWN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Starts this node's quorum voter and active controller on its controller listener and makes
/// the broker a member of the cluster they keep.
async fn join_cluster(broker: &Arc<Broker>) -> anyhow::Result<sluice::cluster::node::ControllerNode> {
    let config = &broker.config;
    // Topics a single node made before this node was a voter go into the new metadata log.
    // Only a one-voter quorum takes them: with several voters another one may write the log's
    // first records, whose image would not have these topics (and their logs would go).
    let new_log = !config.metadata_log_dir.join("__sluice_metadata").exists();
    let imported = if new_log { sluice::broker::cluster::local_state_records(broker) } else { Vec::new() };
    let topics = broker.all_topics().len();
    anyhow::ensure!(
        !new_log || topics == 0 || config.is_single_voter(),
        "the log dirs hold {topics} topics made outside a metadata quorum (a single-node sluice's or Kafka's), and this \
         node starts a new quorum of {} voters: start it first as the only voter (controller.quorum.voters={}@<host>:<port>) \
         so that its topics enter the metadata log, and add brokers (process.roles=broker) after",
        config.quorum_voters.len(),
        config.node_id
    );
    let node = sluice::cluster::node::ControllerNode::start(config, &broker.cluster_id, imported)
        .await
        .context("starting the metadata quorum voter")?;
    let quorum = node.quorum().clone();
    let leader = {
        let q = quorum.clone();
        Box::new(move || sluice::cluster::quorum::MetadataQuorum::status(&*q).leader)
    };
    let image = sluice::cluster::quorum::MetadataQuorum::image(&*quorum);
    let voters = {
        let v = node.voters().clone();
        Box::new(move |id| v.get(&id).cloned())
    };
    let view = sluice::cluster::view::ClusterView::new(config.node_id, image, leader, voters, client_listener(config));
    broker.join_cluster(Arc::new(view));
    if config.is_single_voter() {
        tracing::info!("a single node: the one voter of its own metadata quorum");
    } else {
        tracing::info!(voters = ?config.quorum_voters, "member of a cluster: topics and leaders come from the metadata quorum");
    }
    Ok(node)
}

/// Makes a broker-only node (`process.roles=broker`) a member of the cluster whose controllers
/// are `controller.quorum.voters`, following their metadata as an observer. An image this
/// broker cannot apply stops the process: serving on without it would serve stale metadata.
fn observe_cluster(broker: &Arc<Broker>) -> tokio::task::JoinHandle<()> {
    let config = &broker.config;
    let observer = sluice::cluster::observer::Observer::new(&broker.cluster_id, config.quorum_voters.clone(), config.quorum_bootstrap_servers.clone());
    let leader = {
        let o = observer.clone();
        Box::new(move || o.leader())
    };
    let voters = {
        let o = observer.clone();
        Box::new(move |id| o.voter_addr(id))
    };
    let view = sluice::cluster::view::ClusterView::new(config.node_id, observer.subscribe(), leader, voters, client_listener(config));
    broker.join_cluster(Arc::new(view));
    tracing::info!(
        voters = ?config.quorum_voters,
        bootstrap = ?config.quorum_bootstrap_servers,
        "broker-only member of a cluster: following the controllers' metadata"
    );
    tokio::spawn(async move {
        let e = observer.run().await;
        tracing::error!(error = %e, "stopping: the metadata from the active controller cannot be applied");
        std::process::exit(1);
    })
}

/// The listener clients use, whose endpoints Metadata lists: the first that is not a
/// controller listener.
fn client_listener(config: &BrokerConfig) -> String {
    config
        .listeners
        .iter()
        .find(|l| !config.controller_listener_names.contains(&l.name))
        .map(|l| l.name.clone())
        .unwrap_or_else(|| "PLAINTEXT".to_string())
}

/// A dedicated controller (`process.roles=controller`): a voter of the metadata quorum and
/// `/healthz` on `metrics.listener`, until SIGTERM.
async fn serve_controller(config: BrokerConfig) -> anyhow::Result<()> {
    let shutdown = ShutdownSignal::install();
    let cluster_id = tokio::task::block_in_place(|| sluice::metadata::load_or_format(&config.log_dirs, config.node_id))
        .context("reading the log dirs' meta.properties")?;
    let node = Arc::new(
        sluice::cluster::node::ControllerNode::start(&config, &cluster_id, Vec::new()).await.context("starting the metadata quorum voter")?,
    );
    let metrics_server = match &config.metrics_listener {
        Some(l) => match sluice::metrics::http::bind(&l.addr).await {
            Ok(listener) => {
                let health_node = node.clone();
                let source = sluice::metrics::http::Source::Controller { health: Arc::new(move || health_node.health()) };
                Some(tokio::spawn(sluice::metrics::http::serve(listener, source)))
            }
            // As for a broker: a taken default port only warns; an explicit one must bind.
            Err(e) if !l.explicit => {
                tracing::warn!(addr = %l.addr, error = %e, "default metrics.listener is unavailable; serving without /healthz");
                None
            }
            Err(e) => return Err(e).with_context(|| format!("cannot listen on metrics.listener={}", l.addr)),
        },
        None => None,
    };
    tracing::info!(%cluster_id, node_id = config.node_id, voters = ?config.quorum_voters, "sluice controller serving");
    shutdown.recv().await;
    if let Some(m) = metrics_server {
        m.abort();
        let _ = m.await; // drops its handle on the node
    }
    match Arc::try_unwrap(node) {
        Ok(node) => node.shutdown().await,
        Err(_) => tracing::warn!("controller still in use at shutdown"),
    }
    tracing::info!("stopped");
    Ok(())
}

/// Binds `metrics.listener` and spawns the `/metrics` server. A taken default port only warns
/// (several brokers on one host); an explicitly configured one must bind.
async fn serve_metrics(
    broker: &Arc<Broker>,
    handle: Option<metrics_exporter_prometheus::PrometheusHandle>,
) -> anyhow::Result<Option<tokio::task::JoinHandle<()>>> {
    let Some(listener) = broker.config.metrics_listener.clone() else { return Ok(None) };
    match sluice::metrics::http::bind(&listener.addr).await {
        Ok(l) => {
            let source = sluice::metrics::http::Source::Broker { broker: broker.clone(), handle };
            Ok(Some(tokio::spawn(sluice::metrics::http::serve(l, source))))
        }
        Err(e) if !listener.explicit => {
            tracing::warn!(
                addr = %listener.addr,
                error = %e,
                "default metrics.listener is unavailable; serving without /metrics (set metrics.listener to another host:port, or none)"
            );
            Ok(None)
        }
        Err(e) => Err(e).with_context(|| format!("cannot listen on metrics.listener={}", listener.addr)),
    }
}

/// SIGTERM and SIGINT (Ctrl-C), caught from the moment a process starts: a signal that
/// arrives while it is still starting (a test or an orchestrator stopping it as soon as it
/// listens) is kept until the process waits for it, instead of killing it by the default action.
struct ShutdownSignal {
    streams: Vec<tokio::signal::unix::Signal>,
}

impl ShutdownSignal {
    /// Installs the handlers; call it inside the runtime, before anything is bound.
    fn install() -> Self {
        use tokio::signal::unix::{signal, SignalKind};
        let streams = [SignalKind::terminate(), SignalKind::interrupt()]
            .into_iter()
            .filter_map(|kind| {
                signal(kind)
                    .map_err(|e| tracing::error!(signal = kind.as_raw_value(), error = %e, "cannot install a shutdown signal handler"))
                    .ok()
            })
            .collect();
        ShutdownSignal { streams }
    }

    /// Waits for the first SIGTERM or SIGINT since `install` (forever if neither could be installed).
    async fn recv(mut self) {
        let waits = self.streams.iter_mut().map(|s| Box::pin(s.recv()));
        if waits.len() == 0 {
            return std::future::pending().await;
        }
        futures::future::select_all(waits).await;
    }
}

/// Raises the soft open-files limit to the hard one, as the Go runtime does for every server:
/// a broker holds one descriptor per segment and per connection, and distributions often set
/// a soft limit of 1024 that 1,000 partitions would already exhaust. What remains a limit is
/// logged, so "Too many open files" later has its cause at hand.
fn raise_open_files_limit() {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit read or write the one struct passed by pointer.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        tracing::warn!(error = %std::io::Error::last_os_error(), "could not read the open-files limit");
        return;
    }
    let before = lim.rlim_cur;
    // An unlimited hard limit still stops at the kernel's fs.nr_open.
    let ceiling = if lim.rlim_max == libc::RLIM_INFINITY {
        std::fs::read_to_string("/proc/sys/fs/nr_open").ok().and_then(|s| s.trim().parse().ok()).unwrap_or(1 << 20)
    } else {
        lim.rlim_max
    };
    if lim.rlim_cur < ceiling {
        lim.rlim_cur = ceiling;
        // SAFETY: as above.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } != 0 {
            tracing::warn!(soft = before, hard = lim.rlim_max, error = %std::io::Error::last_os_error(), "could not raise the open-files limit");
            return;
        }
    }
    tracing::info!(limit = lim.rlim_cur, was = before, "open-files limit (one descriptor per segment and per connection)");
}
