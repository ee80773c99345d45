#!/usr/bin/env python3
"""Generates grafana/dashboards/*.json from the panel tables below.

The dashboards are data: edit the tables here and re-run `python3 grafana/generate.py`
(the JSON files are committed so Grafana provisioning needs no build step). Every expression
is also evaluated against a real Prometheus by grafana/test/prometheus_e2e.sh.

Variables: $datasource (Prometheus), $instance, $topic, $group — multi-value regexes, so
expressions match them with =~.
"""
import json
from pathlib import Path

OUT = Path(__file__).resolve().parent / "dashboards"

I = 'instance=~"$instance"'
T = 'instance=~"$instance",topic=~"$topic"'
G = 'instance=~"$instance",group=~"$group"'


def panel(title, exprs, unit="short", kind="timeseries", width=12, height=8, description=""):
    return {"title": title, "exprs": exprs, "unit": unit, "kind": kind, "w": width, "h": height,
            "description": description}


def stat(title, expr, unit="short", description=""):
    return panel(title, [(expr, "")], unit, "stat", 4, 4, description)


DASHBOARDS = {
    "sluice-overview": ("sluice — cluster overview", ["instance"], [
        stat("Topics", f"sum(sluice_topics{{{I}}})"),
        stat("Partitions", f"sum(sluice_partitions{{{I}}})"),
        stat("Under-replicated partitions", f"sum(sluice_under_replicated_partitions{{{I}}})",
             description="ISR smaller than the replica set. Alert: SluiceIsrShrunk."),
        stat("Under min ISR", f"sum(sluice_under_min_isr_partitions{{{I}}})",
             description="acks=all produce fails on these. Alert: SluiceUnderMinIsr."),
        stat("Offline partitions", f"max(sluice_offline_partitions{{{I}}})",
             description="Partitions without a leader. Alert: SluiceOfflinePartitions."),
        stat("Active connections", f"sum(sluice_connections_active{{{I}}})"),
        stat("Uptime", f"time() - max(process_start_time_seconds{{{I}}})", "s"),
        panel("Bytes in / out per second", [
            (f"sum(rate(sluice_topic_bytes_in_total{{{I}}}[$__rate_interval]))", "in"),
            (f"sum(rate(sluice_topic_bytes_out_total{{{I}}}[$__rate_interval]))", "out"),
        ], "Bps"),
        panel("Records in / out per second", [
            (f"sum(rate(sluice_topic_records_in_total{{{I}}}[$__rate_interval]))", "in"),
            (f"sum(rate(sluice_topic_records_out_total{{{I}}}[$__rate_interval]))", "out"),
        ], "short"),
        panel("Requests per second by API", [
            (f"sum by (api) (rate(sluice_requests_total{{{I}}}[$__rate_interval]))", "{{api}}"),
        ], "reqps"),
        panel("Errors per second by API and error", [
            (f"sum by (api, error) (rate(sluice_request_errors_total{{{I}}}[$__rate_interval]))", "{{api}} {{error}}"),
        ], "short"),
        panel("Connections opened / closed per second", [
            (f"sum(rate(sluice_connections_opened_total{{{I}}}[$__rate_interval]))", "opened"),
            (f"sum by (reason) (rate(sluice_connections_closed_total{{{I}}}[$__rate_interval]))", "closed {{reason}}"),
        ], "short"),
        panel("CPU (cores)", [(f"rate(process_cpu_seconds_total{{{I}}}[$__rate_interval])", "{{instance}}")], "short"),
        panel("Resident memory", [(f"process_resident_memory_bytes{{{I}}}", "{{instance}}")], "bytes"),
        panel("Open file descriptors / limit", [
            (f"process_open_fds{{{I}}} / process_max_fds{{{I}}}", "{{instance}}"),
        ], "percentunit"),
        panel("Build and I/O backend", [
            (f"sluice_build_info{{{I}}}", "{{instance}} {{version}}"),
            (f"sluice_log_io_backend_info{{{I}}}", "{{instance}} {{backend}} appends={{appends}}"),
        ], "short", "table"),
        panel("Startup duration (log recovery)", [(f"sluice_startup_duration_seconds{{{I}}}", "{{instance}}")], "s"),
    ]),
    "sluice-topics": ("sluice — topics & partitions", ["instance", "topic"], [
        panel("Bytes in per topic", [
            (f"sum by (topic) (rate(sluice_topic_bytes_in_total{{{T}}}[$__rate_interval]))", "{{topic}}"),
        ], "Bps"),
        panel("Bytes out per topic", [
            (f"sum by (topic) (rate(sluice_topic_bytes_out_total{{{T}}}[$__rate_interval]))", "{{topic}}"),
        ], "Bps"),
        panel("Records in per topic", [
            (f"sum by (topic) (rate(sluice_topic_records_in_total{{{T}}}[$__rate_interval]))", "{{topic}}"),
        ], "short"),
        panel("Records out per topic", [
            (f"sum by (topic) (rate(sluice_topic_records_out_total{{{T}}}[$__rate_interval]))", "{{topic}}"),
        ], "short"),
        panel("Average records per batch (broker, last minute)", [
            (f"sluice_topic_records_per_batch{{{T}}}", "{{topic}}"),
        ], "short", description="Near 1 means producers do not batch (linger.ms=0)."),
        panel("Partition throughput skew (max/mean byte rate)", [
            (f"sluice_topic_partition_skew_ratio{{{T}}}", "{{topic}}"),
        ], "short", description="1 = even; the partition count = one hot partition."),
        panel("Bytes in per partition", [
            (f"rate(sluice_partition_bytes_in_total{{{T}}}[$__rate_interval])", "{{topic}}-{{partition}}"),
        ], "Bps"),
        panel("Log size per partition", [
            (f"sluice_partition_log_size_bytes{{{T}}}", "{{topic}}-{{partition}}"),
        ], "bytes"),
        panel("Segments per partition", [
            (f"sluice_partition_log_segments{{{T}}}", "{{topic}}-{{partition}}"),
        ], "short"),
        panel("Log end offset / high watermark / log start offset", [
            (f"sluice_partition_log_end_offset{{{T}}}", "LEO {{topic}}-{{partition}}"),
            (f"sluice_partition_high_watermark{{{T}}}", "HW {{topic}}-{{partition}}"),
            (f"sluice_partition_log_start_offset{{{T}}}", "start {{topic}}-{{partition}}"),
        ], "short"),
        panel("ISR size vs replicas vs min ISR", [
            (f"sluice_partition_isr_size{{{T}}}", "ISR {{topic}}-{{partition}}"),
            (f"sluice_partition_replicas{{{T}}}", "replicas {{topic}}-{{partition}}"),
            (f"sluice_partition_min_isr{{{T}}}", "min ISR {{topic}}-{{partition}}"),
        ], "short"),
        panel("ISR shrinks / expands per second", [
            (f"sum by (instance) (rate(sluice_isr_shrinks_total{{{I}}}[$__rate_interval]))", "shrinks {{instance}}"),
            (f"sum by (instance) (rate(sluice_isr_expands_total{{{I}}}[$__rate_interval]))", "expands {{instance}}"),
        ], "short", description="Counted by the leaders. Alert: SluiceIsrFlapping."),
        panel("Follower lag (offsets behind the leader)", [
            (f"sluice_partition_replica_lag_offsets{{{T}}}", "{{topic}}-{{partition}} replica {{replica}}"),
        ], "short", description="Reported by each partition's leader, one series per follower."),
        panel("Uncommitted records (LEO - HW)", [
            (f"sluice_partition_log_end_offset{{{T}}} - sluice_partition_high_watermark{{{T}}}", "{{topic}}-{{partition}}"),
        ], "short", description="Records not yet replicated to the whole ISR; 0 on one node."),
    ]),
    "sluice-consumer-groups": ("sluice — consumer groups & lag", ["instance", "topic", "group"], [
        panel("Lag (records) per group", [
            (f"sum by (group, topic) (sluice_consumer_group_lag_records{{{G},topic=~\"$topic\"}})", "{{group}} {{topic}}"),
        ], "short"),
        panel("Lag (seconds): age of the oldest unread record", [
            (f"max by (group, topic) (sluice_consumer_group_lag_seconds{{{G},topic=~\"$topic\"}})", "{{group}} {{topic}}"),
        ], "s"),
        panel("Retention used by the oldest unread record", [
            (f"max by (group, topic) (sluice_consumer_group_retention_used_ratio{{{G},topic=~\"$topic\"}})", "{{group}} {{topic}}"),
        ], "percentunit", description="At 100% the retention sweep deletes unread records. Alert at 50%."),
        panel("Lag trend d(lag)/dt (records/s)", [
            (f"sum by (group, topic) (sluice_consumer_group_lag_trend_records_per_second{{{G},topic=~\"$topic\"}})", "{{group}} {{topic}}"),
        ], "short", description="Positive = falling behind."),
        panel("Commit age", [
            (f"max by (group, topic) (sluice_consumer_group_commit_age_seconds{{{G},topic=~\"$topic\"}})", "{{group}} {{topic}}"),
        ], "s"),
        panel("Lag per partition", [
            (f"sluice_consumer_group_lag_records{{{G},topic=~\"$topic\"}}", "{{group}} {{topic}}-{{partition}}"),
        ], "short"),
        panel("Members", [(f"sluice_consumer_group_members{{{G}}}", "{{group}}")], "short"),
        panel("Rebalances (per 10 minutes)", [
            (f"increase(sluice_consumer_group_rebalances_total{{{G}}}[10m])", "{{group}}"),
        ], "short"),
        panel("Last rebalance duration", [
            (f"sluice_consumer_group_last_rebalance_duration_seconds{{{G}}}", "{{group}}"),
        ], "s"),
        panel("Group state", [(f"sluice_consumer_group_state{{{G}}} == 1", "{{group}} {{state}}")], "short", "table"),
        panel("Groups", [
            (f"sum(sluice_consumer_groups{{{I}}})", "groups"),
            (f"sum(sluice_metrics_omitted_groups{{{I}}})", "omitted from per-group series"),
        ], "short"),
    ]),
    "sluice-requests": ("sluice — request latency", ["instance"], [
        panel("p99 request duration by API", [
            (f"histogram_quantile(0.99, sum by (api, le) (rate(sluice_request_duration_seconds_bucket{{{I}}}[$__rate_interval])))", "{{api}}"),
        ], "s", description="Fetch includes long-poll waits (max.wait.ms)."),
        panel("p50 request duration by API", [
            (f"histogram_quantile(0.5, sum by (api, le) (rate(sluice_request_duration_seconds_bucket{{{I}}}[$__rate_interval])))", "{{api}}"),
        ], "s"),
        panel("Produce p99 by phase", [
            (f"histogram_quantile(0.99, sum by (phase, le) (rate(sluice_request_phase_seconds_bucket{{{I},api=\"Produce\"}}[$__rate_interval])))", "{{phase}}"),
        ], "s"),
        panel("Fetch p99 by phase", [
            (f"histogram_quantile(0.99, sum by (phase, le) (rate(sluice_request_phase_seconds_bucket{{{I},api=\"Fetch\"}}[$__rate_interval])))", "{{phase}}"),
        ], "s"),
        panel("Mean time per phase (all APIs)", [
            (f"sum by (phase) (rate(sluice_request_phase_seconds_sum{{{I}}}[$__rate_interval])) / sum by (phase) (rate(sluice_request_phase_seconds_count{{{I}}}[$__rate_interval]))", "{{phase}}"),
        ], "s"),
        panel("Requests per second by API and version", [
            (f"sum by (api, version) (rate(sluice_requests_total{{{I}}}[$__rate_interval]))", "{{api}} v{{version}}"),
        ], "reqps"),
        panel("Produce batch size (records), p50 / p99", [
            (f"histogram_quantile(0.5, sum by (le) (rate(sluice_produce_batch_records_bucket{{{I}}}[$__rate_interval])))", "p50"),
            (f"histogram_quantile(0.99, sum by (le) (rate(sluice_produce_batch_records_bucket{{{I}}}[$__rate_interval])))", "p99"),
        ], "short"),
        panel("Produce batch size (bytes), mean", [
            (f"sum(rate(sluice_produce_batch_bytes_sum{{{I}}}[$__rate_interval])) / sum(rate(sluice_produce_batch_bytes_count{{{I}}}[$__rate_interval]))", "mean"),
        ], "bytes"),
        panel("Fetch response size, p50 / p99", [
            (f"histogram_quantile(0.5, sum by (le) (rate(sluice_fetch_response_bytes_bucket{{{I}}}[$__rate_interval])))", "p50"),
            (f"histogram_quantile(0.99, sum by (le) (rate(sluice_fetch_response_bytes_bucket{{{I}}}[$__rate_interval])))", "p99"),
        ], "bytes"),
        panel("fsync p99", [
            (f"histogram_quantile(0.99, sum by (le) (rate(sluice_log_fsync_duration_seconds_bucket{{{I}}}[$__rate_interval])))", "p99"),
        ], "s", description="Alert: SluiceSlowFsync above 100 ms."),
    ]),
}

