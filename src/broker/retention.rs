//! The retention loop: every `log.retention.check.interval.ms`, each partition deletes the
//! segments its `retention.ms` / `retention.bytes` no longer cover (whole segments only, never the
//! active one) and forgets idempotent producers idle for `producer.id.expiration.ms` (Kafka checks
//! those every `producer.id.expiration.check.interval.ms`, 10 minutes by default). A failure on
//! one partition is logged with the partition and does not stop the loop or other partitions.

use std::sync::Arc;
use std::time::Duration;

use super::{error_chain, Broker};

/// Runs until the task is dropped.
pub async fn run(broker: Arc<Broker>) {
    let period = Duration::from_millis(broker.config.log_retention_check_interval_ms);
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        let b = broker.clone();
        // Segment deletion touches the filesystem; keep it off the request workers.
        let _ = tokio::task::spawn_blocking(move || {
            if enforce_all(&b) > 0 {
                b.write_checkpoints(false);
            }
        })
        .await;
    }
}

/// One pass over every partition; returns the number of segments deleted.
pub fn enforce_all(broker: &Broker) -> usize {
    let now = broker.now_ms();
    let mut deleted = 0;
    for topic in broker.all_topics() {
        for p in &topic.partitions {
            p.expire_producers(now, broker.config.producer_id_expiration_ms);
            match p.enforce_retention(now) {
                Ok(n) => deleted += n,
                Err(e) => tracing::error!(topic = %topic.name, partition = p.index, error = %error_chain(&e), "retention failed"),
            }
        }
    }
    deleted
}
