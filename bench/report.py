#!/usr/bin/env python3
"""bench/results.json -> bench/RESULTS.md + bench/results.png (medians over rounds)."""
import json, os, statistics

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.abspath(os.environ.get("BENCH_OUT_DIR", HERE))
R = json.load(open(os.path.join(OUT, "results.json")))
# Broker CPU per GiB served by the catch-up reads: bench.py records it; derived here for older
# results that lack it.
for _r in R["rounds"]:
    for _k in ("consume/rdk/p16", "consume/fetch/p16"):
        _c = _r.get(_k)
        if isinstance(_c, dict) and "broker_cpu_s_per_gib" not in _c and _c.get("bytes") and _c.get("broker_cpu_s") is not None:
            _c["broker_cpu_s_per_gib"] = _c["broker_cpu_s"] / (_c["bytes"] / 2**30)
CFG, M, C = R["config"], R["machine"], R.get("ceilings", {})
# The page-cache floor: dd's CPU per GiB once its files have grown the page cache as a session's
# logs do (the last file of each series, start and end averaged). Older results have one dd
# figure at each end and no series, hence no floor.
FLOOR_KEYS = ("page_cache_write_cpu_s_per_gib_series_start", "page_cache_write_cpu_s_per_gib_series_end")
_last = [C[k][-1] for k in FLOOR_KEYS if C.get(k)]
FLOOR = sum(_last) / len(_last) if _last else None
CPU_PRODUCED = (("rdkbench acks=all, 16 partitions", "produce/rdk/acks=all/p16"),
                ("rdkbench acks=1, 16 partitions", "produce/rdk/acks=1/p16"),
                ("perf-test acks=all, 16 partitions", "produce/perftest/acks=all/p16"))


def get(res, path):
    cur = res
    for k in path:
        if not isinstance(cur, dict) or k not in cur:
            return None
        cur = cur[k]
    return cur if isinstance(cur, (int, float)) else None


def values(broker, path):
    """The figure at `path` in each of the broker's rounds; for latency, in each run of each round
    (a session makes several), so that the median is taken over all runs and one round that host
    steal hit in two of its runs does not move it (bench/METHOD.md, "Latency")."""
    out = []
    for r in R["rounds"]:
        if r["broker"] != broker:
            continue
        sub = r.get(path[0])
        runs = sub.get("runs") if len(path) == 2 and isinstance(sub, dict) else None
        if runs and any(path[1] in x for x in runs):
            out += [x[path[1]] for x in runs if isinstance(x.get(path[1]), (int, float))]
        elif (v := get(r, path)) is not None:
            out.append(v)
    return out


def errors(broker, key):
    out = []
    for r in R["rounds"]:
        if r["broker"] != broker:
            continue
        e = r.get(key, {}).get("error") if isinstance(r.get(key), dict) else r.get(key)
        if e:
            out.append(str(e))
    return out


def med(broker, path):
    v = values(broker, path)
    return statistics.median(v) if v else None


def fmt(x, nd=1):
    if x is None:
        return "—"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    return f"{x:.{nd}f}" if abs(x) >= 1 or x == 0 else f"{x:.3f}"


CATCH_UP = "Consume (catch-up from offset 0, right after the produce runs)"
FROM_DISK = "Consume from the disk (catch-up from offset 0 after dropping the page cache)"
LOADED = ("End-to-end latency while another producer writes 16 partitions at full speed "
          "(rdkbench acks=1, own connection; one run per session, after a warm-up without load)")
ROWS = []  # (section, label, path, unit, better[, Kafka's path where it differs])
n_mib = CFG["records"] * CFG["record_size"] / 2**20
for toolname, tl in (("perftest", "kafka-producer-perf-test"), ("rdk", "rdkbench (librdkafka C)")):
    for acks in ("1", "all"):
        for p in (1, 16):
            k = f"produce/{toolname}/acks={acks}/p{p}"
            lab = f"produce {tl}, acks={acks}{' idempotent' if acks == 'all' else ''}, {p} partition{'s' if p > 1 else ''}"
            ROWS.append(("Produce throughput (1 KiB records)", lab, [k, "mbps"], "MiB/s", "higher"))
ROWS.append(("Produce throughput (1 KiB records)", "produce confluent-kafka-python, acks=1, 16 partitions (load-generator check)",
             ["produce/py/acks=1/p16", "mbps"], "MiB/s", "higher"))
