# .ci/kafka-cluster.sh — the multi-broker and secured modes of .ci/kafka.sh,
# sourced by it (not run on its own): `kafka.sh start --brokers N` and
# `kafka.sh start --security DIR`, and every command while such a cluster's
# state exists in $KDELAY_KAFKA_STATE. It reuses kafka.sh's functions
# (resolve_jars, free_port, run_tool, ...), defined before it is sourced.
#
# Layout: one dedicated KRaft controller (node.id 100, process.roles=
# controller, a quorum of one; production runs 3 or 5) and N brokers
# (node.id 1..N, process.roles=broker) on 127.0.0.1, all from the same
# Maven jars. The tests stop, kill and restart brokers, never the
# controller, so leader elections and ISR changes are always decided.
# Topic defaults: default.replication.factor=min(3,N),
# min.insync.replicas=min(2,N); the internal topics likewise.
#
# --security DIR adds, on every broker, a SASL_SSL listener (SCRAM-SHA-512
# and PLAIN) and an SSL listener that requires a client certificate, with
# the StandardAuthorizer (allow.everyone.if.no.acl.found=false). DIR holds
# ca.pem (the CA that signed the broker and client certificates) and
# broker.pem (an unencrypted PKCS#8 private key followed by the broker's
# certificate chain; SANs 127.0.0.1 and localhost). Users: the
# space-separated name:password pairs of KDELAY_KAFKA_SASL_USERS, as PLAIN
# users (JAAS) and SCRAM-SHA-512 credentials (added at format time). An
# SSL client's principal is its certificate's CN. With
# KDELAY_KAFKA_OAUTH_JWKS_URL (an http(s) JWKS endpoint) and
# KDELAY_KAFKA_OAUTH_ISSUER set, the SASL_SSL listener also takes
# OAUTHBEARER: Kafka's OAuthBearerValidatorCallbackHandler checks each JWT
# against that key set (signature, "kid", "iss" the issuer, audience
# "kafka", expiry); the principal is the token's "sub". The PLAINTEXT listener
# (the address `start` prints) and the controller listener stay
# unauthenticated, and their principal, User:ANONYMOUS, is a super user:
# the tests administer the cluster there. Never do that outside a test.
#
# State: $STATE_DIR/cluster.env, and $STATE_DIR/node-<id>.env,
# node-<id>.properties and node-<id>.log per node; data under one
# ${TMPDIR:-/tmp}/kdelay-kafka-data.XXXXXX directory.

CLUSTER_FILE="$STATE_DIR/cluster.env"
CTRL_ID=100
CLUSTER_HEAP="${KDELAY_KAFKA_HEAP:--Xms256m -Xmx512m}"
CTRL_HEAP="${KDELAY_KAFKA_CONTROLLER_HEAP:--Xms128m -Xmx256m}"

c_load() {
  [[ -f "$CLUSTER_FILE" ]] || return 1
  # shellcheck disable=SC1090
  source "$CLUSTER_FILE"
}

c_save() {
  cat >"$CLUSTER_FILE" <<EOF
CLUSTER_NODES=$CLUSTER_NODES
CLUSTER_ID=$CLUSTER_ID
CLUSTER_DATA=$CLUSTER_DATA
CLUSTER_SECURITY_DIR=${CLUSTER_SECURITY_DIR:-}
CLUSTER_SASL_USERS="${CLUSTER_SASL_USERS:-}"
CLUSTER_OAUTH_JWKS_URL="${CLUSTER_OAUTH_JWKS_URL:-}"
CLUSTER_OAUTH_ISSUER="${CLUSTER_OAUTH_ISSUER:-}"
CLUSTER_CTRL_PORT=$CLUSTER_CTRL_PORT
KAFKA_VERSION=$KAFKA_VERSION
KAFKA_CACHE_DIR=$CACHE_DIR
EOF
}

# c_node_load ID: NODE_PID, NODE_PORT, NODE_SASL_PORT, NODE_SSL_PORT,
# NODE_KEPT of node ID.
c_node_load() {
  NODE_PID=0 NODE_PORT=0 NODE_SASL_PORT=0 NODE_SSL_PORT=0 NODE_KEPT=0
  # shellcheck disable=SC1090
  [[ -f "$STATE_DIR/node-$1.env" ]] && source "$STATE_DIR/node-$1.env"
  return 0
}

