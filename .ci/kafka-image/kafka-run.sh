#!/bin/sh
# kafka-run.sh — the entry point of the kdelay-kafka test image: writes
# server.properties from the environment, formats the KRaft storage on
# first start and executes the broker (one node, broker and controller).
#
# Environment (defaults in parentheses):
#   KAFKA_PORT                  client listener port (9092)
#   KAFKA_CONTROLLER_PORT       controller listener port (9093)
#   KAFKA_LISTEN_HOST           address both listeners bind (0.0.0.0)
#   KAFKA_ADVERTISED_LISTENERS  what clients are told
#                               (PLAINTEXT://127.0.0.1:$KAFKA_PORT, right
#                               for --network host)
#   KAFKA_CLUSTER_ID            KRaft cluster id (a fixed test id)
#   KAFKA_HEAP_OPTS             JVM heap (-Xms256m -Xmx512m)
#   KAFKA_EXTRA_PROPERTIES      more server.properties lines, appended last
#                               (a later line wins)
# The broker logs "Kafka Server started" once it serves clients.
set -eu

port="${KAFKA_PORT:-9092}"
cport="${KAFKA_CONTROLLER_PORT:-9093}"
host="${KAFKA_LISTEN_HOST:-0.0.0.0}"
adv="${KAFKA_ADVERTISED_LISTENERS:-PLAINTEXT://127.0.0.1:$port}"
data=/var/lib/kafka
conf="$data/server.properties"

cat >"$conf" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$cport
listeners=PLAINTEXT://$host:$port,CONTROLLER://$host:$cport
advertised.listeners=$adv
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$data/logs
metadata.log.dir=$data/metadata
num.partitions=1
default.replication.factor=1
min.insync.replicas=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=4
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
num.network.threads=2
num.io.threads=4
log.cleaner.threads=1
log.cleaner.dedupe.buffer.size=8388608
${KAFKA_EXTRA_PROPERTIES:-}
PROPS

cat >"$data/log4j2.properties" <<'LOG'
status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = OUT
logger.clients.name = org.apache.kafka.clients
logger.clients.level = WARN
logger.statechange.name = state.change.logger
logger.statechange.level = WARN
logger.request.name = kafka.request.logger
logger.request.level = WARN
LOG

cp="/opt/kafka/libs/*"
log4j="-Dlog4j2.configurationFile=$data/log4j2.properties"
if [ ! -f "$data/metadata/meta.properties" ]; then
  java -Xmx256m -XX:TieredStopAtLevel=1 -XX:+UseSerialGC "$log4j" -cp "$cp" \
    kafka.tools.StorageTool format -t "${KAFKA_CLUSTER_ID:-a2RlbGF5LXRlc3QtMDAwMQ}" -c "$conf"
fi
# shellcheck disable=SC2086
exec java ${KAFKA_HEAP_OPTS:--Xms256m -Xmx512m} -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
  -Djava.awt.headless=true "$log4j" -Dkafka.logs.dir="$data" \
  -cp "$cp" kafka.Kafka "$conf"
