# sluice — common tasks. `make run` starts a broker on localhost:9092; `make test` runs everything CI runs.
CARGO ?= cargo
SLUICE_BIN ?= target/release/sluice
export SLUICE_BIN

.PHONY: all build release run cluster test test-rust test-clients test-protocol test-metrics test-chaos chaos sim fuzz compat compat-matrix kafka-ref kafka-ref-stop clean bench

all: release

build:
	$(CARGO) build

release:
	$(CARGO) build --release

## Start a single-node broker on localhost:9092 with data under ./data.
run: release
	$(SLUICE_BIN) serve $(if $(CONFIG),--config $(CONFIG))

## Start a local 3-node cluster (each node broker and controller) on 127.0.0.1:9092-9094 with
## data under ./data/dev-cluster; Ctrl-C stops it.
cluster: release
	$(SLUICE_BIN) dev-cluster 3

## The whole test suite: Rust unit + integration tests, the real-client suite (librdkafka via
## confluent-kafka, Kafka's own tools from the Maven jars), golden client conversations replayed
## against Apache Kafka and sluice side by side, then the metrics check with a real Prometheus
## (promtool rule tests + every dashboard and alert expression evaluated under load), then short
## Jepsen-style fault runs on three-node clusters (chaos/README.md).
test: test-rust test-clients test-protocol test-metrics test-chaos

test-rust:
	$(CARGO) test --all-targets

test-clients: release
	tests/clients/run.sh

test-protocol: release test-clients
	protocol-tests/run.sh

test-metrics: release test-clients
	grafana/test/prometheus_e2e.sh

test-chaos: release test-clients
	chaos/run.sh ci

## A long Jepsen-style run (chaos/README.md): writers, readers and a nemesis (kill -9, SIGSTOP,
## network partitions, stranded leaders) against a 3-node cluster for CHAOS_SECONDS; the summary
## goes to chaos/results/. CHAOS_TARGET=kafka runs the same against Apache Kafka.
CHAOS_TARGET ?= sluice
CHAOS_SECONDS ?= 1800
CHAOS_SEED ?= 1
CHAOS_NET ?= 0
chaos: $(if $(filter sluice,$(CHAOS_TARGET)),release)
	chaos/run.sh --target $(CHAOS_TARGET) --duration $(CHAOS_SECONDS) --seed $(CHAOS_SEED) --net $(CHAOS_NET) \
	  --summary chaos/results/$(CHAOS_TARGET)-acks-all-$(CHAOS_SECONDS)s.json

## The replication simulation (src/replication/simulation.rs) over SIM_SCHEDULES seeded
## schedules of kills, partitions and slow replicas; `make test` runs 300.
SIM_SCHEDULES ?= 100000
sim:
	SLUICE_SIM_SCHEDULES=$(SIM_SCHEDULES) $(CARGO) test --release --lib replication::simulation -- --nocapture

## Client compatibility matrix (Java, Kafka's tools, kcat, confluent-kafka, franz-go, kafkajs,
## kafka-python): `make compat` against sluice, `make compat TARGET=kafka` against Apache Kafka,
## NODES=3 against a three-node cluster of either (with a leader kill per client), `make
## compat-matrix` runs all four and regenerates compat/MATRIX.md.
TARGET ?= sluice
NODES ?= 1
compat: $(if $(filter sluice,$(TARGET)),release)
	compat/run.sh --target $(TARGET) --nodes $(NODES)

compat-matrix: release
	compat/run.sh --target kafka --write-matrix
	compat/run.sh --target sluice --write-matrix
	compat/run.sh --target kafka --nodes 3 --write-matrix
	compat/run.sh --target sluice --nodes 3 --write-matrix

## Short fuzzing runs of the request, record-batch and metadata-record decoders (needs cargo-fuzz).
FUZZ_SECONDS ?= 30
fuzz:
	cd fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz run request -- -max_total_time=$(FUZZ_SECONDS)
	cd fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz run record_batch -- -max_total_time=$(FUZZ_SECONDS)
	cd fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz run metadata_record -- -max_total_time=$(FUZZ_SECONDS)

## Real Apache Kafka 4.x (from Maven Central jars) on 127.0.0.1:19092, for side-by-side checks.
KAFKA_REF_DIR ?= .cache/kafka-ref
kafka-ref:
	compat/kafka/kafka-ref.sh start --port 19092 --dir $(KAFKA_REF_DIR)

kafka-ref-stop:
	compat/kafka/kafka-ref.sh stop --dir $(KAFKA_REF_DIR)

clean:
	$(CARGO) clean

## sluice vs Apache Kafka side by side (bench/README.md); BENCH_FULL=1 for the issue-6 sizes.
bench:
	bench/run.sh