c_node_save() {
  cat >"$STATE_DIR/node-$1.env" <<EOF
NODE_PID=$NODE_PID
NODE_PORT=$NODE_PORT
NODE_SASL_PORT=$NODE_SASL_PORT
NODE_SSL_PORT=$NODE_SSL_PORT
NODE_KEPT=$NODE_KEPT
EOF
}

c_log() { echo "$STATE_DIR/node-$1.log"; }

# c_alive PID: the pid runs and is a Kafka node (kafka.sh's proc_alive: a
# node this invocation launched counts from the fork on).
c_alive() { proc_alive "${1:-}"; }

# C_START_MODE and C_LAUNCHED_NODES: what c_start_cleanup undoes when a
# start fails: "fresh" removes the whole cluster's state and data, "kept"
# marks the nodes this start launched (ids in C_LAUNCHED_NODES) stopped
# with their data kept.
C_START_MODE=""
C_LAUNCHED_NODES=""

# c_start_cleanup: the EXIT trap of every start. On failure it stops each
# node this start launched (kill_launched), so a failed start never leaves
# a node running, then fixes the state (C_START_MODE).
c_start_cleanup() {
  local rc=$? id
  ((rc == 0)) && return 0
  if ! kill_launched; then
    log "start failed and a node it launched survived SIGKILL; state stays in $STATE_DIR"
    return
  fi
  case "$C_START_MODE" in
    fresh)
      [[ "${CLUSTER_DATA:-}" == *kdelay-kafka-data.* ]] && rm -rf "$CLUSTER_DATA"
      rm -f "$CLUSTER_FILE" "$STATE_DIR"/node-*.env "$STATE_DIR"/node-*.properties
      ;;
    kept)
      for id in $C_LAUNCHED_NODES; do
        c_node_load "$id"
        NODE_PID=0
        NODE_KEPT=1
        c_node_save "$id"
      done
      ;;
  esac
  log "start failed (exit $rc); no node of it is left running${C_START_MODE:+ (state: $C_START_MODE)}"
}

# c_start_guard MODE: arm c_start_cleanup for a start of kind MODE.
c_start_guard() {
  C_START_MODE="$1"
  trap c_start_cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
}

c_start_done() { trap - EXIT INT TERM; }

c_brokers() { seq 1 "$CLUSTER_NODES"; }

# c_bootstrap: the PLAINTEXT addresses of all brokers, comma-separated.
c_bootstrap() {
  local id out=()
  for id in $(c_brokers); do
    c_node_load "$id"
    out+=("127.0.0.1:$NODE_PORT")
  done
  local IFS=,
  echo "${out[*]}"
}

# c_listener_addrs PROTO: the SASL_SSL or SSL addresses, comma-separated.
c_listener_addrs() {
  local id out=() p
  for id in $(c_brokers); do
    c_node_load "$id"
    if [[ "$1" == SASL_SSL ]]; then p=$NODE_SASL_PORT; else p=$NODE_SSL_PORT; fi
    out+=("127.0.0.1:$p")
  done
  local IFS=,
  echo "${out[*]}"
}

