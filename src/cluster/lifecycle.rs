//! A broker's life in the cluster, as Kafka's `BrokerLifecycleManager` runs it: register with
//! the active controller (a new incarnation id per process start, so the controller tells a
//! restart from a second process with the same `node.id`), then heartbeat every
//! `broker.heartbeat.interval.ms` with the metadata offset this broker has applied. The
//! controller unfences the broker once that offset reaches its registration; a broker that
//! stops heartbeating is fenced by the controller after `broker.session.timeout.ms`.
//!
//! Controlled shutdown ([`BrokerLifecycle::shut_down`]): heartbeats ask to shut down until the
//! controller answers that every leadership has moved away, then the process may stop serving.
//!
//! # Failure behaviour
//! A registration that is refused (DUPLICATE_BROKER_REGISTRATION: another live process has this
//! `node.id`; INCONSISTENT_CLUSTER_ID) or that cannot reach a controller is logged with the
//! reason and retried every heartbeat interval; the broker stays out of Metadata meanwhile. A
//! heartbeat answered STALE_BROKER_EPOCH or BROKER_ID_NOT_REGISTERED registers again. A
//! controlled shutdown that the controller does not confirm within its timeout is logged and
//! the broker stops anyway (its partitions then move when its session expires).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::broker_registration_request::{Feature, Listener};
use kafka_protocol::messages::{BrokerHeartbeatRequest, BrokerRegistrationRequest};
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

use super::controller::codes;
use super::driver::METADATA_VERSION;
use super::view::ClusterView;

/// A client listener to register: (name, host, port).
pub type ListenerEndpoint = (String, String, u16);

/// The broker's registration and heartbeats.
pub struct BrokerLifecycle {
    view: Arc<ClusterView>,
    cluster_id: String,
    incarnation: Uuid,
    listeners: Vec<ListenerEndpoint>,
    rack: Option<String>,
    interval: Duration,
    fenced: AtomicBool,
    want_shutdown: AtomicBool,
}

impl BrokerLifecycle {
    pub fn new(
        view: Arc<ClusterView>,
        cluster_id: String,
        listeners: Vec<ListenerEndpoint>,
        rack: Option<String>,
        interval: Duration,
    ) -> BrokerLifecycle {
        BrokerLifecycle {
            view,
            cluster_id,
            incarnation: Uuid::new_v4(),
            listeners,
            rack,
            interval,
            fenced: AtomicBool::new(true),
            want_shutdown: AtomicBool::new(false),
        }
    }

    pub fn epoch(&self) -> i64 {
        self.view.broker_epoch()
    }

    pub fn is_fenced(&self) -> bool {
        self.fenced.load(Ordering::Acquire)
    }

    async fn register(&self) -> Result<i64, String> {
        let req = BrokerRegistrationRequest::default()
            .with_broker_id(self.view.node_id.into())
            .with_cluster_id(StrBytes::from_string(self.cluster_id.clone()))
            .with_incarnation_id(self.incarnation)
            .with_listeners(
                self.listeners
                    .iter()
                    .map(|(name, host, port)| {
                        Listener::default()
                            .with_name(StrBytes::from_string(name.clone()))
                            .with_host(StrBytes::from_string(host.clone()))
                            .with_port(*port)
                    })
                    .collect(),
            )
            .with_features(vec![Feature::default()
                .with_name(StrBytes::from_static_str("metadata.version"))
                .with_min_supported_version(METADATA_VERSION)
                .with_max_supported_version(METADATA_VERSION)])
            .with_rack(self.rack.clone().map(StrBytes::from_string))
            .with_previous_broker_epoch(self.epoch());
        let resp = self.view.call_controller(&req, 4).await?;
        match resp.error_code {
            0 => Ok(resp.broker_epoch),
            codes::DUPLICATE_BROKER_REGISTRATION => Err(format!(
                "the controller refused this broker's registration: another live broker is registered with node.id={} \
                 (DUPLICATE_BROKER_REGISTRATION); retrying",
                self.view.node_id
            )),
            codes::INCONSISTENT_CLUSTER_ID => Err(format!(
                "the controller refused this broker's registration: its cluster id differs from this broker's {} \
                 (INCONSISTENT_CLUSTER_ID)",
                self.cluster_id
            )),
            code => Err(format!("the controller refused this broker's registration with error code {code}")),
        }
    }

