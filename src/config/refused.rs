//! Settings sluice refuses to start with: those whose silent omission would leave the broker
//! less secure or less durable than its operator configured it.
//!
//! A Kafka `server.properties` written for a secured cluster (TLS or SASL listeners, an
//! authorizer) must never start sluice as an open plaintext broker that logs "unknown key
//! ignored" and carries on. So startup checks, before any port is opened:
//! - every listener's security protocol (from `listener.security.protocol.map`, or its name);
//!   only PLAINTEXT is served today;
//! - the keys in [`REFUSED`] (TLS, SASL and authorizer settings), refused when set to a
//!   non-empty value (an empty value is Kafka's "unset");
//! - the KRaft role and quorum settings (`process.roles`, `controller.quorum.voters`,
//!   `controller.quorum.bootstrap.servers`, `node.id`): a node with both roles is a voter of
//!   the quorum — a single node its own one-voter quorum, a member of a cluster one of
//!   `controller.quorum.voters`; a broker-only node (`process.roles=broker`) observes the quorum
//!   of the controllers listed in `controller.quorum.voters`, which must not include it, or
//!   learned from those at `controller.quorum.bootstrap.servers`. A dedicated controller
//!   (`process.roles=controller`) serves no data. Wherever there are several voters, a voter's
//!   own entry in `controller.quorum.voters` must be the port of its controller listener.
//!
//! Each refusal is a [`ConfigError::Refused`] naming the key, the value, and what sluice
//! supports today. When a later feature implements one of these settings, it removes its row
//! from [`REFUSED`] (or relaxes the check) in the same change.
//!
//! # Invariants
//! - A listener is opened only with the protocol it is configured with; there is no fallback
//!   to plaintext.
//! - The checks run on the whole configuration before anything is bound or written.

use std::collections::BTreeMap;

use super::{invalid, parse_int, ConfigError, Endpoint};

/// The security protocols Kafka knows, and whether sluice serves each one.
const PROTOCOLS: &[(&str, bool)] = &[("PLAINTEXT", true), ("SSL", false), ("SASL_PLAINTEXT", false), ("SASL_SSL", false)];