c_write_props() {
  local id="$1" f="$STATE_DIR/node-$1.properties"
  local rf=$((CLUSTER_NODES < 3 ? CLUSTER_NODES : 3)) isr=$((CLUSTER_NODES < 2 ? CLUSTER_NODES : 2))
  local auth=""
  if [[ -n "${CLUSTER_SECURITY_DIR:-}" ]]; then
    auth="authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:ANONYMOUS
allow.everyone.if.no.acl.found=false"
  fi
  if [[ "$id" == "$CTRL_ID" ]]; then
    cat >"$f" <<EOF
# Generated by .ci/kafka-cluster.sh — the dedicated KRaft controller.
process.roles=controller
node.id=$CTRL_ID
controller.quorum.voters=$CTRL_ID@127.0.0.1:$CLUSTER_CTRL_PORT
listeners=CONTROLLER://127.0.0.1:$CLUSTER_CTRL_PORT
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT
log.dirs=$CLUSTER_DATA/node-$CTRL_ID/metadata
# Topic defaults belong to the controller in KRaft: it applies them to
# CreateTopics, and it publishes its min.insync.replicas as the cluster-wide
# default (KIP-966, Kafka 4.x), which overrides a broker's own setting.
num.partitions=1
default.replication.factor=$rf
min.insync.replicas=$isr
unclean.leader.election.enable=false
num.network.threads=2
num.io.threads=2
$auth
EOF
    return
  fi
  c_node_load "$id"
  local listeners="PLAINTEXT://127.0.0.1:$NODE_PORT" protos="PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT" sec=""
  if [[ -n "${CLUSTER_SECURITY_DIR:-}" ]]; then
    listeners+=",SASL_SSL://127.0.0.1:$NODE_SASL_PORT,SSL://127.0.0.1:$NODE_SSL_PORT"
    protos+=",SASL_SSL:SASL_SSL,SSL:SSL"
    local plain="" u
    for u in ${CLUSTER_SASL_USERS:-}; do plain+=" user_${u%%:*}=\"${u#*:}\""; done
    sec="sasl.enabled.mechanisms=SCRAM-SHA-512,PLAIN
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required$plain;
ssl.keystore.type=PEM
ssl.keystore.location=$CLUSTER_SECURITY_DIR/broker.pem
ssl.truststore.type=PEM
ssl.truststore.location=$CLUSTER_SECURITY_DIR/ca.pem
listener.name.ssl.ssl.client.auth=required
ssl.principal.mapping.rules=RULE:^CN=([^,]+).*\$/\$1/,DEFAULT"
    if [[ -n "${CLUSTER_OAUTH_JWKS_URL:-}" ]]; then
      sec="${sec/sasl.enabled.mechanisms=SCRAM-SHA-512,PLAIN/sasl.enabled.mechanisms=SCRAM-SHA-512,PLAIN,OAUTHBEARER}
listener.name.sasl_ssl.oauthbearer.sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;
listener.name.sasl_ssl.oauthbearer.sasl.server.callback.handler.class=org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler
sasl.oauthbearer.jwks.endpoint.url=$CLUSTER_OAUTH_JWKS_URL
sasl.oauthbearer.expected.audience=kafka
sasl.oauthbearer.expected.issuer=$CLUSTER_OAUTH_ISSUER"
    fi
  fi
  cat >"$f" <<EOF
# Generated by .ci/kafka-cluster.sh — broker $id of $CLUSTER_NODES.
process.roles=broker
node.id=$id
controller.quorum.voters=$CTRL_ID@127.0.0.1:$CLUSTER_CTRL_PORT
controller.listener.names=CONTROLLER
listeners=$listeners
advertised.listeners=$listeners
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=$protos
log.dirs=$CLUSTER_DATA/node-$id/logs
num.partitions=1
default.replication.factor=$rf
min.insync.replicas=$isr
offsets.topic.replication.factor=$rf
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=$rf
transaction.state.log.min.isr=$isr
transaction.state.log.num.partitions=4
share.coordinator.state.topic.replication.factor=$rf
share.coordinator.state.topic.min.isr=$isr
unclean.leader.election.enable=false
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
delete.topic.enable=true
num.network.threads=2
num.io.threads=4
num.replica.fetchers=1
num.recovery.threads.per.data.dir=1
log.cleaner.threads=1
log.cleaner.dedupe.buffer.size=8388608
log.retention.check.interval.ms=30000
$sec
$auth
EOF
}

c_format() { # c_format ID: format node ID's storage (in the background).
  local args=(kafka.tools.StorageTool format -t "$CLUSTER_ID" -c "$STATE_DIR/node-$1.properties")
  local u
  for u in ${CLUSTER_SASL_USERS:-}; do
    args+=(--add-scram "SCRAM-SHA-512=[name=${u%%:*},password=${u#*:}]")
  done
  run_tool "${args[@]}" >"$STATE_DIR/node-$1.format.log" 2>&1
}

