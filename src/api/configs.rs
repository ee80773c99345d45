//! DescribeConfigs, AlterConfigs and IncrementalAlterConfigs for topics and brokers.
//!
//! Topic overrides are validated with the same rules as at creation; a rejected change leaves the
//! topic untouched. Dynamic broker configs cover the broker-level defaults of topic configs
//! (`log.retention.ms`, `log.segment.bytes`, `log.cleanup.policy`, `message.max.bytes`, ...), per
//! node (resource name = node id) or cluster-wide (empty name), with Kafka's precedence: node,
//! cluster default, server.properties, Kafka's default. Other broker keys get INVALID_REQUEST
//! ("Cannot update these configs dynamically"), as in Kafka.

use std::collections::BTreeMap;

use kafka_protocol::messages::alter_configs_response::AlterConfigsResourceResponse as LegacyAlterResult;
use kafka_protocol::messages::describe_configs_response::*;
use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;

use super::topics::{SOURCE_DEFAULT, SOURCE_DYNAMIC_TOPIC, SOURCE_STATIC_BROKER};
use super::{str_bytes, RequestContext};
use crate::broker::Broker;
use crate::config::topic as topic_config;

const RESOURCE_TOPIC: i8 = 2;
const RESOURCE_BROKER: i8 = 4;
const RESOURCE_BROKER_LOGGER: i8 = 8;

const OP_SET: i8 = 0;
const OP_DELETE: i8 = 1;
const OP_APPEND: i8 = 2;
const OP_SUBTRACT: i8 = 3;

fn wanted(keys: &Option<Vec<kafka_protocol::protocol::StrBytes>>, name: &str) -> bool {
    keys.as_ref().map(|k| k.iter().any(|k| k.as_str() == name)).unwrap_or(true)
}

/// Kafka's config sources for dynamic broker configs.
const SOURCE_DYNAMIC_BROKER: i8 = 2;
const SOURCE_DYNAMIC_DEFAULT_BROKER: i8 = 3;

/// Where a broker key's value can come from, highest precedence first: this node's dynamic
/// config, the cluster-wide dynamic default, server.properties, Kafka's default.
fn broker_layers(broker: &Broker, key: &str, kafka_default: Option<&str>) -> Vec<(String, i8)> {
    let (cluster, node) = broker.dynamic_broker_configs();
    let mut out = Vec::new();
    if let Some(v) = node.get(key) {
        out.push((v.clone(), SOURCE_DYNAMIC_BROKER));
    }
    if let Some(v) = cluster.get(key) {
        out.push((v.clone(), SOURCE_DYNAMIC_DEFAULT_BROKER));
    }
    if let Some(v) = broker.config.raw.get(key) {
        out.push((v.clone(), SOURCE_STATIC_BROKER));
    }
    if let Some(d) = kafka_default {
        out.push((d.to_string(), SOURCE_DEFAULT));
    }
    out
}

fn synonym(name: &str, value: &str, source: i8) -> DescribeConfigsSynonym {
    DescribeConfigsSynonym::default().with_name(str_bytes(name)).with_value(Some(str_bytes(value))).with_source(source)
}

fn describe_topic(broker: &Broker, name: &str, keys: &Option<Vec<kafka_protocol::protocol::StrBytes>>, synonyms: bool) -> Result<Vec<DescribeConfigsResourceResult>, (ResponseError, String)> {
    let overrides = broker
        .topic_overrides(name)
        .ok_or((ResponseError::UnknownTopicOrPartition, format!("Topic '{name}' does not exist.")))?;
    let defaults = broker.topic_defaults();
    let mut out = Vec::new();
    for (key, def) in topic_config::TOPIC_CONFIGS {
        if !wanted(keys, key) {
            continue;
        }
        let mut layers: Vec<(String, String, i8)> = Vec::new();
        if let Some(v) = overrides.get(*key) {
            layers.push((key.to_string(), v.clone(), SOURCE_DYNAMIC_TOPIC));
        }
        if let Some(bk) = def.broker_key {
            // The broker-level layers, reporting the effective default (hours/minutes folded in).
            for (i, (v, source)) in broker_layers(broker, bk, None).into_iter().enumerate() {
                let v = if i == 0 { defaults.get(*key).cloned().unwrap_or(v) } else { v };
                layers.push((bk.to_string(), v, source));
            }
            layers.push((bk.to_string(), def.default.to_string(), SOURCE_DEFAULT));
        }
        let (value, source) = match layers.first() {
            Some((_, v, SOURCE_DYNAMIC_TOPIC)) => (v.clone(), SOURCE_DYNAMIC_TOPIC),
            Some((_, _, source)) => (defaults.get(*key).cloned().unwrap_or_default(), *source),
            None => (defaults.get(*key).cloned().unwrap_or_else(|| def.default.to_string()), SOURCE_DEFAULT),
        };
        if keys.is_none() && !topic_config::listed(key, &value) {
            continue;
        }
        let syn = if synonyms { layers.iter().map(|(n, v, s)| synonym(n, v, *s)).collect() } else { Vec::new() };
        out.push(
            DescribeConfigsResourceResult::default()
                .with_name(str_bytes(key))
                .with_value(Some(str_bytes(&value)))
                .with_config_source(source)
                .with_synonyms(syn)
                .with_config_type(def.config_type),
        );
    }
    Ok(out)
}

