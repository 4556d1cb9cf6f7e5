#!/usr/bin/env bash
# .ci/kafka.sh — run ONE real Apache Kafka broker (KRaft, combined
# broker+controller) on 127.0.0.1 from the Apache Kafka jars that Maven
# resolves. No Docker, no tarball download: Maven's default configuration
# fetches org.apache.kafka:kafka_2.13 and friends, and the jars are cached.
#
# Usage: .ci/kafka.sh start|stop [--keep-data]|restart|status|env|logs [N]
#
#   start     Start the broker and wait until it answers a metadata request.
#             With stopped-but-kept state (stop --keep-data) it restarts on
#             the same ports and data dir. Idempotent if already running.
#   stop      SIGTERM, wait, SIGKILL; removes the data dir and state.
#             --keep-data: stop the process only (ports, data, state kept).
#   restart   stop --keep-data, then start: same ports, same data.
#   status    Report; exit 0 when running and answering, 1 otherwise.
#   env       Print `export KDELAY_TEST_BROKERS=127.0.0.1:<port>`.
#   logs [N]  Print the last N (default 100) lines of the broker log,
#             without the config dumps (the file at `status` has all).
#   jars      Resolve the jars (cached) and print their directory; the
#             Kafka image (.ci/kafka-image.sh) is built from them.
#
# A cluster (.ci/kafka-cluster.sh has the details):
#
#   start --brokers N   N brokers (default 3) and one dedicated KRaft
#             controller on 127.0.0.1; prints the bootstrap list
#             (comma-separated) once every broker is registered and
#             unfenced. Topic defaults: replication factor min(3,N),
#             min.insync.replicas min(2,N).
#   start --security DIR  (with or without --brokers) adds SASL_SSL and
#             SSL listeners and ACLs; `env` prints their addresses.
#   stop N | kill N | start N   broker N alone: SIGTERM (controlled
#             shutdown), SIGKILL, or start again on its kept data.
#   restart N   stop N, then start N.
#   stop, restart, status, env, logs [N]   as above, for all nodes.
#   acls ARGS...   kafka-acls (AclCommand) against the cluster.
#
# Environment:
#   KDELAY_KAFKA_VERSION  Apache Kafka version (default 4.4.0): a 4.x or
#                         3.x release Maven serves (tested: 4.4.0, 3.9.1,
#                         3.7.2). 3.x logs through log4j 1.x (reload4j;
#                         the script adds its slf4j binding) and keeps
#                         its command-line tools in kafka_2.13
#                         (kafka.admin.*); 4.x logs through log4j 2 and
#                         keeps them in kafka-tools.
#   KDELAY_CACHE          Jar cache root (default $HOME/.cache/kdelay);
#                         jars live in $KDELAY_CACHE/kafka-<version>/libs.
#   KDELAY_KAFKA_STATE    State dir (default ${TMPDIR:-/tmp}/kdelay-kafka):
#                         state.env, server.properties, kafka.log, and
#                         gc.log (the broker's GC pauses, time-stamped:
#                         kdelay-bench --broker-gc-log reads it).
#   KDELAY_KAFKA_PORT     Client port (default: a free random port).
#   KDELAY_KAFKA_HEAP     JVM heap flags (default "-Xms256m -Xmx1g").
#   KDELAY_KAFKA_START_TIMEOUT  Seconds to wait for readiness (default 120).
#   JAVA_HOME             Java to use (default: `java` on PATH); Java 17+.
set -euo pipefail

KAFKA_VERSION="${KDELAY_KAFKA_VERSION:-4.4.0}"
ENV_KAFKA_VERSION="$KAFKA_VERSION"
# log4j-core is brought by kafka_2.13 4.x; the slf4j binding is not. Kafka
# 4.x still logs through slf4j-api 1.7.x, so the 1.x binding is the one.
LOG4J_VERSION="${KDELAY_LOG4J_VERSION:-2.25.5}"
# Kafka 3.x: slf4j-reload4j, the version Kafka 3.x's distribution ships.
SLF4J_VERSION="${KDELAY_SLF4J_VERSION:-1.7.36}"
CACHE_ROOT="${KDELAY_CACHE:-${HOME:-/root}/.cache/kdelay}"
CACHE_DIR="$CACHE_ROOT/kafka-$KAFKA_VERSION"
STATE_DIR="${KDELAY_KAFKA_STATE:-${TMPDIR:-/tmp}/kdelay-kafka}"
STATE_FILE="$STATE_DIR/state.env"
START_TIMEOUT="${KDELAY_KAFKA_START_TIMEOUT:-120}"
HEAP="${KDELAY_KAFKA_HEAP:--Xms256m -Xmx1g}"