c_launch() { # c_launch ID
  local id="$1" heap="$CLUSTER_HEAP" log
  [[ "$id" == "$CTRL_ID" ]] && heap="$CTRL_HEAP"
  log="$(c_log "$id")"
  printf '\n===== [kafka.sh] launch node %s %s =====\n' "$id" "$(date -u +%FT%TZ)" >>"$log"
  local detach=()
  command -v setsid >/dev/null && detach=(setsid)
  # shellcheck disable=SC2086
  "${detach[@]}" "$JAVA" $heap -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:ParallelGCThreads=1 \
    -XX:CICompilerCount=2 -Djava.awt.headless=true \
    "$(log4j_opts broker)" \
    -Dkafka.logs.dir="$STATE_DIR" \
    ${CLUSTER_OAUTH_JWKS_URL:+-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls=$CLUSTER_OAUTH_JWKS_URL} \
    -cp "$(classpath)" kafka.Kafka "$STATE_DIR/node-$id.properties" \
    </dev/null >>"$log" 2>&1 &
  c_node_load "$id"
  NODE_PID=$!
  NODE_KEPT=0
  LAUNCHED+="$NODE_PID "
  C_LAUNCHED_NODES+=" $id"
  c_node_save "$id"
  log "node $id: pid $NODE_PID, log $log"
}

# c_wait_port ID PORT: wait until node ID accepts connections on PORT.
c_wait_port() {
  local id="$1" port="$2" deadline=$((SECONDS + START_TIMEOUT))
  while ! port_in_use "$port"; do
    c_node_load "$id"
    c_alive "$NODE_PID" || { tail -n 60 "$(c_log "$id")" >&2; die "node $id exited during startup (log tail above)"; }
    ((SECONDS < deadline)) || { tail -n 60 "$(c_log "$id")" >&2; die "node $id: port $port not open after ${START_TIMEOUT}s"; }
    sleep 0.5
  done
}

# c_wait_brokers IDS...: wait until the cluster's metadata, asked through
# one of the given brokers, lists every one of them unfenced (4.x prints
# `isFenced: false`; 3.x lists only unfenced brokers and prints no flag).
c_wait_brokers() {
  local deadline=$((SECONDS + START_TIMEOUT)) id boot=() missing
  for id in "$@"; do
    c_node_load "$id"
    c_wait_port "$id" "$NODE_PORT"
    boot+=("127.0.0.1:$NODE_PORT")
  done
  local IFS=,
  local out="$STATE_DIR/apiversions.txt"
  while :; do
    missing=""
    if api_versions "${boot[*]}"; then
      for id in "$@"; do
        grep -Eq "\(id: $id rack: [^ )]*( isFenced: false)?\)" "$out" || missing+=" $id"
      done
      [[ -z "$missing" ]] && return 0
    else
      missing=" (no answer)"
    fi
    for id in "$@"; do
      c_node_load "$id"
      c_alive "$NODE_PID" || { tail -n 60 "$(c_log "$id")" >&2; die "broker $id exited during startup (log tail above)"; }
    done
    ((SECONDS < deadline)) || { cat "$out" >&2; die "brokers not ready after ${START_TIMEOUT}s: missing$missing"; }
    sleep 1
  done
}

c_version() {
  local v
  v="$(grep -ao 'Kafka version: [^ ]*' "$(c_log 1)" 2>/dev/null | tail -n 1 | sed 's/Kafka version: //')"
  echo "${v:-$KAFKA_VERSION}"
}