/// Broker keys that can be changed at runtime: the broker-level defaults of topic configs
/// (Kafka's `DynamicLogConfig` set).
fn is_dynamic_broker_key(key: &str) -> bool {
    topic_config::is_dynamic_broker_key(key)
}

/// The resource name of a broker resource: "" is the cluster-wide default, our node id is this
/// broker; anything else is refused.
fn broker_entity(broker: &Broker, name: &str) -> Result<bool, (ResponseError, String)> {
    if name.is_empty() {
        return Ok(false);
    }
    if name.parse::<i32>().ok() == Some(broker.node_id) {
        return Ok(true);
    }
    Err((ResponseError::InvalidRequest, format!("Unexpected broker id, expected {} or empty string, but received {name}", broker.node_id)))
}

fn describe_broker(broker: &Broker, name: &str, keys: &Option<Vec<kafka_protocol::protocol::StrBytes>>, synonyms: bool) -> Result<Vec<DescribeConfigsResourceResult>, (ResponseError, String)> {
    let node = broker_entity(broker, name)?;
    let (cluster, node_configs) = broker.dynamic_broker_configs();
    let mut entries: std::collections::BTreeMap<String, Option<String>> = std::collections::BTreeMap::new();
    for (k, v, _) in broker.config.broker_entries() {
        entries.insert(k, Some(v));
    }
    for k in cluster.keys().chain(node_configs.keys()) {
        entries.entry(k.clone()).or_insert(None);
    }
    Ok(entries
        .into_iter()
        .filter(|(k, _)| wanted(keys, k))
        .map(|(k, static_or_default)| {
            let kafka_default = topic_config::TOPIC_CONFIGS
                .iter()
                .find(|(_, d)| d.broker_key == Some(k.as_str()))
                .map(|(_, d)| d.default.to_string())
                .or(static_or_default);
            let mut layers = broker_layers(broker, &k, kafka_default.as_deref());
            if !node {
                // The cluster-default entity shows only cluster-level layers.
                layers.retain(|(_, s)| *s != SOURCE_DYNAMIC_BROKER);
            }
            let (value, source) = layers.first().cloned().unwrap_or((String::new(), SOURCE_DEFAULT));
            let syn = if synonyms { layers.iter().map(|(v, s)| synonym(&k, v, *s)).collect() } else { Vec::new() };
            DescribeConfigsResourceResult::default()
                .with_name(str_bytes(&k))
                .with_value(Some(str_bytes(&value)))
                .with_read_only(!is_dynamic_broker_key(&k))
                .with_config_source(source)
                .with_synonyms(syn)
        })
        .collect())
}

/// Validates and stores new dynamic configs for a broker entity.
fn apply_broker(broker: &Broker, name: &str, configs: std::collections::BTreeMap<String, String>, validate_only: bool) -> Result<(), (ResponseError, String)> {
    let node = broker_entity(broker, name)?;
    let refused: Vec<&String> = configs.keys().filter(|k| !is_dynamic_broker_key(k)).collect();
    if !refused.is_empty() {
        return Err((ResponseError::InvalidRequest, format!("Cannot update these configs dynamically: {refused:?}")));
    }
    for (k, v) in &configs {
        topic_config::validate_broker_value(k, v).map_err(|e| (ResponseError::InvalidConfig, e))?;
    }
    if validate_only {
        return Ok(());
    }
    if broker.cluster().is_some() {
        return Err((ResponseError::InvalidRequest, "a cluster member changes broker configs through the controller".into()));
    }
    broker.set_dynamic_broker_configs(node, configs).map_err(|e| (super::topics::topic_error_code(&e), e.to_string()))
}