/// How a refused key is matched.
#[derive(Debug, Clone, Copy)]
enum KeyPattern {
    /// Exactly this key.
    Exact(&'static str),
    /// Any key starting with this prefix.
    Prefix(&'static str),
    /// `listener.name.<listener>.<suffix...>` where the part after the listener name starts
    /// with this prefix (`ssl.`), or contains `.` + it (`scram-sha-512.sasl.jaas.config`).
    PerListener(&'static str),
}

impl KeyPattern {
    fn matches(self, key: &str) -> bool {
        match self {
            KeyPattern::Exact(k) => key == k,
            KeyPattern::Prefix(p) => key.starts_with(p),
            KeyPattern::PerListener(p) => key
                .strip_prefix("listener.name.")
                .and_then(|rest| rest.split_once('.'))
                .is_some_and(|(_, tail)| tail.starts_with(p) || tail.contains(&format!(".{p}"))),
        }
    }
}

/// One family of settings sluice cannot honour yet, and why it refuses them.
#[derive(Debug, Clone, Copy)]
pub struct Refusal {
    pattern: KeyPattern,
    /// What sluice supports instead, as the error states it.
    pub reason: &'static str,
}

const TLS: &str = "sluice does not implement TLS yet and serves only PLAINTEXT listeners; \
                   remove the TLS settings (and SSL listeners) to run it unencrypted knowingly";
const SASL: &str = "sluice does not implement SASL authentication yet and serves only PLAINTEXT \
                    listeners without authentication; remove the SASL settings to run it \
                    unauthenticated knowingly";
const AUTHORIZER: &str = "sluice has no authorizer yet: every client may do everything, and the ACL \
                          APIs answer SECURITY_DISABLED as Kafka does without one; remove \
                          authorizer.class.name to run it without authorization knowingly";

/// Settings refused when set to a non-empty value. Rows leave this table as the features behind
/// them are implemented (TLS, SASL, authorizer: the security issue).
pub const REFUSED: &[Refusal] = &[
    Refusal { pattern: KeyPattern::Prefix("ssl."), reason: TLS },
    Refusal { pattern: KeyPattern::PerListener("ssl."), reason: TLS },
    Refusal { pattern: KeyPattern::Prefix("sasl."), reason: SASL },
    Refusal { pattern: KeyPattern::PerListener("sasl."), reason: SASL },
    Refusal { pattern: KeyPattern::Exact("security.inter.broker.protocol"), reason: SASL },
    Refusal { pattern: KeyPattern::Exact("principal.builder.class"), reason: SASL },
    Refusal { pattern: KeyPattern::Exact("authorizer.class.name"), reason: AUTHORIZER },
];

/// Whether `key` is one sluice checks here (so it is not reported as unknown).
pub fn is_checked_key(key: &str) -> bool {
    REFUSED.iter().any(|r| r.pattern.matches(key))
}

fn refused(key: &str, value: &str, reason: impl Into<String>) -> ConfigError {
    ConfigError::Refused { key: key.to_string(), value: value.to_string(), reason: reason.into() }
}

/// Checks every setting sluice must refuse rather than ignore; see the module docs.
pub fn check(raw: &BTreeMap<String, String>, listeners: &[Endpoint], node_id: i32) -> Result<(), ConfigError> {
    for (key, value) in raw {
        if value.trim().is_empty() {
            continue;
        }
        if key == "security.inter.broker.protocol" && value.trim() == "PLAINTEXT" {
            continue;
        }
        if let Some(r) = REFUSED.iter().find(|r| r.pattern.matches(key)) {
            return Err(refused(key, value, r.reason));
        }
    }
    let controller_names = list(raw.get("controller.listener.names").map(String::as_str).unwrap_or(""));
    let map = security_protocol_map(raw, &controller_names)?;
    for key in ["listeners", "advertised.listeners"] {
        let Some(value) = raw.get(key) else { continue };
        let configured = super::parse_listeners(key, value)?;
        for l in if key == "listeners" { listeners } else { &configured[..] } {
            let Some(protocol) = map.get(l.name.as_str()) else {
                let hint = if raw.contains_key("listener.security.protocol.map") {
                    "add it to listener.security.protocol.map"
                } else {
                    "name it after its protocol (PLAINTEXT://...) or map it in listener.security.protocol.map"
                };
                return Err(invalid(key, value, &format!("no security protocol is defined for listener {}; {hint}", l.name)));
            };
            if !PROTOCOLS.iter().any(|(p, served)| p == protocol && *served) {
                let reason = format!(
                    "listener {l} uses security protocol {protocol}; sluice serves only PLAINTEXT listeners today \
                     (TLS and SASL are not implemented) and will not open it as plaintext"
                );
                return Err(refused(key, value, reason));
            }
        }
    }
    check_roles(raw, listeners, &controller_names, node_id)
}

/// This machine's host name (a container's stock config bootstraps from it); read from procfs,
/// as sluice runs on Linux.
fn local_hostname() -> Option<String> {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?;
    Some(name.trim().to_string()).filter(|n| !n.is_empty())
}

pub(super) fn list(value: &str) -> Vec<String> {
    value.split(',').map(str::trim).filter(|s| !s.is_empty()).map(String::from).collect()
}

/// Listener name -> security protocol, as Kafka resolves it: the configured map, or Kafka's
/// default (each protocol to itself) plus PLAINTEXT for the controller listeners (KRaft's
/// default when the map is not set).
fn security_protocol_map(
    raw: &BTreeMap<String, String>,
    controller_names: &[String],
) -> Result<BTreeMap<String, String>, ConfigError> {
    let key = "listener.security.protocol.map";
    let mut map = BTreeMap::new();
    match raw.get(key).filter(|v| !v.trim().is_empty()) {
        Some(value) => {
            for entry in list(value) {
                let expected = "a list of LISTENER:PROTOCOL with PROTOCOL one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL";
                let (name, protocol) = entry.split_once(':').ok_or_else(|| invalid(key, value, expected))?;
                let protocol = protocol.trim().to_ascii_uppercase();
                if !PROTOCOLS.iter().any(|(p, _)| *p == protocol) {
                    return Err(invalid(key, value, expected));
                }
                map.insert(name.trim().to_string(), protocol);
            }
        }
        None => {
            for (p, _) in PROTOCOLS {
                map.insert(p.to_string(), p.to_string());
            }
            for name in controller_names {
                map.entry(name.clone()).or_insert_with(|| "PLAINTEXT".to_string());
            }
        }
    }
    Ok(map)
}

/// Parses `controller.quorum.voters` (`id@host:port,...`) into id -> `host:port`.
pub(super) fn parse_voters(value: &str) -> Result<BTreeMap<i32, String>, ConfigError> {
    let expected = "a list of id@host:port";
    let mut voters = BTreeMap::new();
    for v in list(value) {
        let (id, addr) = v.split_once('@').ok_or_else(|| invalid("controller.quorum.voters", value, expected))?;
        let id: i32 = parse_int("controller.quorum.voters", id, 0, i32::MAX)
            .map_err(|_| invalid("controller.quorum.voters", value, expected))?;
        let port_ok = addr.rsplit_once(':').is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok());
        if !port_ok || voters.insert(id, addr.to_string()).is_some() {
            return Err(invalid("controller.quorum.voters", value, "a list of id@host:port with distinct ids"));
        }
    }
    Ok(voters)
}

/// sluice runs a one-voter quorum of itself, broker and controller in one process. Kafka's
/// stock single-node KRaft settings describe exactly that; anything else describes a cluster
/// sluice cannot join yet.
fn check_roles(
    raw: &BTreeMap<String, String>,
    listeners: &[Endpoint],
    controller_names: &[String],
    node_id: i32,
) -> Result<(), ConfigError> {
    if let (Some(n), Some(b)) = (raw.get("node.id"), raw.get("broker.id")) {
        if n.trim() != b.trim() {
            return Err(invalid("broker.id", b, &format!("the same id as node.id ({}) or unset", n.trim())));
        }
    }
    const CLUSTER: &str = "a sluice broker is a voter of the metadata quorum (process.roles=broker,controller, \
                           this node in controller.quorum.voters) or observes one (process.roles=broker, \
                           controller.quorum.voters listing the controllers)";
    let mut controller_only = false;
    let mut broker_only = false;
    if let Some(value) = raw.get("process.roles") {
        let roles = list(value);
        if roles.is_empty() || roles.iter().any(|r| r != "broker" && r != "controller") {
            return Err(invalid("process.roles", value, "a list of broker and/or controller"));
        }
        controller_only = roles.iter().all(|r| r == "controller");
        broker_only = roles.iter().all(|r| r == "broker");
    }
    if broker_only {
        // An observer: the controllers are the voters, this node is not one (as Kafka requires).
        // It finds them in controller.quorum.voters, or learns them from the controllers at
        // controller.quorum.bootstrap.servers.
        let value = raw.get("controller.quorum.voters").map(String::as_str).unwrap_or("").trim();
        let bootstrap = raw.get("controller.quorum.bootstrap.servers").map(String::as_str).unwrap_or("").trim();
        if value.is_empty() && bootstrap.is_empty() {
            return Err(refused(
                "process.roles",
                "broker",
                format!("{CLUSTER}; a broker-only node needs controller.quorum.voters or controller.quorum.bootstrap.servers"),
            ));
        }
        for server in list(bootstrap) {
            if server.rsplit_once(':').and_then(|(_, p)| p.parse::<u16>().ok()).is_none() {
                return Err(invalid("controller.quorum.bootstrap.servers", bootstrap, "a list of host:port"));
            }
        }
        let voters = parse_voters(value)?;
        if voters.contains_key(&node_id) {
            return Err(invalid("controller.quorum.voters", value, &format!("a list without this broker-only node ({node_id}): voters are controllers")));
        }
        if controller_names.is_empty() {
            return Err(invalid("controller.listener.names", "", "the name of the controllers' listener (CONTROLLER)"));
        }
        return Ok(());
    }
    if let Some(value) = raw.get("controller.quorum.voters").filter(|v| !v.trim().is_empty()) {
        let voters = parse_voters(value)?;
        if controller_only || voters.len() > 1 {
            // A dedicated controller (a voter of a quorum of controllers, serving no data), or a
            // combined node of a cluster (a voter that also serves data): its own entry must
            // name its controller listener.
            let Some(own) = voters.get(&node_id) else {
                return Err(invalid("controller.quorum.voters", value, &format!("a list that includes this node ({node_id}@host:port)")));
            };
            let own_port = own.rsplit_once(':').and_then(|(_, p)| p.parse::<u16>().ok());
            let listening = listeners.iter().any(|l| controller_names.contains(&l.name) && Some(l.port) == own_port);
            if !listening {
                return Err(invalid(
                    "controller.quorum.voters",
                    value,
                    &format!("this node's entry ({node_id}@{own}) to be the port of a listener named in controller.listener.names"),
                ));
            }
        } else if voters.keys().copied().collect::<Vec<_>>() != [node_id] {
            return Err(refused(
                "controller.quorum.voters",
                value,
                format!(
                    "{CLUSTER}; the only voter may be this node ({node_id}@host:port), or run it as a dedicated \
                     controller (process.roles=controller)"
                ),
            ));
        }
    } else if controller_only {
        return Err(invalid("process.roles", "controller", "controller.quorum.voters listing the quorum's voters, this node among them"));
    }
    if let Some(value) = raw.get("controller.quorum.bootstrap.servers").filter(|v| !v.trim().is_empty()) {
        // Kafka's stock single-node config bootstraps from its own controller listener.
        let own: Vec<&Endpoint> = listeners.iter().filter(|l| controller_names.contains(&l.name)).collect();
        let advertised = raw.get("advertised.listeners").map(|v| super::parse_listeners("advertised.listeners", v)).transpose()?;
        let is_own = |host: &str, port: u16| {
            let host = host.trim_start_matches('[').trim_end_matches(']');
            own.iter().any(|l| {
                l.port == port
                    && (host == l.host
                        || ["localhost", "127.0.0.1", "::1"].contains(&host)
                        || local_hostname().is_some_and(|h| h.eq_ignore_ascii_case(host))
                        || advertised.iter().flatten().any(|a| a.name == l.name && a.host == host))
            })
        };
        for server in list(value) {
            let Some((host, port)) = server.rsplit_once(':').and_then(|(h, p)| Some((h, p.parse::<u16>().ok()?))) else {
                return Err(invalid("controller.quorum.bootstrap.servers", value, "a list of host:port"));
            };
            if !is_own(host, port) {
                let own = if own.is_empty() {
                    "none is configured: name it in controller.listener.names".to_string()
                } else {
                    own.iter().map(|l| l.to_string()).collect::<Vec<_>>().join(", ")
                };
                return Err(refused(
                    "controller.quorum.bootstrap.servers",
                    value,
                    format!("{CLUSTER}; {server} is not this node's controller listener ({own})"),
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::{BrokerConfig, Loaded};
    use super::*;

    fn load(pairs: &[(&str, &str)]) -> Result<Loaded, ConfigError> {
        BrokerConfig::from_pairs(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())))
    }

    fn refusal(pairs: &[(&str, &str)]) -> String {
        match load(pairs) {
            Ok(_) => panic!("{pairs:?} was accepted"),
            Err(e) => e.to_string(),
        }
    }

    /// Kafka 4.x's `config/server.properties` (single-node KRaft, combined roles) as shipped.
    pub(crate) const STOCK_KRAFT: &[(&str, &str)] = &[
        ("process.roles", "broker,controller"),
        ("node.id", "1"),
        ("controller.quorum.bootstrap.servers", "localhost:9093"),
        ("listeners", "PLAINTEXT://:9092,CONTROLLER://:9093"),
        ("inter.broker.listener.name", "PLAINTEXT"),
        ("advertised.listeners", "PLAINTEXT://localhost:9092,CONTROLLER://localhost:9093"),
        ("controller.listener.names", "CONTROLLER"),
        (
            "listener.security.protocol.map",
            "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
        ),
        ("num.network.threads", "3"),
        ("num.io.threads", "8"),
        ("socket.send.buffer.bytes", "102400"),
        ("socket.receive.buffer.bytes", "102400"),
        ("socket.request.max.bytes", "104857600"),
        ("log.dirs", "/tmp/kraft-combined-logs"),
        ("num.partitions", "1"),
        ("num.recovery.threads.per.data.dir", "1"),
        ("offsets.topic.replication.factor", "1"),
        ("share.coordinator.state.topic.replication.factor", "1"),
        ("share.coordinator.state.topic.min.isr", "1"),
        ("transaction.state.log.replication.factor", "1"),
        ("transaction.state.log.min.isr", "1"),
        ("log.retention.hours", "168"),
        ("log.segment.bytes", "1073741824"),
        ("log.retention.check.interval.ms", "300000"),
    ];

    #[test]
    fn kafkas_stock_single_node_kraft_config_starts_with_no_unknown_keys() {
        let l = load(STOCK_KRAFT).unwrap();
        assert!(l.unknown_keys.is_empty(), "{:?}", l.unknown_keys);
        let mut with_voters: Vec<_> =
            STOCK_KRAFT.iter().filter(|(k, _)| *k != "controller.quorum.bootstrap.servers").copied().collect();
        with_voters.push(("controller.quorum.voters", "1@localhost:9093"));
        load(&with_voters).unwrap();
    }

    #[test]
    fn listeners_with_an_unimplemented_security_protocol_are_refused() {
        let map = ("listener.security.protocol.map", "PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,EXTERNAL:SSL");
        for listeners in ["PLAINTEXT://127.0.0.1:1,SASL_SSL://127.0.0.1:2", "EXTERNAL://127.0.0.1:3"] {
            let err = refusal(&[("listeners", listeners), map]);
            assert!(err.contains("listeners") && err.contains(listeners) && err.contains("only PLAINTEXT"), "{err}");
        }
        // Without a map, a listener named after a protocol has that protocol.
        for listeners in ["SSL://127.0.0.1:4", "SASL_PLAINTEXT://127.0.0.1:5"] {
            let err = refusal(&[("listeners", listeners)]);
            assert!(err.contains(listeners) && err.contains("only PLAINTEXT"), "{err}");
        }
        let err = refusal(&[("advertised.listeners", "SASL_SSL://example.com:9093")]);
        assert!(err.contains("advertised.listeners"), "{err}");
        // A name with no protocol is an error, as in Kafka; a mapped PLAINTEXT one is served.
        let err = refusal(&[("listeners", "INTERNAL://127.0.0.1:6")]);
        assert!(err.contains("no security protocol is defined for listener INTERNAL"), "{err}");
        load(&[("listeners", "INTERNAL://127.0.0.1:6"), ("listener.security.protocol.map", "INTERNAL:PLAINTEXT")]).unwrap();
        let err = refusal(&[("listener.security.protocol.map", "PLAINTEXT:TLS")]);
        assert!(err.contains("listener.security.protocol.map") && err.contains("SASL_SSL"), "{err}");
    }

    #[test]
    fn tls_sasl_and_authorizer_settings_are_refused_naming_key_and_value() {
        for (key, value, says) in [
            ("ssl.keystore.location", "/etc/kafka/broker.jks", "TLS"),
            ("ssl.client.auth", "required", "TLS"),
            ("listener.name.external.ssl.truststore.location", "/x", "TLS"),
            ("sasl.enabled.mechanisms", "SCRAM-SHA-512", "SASL"),
            ("listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config", "org.apache...ScramLoginModule required;", "SASL"),
            ("listener.name.internal.sasl.enabled.mechanisms", "PLAIN", "SASL"),
            ("security.inter.broker.protocol", "SASL_SSL", "SASL"),
            ("authorizer.class.name", "org.apache.kafka.metadata.authorizer.StandardAuthorizer", "authorizer"),
        ] {
            let err = refusal(&[(key, value)]);
            assert!(err.contains(key) && err.contains(value) && err.contains(says), "{err}");
        }
        // Kafka's "unset" forms start.
        load(&[("authorizer.class.name", ""), ("security.inter.broker.protocol", "PLAINTEXT")]).unwrap();
        // Per-listener keys that are not TLS or SASL are not caught by the listener patterns.
        assert!(!is_checked_key("listener.name.internal.max.connections"));
    }

    #[test]
    fn a_dedicated_controller_may_be_one_voter_of_many_on_its_controller_listener() {
        let voters = ("controller.quorum.voters", "1@127.0.0.1:9093,2@127.0.0.1:9094,3@127.0.0.1:9095");
        let base = [
            ("process.roles", "controller"),
            ("node.id", "2"),
            voters,
            ("listeners", "CONTROLLER://127.0.0.1:9094"),
            ("controller.listener.names", "CONTROLLER"),
        ];
        let c = load(&base).unwrap().config;
        assert_eq!(c.roles, super::super::Roles::Controller);
        assert_eq!(c.quorum_voters.len(), 3);
        let mut wrong_port = base;
        wrong_port[3] = ("listeners", "CONTROLLER://127.0.0.1:9999");
        let err = refusal(&wrong_port);
        assert!(err.contains("this node's entry (2@127.0.0.1:9094)"), "{err}");
        let mut not_a_voter = base;
        not_a_voter[1] = ("node.id", "4");
        assert!(refusal(&not_a_voter).contains("includes this node (4@"));
        let mut duplicate = base;
        duplicate[2] = ("controller.quorum.voters", "1@127.0.0.1:9093,1@127.0.0.1:9094");
        assert!(refusal(&duplicate).contains("distinct ids"));
    }

    #[test]
    fn a_broker_only_node_observes_controllers_and_other_quorums_must_include_this_node() {
        let err = refusal(&[("process.roles", "broker")]);
        assert!(err.contains("process.roles") && err.contains("needs controller.quorum.voters or controller.quorum.bootstrap.servers"), "{err}");
        let observer = [
            ("process.roles", "broker"),
            ("node.id", "4"),
            ("controller.quorum.voters", "1@127.0.0.1:9093,2@127.0.0.1:9094,3@127.0.0.1:9095"),
            ("listeners", "PLAINTEXT://127.0.0.1:9092"),
            ("controller.listener.names", "CONTROLLER"),
        ];
        assert_eq!(load(&observer).expect("a broker observing three controllers").config.roles, super::super::Roles::Broker);
        let mut bootstrapped = observer;
        bootstrapped[2] = ("controller.quorum.bootstrap.servers", "127.0.0.1:9093,localhost:9094");
        let c = load(&bootstrapped).expect("a broker learning its controllers from bootstrap servers").config;
        assert_eq!((c.quorum_voters.len(), c.quorum_bootstrap_servers.len()), (0, 2));
        bootstrapped[2] = ("controller.quorum.bootstrap.servers", "127.0.0.1");
        assert!(refusal(&bootstrapped).contains("a list of host:port"));
        let mut voter = observer;
        voter[1] = ("node.id", "2");
        let err = refusal(&voter);
        assert!(err.contains("controller.quorum.voters") && err.contains("without this broker-only node (2)"), "{err}");
        let err = refusal(&[("process.roles", "controller")]);
        assert!(err.contains("process.roles") && err.contains("controller.quorum.voters"), "{err}");
        let err = refusal(&[("process.roles", "broker,observer")]);
        assert!(err.contains("process.roles") && err.contains("broker and/or controller"), "{err}");
        // A combined member of a cluster must be a voter on its own controller listener.
        let voters = "1@127.0.0.1:9093,2@127.0.0.1:9094,3@127.0.0.1:9095";
        let err = refusal(&[("controller.quorum.voters", voters)]);
        assert!(err.contains("controller.quorum.voters") && err.contains(voters) && err.contains("controller.listener.names"), "{err}");
        let err = refusal(&[("node.id", "4"), ("controller.quorum.voters", voters)]);
        assert!(err.contains("includes this node (4@"), "{err}");
        load(&[
            ("process.roles", "broker,controller"),
            ("node.id", "2"),
            ("controller.quorum.voters", voters),
            ("listeners", "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9094"),
            ("controller.listener.names", "CONTROLLER"),
        ])
        .expect("a combined member of a three-voter quorum");
        let err = refusal(&[("node.id", "2"), ("controller.quorum.voters", "1@127.0.0.1:9093")]);
        assert!(err.contains("this node (2@"), "{err}");
        let err = refusal(&[
            ("listeners", "PLAINTEXT://:9092,CONTROLLER://:9093"),
            ("controller.listener.names", "CONTROLLER"),
            ("controller.quorum.bootstrap.servers", "localhost:9093,kafka2:9093"),
        ]);
        assert!(err.contains("controller.quorum.bootstrap.servers") && err.contains("kafka2:9093"), "{err}");
        let err = refusal(&[("node.id", "1"), ("broker.id", "2")]);
        assert!(err.contains("broker.id") && err.contains("node.id (1)"), "{err}");
    }
}