ROWS += [
    ("Produce with fsync before the acknowledgement", "rdkbench acks=all idempotent, 16 partitions "
     "(sluice topic flush.acks.all=true, Kafka topic flush.messages=1)", ["produce/durable/acks=all/p16", "mbps"], "MiB/s", "higher"),
    ("Produce with fsync before the acknowledgement", "broker CPU per GiB produced",
     ["produce/durable/acks=all/p16", "broker_cpu_s_per_gib"], "CPU s/GiB", "lower"),
    ("Produce with fsync before the acknowledgement", "the same with topic flush.messages=1 on both brokers",
     ["produce/durable-fm/acks=all/p16", "mbps"], "MiB/s", "higher"),
    ("Produce with fsync before the acknowledgement", "broker CPU per GiB produced (flush.messages=1 on both)",
     ["produce/durable-fm/acks=all/p16", "broker_cpu_s_per_gib"], "CPU s/GiB", "lower"),
    (CATCH_UP, "rdkbench group-less fetch of all 16 partitions", ["consume/rdk/p16", "mbps"], "MiB/s", "higher"),
    (CATCH_UP, "kafka-consumer-perf-test (consumer group)", ["consume/perftest/p16", "mbps"], "MiB/s", "higher"),
    (CATCH_UP, "kafka-consumer-perf-test: its group join (\"rebalance\" time, mostly the Java client's own start)",
     ["consume/perftest/p16", "rebalance_ms"], "ms", "lower"),
    (CATCH_UP, "kafka-consumer-perf-test: fetch phase only (after the join)", ["consume/perftest/p16", "fetch_mbps"], "MiB/s", "higher"),
    (CATCH_UP, "raw fetch loop (no client library, bytes discarded), 16 partitions", ["consume/fetch/p16", "mbps"], "MiB/s", "higher"),
    (CATCH_UP, "broker CPU per GiB read (rdkbench run)", ["consume/rdk/p16", "broker_cpu_s_per_gib"], "CPU s/GiB", "lower"),
    (CATCH_UP, "broker CPU per GiB read (raw fetch loop run)", ["consume/fetch/p16", "broker_cpu_s_per_gib"], "CPU s/GiB", "lower"),
    (FROM_DISK, "rdkbench group-less fetch of all 16 partitions",
     ["consume-cold/rdk/p16", "mbps"], "MiB/s", "higher"),
    (FROM_DISK, "raw fetch loop, 16 partitions",
     ["consume-cold/fetch/p16", "mbps"], "MiB/s", "higher"),
    (FROM_DISK, "broker CPU per GiB read (rdkbench run)",
     ["consume-cold/rdk/p16", "broker_cpu_s_per_gib"], "CPU s/GiB", "lower"),
    ("End-to-end latency (rdkbench, acks=all, linger 0)", f"p50 at {CFG['lat_rate']} records/s", ["latency", "p50_ms"], "ms", "lower"),
    ("End-to-end latency (rdkbench, acks=all, linger 0)", "p99", ["latency", "p99_ms"], "ms", "lower"),
    ("End-to-end latency (rdkbench, acks=all, linger 0)", "p99.9", ["latency", "p999_ms"], "ms", "lower"),
    ("End-to-end latency (rdkbench, acks=all, linger 0)", "max", ["latency", "max_ms"], "ms", "lower"),
    ("End-to-end latency (rdkbench, acks=all, linger 0)", "broker CPU meanwhile (warm-up included)", ["latency", "broker_cpu_s_per_s"],
     "CPU s/s", "lower"),
    (LOADED, f"p50 at {CFG['lat_rate']} records/s", ["loaded/latency", "p50_ms"], "ms", "lower"),
    (LOADED, "p99", ["loaded/latency", "p99_ms"], "ms", "lower"),
    (LOADED, "p99.9", ["loaded/latency", "p999_ms"], "ms", "lower"),
    (LOADED, "the load producer's throughput meanwhile", ["loaded/load_mbps"], "MiB/s", "higher"),
] + [("Broker CPU per GiB produced", lab, [k, "broker_cpu_s_per_gib"], "CPU s/GiB", "lower") for lab, k in CPU_PRODUCED] + [
    ("Resources", "RSS idle after start", ["rss_idle_mib"], "MiB", "lower"),
    ("Resources", "RSS peak under produce load (sampled every 50 ms)", ["rss_load_peak_mib"], "MiB", "lower"),
    ("Resources", "RSS high-water mark of the main session (VmHWM)", ["rss_hwm_mib"], "MiB", "lower"),
    ("Resources", "start to serving (exec -> first ApiVersions answer), empty log dir", ["start_s"], "s", "lower"),
    ("Resources", "start to serving, second fresh start (scale session)", ["scale_start_s"], "s", "lower"),
    ("Scale", f"create {CFG['scale_partitions']} partitions ({CFG['scale_per_topic']} per topic) until all have leaders", ["scale_create_s"], "s", "lower"),
    ("Scale", "then one record to every partition (all acked)", ["scale_touch_s"], "s", "lower"),
    ("Scale", "create and serve: both of the above", ["scale_create_serve_s"], "s", "lower"),
    ("Scale", "RSS growth per idle partition", ["scale_kib_per_idle_partition"], "KiB", "lower"),
    ("Scale", "RSS growth per partition after each got a record", ["scale_kib_per_served_partition"], "KiB", "lower"),
    ("Scale", "RSS with all partitions served", ["scale_rss_served_mib"], "MiB", "lower"),
    ("Recovery", "log size at kill -9", ["recovery_log_gib"], "GiB", "info"),
    ("Recovery", "restart after kill -9 to serving", ["recovery_s"], "s", "lower"),
]