c_fresh_start() { # c_fresh_start N SECURITY_DIR
  local t0=$SECONDS id
  CLUSTER_NODES="$1"
  CLUSTER_SECURITY_DIR="$2"
  CLUSTER_SASL_USERS="${KDELAY_KAFKA_SASL_USERS:-}"
  CLUSTER_OAUTH_JWKS_URL="${KDELAY_KAFKA_OAUTH_JWKS_URL:-}"
  CLUSTER_OAUTH_ISSUER="${KDELAY_KAFKA_OAUTH_ISSUER:-}"
  [[ -z "$CLUSTER_OAUTH_JWKS_URL" || -n "$CLUSTER_OAUTH_ISSUER" ]] || die "KDELAY_KAFKA_OAUTH_JWKS_URL needs KDELAY_KAFKA_OAUTH_ISSUER"
  [[ "$CLUSTER_NODES" =~ ^[1-9]$ ]] || die "--brokers: want 1..9, got '$CLUSTER_NODES'"
  if [[ -n "$CLUSTER_SECURITY_DIR" ]]; then
    CLUSTER_SECURITY_DIR="$(cd "$CLUSTER_SECURITY_DIR" && pwd)" || die "--security: no directory $2"
    [[ -f "$CLUSTER_SECURITY_DIR/ca.pem" && -f "$CLUSTER_SECURITY_DIR/broker.pem" ]] \
      || die "--security $CLUSTER_SECURITY_DIR: needs ca.pem and broker.pem"
    [[ -n "$CLUSTER_SASL_USERS" ]] || die "--security: set KDELAY_KAFKA_SASL_USERS (name:password ...)"
  fi
  check_version
  command -v "$JAVA" >/dev/null || die "java not found (set JAVA_HOME or put Java 17+ on PATH)"
  resolve_jars
  write_log4j_configs
  c_start_guard fresh
  CLUSTER_ID="$(random_cluster_id)"
  CLUSTER_DATA="$(mktemp -d "${TMPDIR:-/tmp}/kdelay-kafka-data.XXXXXX")"
  local used=" "
  pick() { local p; p="$(free_port)"; while [[ "$used" == *" $p "* ]]; do p="$(free_port)"; done; used+="$p "; echo "$p"; }
  CLUSTER_CTRL_PORT="$(pick)"
  c_save
  for id in $(c_brokers); do
    NODE_PID=0 NODE_KEPT=0 NODE_PORT="$(pick)" NODE_SASL_PORT=0 NODE_SSL_PORT=0
    if [[ -n "$CLUSTER_SECURITY_DIR" ]]; then NODE_SASL_PORT="$(pick)"; NODE_SSL_PORT="$(pick)"; fi
    c_node_save "$id"
  done
  NODE_PID=0 NODE_KEPT=0 NODE_PORT=$CLUSTER_CTRL_PORT NODE_SASL_PORT=0 NODE_SSL_PORT=0
  c_node_save "$CTRL_ID"
  local pids=() rc=0
  for id in "$CTRL_ID" $(c_brokers); do
    : >"$(c_log "$id")"
    c_write_props "$id"
    c_format "$id" &
    pids+=($!)
  done
  log "formatting $((CLUSTER_NODES + 1)) nodes (cluster id $CLUSTER_ID) in $CLUSTER_DATA"
  for id in "${pids[@]}"; do wait "$id" || rc=1; done
  if ((rc)); then
    cat "$STATE_DIR"/node-*.format.log >&2
    die "kafka.tools.StorageTool format failed"
  fi
  log "starting Apache Kafka $KAFKA_VERSION: controller $CTRL_ID on 127.0.0.1:$CLUSTER_CTRL_PORT, $CLUSTER_NODES brokers${CLUSTER_SECURITY_DIR:+ (SASL_SSL + SSL, ACLs)}"
  c_launch "$CTRL_ID"
  c_wait_port "$CTRL_ID" "$CLUSTER_CTRL_PORT"
  for id in $(c_brokers); do c_launch "$id"; done
  # shellcheck disable=SC2046
  c_wait_brokers $(c_brokers)
  c_start_done
  log "ready: Apache Kafka $(c_version), $CLUSTER_NODES brokers on $(c_bootstrap) in $((SECONDS - t0))s"
  c_bootstrap
}