if [[ -n "${JAVA_HOME:-}" && -x "$JAVA_HOME/bin/java" ]]; then
  JAVA="$JAVA_HOME/bin/java"
else
  JAVA="java"
fi

log() { printf '[kafka.sh] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# ------------------------------------------------------------- version ----
# Kafka 3.x and 4.x differ in three places: the jars to resolve, the log4j
# generation (log4j 1.x via reload4j in 3.x, log4j 2 in 4.x) and where the
# tools live (kafka.admin.* in kafka_2.13 for 3.x, org.apache.kafka.tools.*
# in kafka-tools for 4.x). The storage format command is kafka.tools.StorageTool
# in both. Functions, not variables: a restart takes KAFKA_VERSION from the
# state file.

kafka_major() {
  local m="${KAFKA_VERSION%%.*}"
  [[ "$m" =~ ^[0-9]+$ ]] || die "KDELAY_KAFKA_VERSION=$KAFKA_VERSION: want a release such as 4.4.0 or 3.9.1"
  echo "$m"
}

check_version() {
  local m
  m="$(kafka_major)"
  ((m >= 3)) || die "Apache Kafka $KAFKA_VERSION: only KRaft releases (3.x, 4.x) are supported here"
}

is_kafka3() { [[ "$(kafka_major)" == 3 ]]; }

# tool_class NAME: the main class of Kafka's command-line tool NAME
# (BrokerApiVersionsCommand, AclCommand) in this version's jars.
tool_class() {
  if is_kafka3; then echo "kafka.admin.$1"; else echo "org.apache.kafka.tools.$1"; fi
}

# log4j_opts broker|tools: the JVM flag that points this version's log4j
# at the config write_log4j_configs wrote.
log4j_opts() {
  if is_kafka3; then
    echo "-Dlog4j.configuration=file:$STATE_DIR/log4j-$1.properties"
  else
    echo "-Dlog4j2.configurationFile=$STATE_DIR/log4j2-$1.properties"
  fi
}

# ---------------------------------------------------------------- jars ----

# extra_deps: the pom dependencies beside kafka_2.13. 4.x: kafka-tools
# (BrokerApiVersionsCommand, for the readiness check) and log4j 2 with its
# slf4j 1.x binding. 3.x: kafka_2.13 holds its tools; only the slf4j
# binding to reload4j (log4j 1.x), which Kafka's own distribution ships
# but its pom leaves out (without it slf4j logs nothing).
extra_deps() {
  if is_kafka3; then
    cat <<EOF
    <dependency>
      <groupId>org.slf4j</groupId>
      <artifactId>slf4j-reload4j</artifactId>
      <version>$SLF4J_VERSION</version>
    </dependency>
EOF
    return 0
  fi
  cat <<EOF
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka-tools</artifactId>
      <version>$KAFKA_VERSION</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-slf4j-impl</artifactId>
      <version>$LOG4J_VERSION</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-core</artifactId>
      <version>$LOG4J_VERSION</version>
    </dependency>
EOF
}

# resolve_jars: make sure $CACHE_DIR/libs holds the broker's runtime jars.
resolve_jars() {
  if [[ -f "$CACHE_DIR/.complete" ]]; then
    log "jars: cached in $CACHE_DIR/libs ($(ls "$CACHE_DIR/libs" | wc -l) jars)"
    return 0
  fi
  command -v mvn >/dev/null || die "mvn not found on PATH (Maven is needed to fetch the Kafka jars)"
  log "jars: resolving Apache Kafka $KAFKA_VERSION with Maven into $CACHE_DIR"
  local t0=$SECONDS
  mkdir -p "$CACHE_DIR"
  local work
  work="$(mktemp -d "$CACHE_DIR/.resolve.XXXXXX")"
  cat >"$work/pom.xml" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<!-- Generated by .ci/kafka.sh: the runtime classpath of one Kafka broker. -->
<project>
  <modelVersion>4.0.0</modelVersion>
  <groupId>io.kdelay.ci</groupId>
  <artifactId>kafka-broker-runtime</artifactId>
  <version>$KAFKA_VERSION</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_2.13</artifactId>
      <version>$KAFKA_VERSION</version>
    </dependency>
$(extra_deps)
  </dependencies>
</project>
EOF
  if ! mvn -B -q -f "$work/pom.xml" dependency:copy-dependencies \
        -DincludeScope=runtime -DoutputDirectory="$work/libs" \
        </dev/null >"$work/mvn.log" 2>&1; then
    cat "$work/mvn.log" >&2
    die "Maven could not resolve org.apache.kafka:kafka_2.13:$KAFKA_VERSION (log above)"
  fi
  ls "$work/libs"/kafka_2.13-"$KAFKA_VERSION".jar >/dev/null 2>&1 \
    || die "Maven finished but kafka_2.13-$KAFKA_VERSION.jar is missing in $work/libs"
  rm -rf "$CACHE_DIR/libs"
  mv "$work/libs" "$CACHE_DIR/libs"
  cp "$work/pom.xml" "$CACHE_DIR/pom.xml"
  rm -rf "$work"
  touch "$CACHE_DIR/.complete"
  log "jars: $(ls "$CACHE_DIR/libs" | wc -l) jars resolved in $((SECONDS - t0))s"
}

classpath() { printf '%s/libs/*' "$CACHE_DIR"; }

write_log4j_configs() {
  cat >"$STATE_DIR/log4j2-broker.properties" <<'EOF'
status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = OUT
logger.clients.name = org.apache.kafka.clients
logger.clients.level = WARN
logger.ctrlr.name = org.apache.kafka.controller
logger.ctrlr.level = INFO
logger.statechange.name = state.change.logger
logger.statechange.level = WARN
logger.request.name = kafka.request.logger
logger.request.level = WARN
EOF
  cat >"$STATE_DIR/log4j2-tools.properties" <<'EOF'
status = error
appender.err.type = Console
appender.err.name = ERR
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = ERROR
rootLogger.appenderRef.err.ref = ERR
EOF
  # The same two for log4j 1.x (Kafka 3.x, reload4j).
  cat >"$STATE_DIR/log4j-broker.properties" <<'EOF'
log4j.rootLogger=INFO, OUT
log4j.appender.OUT=org.apache.log4j.ConsoleAppender
log4j.appender.OUT.layout=org.apache.log4j.PatternLayout
log4j.appender.OUT.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.org.apache.kafka.clients=WARN
log4j.logger.org.apache.kafka.controller=INFO
log4j.logger.state.change.logger=WARN
log4j.logger.kafka.request.logger=WARN
EOF
  cat >"$STATE_DIR/log4j-tools.properties" <<'EOF'
log4j.rootLogger=ERROR, ERR
log4j.appender.ERR=org.apache.log4j.ConsoleAppender
log4j.appender.ERR.Target=System.err
log4j.appender.ERR.layout=org.apache.log4j.PatternLayout
log4j.appender.ERR.layout.ConversionPattern=[%d] %p %m (%c)%n
EOF
}

# ---------------------------------------------------------------- ports ---

# port_in_use PORT: true when something accepts connections on 127.0.0.1:PORT.
port_in_use() {
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# free_port: a port below the kernel's ephemeral range that nothing listens on.
free_port() {
  local p i
  for i in $(seq 1 200); do
    p=$((20000 + RANDOM % 12000))
    if ! port_in_use "$p"; then
      if command -v ss >/dev/null && ss -Htan "sport = :$p" 2>/dev/null | grep -q .; then
        continue
      fi
      echo "$p"
      return 0
    fi
  done
  die "no free port found"
}

# ---------------------------------------------------------------- state ---

# load_state: the recorded broker; its version and jar cache win over the
# environment's (a save_state after it must not point them elsewhere).
load_state() {
  [[ -f "$STATE_FILE" ]] || return 1
  # shellcheck disable=SC1090
  source "$STATE_FILE"
  CACHE_DIR="${KAFKA_CACHE_DIR:-$CACHE_ROOT/kafka-$KAFKA_VERSION}"
}

save_state() {
  cat >"$STATE_FILE" <<EOF
KAFKA_PID=$KAFKA_PID
KAFKA_PORT=$KAFKA_PORT
KAFKA_CONTROLLER_PORT=$KAFKA_CONTROLLER_PORT
KAFKA_DATA_DIR=$KAFKA_DATA_DIR
KAFKA_LOG=$KAFKA_LOG
KAFKA_VERSION=$KAFKA_VERSION
KAFKA_CLUSTER_ID=$KAFKA_CLUSTER_ID
KAFKA_CACHE_DIR=$CACHE_DIR
KAFKA_KEPT=${KAFKA_KEPT:-0}
EOF
}

# ------------------------------------------------------------ processes --

# LAUNCHED: the pids of the JVMs this invocation started (launch_broker,
# c_launch), space-separated. start_cleanup stops them when start fails.
LAUNCHED=" "

# proc_alive PID: PID runs (not a zombie) and is a Kafka node. A pid this
# invocation launched is ours whatever its command line says: between the
# fork and the exec of java it is still a copy of this shell. A pid read
# from a state file must also be running kafka.Kafka (not a reused pid).
proc_alive() {
  local pid="${1:-}" st
  [[ -n "$pid" && "$pid" != 0 ]] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  if [[ -r "/proc/$pid/stat" ]]; then
    st="$(sed 's/^.*) //' "/proc/$pid/stat" 2>/dev/null)" || return 1
    [[ "${st:0:1}" == Z || "${st:0:1}" == X || -z "$st" ]] && return 1
  fi
  [[ "$LAUNCHED" == *" $pid "* ]] && return 0
  if [[ -r "/proc/$pid/cmdline" ]]; then
    tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q 'kafka\.Kafka' || return 1
  fi
  return 0
}

# pid_alive: the recorded broker pid runs and is a Kafka node.
pid_alive() { proc_alive "${KAFKA_PID:-}"; }

# kill_launched: stop every JVM this invocation launched (SIGTERM, up to
# 15 s, then SIGKILL) and reap it. Each runs in its own session (setsid),
# so its process group is signalled as well.
kill_launched() {
  local pid i left
  for pid in $LAUNCHED; do
    proc_alive "$pid" || continue
    log "stopping pid $pid, started by this failed start"
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
  done
  for i in $(seq 1 60); do
    left=""
    for pid in $LAUNCHED; do proc_alive "$pid" && left+=" $pid"; done
    [[ -z "$left" ]] && break
    sleep 0.25
  done
  for pid in $left; do
    log "pid $pid did not exit in 15s; SIGKILL"
    kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
  done
  for pid in $LAUNCHED; do wait "$pid" 2>/dev/null || true; done
  for pid in $LAUNCHED; do
    proc_alive "$pid" && { log "ERROR: pid $pid is still alive"; return 1; }
  done
  return 0
}

# random_cluster_id: 16 random bytes, base64url without padding (22 chars),
# the form Kafka's Uuid uses; Kafka avoids ids starting with '-'.
random_cluster_id() {
  local id
  while :; do
    id="$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')"
    [[ "$id" != -* ]] && { echo "$id"; return; }
  done
}

write_server_properties() {
  cat >"$STATE_DIR/server.properties" <<EOF
# Generated by .ci/kafka.sh — single combined KRaft node for tests.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$KAFKA_CONTROLLER_PORT
listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT,CONTROLLER://127.0.0.1:$KAFKA_CONTROLLER_PORT
advertised.listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$KAFKA_DATA_DIR/logs
metadata.log.dir=$KAFKA_DATA_DIR/metadata
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
delete.topic.enable=true
num.network.threads=2
num.io.threads=4
num.recovery.threads.per.data.dir=1
log.cleaner.threads=1
log.cleaner.dedupe.buffer.size=8388608
log.retention.check.interval.ms=30000
EOF
}

# ---------------------------------------------------------------- java ----

run_tool() { # run_tool MAINCLASS ARGS... — a short-lived Kafka CLI JVM.
  "$JAVA" -Xmx256m -XX:TieredStopAtLevel=1 -XX:+UseSerialGC \
    "$(log4j_opts tools)" \
    -cp "$(classpath)" "$@"
}

format_storage() {
  log "formatting KRaft storage in $KAFKA_DATA_DIR (cluster id $KAFKA_CLUSTER_ID)"
  if ! run_tool kafka.tools.StorageTool format -t "$KAFKA_CLUSTER_ID" \
        -c "$STATE_DIR/server.properties" >"$STATE_DIR/format.log" 2>&1; then
    cat "$STATE_DIR/format.log" >&2
    die "kafka.tools.StorageTool format failed"
  fi
}

launch_broker() {
  printf '\n===== [kafka.sh] launch %s =====\n' "$(date -u +%FT%TZ)" >>"$KAFKA_LOG"
  # setsid: own session, so the broker outlives the calling shell step and
  # a Ctrl-C there does not reach it; stop it with `kafka.sh stop`.
  local detach=()
  command -v setsid >/dev/null && detach=(setsid)
  # shellcheck disable=SC2086
  "${detach[@]}" "$JAVA" $HEAP -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
    -Xlog:gc:file="$STATE_DIR/gc.log":time \
    -Djava.awt.headless=true \
    "$(log4j_opts broker)" \
    -Dkafka.logs.dir="$STATE_DIR" \
    -cp "$(classpath)" kafka.Kafka "$STATE_DIR/server.properties" \
    </dev/null >>"$KAFKA_LOG" 2>&1 &
  KAFKA_PID=$!
  LAUNCHED+="$KAFKA_PID "
  save_state
  log "broker pid $KAFKA_PID, client 127.0.0.1:$KAFKA_PORT, controller 127.0.0.1:$KAFKA_CONTROLLER_PORT"
  log "log $KAFKA_LOG, data $KAFKA_DATA_DIR"
}

# api_versions BOOTSTRAP: a metadata + ApiVersions round trip to every
# broker through Kafka's own BrokerApiVersionsCommand (its output lists
# each broker as `host:port (id: N rack: R ...)`), into apiversions.txt.
api_versions() {
  run_tool "$(tool_class BrokerApiVersionsCommand)" --bootstrap-server "$1" \
    >"$STATE_DIR/apiversions.txt" 2>&1
}

# wait_ready: port open, then api_versions answers.
wait_ready() {
  local deadline=$((SECONDS + START_TIMEOUT))
  while ! port_in_use "$KAFKA_PORT"; do
    pid_alive || { tail -n 60 "$KAFKA_LOG" >&2; die "broker exited during startup (log tail above)"; }
    ((SECONDS < deadline)) || { tail -n 60 "$KAFKA_LOG" >&2; die "port $KAFKA_PORT not open after ${START_TIMEOUT}s"; }
    sleep 0.5
  done
  while :; do
    if api_versions "127.0.0.1:$KAFKA_PORT"; then
      break
    fi
    pid_alive || { tail -n 60 "$KAFKA_LOG" >&2; die "broker exited during startup (log tail above)"; }
    ((SECONDS < deadline)) || { cat "$STATE_DIR/apiversions.txt" >&2; tail -n 60 "$KAFKA_LOG" >&2; die "broker not ready after ${START_TIMEOUT}s"; }
    sleep 1
  done
}

started_version() {
  local v
  v="$(grep -ao 'Kafka version: [^ ]*' "$KAFKA_LOG" 2>/dev/null | tail -n 1 | sed 's/Kafka version: //')"
  echo "${v:-$KAFKA_VERSION}"
}

# ---------------------------------------------------------------- cmds ----

# START_MODE: what start_cleanup does with the state of a failed start:
# "fresh" removes it with the data dir, "kept" keeps the data for a retry.
START_MODE=""

# start_cleanup: the EXIT trap of start. On failure (die, a signal) it
# stops the broker this start launched, so a failed start never leaves a
# broker running, then drops or keeps the state (START_MODE).
start_cleanup() {
  local rc=$?
  ((rc == 0)) && return 0
  if ! kill_launched; then
    log "start failed and pid ${KAFKA_PID:-?} survived SIGKILL; its state stays in $STATE_DIR"
    return
  fi
  case "$START_MODE" in
    fresh)
      [[ "${KAFKA_DATA_DIR:-}" == *kdelay-kafka-data.* ]] && rm -rf "$KAFKA_DATA_DIR"
      rm -f "$STATE_FILE"
      ;;
    kept)
      KAFKA_PID=0
      KAFKA_KEPT=1
      save_state
      ;;
  esac
  log "start failed (exit $rc); no broker of it is left running${START_MODE:+ (state: $START_MODE)}"
}