# sluice with log.io.direct=false (its own session) against Kafka's figures for the same workloads.
BUFFERED = "sluice with log.io.direct=false (every append through the page cache, as Kafka writes) against Kafka's runs above"
for acks in ("1", "all"):
    k = f"produce/rdk/acks={acks}/p16"
    ROWS += [(BUFFERED, f"produce rdkbench, acks={acks}{' idempotent' if acks == 'all' else ''}, 16 partitions",
              ["buffered/" + k, "mbps"], "MiB/s", "higher", [k, "mbps"]),
             (BUFFERED, f"broker CPU per GiB produced, acks={acks}", ["buffered/" + k, "broker_cpu_s_per_gib"], "CPU s/GiB", "lower",
              [k, "broker_cpu_s_per_gib"])]
ROWS += [(BUFFERED, "catch-up read, rdkbench, 16 partitions", ["buffered/consume/rdk/p16", "mbps"], "MiB/s", "higher",
          ["consume/rdk/p16", "mbps"]),
         (BUFFERED, "broker CPU per GiB read", ["buffered/consume/rdk/p16", "broker_cpu_s_per_gib"], "CPU s/GiB", "lower",
          ["consume/rdk/p16", "broker_cpu_s_per_gib"])]
ROWS += [(BUFFERED, f"end-to-end latency {q}", ["buffered/latency", f"{q}_ms"], "ms", "lower", ["latency", f"{q}_ms"])
         for q in ("p50", "p99", "p999")]

# sluice with log.io.direct.reads=false (its own session) against Kafka's figures for the same reads.
PCREADS = ("sluice with log.io.direct.reads=false (direct appends, fetches through the page cache) "
           "against Kafka's runs above")
ROWS += [(PCREADS, "produce rdkbench, acks=1, 16 partitions (the topic read below)", ["pcreads/produce/rdk/acks=1/p16", "mbps"],
          "MiB/s", "higher", ["produce/rdk/acks=1/p16", "mbps"])]
for prefix, when in (("consume", "right after the produce run"), ("consume-cold", "after dropping the page cache")):
    for key, what in (("rdk/p16", "rdkbench"), ("fetch/p16", "raw fetch loop")):
        ROWS += [(PCREADS, f"catch-up read {when}, {what}, 16 partitions", [f"pcreads/{prefix}/{key}", "mbps"], "MiB/s",
                  "higher", [f"{prefix}/{key}", "mbps"]),
                 (PCREADS, f"broker CPU per GiB read ({what}, {when})", [f"pcreads/{prefix}/{key}", "broker_cpu_s_per_gib"],
                  "CPU s/GiB", "lower", [f"{prefix}/{key}", "broker_cpu_s_per_gib"])]

# sluice with cpu.idle.poll.us=1000 (its own session) against Kafka's latency run.
IDLEPOLL = ("sluice with cpu.idle.poll.us=1000 (its CPU kept from halting for 1 ms after each request: "
            "a CPU's worth of time for a shorter latency) against Kafka's latency run above")
ROWS += [(IDLEPOLL, f"end-to-end latency {q}", ["idlepoll/latency", f"{q}_ms"], "ms", "lower", ["latency", f"{q}_ms"])
         for q in ("p50", "p99", "p999")]