/// Applies SET/DELETE/APPEND/SUBTRACT to a copy of `current`.
fn apply_ops(
    current: &std::collections::BTreeMap<String, String>,
    ops: &[kafka_protocol::messages::incremental_alter_configs_request::AlterableConfig],
    default_of: impl Fn(&str) -> Option<String>,
) -> Result<std::collections::BTreeMap<String, String>, (ResponseError, String)> {
    let mut out = current.clone();
    for c in ops {
        let key = c.name.to_string();
        let value = c.value.as_ref().map(|v| v.to_string());
        match (c.config_operation, value) {
            (OP_SET, Some(v)) => {
                out.insert(key, v);
            }
            (OP_DELETE, _) => {
                out.remove(&key);
            }
            (OP_APPEND | OP_SUBTRACT, Some(v)) => {
                let current = out.get(&key).cloned().or_else(|| default_of(&key)).unwrap_or_default();
                let mut items: Vec<String> = current.split(',').map(str::trim).filter(|s| !s.is_empty()).map(String::from).collect();
                for item in v.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                    if c.config_operation == OP_APPEND {
                        if !items.iter().any(|i| i == item) {
                            items.push(item.to_string());
                        }
                    } else {
                        items.retain(|i| i != item);
                    }
                }
                out.insert(key, items.join(","));
            }
            (op, _) => return Err((ResponseError::InvalidRequest, format!("Invalid config operation {op} or missing value for {key}"))),
        }
    }
    Ok(out)
}

pub async fn describe_configs(ctx: &RequestContext, req: DescribeConfigsRequest) -> DescribeConfigsResponse {
    let broker = &ctx.broker;
    let results = req
        .resources
        .into_iter()
        .map(|r| {
            let name = r.resource_name.to_string();
            let outcome = match r.resource_type {
                RESOURCE_TOPIC => describe_topic(broker, &name, &r.configuration_keys, req.include_synonyms),
                RESOURCE_BROKER => describe_broker(broker, &name, &r.configuration_keys, req.include_synonyms),
                RESOURCE_BROKER_LOGGER => Ok(Vec::new()),
                other => Err((ResponseError::InvalidRequest, format!("Unsupported resource type {other}"))),
            };
            let result = DescribeConfigsResult::default().with_resource_type(r.resource_type).with_resource_name(r.resource_name);
            match outcome {
                // Kafka sends null documentation unless asked for it.
                Ok(configs) => result.with_configs(
                    configs
                        .into_iter()
                        .map(|c| if req.include_documentation { c } else { c.with_documentation(None) })
                        .collect(),
                ),
                Err((code, msg)) => result.with_error_code(code.code()).with_error_message(Some(str_bytes(&msg))),
            }
        })
        .collect();
    DescribeConfigsResponse::default().with_results(results)
}

/// Validates and applies new overrides for a topic.
fn apply_topic(broker: &Broker, name: &str, overrides: BTreeMap<String, String>, validate_only: bool) -> Result<(), (ResponseError, String)> {
    if broker.topic(name).is_none() {
        return Err((ResponseError::UnknownTopicOrPartition, format!("Topic '{name}' does not exist.")));
    }
    for (k, v) in &overrides {
        topic_config::validate(k, v).map_err(|e| (ResponseError::InvalidConfig, e.to_string()))?;
    }
    if validate_only {
        return Ok(());
    }
    broker
        .set_topic_configs(name, overrides)
        .map_err(|e| (super::topics::topic_error_code(&e), e.to_string()))
}

/// Stored overrides are written with fsync, so the change runs on the blocking pool
/// ([`super::off_runtime`]).
pub async fn incremental_alter_configs(ctx: &RequestContext, req: IncrementalAlterConfigsRequest) -> IncrementalAlterConfigsResponse {
    let broker = ctx.broker.clone();
    if broker.cluster().is_some() {
        let mut responses = Vec::with_capacity(req.resources.len());
        for r in req.resources {
            let name = r.resource_name.to_string();
            let outcome = match r.resource_type {
                RESOURCE_TOPIC => match broker.topic_overrides(&name) {
                    None => Err((ResponseError::UnknownTopicOrPartition, format!("Topic '{name}' does not exist."))),
                    Some(current) => match r.configs.iter().find(|c| topic_config::lookup(&c.name).is_none()) {
                        Some(c) => Err((ResponseError::InvalidConfig, format!("Unknown topic config name: {}", c.name.as_str()))),
                        None => {
                            let defaults = broker.topic_defaults();
                            match apply_ops(&current, &r.configs, |k| defaults.get(k).cloned()) {
                                Ok(overrides) => match overrides.iter().try_for_each(|(k, v)| topic_config::validate(k, v)) {
                                    Ok(()) => alter_in_cluster(&broker, RESOURCE_TOPIC, &name, &current, overrides, req.validate_only).await,
                                    Err(e) => Err((ResponseError::InvalidConfig, e.to_string())),
                                },
                                Err(e) => Err(e),
                            }
                        }
                    },
                },
                RESOURCE_BROKER => match broker_entity(&broker, &name) {
                    Err(e) => Err(e),
                    Ok(_) => {
                        let current = broker.image_broker_configs(&name);
                        match apply_ops(&current, &r.configs, |k| broker.config.broker_value(k)) {
                            Ok(configs) => match apply_broker(&broker, &name, configs.clone(), true) {
                                Ok(()) => alter_in_cluster(&broker, RESOURCE_BROKER, &name, &current, configs, req.validate_only).await,
                                Err(e) => Err(e),
                            },
                            Err(e) => Err(e),
                        }
                    }
                },
                other => not_in_cluster(other),
            };
            responses.push(alter_result(r.resource_type, r.resource_name, outcome));
        }
        return IncrementalAlterConfigsResponse::default().with_responses(responses);
    }
    super::off_runtime(move || incremental_alter_configs_blocking(&broker, req)).await
}