# c_start_node ID: start a stopped broker (or the controller) on its kept
# data and ports; wait until it is registered and unfenced.
c_start_node() {
  local id="$1" t0=$SECONDS
  c_node_load "$id"
  c_start_guard kept
  if c_alive "$NODE_PID"; then
    log "node $id already running (pid $NODE_PID)"
  else
    CACHE_DIR="${KAFKA_CACHE_DIR:-$CACHE_DIR}"
    [[ -f "$CACHE_DIR/.complete" ]] || resolve_jars
    write_log4j_configs
    c_launch "$id"
  fi
  if [[ "$id" == "$CTRL_ID" ]]; then
    c_wait_port "$id" "$CLUSTER_CTRL_PORT"
    c_start_done
    echo "127.0.0.1:$CLUSTER_CTRL_PORT"
  else
    c_wait_brokers "$id"
    c_start_done
    log "broker $id ready in $((SECONDS - t0))s"
    c_node_load "$id"
    echo "127.0.0.1:$NODE_PORT"
  fi
}

# c_stop_node ID SIGNAL: TERM (controlled shutdown: leadership moves
# first) waits up to 60s then SIGKILLs; KILL is a crash. Data is kept.
c_stop_node() {
  local id="$1" sig="$2" i t0=$SECONDS
  c_node_load "$id"
  if ! c_alive "$NODE_PID"; then
    log "node $id not running"
  else
    log "node $id: SIG$sig to pid $NODE_PID"
    kill "-$sig" "$NODE_PID" 2>/dev/null || true
    for i in $(seq 1 120); do c_alive "$NODE_PID" || break; sleep 0.5; done
    if c_alive "$NODE_PID"; then
      log "node $id did not exit in 60s; SIGKILL"
      kill -KILL "$NODE_PID" 2>/dev/null || true
      for i in $(seq 1 20); do c_alive "$NODE_PID" || break; sleep 0.25; done
    fi
    c_alive "$NODE_PID" && die "node $id (pid $NODE_PID) is still alive"
    log "node $id stopped in $((SECONDS - t0))s"
  fi
  NODE_PID=0
  NODE_KEPT=1
  c_node_save "$id"
}

# c_stop_all [--keep-data]: the brokers (SIGTERM, in parallel), then the
# controller: SIGTERM when the data is kept, else SIGKILL (its data goes).
c_stop_all() {
  local id pids=()
  for id in $(c_brokers); do c_stop_node "$id" TERM & pids+=($!); done
  for id in "${pids[@]}"; do wait "$id" || true; done
  if [[ "${1:-}" == --keep-data ]]; then
    c_stop_node "$CTRL_ID" TERM
    log "kept data $CLUSTER_DATA and ports (start again with: $0 start)"
    return 0
  fi
  c_stop_node "$CTRL_ID" KILL
  for id in $(c_brokers); do
    c_node_load "$id"
    c_alive "$NODE_PID" && die "broker $id (pid $NODE_PID) is still alive"
  done
  [[ "$CLUSTER_DATA" == *kdelay-kafka-data.* ]] && rm -rf "$CLUSTER_DATA"
  rm -f "$CLUSTER_FILE" "$STATE_DIR"/node-*.env "$STATE_DIR"/node-*.properties "$STATE_DIR"/node-*.format.log "$STATE_DIR/apiversions.txt"
  log "removed data dir; logs left at $STATE_DIR/node-*.log"
}

c_status() {
  local id rc=0
  for id in "$CTRL_ID" $(c_brokers); do
    c_node_load "$id"
    local what="broker $id" port=$NODE_PORT extra=""
    [[ "$id" == "$CTRL_ID" ]] && what="controller $id"
    [[ "$NODE_SASL_PORT" != 0 ]] && extra=" (SASL_SSL 127.0.0.1:$NODE_SASL_PORT, SSL 127.0.0.1:$NODE_SSL_PORT)"
    if c_alive "$NODE_PID" && port_in_use "$port"; then
      echo "kafka: $what running: pid $NODE_PID, 127.0.0.1:$port$extra, log $(c_log "$id")"
    elif c_alive "$NODE_PID"; then
      echo "kafka: $what: process $NODE_PID alive but port $port not accepting"
      rc=1
    else
      echo "kafka: $what stopped (data kept; \`start $id\` resumes it), port $port"
      rc=1
    fi
  done
  echo "kafka: Apache Kafka $(c_version), cluster $CLUSTER_ID, bootstrap $(c_bootstrap), data $CLUSTER_DATA"
  return $rc
}