ROWS += [(IDLEPOLL, "broker CPU meanwhile (warm-up included)", ["idlepoll/latency", "broker_cpu_s_per_s"], "CPU s/s", "lower",
          ["latency", "broker_cpu_s_per_s"])]


def quiet():
    busy = max(M.get("busy_before", 1), M.get("busy_after", 1))
    la = max(float(M.get("loadavg_start", 99)), float(M.get("loadavg_end", 99)))
    return busy < 0.1 and la < 0.5, busy, la


def lat_setup():
    runs = CFG.get("lat_runs", 1)
    if runs == 1:
        return f"{CFG['lat_secs']:.0f} s"
    return (f"{runs} runs of {CFG['lat_secs']:.0f} s per session after {CFG.get('lat_warmup', 1):.0f} s of warm-up "
            "(latency figures are medians over all runs, individual runs in brackets)")


def latency_runs():
    """Each latency run's p99 with the host steal time during it (results that record runs only)."""
    rows = []
    for r in R["rounds"]:
        for key in ("latency", "loaded/latency", "buffered/latency", "idlepoll/latency"):
            lat = r.get(key)
            if not isinstance(lat, dict) or not lat.get("runs"):
                continue
            who = r["broker"] + {"buffered/latency": " (log.io.direct=false)", "loaded/latency": " (under load)",
                                 "idlepoll/latency": " (cpu.idle.poll.us=1000)"}.get(key, "")
            cells = ", ".join("fails" if "error" in x else f"{x.get('p99_ms', 0):.2f} ms ({x.get('host_steal_s', 0):.2f} s)"
                              for x in lat["runs"])
            rows.append(f"| {who} | {r['round']} | {cells} |")
    if not rows:
        return []
    return ["\n### Latency runs\n",
            "p99 of every latency run, with the host steal time during it in brackets: a run the hypervisor took "
            "the CPUs from is slower for a reason outside either broker.\n",
            "| broker | round | p99 (host steal) per run |\n| --- | --- | --- |", *rows]