fn alter_result(
    resource_type: i8,
    resource_name: kafka_protocol::protocol::StrBytes,
    outcome: Result<(), (ResponseError, String)>,
) -> AlterConfigsResourceResponse {
    let resp = AlterConfigsResourceResponse::default().with_resource_type(resource_type).with_resource_name(resource_name);
    match outcome {
        Ok(()) => resp,
        Err((code, msg)) => resp.with_error_code(code.code()).with_error_message(Some(str_bytes(&msg))),
    }
}

/// What a cluster member answers for other resource types.
fn not_in_cluster(resource_type: i8) -> Result<(), (ResponseError, String)> {
    match resource_type {
        RESOURCE_BROKER_LOGGER => Err((ResponseError::InvalidRequest, "broker loggers are set with log.level".into())),
        other => Err((ResponseError::InvalidRequest, format!("Unsupported resource type {other}"))),
    }
}

/// Asks the active controller to record a resource's new configs (validated by the caller), as
/// SET and DELETE operations against `current`; every broker then takes them from the image
/// (`broker::cluster::LocalSync`).
async fn alter_in_cluster(
    broker: &std::sync::Arc<Broker>,
    resource_type: i8,
    name: &str,
    current: &BTreeMap<String, String>,
    overrides: BTreeMap<String, String>,
    validate_only: bool,
) -> Result<(), (ResponseError, String)> {
    use kafka_protocol::messages::incremental_alter_configs_request::{AlterConfigsResource, AlterableConfig};
    let mut ops: Vec<AlterableConfig> = overrides
        .iter()
        .filter(|(k, v)| current.get(*k) != Some(*v))
        .map(|(k, v)| AlterableConfig::default().with_name(str_bytes(k)).with_config_operation(OP_SET).with_value(Some(str_bytes(v))))
        .collect();
    ops.extend(current.keys().filter(|k| !overrides.contains_key(*k)).map(|k| AlterableConfig::default().with_name(str_bytes(k)).with_config_operation(OP_DELETE)));
    let req = IncrementalAlterConfigsRequest::default().with_validate_only(validate_only).with_resources(vec![AlterConfigsResource::default()
        .with_resource_type(resource_type)
        .with_resource_name(str_bytes(name))
        .with_configs(ops)]);
    let view = broker.cluster().expect("called in a cluster");
    let resp = view
        .call_controller(&req, 1)
        .await
        .map_err(|e| (ResponseError::RequestTimedOut, format!("the active controller did not answer: {e}")))?;
    match resp.responses.first() {
        Some(r) if r.error_code == 0 => Ok(()),
        Some(r) => Err((ResponseError::try_from_code(r.error_code).unwrap_or(ResponseError::UnknownServerError), r.error_message.as_ref().map(|m| m.to_string()).unwrap_or_default())),
        None => Err((ResponseError::UnknownServerError, "the controller answered for no resource".into())),
    }
}

