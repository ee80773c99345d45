package sluice.compat;

import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.time.Duration;
import java.util.*;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.config.ConfigDef;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.connect.cli.ConnectDistributed;
import org.apache.kafka.connect.connector.Task;
import org.apache.kafka.connect.data.Schema;
import org.apache.kafka.connect.runtime.Connect;
import org.apache.kafka.connect.sink.SinkConnector;
import org.apache.kafka.connect.sink.SinkRecord;
import org.apache.kafka.connect.sink.SinkTask;
import org.apache.kafka.connect.source.SourceConnector;
import org.apache.kafka.connect.source.SourceRecord;
import org.apache.kafka.connect.source.SourceTask;

import static sluice.compat.Main.*;

/**
 * Kafka Connect in distributed mode (connect-runtime, in this process) against the broker: the
 * worker joins its group with the "connect" protocol and keeps its configs, source offsets and
 * statuses in compacted topics it creates. A source connector of this file counts 0..N-1 into a
 * topic, recording its position as the source offset; a sink connector collects what a sink
 * task is given. A second worker, started after the first stops, must resume the source from
 * the offset the first one committed.
 */
public final class ConnectScenario {
    private ConnectScenario() {}

    static final Map<String, Object> PARTITION = Map.of("source", "counter");
    /** Values the sink tasks were given, in the order they were given them. */
    static final ConcurrentLinkedQueue<String> COLLECTED = new ConcurrentLinkedQueue<>();
    /** Positions the source tasks started from. */
    static final ConcurrentLinkedQueue<Long> STARTED_AT = new ConcurrentLinkedQueue<>();

    public static class CountingSource extends SourceConnector {
        private Map<String, String> props;
        @Override public String version() { return "1"; }
        @Override public void start(Map<String, String> p) { props = p; }
        @Override public Class<? extends Task> taskClass() { return CountingTask.class; }
        @Override public List<Map<String, String>> taskConfigs(int max) { return List.of(props); }
        @Override public void stop() {}
        @Override public ConfigDef config() { return new ConfigDef(); }
    }

    public static class CountingTask extends SourceTask {
        private String topic;
        private long next, until;
        @Override public String version() { return "1"; }
        @Override public void start(Map<String, String> p) {
            topic = p.get("topic");
            until = Long.parseLong(p.get("until"));
            Map<String, Object> off = context.offsetStorageReader().offset(PARTITION);
            next = off == null ? 0 : ((Number) off.get("position")).longValue() + 1;
            STARTED_AT.add(next);
        }
        @Override public List<SourceRecord> poll() throws InterruptedException {
            if (next >= until) { Thread.sleep(50); return null; }
            List<SourceRecord> out = new ArrayList<>();
            for (int i = 0; i < 10 && next < until; i++, next++)
                out.add(new SourceRecord(PARTITION, Map.of("position", next), topic, (int) (next % 2),
                        Schema.STRING_SCHEMA, "k" + next, Schema.STRING_SCHEMA, "v" + next));
            return out;
        }
        @Override public void stop() {}
    }

    public static class CollectingSink extends SinkConnector {
        private Map<String, String> props;
        @Override public String version() { return "1"; }
        @Override public void start(Map<String, String> p) { props = p; }
        @Override public Class<? extends Task> taskClass() { return CollectingTask.class; }
        @Override public List<Map<String, String>> taskConfigs(int max) { return List.of(props); }
        @Override public void stop() {}
        @Override public ConfigDef config() { return new ConfigDef(); }
    }

    public static class CollectingTask extends SinkTask {
        @Override public String version() { return "1"; }
        @Override public void start(Map<String, String> p) {}
        @Override public void put(Collection<SinkRecord> records) { for (SinkRecord r : records) COLLECTED.add((String) r.value()); }
        @Override public void stop() {}
    }

    static Connect<?> startWorker(String group, String state) throws Exception {
        Map<String, String> w = new HashMap<>();
        w.put("bootstrap.servers", bootstrap);
        w.put("group.id", group);
        w.put("config.storage.topic", group + "-configs");
        w.put("offset.storage.topic", group + "-offsets");
        w.put("status.storage.topic", group + "-status");
        for (String k : List.of("config", "offset", "status")) w.put(k + ".storage.replication.factor", "1");
        w.put("key.converter", "org.apache.kafka.connect.storage.StringConverter");
        w.put("value.converter", "org.apache.kafka.connect.storage.StringConverter");
        w.put("listeners", "http://127.0.0.1:0");
        w.put("offset.flush.interval.ms", "200");
        w.put("plugin.discovery", "only_scan");
        w.put("plugin.path", state);
        // Connect's consumers do not leave the group on close either; keep the next join short
        w.put("session.timeout.ms", "6000");
        w.put("scheduled.rebalance.max.delay.ms", "0");
        return new ConnectDistributed().startConnect(w);
    }