def main():
    q, busy, la = quiet()
    L = []
    L.append("# sluice vs Apache Kafka — benchmark results\n")
    L.append("Generated by `make bench` (`bench/run.sh`); raw per-round figures in `" + os.path.relpath(os.path.join(OUT, "results.json"), os.path.dirname(HERE)) + "`. "
             "Rerun on your machine and compare ratios, not absolute numbers.\n")
    if not q:
        L.append(f"> **Noisy run.** The machine was not quiet: CPU busy {busy*100:.0f}% with no benchmark running "
                 f"(sampled before/after), load average up to {la}. Other work shared the "
                 f"{M.get('cpus')} CPUs, so absolute figures are low and spread is high; ratios from alternating "
                 "A B A B rounds are the more meaningful part. Rerun on an idle machine for publishable numbers.\n")
    # A run without the produce or latency workloads (e.g. scale only) has nothing to chart.
    has_chart = any(isinstance(r.get(k), dict) for r in R["rounds"] for k in r if k.startswith("produce/") or k == "latency")
    if has_chart:
        L.append("![throughput and latency](results.png)\n")
    L.append("## Setup\n")
    L.append(f"- size: **{CFG['size']}** — {CFG['records']:,} records × {CFG['record_size']} B per produce run "
             f"({n_mib:,.0f} MiB), latency {lat_setup()} at {CFG['lat_rate']} records/s, "
             f"{CFG['scale_partitions']:,} partitions; {CFG['rounds']} rounds per broker, order "
             f"{' '.join(CFG['order'] * CFG['rounds'])}; figures are medians over rounds (individual rounds in brackets)")
    L.append(f"- machine: {M['cpu_model']}, {M['cpus']} CPUs, {M['mem_gib']} GiB RAM, kernel {M['kernel']}, Debian {M['os']}")
    L.append(f"- brokers pinned with `taskset -c {CFG['broker_cpus']}`, load generators with `taskset -c {CFG['client_cpus']}`; "
             "same data disk (a fresh directory per session), both with default flush settings (no fsync per write; Kafka writes "
             "through the page cache, sluice appends of 64 KiB and more with O_DIRECT, its default), "
             "single node, replication factor 1, plaintext on 127.0.0.1")
    L.append(f"- sluice: `{M['sluice_version']}`, commit {M['sluice_commit']}; "
             f"Apache Kafka: {M['kafka_version']} (KRaft, broker+controller in one JVM, {M['java']}, "
             f"`{CFG['kafka_heap']}` G1 as kafka-server-start.sh); librdkafka {M['librdkafka']} (Debian)")
    if M.get("host_steal_s") is not None:
        L.append(f"- host steal (CPU time the hypervisor gave to others while this guest wanted it) over the whole run: "
                 f"{M['host_steal_s']:.1f} s")
    L.append(f"- run date {M['date']}; load average {M.get('loadavg_start')} at start, {M.get('loadavg_end')} at end; "
             f"benchmark wall time {R.get('wall_s', 0)/60:.1f} min")
    L.append("")
    L.append("## Machine ceilings (measured in the same run)\n")
    L.append("| ceiling | value |\n| --- | --- |")
    L.append(f"| sequential write, dd bs=1M oflag=direct ({CFG['dd_mib']} MiB of zeros) | {fmt(C.get('dd_direct_mibps'))} MiB/s |")
    L.append(f"| sequential write, dd buffered + fdatasync | {fmt(C.get('dd_buffered_fdatasync_mibps'))} MiB/s |")
    if C.get("dd_read_direct_mibps") is not None:
        L.append(f"| sequential read of that file, dd bs=1M iflag=direct | {fmt(C.get('dd_read_direct_mibps'))} MiB/s |")
    if C.get("dd_read_buffered_cold_mibps") is not None:
        L.append(f"| sequential read of that file through the page cache after dropping it, dd bs=1M | "
                 f"{fmt(C.get('dd_read_buffered_cold_mibps'))} MiB/s |")
    if FLOOR is not None:
        series = ["; ".join(f"{fmt(v, 2)}" for v in C.get(k) or []) or "—" for k in FLOOR_KEYS]
        L.append(f"| CPU to write into the page cache: dd {CFG['dd_mib']} MiB buffered without sync on the broker CPUs, "
                 f"{CFG.get('dd_files', '?')} files kept until the last is written, one figure per file, at start / end of the run "
                 f"(the floor of CPU per GiB produced for a broker writing through the page cache) | "
                 f"{series[0]} / {series[1]} CPU s/GiB |")
    else:
        L.append(f"| CPU to write into the page cache, dd {CFG['dd_mib']} MiB buffered without sync on the broker CPUs, at start / end of the run "
                 f"(the floor of CPU per GiB produced for a broker writing through the page cache) | {fmt(C.get('page_cache_write_cpu_s_per_gib_start'), 2)} / "
                 f"{fmt(C.get('page_cache_write_cpu_s_per_gib_end'), 2)} CPU s/GiB |")
    if C.get("dd_direct_cpu_s_per_gib") is not None:
        L.append(f"| CPU to write with O_DIRECT (the page cache bypassed): the dd oflag=direct run above, on the broker CPUs "
                 f"(what a broker writing its log with direct I/O, as sluice does by default, pays instead of the floor above) | "
                 f"{fmt(C.get('dd_direct_cpu_s_per_gib'), 2)} CPU s/GiB |")
    L.append(f"| fdatasync after 4 KiB append, p50 / p99 | {fmt(C.get('fdatasync_p50_ms'), 2)} / {fmt(C.get('fdatasync_p99_ms'), 2)} ms |")
    L.append(f"| loopback TCP ({C.get('tcp_tool', 'n/a')}, server on broker CPUs, client on client CPUs) | {fmt(C.get('tcp_loopback_mibps'))} MiB/s |")
    L.append("")
    L.append("## Results\n")
    L.append("Ratio = sluice / Kafka; the last column says whether that is good (higher-is-better figures want > 1, "
             "lower-is-better figures want < 1).\n")
    section = None
    for sec, label, path, unit, better, *kpath in ROWS:
        kpath = kpath[0] if kpath else path
        if sec != section:
            L.append(f"\n### {sec}\n")
            L.append("| figure | unit | sluice | Kafka | sluice/Kafka | |\n| --- | --- | --- | --- | --- | --- |")
            section = sec
        s, k = med("sluice", path), med("kafka", kpath)
        sv, kv = values("sluice", path), values("kafka", kpath)
        ratio = s / k if (s is not None and k) else None
        verdict = ""
        if ratio is not None and better != "info":
            good = ratio > 1 if better == "higher" else ratio < 1
            verdict = "better" if good else "worse"
        def cell(m, vs, broker):
            if m is None:
                errs = errors(broker, (path if broker == "sluice" else kpath)[0])
                return f"fails: `{errs[0][:160]}`" if errs else "—"
            return f"**{fmt(m)}**" + (f" ({', '.join(fmt(v) for v in vs)})" if len(vs) > 1 else "")
        L.append(f"| {label} | {unit} | {cell(s, sv, 'sluice')} | {cell(k, kv, 'kafka')} | "
                 f"{fmt(ratio, 2) if ratio is not None else '—'} | {verdict} |")
    # load generator saturation
    L.append("\n### Load generator saturation\n")
    L.append("Client CPU seconds / wall seconds of each produce run and of the catch-up read (the client is pinned to "
             f"CPU set `{CFG['client_cpus']}`; ≈1.0 on one CPU means the load generator, not the broker, is the limit).\n")
    L.append("| client run | vs sluice | vs Kafka |\n| --- | --- | --- |")
    for toolname in ("perftest", "rdk", "py"):
        for acks in ("1", "all"):
            for p in (1, 16):
                k = f"produce/{toolname}/acks={acks}/p{p}"
                vals = {}
                for b in ("sluice", "kafka"):
                    xs = [r[k]["client_cpu_s"] / r[k]["client_wall_s"] for r in R["rounds"]
                          if r["broker"] == b and isinstance(r.get(k), dict) and r[k].get("client_wall_s")]
                    vals[b] = statistics.median(xs) if xs else None
                if vals["sluice"] is None and vals["kafka"] is None:
                    continue
                L.append(f"| {toolname} acks={acks} p{p} | {fmt(vals['sluice'], 2)} | {fmt(vals['kafka'], 2)} |")
    for k, lab in (("consume/rdk/p16", "rdk consume p16"), ("consume/fetch/p16", "raw fetch loop p16"),
                   ("consume-cold/rdk/p16", "rdk consume p16, page cache dropped"),
                   ("consume-cold/fetch/p16", "raw fetch loop p16, page cache dropped"),
                   ("consume/perftest/p16", "perftest consume p16 (whole JVM run, start-up and group join included)")):
        vals = {}
        for b in ("sluice", "kafka"):
            # Older results have no client wall time for the read: rdkbench's own elapsed time stands in.
            xs = [r[k]["client_cpu_s"] / (r[k].get("client_wall_s") or r[k]["secs"])
                  for r in R["rounds"] if r["broker"] == b and isinstance(r.get(k), dict)
                  and r[k].get("client_cpu_s") is not None and (r[k].get("client_wall_s") or r[k].get("secs"))]
            vals[b] = statistics.median(xs) if xs else None
        if vals["sluice"] is not None or vals["kafka"] is not None:
            L.append(f"| {lab} | {fmt(vals['sluice'], 2)} | {fmt(vals['kafka'], 2)} |")
    L.extend(latency_runs())
    opened = [(r["round"], r["recovery_opened_logs"]) for r in R["rounds"]
              if r["broker"] == "sluice" and isinstance(r.get("recovery_opened_logs"), dict)]
    if opened:
        L.append("\n### sluice's restarts after kill -9\n")
        L.append("sluice's own account of each restart: partitions opened, how long that took, and the slowest one.\n")
        L.append("| round | partitions | opened in | slowest partition | its time |\n| --- | --- | --- | --- | --- |")
        for rnd, o in opened:
            L.append(f"| {rnd} | {o.get('partitions', '?')} | {o.get('elapsed_ms', '?')} ms | "
                     f"`{os.path.basename(o.get('slowest', '?'))}` | {o.get('slowest_ms', '?')} ms |")
    # errors and checks
    notes = []
    for r in R["rounds"]:
        for k, v in r.items():
            if isinstance(v, dict) and v.get("error"):
                notes.append(f"- {r['broker']} round {r['round']}, {k}: `{v['error'][:300]}`")
            elif k.endswith("_error"):
                notes.append(f"- {r['broker']} round {r['round']}, {k}: `{str(v)[:300]}`")
        if r.get("recovery_check") and r["recovery_check"] != "ok":
            notes.append(f"- {r['broker']} round {r['round']}: recovery check: {r['recovery_check']}")
    L.append("\n## Failures and checks\n")
    L.extend(notes or ["- none: every workload ran against both brokers; recovery kept every acknowledged record of the checked topic"])
    L.append("\n## Method notes\n")
    L.append(open(os.path.join(HERE, "METHOD.md")).read().strip() if os.path.exists(os.path.join(HERE, "METHOD.md")) else "")
    open(os.path.join(OUT, "RESULTS.md"), "w").write("\n".join(L) + "\n")
    if has_chart:
        chart()