cmd_start() {
  local t0=$SECONDS
  mkdir -p "$STATE_DIR"
  trap start_cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  if load_state; then
    if pid_alive; then
      log "already running (pid $KAFKA_PID) on 127.0.0.1:$KAFKA_PORT"
      echo "127.0.0.1:$KAFKA_PORT"
      return 0
    fi
    if [[ "${KAFKA_KEPT:-0}" == 1 && -d "$KAFKA_DATA_DIR/metadata" ]]; then
      # Stopped with --keep-data: same ports, same data, same cluster.
      CACHE_DIR="${KAFKA_CACHE_DIR:-$CACHE_DIR}"
      [[ -f "$CACHE_DIR/.complete" ]] || resolve_jars
      write_log4j_configs
      log "restarting Apache Kafka $KAFKA_VERSION on kept data $KAFKA_DATA_DIR"
      START_MODE=kept
      KAFKA_KEPT=0
      launch_broker
      wait_ready
      trap - EXIT INT TERM
      log "ready: Apache Kafka $(started_version) on 127.0.0.1:$KAFKA_PORT in $((SECONDS - t0))s"
      echo "127.0.0.1:$KAFKA_PORT"
      return 0
    fi
    # The broker died without `stop --keep-data` (crash, killed session):
    # do not resurrect its data, start clean.
    log "stale state in $STATE_DIR (pid ${KAFKA_PID:-?} gone); wiping it and starting fresh"
    [[ "${KAFKA_DATA_DIR:-}" == *kdelay-kafka-data.* ]] && rm -rf "$KAFKA_DATA_DIR"
    rm -f "$STATE_FILE"
    KAFKA_VERSION="$ENV_KAFKA_VERSION"
    CACHE_DIR="$CACHE_ROOT/kafka-$KAFKA_VERSION"
  fi

  check_version
  command -v "$JAVA" >/dev/null || die "java not found (set JAVA_HOME or put Java 17+ on PATH)"
  resolve_jars
  write_log4j_configs
  START_MODE=fresh
  KAFKA_PORT="${KDELAY_KAFKA_PORT:-$(free_port)}"
  KAFKA_CONTROLLER_PORT="$(free_port)"
  while [[ "$KAFKA_CONTROLLER_PORT" == "$KAFKA_PORT" ]]; do KAFKA_CONTROLLER_PORT="$(free_port)"; done
  port_in_use "$KAFKA_PORT" && die "port $KAFKA_PORT is already in use"
  KAFKA_DATA_DIR="$(mktemp -d "${TMPDIR:-/tmp}/kdelay-kafka-data.XXXXXX")"
  KAFKA_LOG="$STATE_DIR/kafka.log"
  KAFKA_CLUSTER_ID="$(random_cluster_id)"
  KAFKA_PID=0
  KAFKA_KEPT=0
  : >"$KAFKA_LOG"
  write_server_properties
  save_state
  format_storage
  log "starting Apache Kafka $KAFKA_VERSION (java: $("$JAVA" -version 2>&1 | head -n 1))"
  launch_broker
  wait_ready
  trap - EXIT INT TERM
  log "ready: Apache Kafka $(started_version) on 127.0.0.1:$KAFKA_PORT in $((SECONDS - t0))s"
  echo "127.0.0.1:$KAFKA_PORT"
}