    static String http(HttpClient c, String method, URI uri, String body) throws Exception {
        HttpRequest.Builder b = HttpRequest.newBuilder(uri).timeout(Duration.ofSeconds(30)).header("Content-Type", "application/json");
        b = body == null ? b.method(method, HttpRequest.BodyPublishers.noBody()) : b.method(method, HttpRequest.BodyPublishers.ofString(body));
        HttpResponse<String> r = c.send(b.build(), HttpResponse.BodyHandlers.ofString());
        check(r.statusCode() / 100 == 2, method + " " + uri + " -> " + r.statusCode() + " " + r.body());
        return r.body();
    }

    static String json(Map<String, String> m) {
        return m.entrySet().stream().map(e -> "\"" + e.getKey() + "\":\"" + e.getValue() + "\"").collect(Collectors.joining(",", "{", "}"));
    }

    /** PUTs a connector config, retrying while the worker has not yet joined its group. */
    static void putConnector(HttpClient c, URI base, String name, Map<String, String> config) throws Exception {
        long deadline = System.currentTimeMillis() + 60000;
        while (true) {
            try {
                http(c, "PUT", base.resolve("/connectors/" + name + "/config"), json(config));
                return;
            } catch (AssertionError e) {
                if (System.currentTimeMillis() > deadline) throw e;
                Thread.sleep(500);
            }
        }
    }

    static void awaitCollected(int n, long timeoutMs) throws InterruptedException {
        long deadline = System.currentTimeMillis() + timeoutMs;
        while (new HashSet<>(COLLECTED).size() < n) {
            check(System.currentTimeMillis() < deadline, "the sink was given " + new HashSet<>(COLLECTED).size() + " distinct records, expected " + n);
            Thread.sleep(100);
        }
    }

    static String distributed() throws Exception {
        String t = topic("connect"), group = "compat-java-connect-" + RUN;
        String plugins = Files.createTempDirectory("sluice-compat-connect").toString();
        try (Admin admin = admin()) {
            createTopic(admin, t, 2, null);
        }
        HttpClient http = HttpClient.newHttpClient();
        Map<String, String> source = Map.of("connector.class", CountingSource.class.getName(), "tasks.max", "1", "topic", t, "until", "100");
        Map<String, String> sink = Map.of("connector.class", CollectingSink.class.getName(), "tasks.max", "1", "topics", t);

        Connect<?> first = startWorker(group, plugins);
        try {
            URI base = first.rest().serverUrl();
            putConnector(http, base, "count", source);
            putConnector(http, base, "collect", sink);
            awaitCollected(100, 60000);
            String status = http(http, "GET", base.resolve("/connectors/count/status"), null);
            check(status.contains("\"RUNNING\""), "source status " + status);
        } finally {
            first.stop();
            first.awaitStop();
        }
        // the worker created its storage topics compacted, as Connect requires
        try (Admin admin = admin()) {
            for (String s : List.of("-configs", "-offsets", "-status")) {
                ConfigResource cr = new ConfigResource(ConfigResource.Type.TOPIC, group + s);
                String policy = admin.describeConfigs(List.of(cr)).all().get(20, TimeUnit.SECONDS).get(cr).get("cleanup.policy").value();
                check(policy.equals("compact"), group + s + " cleanup.policy " + policy);
            }
        }

        // a second worker: the connectors' configs come back from the config topic, and the
        // source resumes from the offset the first worker committed
        Connect<?> second = startWorker(group, plugins);
        try {
            URI base = second.rest().serverUrl();
            long deadline = System.currentTimeMillis() + 60000;
            while (!http(http, "GET", base.resolve("/connectors"), null).contains("\"count\"")) {
                check(System.currentTimeMillis() < deadline, "the second worker never listed the connectors");
                Thread.sleep(500);
            }
            putConnector(http, base, "count", Map.of("connector.class", CountingSource.class.getName(), "tasks.max", "1", "topic", t, "until", "150"));
            awaitCollected(150, 60000);
        } finally {
            second.stop();
            second.awaitStop();
        }
        List<Long> starts = new ArrayList<>(STARTED_AT);
        check(starts.size() >= 2 && starts.get(0) == 0 && starts.get(starts.size() - 1) == 100,
                "source tasks started at " + starts + ": the last must resume at 100 from the committed offset");

        // the topic holds 0..149 once each, per partition in order
        try (KafkaConsumer<String, String> c = consumer(Map.of())) {
            c.assign(tps(t, 2));
            c.seekToBeginning(tps(t, 2));
            List<ConsumerRecord<String, String>> got = pollUntil(c, 150, 20000);
            check(got.size() == 150, "topic holds " + got.size() + " records, expected 150");
            Map<Integer, Long> last = new HashMap<>();
            for (ConsumerRecord<String, String> r : got) {
                long v = Long.parseLong(r.value().substring(1));
                check(v % 2 == r.partition() && v > last.getOrDefault(r.partition(), -1L), "record " + r.value() + " at " + r.partition() + "@" + r.offset());
                last.put(r.partition(), v);
            }
        }
        return "distributed worker (connect group protocol, compacted config/offset/status topics): source 0..99, restart resumed at "
                + starts.get(starts.size() - 1) + ", 150 records once each; sink task given all " + new HashSet<>(COLLECTED).size();
    }
}