def chart():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(14, 5.5), gridspec_kw={"width_ratios": [2.2, 1]})
    # A third bar, sluice with log.io.direct=false, where the buffered session measured the workload.
    labels, S, K, D = [], [], [], []

    def bar(label, key, buffered_key=None):
        labels.append(label)
        S.append(med("sluice", [key, "mbps"]) or 0)
        K.append(med("kafka", [key, "mbps"]) or 0)
        D.append((med("sluice", [buffered_key, "mbps"]) or 0) if buffered_key else 0)
    for toolname, short in (("perftest", "perf-test"), ("rdk", "rdkbench")):
        for acks in ("1", "all"):
            for p in (1, 16):
                key = f"produce/{toolname}/acks={acks}/p{p}"
                bar(f"{short}\nacks={acks}\n{p}p", key, "buffered/" + key if toolname == "rdk" and p == 16 else None)
    bar("rdkbench\ncatch-up\n16p", "consume/rdk/p16", "buffered/consume/rdk/p16")
    if med("sluice", ["consume/fetch/p16", "mbps"]) is not None or med("kafka", ["consume/fetch/p16", "mbps"]) is not None:
        bar("raw fetch\ncatch-up\n16p", "consume/fetch/p16")
    for key, label in (("consume-cold/rdk/p16", "rdkbench\nfrom disk\n16p"), ("consume-cold/fetch/p16", "raw fetch\nfrom disk\n16p")):
        if med("sluice", [key, "mbps"]) is not None or med("kafka", [key, "mbps"]) is not None:
            bar(label, key)
    x = range(len(labels))
    third = any(D)
    w = 0.27 if third else 0.38
    off = w if third else w / 2
    a1.bar([i - off for i in x], S, w, label="sluice", color="#1f77b4")
    if third:
        a1.bar(list(x), D, w, label="sluice, log.io.direct=false", color="#2ca02c")
    a1.bar([i + off for i in x], K, w, label="Apache Kafka", color="#d62728")
    a1.set_xticks(list(x)); a1.set_xticklabels(labels, fontsize=8)
    a1.set_ylabel("MiB/s (1 KiB records)"); a1.set_title("Throughput (median, higher is better)")
    if C.get("tcp_loopback_mibps"):
        a1.axhline(C["tcp_loopback_mibps"] / 2, ls=":", color="gray", lw=1, label="½ loopback TCP ceiling")
    a1.legend(fontsize=8)
    pl = ["p50", "p99", "p99.9"]
    keys = ["p50_ms", "p99_ms", "p999_ms"]
    S2 = [med("sluice", ["latency", k]) or 0 for k in keys]
    K2 = [med("kafka", ["latency", k]) or 0 for k in keys]
    D2 = [med("sluice", ["buffered/latency", k]) or 0 for k in keys]
    P2 = [med("sluice", ["idlepoll/latency", k]) or 0 for k in keys]
    series = [(S2, "sluice", "#1f77b4"), (D2, "sluice, log.io.direct=false", "#2ca02c"),
              (P2, "sluice, cpu.idle.poll.us=1000", "#9467bd"), (K2, "Apache Kafka", "#d62728")]
    series = [x for x in series if any(x[0])]
    w2 = 0.8 / len(series)
    for j, (vals, label, color) in enumerate(series):
        a2.bar([i + (j - (len(series) - 1) / 2) * w2 for i in range(3)], vals, w2, label=label, color=color)
    a2.set_xticks(range(3)); a2.set_xticklabels(pl)
    a2.set_ylabel("ms"); a2.set_yscale("log")
    a2.set_title(f"End-to-end latency at {CFG['lat_rate']} rec/s (lower is better)")
    a2.legend(fontsize=8)
    q = quiet()[0]
    fig.suptitle(f"sluice vs Apache Kafka — {CFG['size']} run, {M['date']}, {M['cpus']} CPUs"
                 + ("" if q else " — NOISY machine (shared CPUs)"), fontsize=11)
    fig.tight_layout()
    fig.savefig(os.path.join(OUT, "results.png"), dpi=110)


if __name__ == "__main__":
    main()
