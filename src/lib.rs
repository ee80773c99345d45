//! sluice: a single-binary, drop-in replacement for an Apache Kafka 4.x broker.
//!
//! Layers, dependencies pointing down only (see ARCHITECTURE.md):
//!
//! ```text
//!  main / cli      sluice serve | format | version; config loading
//!  network         listeners, connection tasks, request framing
//!  api             one handler per Kafka API key
//!  replication     partition state: log + high watermark + leader epoch + waiters
//!  metadata        topics, partitions, topic ids, configs (single node for now)
//!  log             partition log: segments, indexes, recovery, retention, I/O backends
//!  protocol        framing + record-batch header view (kafka-protocol for messages)
//! ```
pub mod log;
pub mod protocol;