fn incremental_alter_configs_blocking(broker: &Broker, req: IncrementalAlterConfigsRequest) -> IncrementalAlterConfigsResponse {
    let responses = req
        .resources
        .into_iter()
        .map(|r| {
            let name = r.resource_name.to_string();
            let outcome = match r.resource_type {
                RESOURCE_TOPIC => match broker.topic(&name) {
                    None => Err((ResponseError::UnknownTopicOrPartition, format!("Topic '{name}' does not exist."))),
                    Some(topic) => match r.configs.iter().find(|c| topic_config::lookup(&c.name).is_none()) {
                        Some(c) => Err((ResponseError::InvalidConfig, format!("Unknown topic config name: {}", c.name.as_str()))),
                        None => {
                            let defaults = broker.topic_defaults();
                            apply_ops(&topic.overrides, &r.configs, |k| defaults.get(k).cloned())
                                .and_then(|overrides| apply_topic(broker, &name, overrides, req.validate_only))
                        }
                    },
                },
                RESOURCE_BROKER => broker_entity(broker, &name).and_then(|node| {
                    let (cluster, node_configs) = broker.dynamic_broker_configs();
                    let current = if node { node_configs } else { cluster };
                    apply_ops(&current, &r.configs, |k| broker.config.broker_value(k))
                        .and_then(|configs| apply_broker(broker, &name, configs, req.validate_only))
                }),
                RESOURCE_BROKER_LOGGER => Err((ResponseError::InvalidRequest, "broker loggers are set with log.level".into())),
                other => Err((ResponseError::InvalidRequest, format!("Unsupported resource type {other}"))),
            };
            let resp = AlterConfigsResourceResponse::default().with_resource_type(r.resource_type).with_resource_name(r.resource_name);
            match outcome {
                Ok(()) => resp,
                Err((code, msg)) => resp.with_error_code(code.code()).with_error_message(Some(str_bytes(&msg))),
            }
        })
        .collect();
    IncrementalAlterConfigsResponse::default().with_responses(responses)
}

/// Runs on the blocking pool, as [`incremental_alter_configs`] does.
pub async fn alter_configs(ctx: &RequestContext, req: AlterConfigsRequest) -> AlterConfigsResponse {
    let broker = ctx.broker.clone();
    if broker.cluster().is_some() {
        let mut responses = Vec::with_capacity(req.resources.len());
        for r in req.resources {
            let name = r.resource_name.to_string();
            let values: BTreeMap<String, String> =
                r.configs.iter().filter_map(|c| c.value.as_ref().map(|v| (c.name.to_string(), v.to_string()))).collect();
            let outcome = match (r.resource_type, broker.topic_overrides(&name)) {
                (RESOURCE_TOPIC, None) => Err((ResponseError::UnknownTopicOrPartition, format!("Topic '{name}' does not exist."))),
                (RESOURCE_TOPIC, Some(current)) => match values.iter().try_for_each(|(k, v)| topic_config::validate(k, v)) {
                    Ok(()) => alter_in_cluster(&broker, RESOURCE_TOPIC, &name, &current, values, req.validate_only).await,
                    Err(e) => Err((ResponseError::InvalidConfig, e.to_string())),
                },
                (RESOURCE_BROKER, _) => match apply_broker(&broker, &name, values.clone(), true) {
                    Ok(()) => {
                        let current = broker.image_broker_configs(&name);
                        alter_in_cluster(&broker, RESOURCE_BROKER, &name, &current, values, req.validate_only).await
                    }
                    Err(e) => Err(e),
                },
                (other, _) => not_in_cluster(other),
            };
            let resp = LegacyAlterResult::default().with_resource_type(r.resource_type).with_resource_name(r.resource_name);
            responses.push(match outcome {
                Ok(()) => resp,
                Err((code, msg)) => resp.with_error_code(code.code()).with_error_message(Some(str_bytes(&msg))),
            });
        }
        return AlterConfigsResponse::default().with_responses(responses);
    }
    super::off_runtime(move || alter_configs_blocking(&broker, req)).await
}

fn alter_configs_blocking(broker: &Broker, req: AlterConfigsRequest) -> AlterConfigsResponse {
    let responses = req
        .resources
        .into_iter()
        .map(|r| {
            let name = r.resource_name.to_string();
            // Legacy AlterConfigs replaces the whole set of overrides with the values given.
            let values: BTreeMap<String, String> = r
                .configs
                .iter()
                .filter_map(|c| c.value.as_ref().map(|v| (c.name.to_string(), v.to_string())))
                .collect();
            let outcome = match r.resource_type {
                RESOURCE_TOPIC => apply_topic(broker, &name, values, req.validate_only),
                RESOURCE_BROKER => apply_broker(broker, &name, values, req.validate_only),
                other => Err((ResponseError::InvalidRequest, format!("Unsupported resource type {other}"))),
            };
            let resp = LegacyAlterResult::default().with_resource_type(r.resource_type).with_resource_name(r.resource_name);
            match outcome {
                Ok(()) => resp,
                Err((code, msg)) => resp.with_error_code(code.code()).with_error_message(Some(str_bytes(&msg))),
            }
        })
        .collect();
    AlterConfigsResponse::default().with_responses(responses)
}