cmd_stop() {
  local keep=0
  [[ "${1:-}" == "--keep-data" ]] && keep=1
  if ! load_state; then
    log "not running (no state in $STATE_DIR)"
    return 0
  fi
  if pid_alive; then
    log "stopping broker pid $KAFKA_PID (SIGTERM)"
    kill -TERM "$KAFKA_PID" 2>/dev/null || true
    local i
    for i in $(seq 1 60); do
      pid_alive || break
      sleep 0.5
    done
    if pid_alive; then
      log "broker did not exit in 30s; SIGKILL"
      kill -KILL "$KAFKA_PID" 2>/dev/null || true
      for i in $(seq 1 20); do pid_alive || break; sleep 0.25; done
    fi
    pid_alive && die "broker pid $KAFKA_PID is still alive"
    log "broker stopped"
  fi
  if ((keep)); then
    KAFKA_PID=0
    KAFKA_KEPT=1
    save_state
    log "kept data $KAFKA_DATA_DIR and ports $KAFKA_PORT/$KAFKA_CONTROLLER_PORT (start again with: $0 start)"
  else
    [[ -n "${KAFKA_DATA_DIR:-}" && "$KAFKA_DATA_DIR" == *kdelay-kafka-data.* ]] && rm -rf "$KAFKA_DATA_DIR"
    rm -f "$STATE_FILE" "$STATE_DIR/server.properties" "$STATE_DIR/apiversions.txt" "$STATE_DIR/format.log"
    log "removed data dir; broker log left at ${KAFKA_LOG:-$STATE_DIR/kafka.log}"
  fi
}