VARIABLE_QUERIES = {
    "instance": "label_values(sluice_build_info, instance)",
    "topic": 'label_values(sluice_topic_bytes_in_total{instance=~"$instance"}, topic)',
    "group": 'label_values(sluice_consumer_group_members{instance=~"$instance"}, group)',
}


def variable(name):
    return {
        "name": name, "label": name, "type": "query", "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "query": {"query": VARIABLE_QUERIES[name], "refId": name}, "definition": VARIABLE_QUERIES[name],
        "multi": True, "includeAll": True, "allValue": ".*", "current": {"text": "All", "value": "$__all"},
        "refresh": 2, "sort": 1,
    }


def build(uid, title, variables, panels):
    out, x, y, row_h = [], 0, 0, 0
    for i, p in enumerate(panels, start=1):
        if x + p["w"] > 24:
            x, y, row_h = 0, y + row_h, 0
        targets = [{"expr": e, "legendFormat": legend or "__auto", "refId": chr(ord("A") + j),
                    "datasource": {"type": "prometheus", "uid": "${datasource}"},
                    **({"instant": True, "format": "table"} if p["kind"] == "table" else {})}
                   for j, (e, legend) in enumerate(p["exprs"])]
        out.append({
            "id": i, "type": p["kind"], "title": p["title"], "description": p["description"],
            "datasource": {"type": "prometheus", "uid": "${datasource}"},
            "gridPos": {"x": x, "y": y, "w": p["w"], "h": p["h"]},
            "fieldConfig": {"defaults": {"unit": p["unit"]}, "overrides": []},
            "options": {}, "targets": targets,
        })
        x += p["w"]
        row_h = max(row_h, p["h"])
    ds = {"name": "datasource", "label": "Prometheus", "type": "datasource", "query": "prometheus",
          "current": {}, "hide": 0}
    return {
        "uid": uid, "title": title, "tags": ["sluice", "kafka"], "timezone": "browser", "editable": True,
        "schemaVersion": 39, "version": 1, "refresh": "30s", "time": {"from": "now-1h", "to": "now"},
        "templating": {"list": [ds] + [variable(v) for v in variables]},
        "annotations": {"list": []}, "links": [], "panels": out,
    }


if __name__ == "__main__":
    OUT.mkdir(exist_ok=True)
    for uid, (title, variables, panels) in DASHBOARDS.items():
        (OUT / f"{uid}.json").write_text(json.dumps(build(uid, title, variables, panels), indent=2) + "\n")
        print("wrote", OUT / f"{uid}.json")
