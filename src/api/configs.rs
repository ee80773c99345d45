//! DescribeConfigs, AlterConfigs and IncrementalAlterConfigs for topics and (read-only) for the
//! broker.
//!
//! Topic overrides are validated with the same rules as at creation; a rejected change leaves the
//! topic untouched. Dynamic broker configs are not supported yet: altering a broker resource gets
//! INVALID_REQUEST with a message saying so.

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

fn describe_topic(broker: &Broker, name: &str, keys: &Option<Vec<kafka_protocol::protocol::StrBytes>>, synonyms: bool) -> Result<Vec<DescribeConfigsResourceResult>, (ResponseError, String)> {
    let topic = broker
        .topic(name)
        .ok_or((ResponseError::UnknownTopicOrPartition, format!("Topic '{name}' does not exist.")))?;
    let mut out = Vec::new();
    for (key, def) in topic_config::TOPIC_CONFIGS {
        if !wanted(keys, key) {
            continue;
        }
        let default_value = broker.config.topic_defaults.get(*key).cloned().unwrap_or_default();
        let broker_set = def.broker_key.map(|bk| broker.config.raw.contains_key(bk)).unwrap_or(false);
        let (value, source) = match topic.overrides.get(*key) {
            Some(v) => (v.clone(), SOURCE_DYNAMIC_TOPIC),
            None if broker_set => (default_value.clone(), SOURCE_STATIC_BROKER),
            None => (default_value.clone(), SOURCE_DEFAULT),
        };
        let mut syn = Vec::new();
        if synonyms {
            if let Some(v) = topic.overrides.get(*key) {
                syn.push(DescribeConfigsSynonym::default().with_name(str_bytes(key)).with_value(Some(str_bytes(v))).with_source(SOURCE_DYNAMIC_TOPIC));
            }
            if let Some(bk) = def.broker_key {
                if broker_set {
                    syn.push(DescribeConfigsSynonym::default().with_name(str_bytes(bk)).with_value(Some(str_bytes(&default_value))).with_source(SOURCE_STATIC_BROKER));
                }
                syn.push(DescribeConfigsSynonym::default().with_name(str_bytes(bk)).with_value(Some(str_bytes(def.default))).with_source(SOURCE_DEFAULT));
            }
        }
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

fn describe_broker(broker: &Broker, name: &str, keys: &Option<Vec<kafka_protocol::protocol::StrBytes>>) -> Result<Vec<DescribeConfigsResourceResult>, (ResponseError, String)> {
    if !name.is_empty() && name.parse::<i32>().ok() != Some(broker.node_id) {
        return Err((ResponseError::InvalidRequest, format!("Unexpected broker id, expected {} or empty string, but received {name}", broker.node_id)));
    }
    Ok(broker
        .config
        .broker_entries()
        .into_iter()
        .filter(|(k, _, _)| wanted(keys, k))
        .map(|(k, v, set)| {
            DescribeConfigsResourceResult::default()
                .with_name(str_bytes(&k))
                .with_value(Some(str_bytes(&v)))
                .with_read_only(true)
                .with_config_source(if set { SOURCE_STATIC_BROKER } else { SOURCE_DEFAULT })
        })
        .collect())
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
                RESOURCE_BROKER => describe_broker(broker, &name, &r.configuration_keys),
                RESOURCE_BROKER_LOGGER => Ok(Vec::new()),
                other => Err((ResponseError::InvalidRequest, format!("Unsupported resource type {other}"))),
            };
            let result = DescribeConfigsResult::default().with_resource_type(r.resource_type).with_resource_name(r.resource_name);
            match outcome {
                Ok(configs) => result.with_configs(configs),
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

fn broker_alter_refused() -> (ResponseError, String) {
    (ResponseError::InvalidRequest, "sluice does not support dynamic broker configs yet; set them in server.properties".into())
}

pub async fn incremental_alter_configs(ctx: &RequestContext, req: IncrementalAlterConfigsRequest) -> IncrementalAlterConfigsResponse {
    let broker = &ctx.broker;
    let responses = req
        .resources
        .into_iter()
        .map(|r| {
            let name = r.resource_name.to_string();
            let outcome = match r.resource_type {
                RESOURCE_TOPIC => match broker.topic(&name) {
                    None => Err((ResponseError::UnknownTopicOrPartition, format!("Topic '{name}' does not exist."))),
                    Some(topic) => {
                        let mut overrides = topic.overrides.clone();
                        let mut result = Ok(());
                        for c in &r.configs {
                            let key = c.name.to_string();
                            if topic_config::lookup(&key).is_none() {
                                result = Err((ResponseError::InvalidConfig, format!("Unknown topic config name: {key}")));
                                break;
                            }
                            let value = c.value.as_ref().map(|v| v.to_string());
                            match (c.config_operation, value) {
                                (OP_SET, Some(v)) => {
                                    overrides.insert(key, v);
                                }
                                (OP_DELETE, _) => {
                                    overrides.remove(&key);
                                }
                                (OP_APPEND | OP_SUBTRACT, Some(v)) => {
                                    let current = overrides
                                        .get(&key)
                                        .cloned()
                                        .or_else(|| broker.config.topic_defaults.get(&key).cloned())
                                        .unwrap_or_default();
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
                                    overrides.insert(key, items.join(","));
                                }
                                (op, _) => {
                                    result = Err((ResponseError::InvalidRequest, format!("Invalid config operation {op} or missing value for {key}")));
                                    break;
                                }
                            }
                        }
                        result.and_then(|_| apply_topic(broker, &name, overrides, req.validate_only))
                    }
                },
                RESOURCE_BROKER | RESOURCE_BROKER_LOGGER => Err(broker_alter_refused()),
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

pub async fn alter_configs(ctx: &RequestContext, req: AlterConfigsRequest) -> AlterConfigsResponse {
    let broker = &ctx.broker;
    let responses = req
        .resources
        .into_iter()
        .map(|r| {
            let name = r.resource_name.to_string();
            let outcome = match r.resource_type {
                // Legacy AlterConfigs replaces the whole set of overrides.
                RESOURCE_TOPIC => {
                    let overrides: BTreeMap<String, String> = r
                        .configs
                        .iter()
                        .filter_map(|c| c.value.as_ref().map(|v| (c.name.to_string(), v.to_string())))
                        .collect();
                    apply_topic(broker, &name, overrides, req.validate_only)
                }
                RESOURCE_BROKER => Err(broker_alter_refused()),
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
