#!/usr/bin/env bash
# Download Apache Kafka jars (broker, tools, clients, storage, raft, metadata)
# plus every runtime dependency and a log4j2 binding from Maven Central into
#   .cache/kafka-<version>/libs/
# Idempotent: does nothing when the libs dir is already complete.
#
# Env:
#   KAFKA_VERSION   Kafka version to fetch (default below; 4.x needs Java 17+)
#   SLUICE_CACHE    cache dir (default <repo>/.cache)
#
# Prints the libs directory on the last line of stdout.
set -euo pipefail

KAFKA_VERSION="${KAFKA_VERSION:-4.4.0}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
CACHE="${SLUICE_CACHE:-$ROOT/.cache}"
DEST="$CACHE/kafka-$KAFKA_VERSION"
LIBS="$DEST/libs"
STAMP="$DEST/.complete"

if [[ -f "$STAMP" ]] && ls "$LIBS"/kafka_2.13-"$KAFKA_VERSION".jar >/dev/null 2>&1; then
  echo "$LIBS"
  exit 0
fi

if ! command -v java >/dev/null 2>&1; then
  echo "fetch.sh: error: 'java' not found on PATH; Kafka $KAFKA_VERSION needs a Java 17+ runtime (apt-get install openjdk-17-jre-headless)" >&2
  exit 2
fi
if ! command -v mvn >/dev/null 2>&1; then
  echo "fetch.sh: error: 'mvn' not found on PATH; install Maven (apt-get install maven)" >&2
  exit 2
fi
JAVA_MAJOR="$(java -XshowSettings:properties -version 2>&1 | awk -F'= ' '/java.specification.version/ {print $2}' | tr -d ' ')"
if [[ -n "$JAVA_MAJOR" && "${JAVA_MAJOR%%.*}" -lt 17 ]]; then
  echo "fetch.sh: error: Java $JAVA_MAJOR found; the Kafka 4.x broker and tools need Java 17+" >&2
  exit 2
fi

mkdir -p "$DEST" "$CACHE/m2"
POM="$DEST/pom.xml"
cat >"$POM" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0"
         xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
         xsi:schemaLocation="http://maven.apache.org/POM/4.0.0 http://maven.apache.org/xsd/maven-4.0.0.xsd">
  <modelVersion>4.0.0</modelVersion>
  <groupId>sluice.compat</groupId>
  <artifactId>kafka-dist</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <properties>
    <kafka.version>$KAFKA_VERSION</kafka.version>
    <log4j.version>2.25.5</log4j.version>
  </properties>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>\${kafka.version}</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-tools</artifactId><version>\${kafka.version}</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-clients</artifactId><version>\${kafka.version}</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-storage</artifactId><version>\${kafka.version}</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-server</artifactId><version>\${kafka.version}</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-metadata</artifactId><version>\${kafka.version}</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-raft</artifactId><version>\${kafka.version}</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j-impl</artifactId><version>\${log4j.version}</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-api</artifactId><version>\${log4j.version}</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-core</artifactId><version>\${log4j.version}</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-1.2-api</artifactId><version>\${log4j.version}</version></dependency>
  </dependencies>
</project>
EOF

echo "fetch.sh: resolving Apache Kafka $KAFKA_VERSION from Maven Central into $LIBS" >&2
rm -rf "$LIBS.tmp"
if ! mvn -B -q -f "$POM" \
    -Dmaven.repo.local="$CACHE/m2" \
    org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies \
    -DincludeScope=runtime \
    -DoutputDirectory="$LIBS.tmp" >"$DEST/mvn.log" 2>&1; then
  echo "fetch.sh: error: mvn failed resolving Kafka $KAFKA_VERSION; last lines of $DEST/mvn.log:" >&2
  tail -n 30 "$DEST/mvn.log" >&2
  exit 1
fi
# Kafka uses slf4j-api 1.7.x: keep only the log4j2 binding for it (log4j-slf4j-impl).
rm -f "$LIBS.tmp"/slf4j-reload4j-*.jar "$LIBS.tmp"/reload4j-*.jar "$LIBS.tmp"/log4j-slf4j2-impl-*.jar
rm -rf "$LIBS"
mv "$LIBS.tmp" "$LIBS"
touch "$STAMP"
echo "fetch.sh: $(ls "$LIBS" | wc -l) jars in $LIBS" >&2
echo "$LIBS"