    /// One heartbeat; returns whether the controller says the broker may shut down.
    async fn heartbeat(&self) -> Result<bool, String> {
        let epoch = self.epoch();
        let req = BrokerHeartbeatRequest::default()
            .with_broker_id(self.view.node_id.into())
            .with_broker_epoch(epoch)
            .with_current_metadata_offset(self.view.image().offset)
            .with_want_shut_down(self.want_shutdown.load(Ordering::Acquire));
        let resp = self.view.call_controller(&req, 1).await?;
        match resp.error_code {
            0 => {
                let was = self.fenced.swap(resp.is_fenced, Ordering::AcqRel);
                if was != resp.is_fenced {
                    if resp.is_fenced {
                        tracing::warn!(epoch, "this broker is fenced by the controller");
                    } else {
                        tracing::info!(epoch, "this broker is unfenced: it serves the partitions it leads");
                        self.view.mark_caught_up();
                    }
                }
                Ok(resp.should_shut_down)
            }
            codes::STALE_BROKER_EPOCH | codes::BROKER_ID_NOT_REGISTERED => {
                tracing::warn!(epoch, code = resp.error_code, "the controller no longer knows this broker's epoch; registering again");
                self.view.set_broker_epoch(-1);
                self.fenced.store(true, Ordering::Release);
                Ok(false)
            }
            code => Err(format!("heartbeat answered with error code {code}")),
        }
    }

    /// Registers, then heartbeats, until the task is dropped.
    pub async fn run(self: Arc<Self>) {
        let mut last_error = String::new();
        loop {
            let registering = self.epoch() < 0;
            let outcome = if registering {
                self.register().await.map(|epoch| {
                    tracing::info!(epoch, incarnation = %self.incarnation, "registered with the active controller");
                    self.view.set_broker_epoch(epoch);
                })
            } else {
                self.heartbeat().await.map(drop)
            };
            // The first heartbeat follows a registration at once: it is what unfences.
            if registering && outcome.is_ok() {
                continue;
            }
            match outcome {
                Ok(()) => last_error.clear(),
                Err(e) if e != last_error => {
                    tracing::warn!(error = %e, "broker registration or heartbeat failed");
                    last_error = e;
                }
                Err(_) => {}
            }
            // Heartbeat at once while fenced and caught up on a registration, as Kafka's
            // broker does, so unfencing takes one round trip rather than an interval.
            let pause = if self.epoch() >= 0 && self.is_fenced() { self.interval.min(Duration::from_millis(200)) } else { self.interval };
            tokio::time::sleep(pause).await;
        }
    }

    /// Controlled shutdown: asks the controller to move this broker's leaderships away and
    /// returns once it confirms, or after `timeout`.
    pub async fn shut_down(&self, timeout: Duration) {
        if self.epoch() < 0 {
            return;
        }
        self.want_shutdown.store(true, Ordering::Release);
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            match tokio::time::timeout_at(deadline, self.heartbeat()).await {
                Ok(Ok(true)) => {
                    tracing::info!("controlled shutdown: the controller moved every leadership away");
                    return;
                }
                Ok(Ok(false)) => {}
                Ok(Err(e)) => tracing::warn!(error = %e, "controlled shutdown heartbeat failed"),
                Err(_) => {}
            }
            if tokio::time::Instant::now() >= deadline {
                tracing::warn!(?timeout, "controlled shutdown was not confirmed in time; stopping anyway");
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
