//! sluice: a single-binary, drop-in replacement for an Apache Kafka 4.x broker.
//!
//! Layers, dependencies pointing down only (see ARCHITECTURE.md):
//!
//! ```text
//!  main / cli      sluice serve | format | metadata-image | version; config loading
//!  network         listeners, connection tasks, request framing
//!  api             one handler per Kafka API key: decode -> call the broker -> encode
//!  group           group coordinator: classic groups, committed offsets, __consumer_offsets
//!  txn             transactions: coordinator states, __transaction_state records (not served yet)
//!  broker          topics, partitions, producer ids, background retention
//!  replication     partition state: log + high watermark + leader epoch + producer state
//!  metadata        cluster id, topic ids and config overrides on disk (single node for now)
//!  cluster         KRaft metadata records (Kafka's schemas), the metadata image, placement,
//!                  the metadata quorum (openraft behind our trait)
//!  log             partition log: segments, indexes, recovery, retention, I/O backends
//!  protocol        framing, record-batch header view, coordinator-record field codecs
//!                  (kafka-protocol for messages)
//!  config          server.properties keys, defaults and validation
//!  metrics         every metric's name, help and labels; /metrics; consumer lag
//! ```
pub mod api;
pub mod broker;
pub mod cluster;
pub mod config;
pub mod group;
pub mod log;
pub mod metadata;
pub mod metrics;
pub mod network;
pub mod protocol;
pub mod replication;
pub mod runtime;
pub mod txn;