c_env() {
  echo "export KDELAY_TEST_BROKERS=$(c_bootstrap)"
  if [[ -n "${CLUSTER_SECURITY_DIR:-}" ]]; then
    echo "export KDELAY_TEST_SASL_SSL_BROKERS=$(c_listener_addrs SASL_SSL)"
    echo "export KDELAY_TEST_SSL_BROKERS=$(c_listener_addrs SSL)"
  fi
}

c_logs() {
  local n="${1:-100}" id
  for id in "$CTRL_ID" $(c_brokers); do
    [[ -f "$(c_log "$id")" ]] || continue
    grep -av $'^\t' "$(c_log "$id")" | tail -n "$n" | sed "s/^/[node $id] /"
  done
}

c_check_id() {
  [[ "$1" =~ ^[0-9]+$ ]] && { [[ "$1" == "$CTRL_ID" ]] || ((1 <= $1 && $1 <= CLUSTER_NODES)); } \
    || die "no node $1: brokers are 1..$CLUSTER_NODES (controller $CTRL_ID)"
}

cluster_main() {
  local cmd="${1:-}"
  shift || true
  local brokers="" security="" arg
  local args=()
  while (($#)); do
    case "$1" in
      --brokers) brokers="${2:-}"; shift 2 || die "--brokers needs a number" ;;
      --brokers=*) brokers="${1#*=}"; shift ;;
      --security) security="${2:-}"; shift 2 || die "--security needs a directory" ;;
      --security=*) security="${1#*=}"; shift ;;
      *) args+=("$1"); shift ;;
    esac
  done
  mkdir -p "$STATE_DIR"
  if ! c_load; then
    [[ "$cmd" == start ]] || { log "not running (no cluster state in $STATE_DIR)"; [[ "$cmd" == stop ]] && return 0; return 1; }
    c_fresh_start "${brokers:-3}" "$security"
    return
  fi
  CACHE_DIR="${KAFKA_CACHE_DIR:-$CACHE_DIR}"
  arg="${args[0]:-}"
  case "$cmd" in
    start)
      if [[ -n "$arg" ]]; then
        c_check_id "$arg"
        c_start_node "$arg"
        return
      fi
      [[ -z "$brokers" || "$brokers" == "$CLUSTER_NODES" ]] \
        || die "a cluster of $CLUSTER_NODES brokers already has state in $STATE_DIR; \`stop\` it first"
      local id
      c_start_guard kept
      write_log4j_configs
      for id in "$CTRL_ID" $(c_brokers); do
        c_node_load "$id"
        c_alive "$NODE_PID" && continue
        c_launch "$id"
        [[ "$id" == "$CTRL_ID" ]] && c_wait_port "$id" "$CLUSTER_CTRL_PORT"
      done
      # shellcheck disable=SC2046
      c_wait_brokers $(c_brokers)
      c_start_done
      c_bootstrap
      ;;
    stop)
      if [[ -n "$arg" && "$arg" != --keep-data ]]; then
        c_check_id "$arg"
        c_stop_node "$arg" TERM
      else
        c_stop_all "$arg"
      fi
      ;;
    kill)
      [[ -n "$arg" ]] || die "kill needs a broker number (1..$CLUSTER_NODES)"
      c_check_id "$arg"
      c_stop_node "$arg" KILL
      ;;
    restart)
      if [[ -n "$arg" ]]; then
        c_check_id "$arg"
        c_stop_node "$arg" TERM
        c_start_node "$arg"
        return
      fi
      c_stop_all --keep-data
      cluster_main start
      ;;
    acls)
      # Kafka's own kafka-acls (AclCommand) against the PLAINTEXT listener,
      # whose principal is a super user in --security mode.
      run_tool "$(tool_class AclCommand)" --bootstrap-server "$(c_bootstrap)" "${args[@]}"
      ;;
    status) c_status ;;
    env) c_env ;;
    logs) c_logs "$arg" ;;
    *) die "unknown command '$cmd'" ;;
  esac
}