cmd_restart() {
  load_state || die "nothing to restart (no state in $STATE_DIR); use start"
  cmd_stop --keep-data
  cmd_start
}

cmd_status() {
  if ! load_state; then
    echo "kafka: not started (no state in $STATE_DIR)"
    return 1
  fi
  if pid_alive; then
    if port_in_use "$KAFKA_PORT"; then
      echo "kafka: running: Apache Kafka $(started_version), pid $KAFKA_PID, 127.0.0.1:$KAFKA_PORT (controller $KAFKA_CONTROLLER_PORT), data $KAFKA_DATA_DIR, log $KAFKA_LOG"
      return 0
    fi
    echo "kafka: process $KAFKA_PID alive but port $KAFKA_PORT not accepting"
    return 1
  fi
  if [[ "${KAFKA_KEPT:-0}" == 1 ]]; then
    echo "kafka: stopped (data kept in $KAFKA_DATA_DIR, ports $KAFKA_PORT/$KAFKA_CONTROLLER_PORT; \`start\` resumes it); log $KAFKA_LOG"
  else
    echo "kafka: not running: pid ${KAFKA_PID:-?} is gone (crashed or killed); \`restart\` resumes its data, \`start\` starts fresh; log $KAFKA_LOG"
  fi
  return 1
}

cmd_env() {
  load_state || die "not started"
  echo "export KDELAY_TEST_BROKERS=127.0.0.1:$KAFKA_PORT"
}

cmd_logs() {
  local n="${1:-100}"
  if load_state; then :; else KAFKA_LOG="$STATE_DIR/kafka.log"; fi
  [[ -f "$KAFKA_LOG" ]] || die "no log at $KAFKA_LOG"
  # Skip the indented `key = value` config dumps; the file has them all.
  grep -av $'^\t' "$KAFKA_LOG" | tail -n "$n"
}

# Cluster and secured modes (.ci/kafka-cluster.sh): `start --brokers N`,
# `start --security DIR`, and every command while a cluster's state exists.
if [[ -f "$STATE_DIR/cluster.env" || " $* " == *" --brokers"* || " $* " == *" --security"* ]]; then
  # shellcheck source=kafka-cluster.sh
  source "$(dirname "${BASH_SOURCE[0]}")/kafka-cluster.sh"
  cluster_main "$@"
  exit $?
fi

case "${1:-}" in
  start) shift; cmd_start "$@" ;;
  stop) shift; cmd_stop "$@" ;;
  restart) shift; cmd_restart "$@" ;;
  status) shift; cmd_status "$@" ;;
  env) shift; cmd_env "$@" ;;
  logs) shift; cmd_logs "$@" ;;
  jars) resolve_jars; echo "$CACHE_DIR/libs" ;;
  *) awk 'NR == 1 { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "$0"; exit 2 ;;
esac
