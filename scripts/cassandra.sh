#!/usr/bin/env bash
# Runs a real single-node Apache Cassandra 5.0.8 for the tests, from the
# cassandra-all jars on Maven Central, on OpenJDK 17, bound to 127.0.0.1.
#
#   scripts/cassandra.sh start    start a node (fetching the jars once), wait until
#                                 it serves CQL, print KAIROS_TEST_CASSANDRA=127.0.0.1:<port>
#   scripts/cassandra.sh stop     stop the node this run dir recorded, remove its data
#   scripts/cassandra.sh stop --keep
#                                 stop the node but keep its data dir, ports and
#                                 settings for restart (an outage in a test)
#   scripts/cassandra.sh restart  start the node of the last start again on the same
#                                 data dir and ports (stopping it first if it runs);
#                                 print KAIROS_TEST_CASSANDRA=... once it serves CQL
#   scripts/cassandra.sh status   say whether it runs (exit 0 if it does, 1 if not)
#   scripts/cassandra.sh env      print KAIROS_TEST_CASSANDRA=... of the running node
#   scripts/cassandra.sh check    exit 0 if a node can be started here (Java 17, and
#                                 the jars cached or Maven to fetch them), else say
#                                 why and exit 1; fetches and starts nothing
#
# Cluster mode (CASSANDRA_NODES=N, 2..9, at start and check): N nodes on
# 127.0.0.1 .. 127.0.0.N (Linux routes all of 127/8 to lo), one CQL port and one
# storage port shared by all of them, seed 127.0.0.1, one token each, evenly
# spread; node I lives in $KAIROS_RUN_DIR/node<I>. start starts the nodes one
# after another and waits until every node's log says every other node is UP;
# it prints KAIROS_TEST_CASSANDRA=127.0.0.1:<port> and
# KAIROS_TEST_CASSANDRA_HOSTS=127.0.0.1:<port>,127.0.0.2:<port>,... stop,
# stop --keep, restart, status and env then act on the whole cluster, and
#   scripts/cassandra.sh stop-node I [--kill]
#                                 stop node I (TERM; --kill: SIGKILL, a crash),
#                                 keeping its data; after a TERM it waits until
#                                 the other running nodes see it DOWN
#   scripts/cassandra.sh start-node I
#                                 start node I again on its data and wait until
#                                 it and the other running nodes see each other UP
# Memory: about 1.5 GiB RSS per node with the default 1 GiB heap (3 nodes:
# ~4.5 GiB). Password authentication and TLS are not offered in cluster mode.
#
# Use it by hand:   export "$(scripts/cassandra.sh start)"; go test ./...; scripts/cassandra.sh stop
#
# Environment:
#   KAIROS_CACHE       jar cache (default ${XDG_CACHE_HOME:-$HOME/.cache}/kairosadapter)
#   KAIROS_RUN_DIR     where the state file and the per-start data dirs live
#                      (default <repo>/.cache/cassandra-run); one node per KAIROS_RUN_DIR
#   KAIROS_JAVA        a java binary to use instead of the detected JDK 17
#   CASSANDRA_START_TIMEOUT   seconds to wait for readiness (default 180)
#   CASSANDRA_HEAP     heap size (default 1G)
#   CASSANDRA_AUTH=1   at start: password authentication (PasswordAuthenticator,
#                      CassandraAuthorizer); start waits until the default superuser
#                      cassandra/cassandra can log in. A restart keeps the setting.
#   CASSANDRA_NODES    at start and check: the number of nodes (default 1: the
#                      single node above; 2..9: cluster mode)
#   CASSANDRA_TLS_DIR  at start: client TLS only (no plain CQL), with the node's
#                      unencrypted private key and certificate chain in
#                      $CASSANDRA_TLS_DIR/node.pem and the CA in ca.pem (Cassandra's
#                      PEMBasedSslContextFactory). A restart keeps the setting.
set -euo pipefail

CASSANDRA_VERSION=5.0.8
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CONF_DIR=$REPO/tools/cassandra
CACHE=${KAIROS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kairosadapter}
CASS_HOME=$CACHE/cassandra-$CASSANDRA_VERSION
LIB=$CASS_HOME/lib
RUN_BASE=${KAIROS_RUN_DIR:-$REPO/.cache/cassandra-run}
STATE=$RUN_BASE/state
START_TIMEOUT=${CASSANDRA_START_TIMEOUT:-180}
HEAP=${CASSANDRA_HEAP:-1G}
AUTH=${CASSANDRA_AUTH:-0}
TLS_DIR=${CASSANDRA_TLS_DIR:-}
NODES=${CASSANDRA_NODES:-1}
# CLUSTER marks a run dir in cluster mode; it holds NODES, CQL_PORT, STORAGE_PORT.
CLUSTER=$RUN_BASE/cluster
# IP is the address of the node in hand; cluster mode sets NODE and IP per node.
IP=127.0.0.1
NODE=''

log() { printf 'cassandra.sh: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# java_major prints the feature version of the given java binary (8, 11, 17, ...).
java_major() {
	local v
	v=$("$1" -version 2>&1 | sed -n 's/.*version "\([^"]*\)".*/\1/p' | head -n1) || true
	v=${v#1.}          # 1.8.0_x -> 8.0_x
	printf '%s\n' "${v%%[.+_-]*}"
}

# find_java picks a JDK 17: Cassandra 5.0 needs 11 or 17, and JDK 18+ cannot
# install its SecurityManager (24+ not at all), so nothing else is accepted.
find_java() {
	local c
	local -a cands=()
	[[ -n ${KAIROS_JAVA:-} ]] && cands+=("$KAIROS_JAVA")
	for c in /usr/lib/jvm/java-17-openjdk-*/bin/java; do
		[[ -x $c ]] && cands+=("$c")
	done
	[[ -n ${JAVA_HOME:-} && -x $JAVA_HOME/bin/java ]] && cands+=("$JAVA_HOME/bin/java")
	c=$(command -v java || true)
	[[ -n $c ]] && cands+=("$c")
	for c in "${cands[@]}"; do
		if [[ $(java_major "$c") == 17 ]]; then
			printf '%s\n' "$c"
			return 0
		fi
	done
	[[ ${1:-} == quiet ]] && return 1
	die "Cassandra $CASSANDRA_VERSION needs Java 17 (not 18+, whose SecurityManager removal breaks it).
  Tried: ${cands[*]:-<no java found>}
  Install it (Debian: apt-get install openjdk-17-jre-headless) or set KAIROS_JAVA=/path/to/java17."
}

fetch_jars() {
	[[ -f $LIB/cassandra-all-$CASSANDRA_VERSION.jar ]] && return 0
	command -v mvn >/dev/null || die "Maven (mvn) is needed once to fetch the Cassandra jars into $LIB
  Install it (Debian: apt-get install maven)."
	log "fetching cassandra-all $CASSANDRA_VERSION and its dependencies from Maven Central into $LIB ..."
	mkdir -p "$CASS_HOME"
	local tmp
	tmp=$(mktemp -d "$CASS_HOME/lib.tmp.XXXXXX")
	# shellcheck disable=SC2064
	trap "rm -rf '$tmp'" EXIT
	mvn -B -q -Dstyle.color=never -f "$CONF_DIR/pom.xml" \
		org.apache.maven.plugins:maven-dependency-plugin:3.6.1:copy-dependencies \
		-DincludeScope=runtime -DoutputDirectory="$tmp" >&2 ||
		die "mvn failed to fetch the Cassandra jars"
	[[ -f $tmp/cassandra-all-$CASSANDRA_VERSION.jar ]] || die "mvn did not produce cassandra-all-$CASSANDRA_VERSION.jar"
	# Rename into place so that a concurrent or interrupted fetch never leaves a half-filled lib/.
	if ! mv -T "$tmp" "$LIB" 2>/dev/null; then
		[[ -f $LIB/cassandra-all-$CASSANDRA_VERSION.jar ]] || die "could not move the jars into $LIB"
		rm -rf "$tmp"
	fi
	trap - EXIT
}

# port_free reports whether nothing listens on ${2:-127.0.0.1}:$1 and the port can be bound.
port_free() {
	local ip=${2:-127.0.0.1}
	if (exec 3<>"/dev/tcp/$ip/$1") 2>/dev/null; then
		return 1
	fi
	if command -v python3 >/dev/null; then
		python3 - "$1" "$ip" <<'EOF' 2>/dev/null
import socket, sys
s = socket.socket()
s.bind((sys.argv[2], int(sys.argv[1])))
s.close()
EOF
	fi
}

# pick_port prints a free port below Linux's ephemeral range (32768+), so that
# outgoing connections do not take it between the probe and the JVM's bind;
# in cluster mode one free on the address of every node.
pick_port() {
	local p _ i ok
	for _ in $(seq 1 200); do
		p=$((20000 + (RANDOM % 12000)))
		[[ $p == "${1:-}" ]] && continue
		ok=1
		for i in $(seq 1 "$NODES"); do
			port_free "$p" "127.0.0.$i" || { ok=0; break; }
		done
		if ((ok)); then
			printf '%s\n' "$p"
			return 0
		fi
	done
	die "found no free TCP port on 127.0.0.1"
}

# read_state loads PID, CQL_PORT, STORAGE_PORT, RUN, AUTH and TLS_DIR from the
# state file.
read_state() {
	PID='' CQL_PORT='' STORAGE_PORT='' RUN='' IP=127.0.0.1
	[[ -f $STATE ]] || return 1
	local k v
	while IFS='=' read -r k v; do
		case $k in
		PID) PID=$v ;;
		CQL_PORT) CQL_PORT=$v ;;
		STORAGE_PORT) STORAGE_PORT=$v ;;
		RUN) RUN=$v ;;
		AUTH) AUTH=$v ;;
		TLS_DIR) TLS_DIR=$v ;;
		IP) IP=$v ;;
		esac
	done <"$STATE"
	[[ -n $PID ]]
}

# write_config writes the node's cassandra.yaml into its run dir, so that a
# restart uses the same settings: the repository's file, with password
# authentication when AUTH=1 and client TLS when TLS_DIR is set.
write_config() {
	local out=$RUN/cassandra.yaml
	cp "$CONF_DIR/cassandra.yaml" "$out"
	if [[ -n $NODE ]]; then
		# One token per node, evenly spread over Murmur3's range.
		local token
		token=$(python3 -c 'import sys; n, i = int(sys.argv[1]), int(sys.argv[2]); print(-2**63 + (i - 1) * (2**64 // n))' "$NODES" "$NODE")
		sed -i -e "s/^listen_address: .*/listen_address: $IP/" \
			-e "s/^rpc_address: .*/rpc_address: $IP/" "$out"
		grep -qx "listen_address: $IP" "$out" && grep -qx "rpc_address: $IP" "$out" ||
			die "could not set the node's address: $CONF_DIR/cassandra.yaml has no listen_address/rpc_address lines"
		printf 'initial_token: %s\n' "$token" >>"$out"
	fi
	if [[ $AUTH == 1 ]]; then
		sed -i -e 's/^authenticator: .*/authenticator: PasswordAuthenticator/' \
			-e 's/^authorizer: .*/authorizer: CassandraAuthorizer/' "$out"
		grep -qx 'authenticator: PasswordAuthenticator' "$out" && grep -qx 'authorizer: CassandraAuthorizer' "$out" ||
			die "could not enable password authentication: $CONF_DIR/cassandra.yaml has no authenticator/authorizer lines"
	fi
	if [[ -n $TLS_DIR ]]; then
		cat >>"$out" <<-YAML
			client_encryption_options:
			  enabled: true
			  optional: false
			  ssl_context_factory:
			    class_name: org.apache.cassandra.security.PEMBasedSslContextFactory
			  keystore: $TLS_DIR/node.pem
			  truststore: $TLS_DIR/ca.pem
		YAML
	fi
}

# can_login reports whether cassandra/cassandra can log in over CQL (native
# protocol v4: STARTUP, then AUTH_RESPONSE with a SASL PLAIN token). The
# default superuser is created only after CQL is served, and the jars ship no
# CQL client, hence this small one.
can_login() {
	python3 - "$CQL_PORT" "$TLS_DIR" "$IP" <<'PY' 2>/dev/null
import socket, struct, sys

def frame(opcode, body):
    return struct.pack(">BBhBi", 4, 0, 0, opcode, len(body)) + body

def recv_exact(s, n):
    b = b""
    while len(b) < n:
        c = s.recv(n - len(b))
        if not c:
            raise EOFError
        b += c
    return b

def read_opcode(s):
    _, _, _, opcode, n = struct.unpack(">BBhBi", recv_exact(s, 9))
    recv_exact(s, n)
    return opcode

def short_string(v):
    return struct.pack(">H", len(v)) + v

s = socket.create_connection((sys.argv[3], int(sys.argv[1])), timeout=5)
if sys.argv[2]:  # TLS: only the login is checked here, not the certificate
    import ssl
    s = ssl._create_unverified_context().wrap_socket(s)
s.sendall(frame(0x01, struct.pack(">H", 1) + short_string(b"CQL_VERSION") + short_string(b"3.0.0")))
if read_opcode(s) != 0x03:  # not AUTHENTICATE
    sys.exit(1)
token = b"\0cassandra\0cassandra"
s.sendall(frame(0x0F, struct.pack(">i", len(token)) + token))
sys.exit(0 if read_opcode(s) == 0x10 else 1)  # AUTH_SUCCESS
PY
}

# ours reports whether $1 is a live Cassandra JVM using run dir $2 (guards
# against a recycled PID).
ours() {
	[[ -n $1 && -r /proc/$1/cmdline ]] || return 1
	tr '\0' '\n' <"/proc/$1/cmdline" 2>/dev/null | grep -qxF -- "-Dcassandra.storagedir=$2"
}

running() { read_state && ours "$PID" "$RUN"; }

print_env() { printf 'KAIROS_TEST_CASSANDRA=127.0.0.1:%s\n' "$CQL_PORT"; }

tail_logs() {
	local f
	for f in "$1/logs/stdout.log" "$1/logs/system.log"; do
		[[ -s $f ]] || continue
		log "---- last lines of $f ----"
		tail -n "${2:-40}" "$f" >&2
	done
}

# kill_wait sends TERM, waits up to 30 s, then KILLs.
kill_wait() {
	local pid=$1 run=$2 _
	ours "$pid" "$run" || return 0
	kill -TERM "$pid" 2>/dev/null || return 0
	for _ in $(seq 1 60); do
		ours "$pid" "$run" || return 0
		sleep 0.5
	done
	log "PID $pid still alive after 30 s, sending KILL"
	kill -KILL "$pid" 2>/dev/null || true
	for _ in $(seq 1 20); do
		ours "$pid" "$run" || return 0
		sleep 0.5
	done
}

# launch starts the JVM in its own session (so a Ctrl-C in the terminal reaches
# only the caller, whose trap stops the node) and records its PID.
launch() {
	local java=$1 jamm
	# A joining node gives up with "Unable to contact any seeds" when it has
	# heard nothing from the seed within the ring delay; 1 s was too short
	# for the third node of a cluster while other tests load the machine.
	local ring_delay_ms=1000
	((NODES > 1)) && ring_delay_ms=5000
	local -a jamms=("$LIB"/jamm-*.jar)
	# Not flushing system and schema tables speeds up DDL, but a node
	# started again after a crash (cluster mode's stop-node --kill) then
	# loads the schema from disk without the tables created since its start
	# and answers INCOMPATIBLE_SCHEMA: cluster nodes flush them.
	local -a schema_speedups=(-Dcassandra.unsafesystem=true -Dcassandra.test.flush_local_schema_changes=false)
	[[ -z $NODE ]] || schema_speedups=()
	# Cluster nodes start one after another, a few seconds apart: a node
	# whose seed has not yet heard that the previous one finished joining
	# would otherwise refuse to bootstrap ("Other bootstrapping/leaving/moving
	# nodes detected"). The nodes are empty, so nothing needs streaming.
	[[ -z $NODE ]] || schema_speedups+=(-Dcassandra.consistent.rangemovement=false)
	jamm=${jamms[0]}
	[[ -f $jamm ]] || die "no jamm-*.jar in $LIB"
	mkdir -p "$RUN/logs" "$RUN/tmp" "$RUN/triggers"
	# A restart reuses the run dir: the old PID must not pass for the new one.
	rm -f "$RUN/pid"
	# The bash wrapper writes its own PID, then execs java keeping that PID.
	# shellcheck disable=SC2016
	MALLOC_ARENA_MAX=4 setsid bash -c 'echo $$ >"$0/pid"; exec "$@"' "$RUN" \
		"$java" \
		-Xms"$HEAP" -Xmx"$HEAP" -Xss256k -XX:+UseG1GC -XX:+ExitOnOutOfMemoryError \
		-ea -da:net.openhft... -Djava.net.preferIPv4Stack=true \
		-Djava.io.tmpdir="$RUN/tmp" -Djna.tmpdir="$RUN/tmp" \
		-javaagent:"$jamm" \
		@"$CONF_DIR/jpms.args" \
		-Dcassandra.config="file://$RUN/cassandra.yaml" \
		-Dcassandra.storagedir="$RUN" \
		-Dcassandra.logdir="$RUN/logs" \
		-Dlogback.configurationFile="$CONF_DIR/logback.xml" \
		-Dcassandra-foreground=yes \
		-Dcassandra.native_transport_port="$CQL_PORT" \
		-Dcassandra.storage_port="$STORAGE_PORT" \
		-Dcassandra.skip_wait_for_gossip_to_settle=0 \
		-Dcassandra.ring_delay_ms="$ring_delay_ms" \
		-Dcassandra.superuser_setup_delay_ms=0 \
		"${schema_speedups[@]}" \
		-Dcassandra.skip_sync=true \
		-Dcassandra.triggers_dir="$RUN/triggers" \
		-Dcassandra.system_distributed.default_rf=1 \
		-Dcassandra.system_traces.default_rf=1 \
		-Dchronicle.analytics.disable=true \
		-cp "$LIB/*" org.apache.cassandra.service.CassandraDaemon \
		</dev/null >"$RUN/logs/stdout.log" 2>&1 &
	local _
	for _ in $(seq 1 50); do
		[[ -s $RUN/pid ]] && break
		sleep 0.1
	done
	PID=$(cat "$RUN/pid" 2>/dev/null || true)
	[[ -n $PID ]] || die "the JVM did not start"
	printf 'PID=%s\nCQL_PORT=%s\nSTORAGE_PORT=%s\nRUN=%s\nAUTH=%s\nTLS_DIR=%s\nIP=%s\n' "$PID" "$CQL_PORT" "$STORAGE_PORT" "$RUN" "$AUTH" "$TLS_DIR" "$IP" >"$STATE"
}

# wait_ready waits until the JVM is alive, the CQL port accepts connections and
# the log says CQL is served, and with AUTH=1 until the default superuser can
# log in. Returns 2 if the start failed on a port clash.
wait_ready() {
	local deadline=$((SECONDS + START_TIMEOUT))
	while ((SECONDS < deadline)); do
		if ! ours "$PID" "$RUN"; then
			if grep -qsE 'Address already in use|BindException' "$RUN/logs/system.log" "$RUN/logs/stdout.log"; then
				return 2
			fi
			log "the Cassandra JVM (PID $PID) exited during start"
			return 1
		fi
		if grep -qsE 'Starting listening for CQL clients|Startup complete' "$RUN/logs/system.log" &&
			(exec 3<>"/dev/tcp/$IP/$CQL_PORT") 2>/dev/null &&
			{ [[ $AUTH != 1 ]] || can_login; }; then
			return 0
		fi
		sleep 0.5
	done
	log "Cassandra did not become ready within ${START_TIMEOUT}s"
	return 1
}

cmd_start() {
	if running; then
		log "already running (PID $PID, run dir $RUN)"
		print_env
		return 0
	fi
	[[ -f $STATE ]] && { read_state || true; [[ -n ${RUN:-} ]] && rm -rf "$RUN"; rm -f "$STATE"; }
	# read_state loaded the old node's settings; a new start takes the caller's.
	AUTH=${CASSANDRA_AUTH:-0} TLS_DIR=${CASSANDRA_TLS_DIR:-}
	local java
	java=$(find_java)
	fetch_jars
	command -v setsid >/dev/null || die "setsid (util-linux) is needed"
	[[ $AUTH != 1 ]] || command -v python3 >/dev/null || die "CASSANDRA_AUTH=1 needs python3 to check the login"
	if [[ -n $TLS_DIR ]]; then
		TLS_DIR=$(cd "$TLS_DIR" && pwd) || die "CASSANDRA_TLS_DIR=$CASSANDRA_TLS_DIR is not a directory"
		[[ -f $TLS_DIR/node.pem && -f $TLS_DIR/ca.pem ]] || die "CASSANDRA_TLS_DIR=$TLS_DIR needs node.pem (key and certificate chain) and ca.pem"
	fi
	mkdir -p "$RUN_BASE"
	local _ rc t0=$SECONDS
	for _ in 1 2 3; do
		CQL_PORT=$(pick_port)
		STORAGE_PORT=$(pick_port "$CQL_PORT")
		RUN=$(mktemp -d "$RUN_BASE/run.XXXXXX")
		write_config
		log "starting Cassandra $CASSANDRA_VERSION (java $java, CQL 127.0.0.1:$CQL_PORT, storage $STORAGE_PORT, auth $AUTH, tls ${TLS_DIR:-off}, dir $RUN)"
		launch "$java"
		rc=0
		wait_ready || rc=$?
		if ((rc == 0)); then
			log "ready in $((SECONDS - t0))s (PID $PID)"
			print_env
			return 0
		fi
		if ((rc == 2)); then
			log "port clash, retrying with other ports"
			kill_wait "$PID" "$RUN"
			rm -rf "$RUN"
			rm -f "$STATE"
			continue
		fi
		tail_logs "$RUN" 60
		kill_wait "$PID" "$RUN"
		rm -rf "$RUN"
		rm -f "$STATE"
		die "Cassandra failed to start (logs above)"
	done
	die "Cassandra failed to start: ports kept clashing"
}

cmd_restart() {
	read_state || die "nothing to restart: no state file $STATE (start a node first)"
	[[ -d $RUN && -f $RUN/cassandra.yaml ]] || die "the data dir $RUN of the last start is gone; start a new node"
	if ours "$PID" "$RUN"; then
		log "stopping PID $PID"
		kill_wait "$PID" "$RUN"
	fi
	local java f rc=0 t0=$SECONDS
	java=$(find_java)
	# logback appends to the logs: set the previous start's aside, or
	# wait_ready would find its "listening for CQL clients" line at once.
	for f in system.log stdout.log; do
		if [[ -f $RUN/logs/$f ]]; then
			mv -f "$RUN/logs/$f" "$RUN/logs/$f.previous"
		fi
	done
	log "restarting Cassandra $CASSANDRA_VERSION (CQL 127.0.0.1:$CQL_PORT, storage $STORAGE_PORT, auth $AUTH, tls ${TLS_DIR:-off}, dir $RUN)"
	launch "$java"
	wait_ready || rc=$?
	if ((rc == 0)); then
		log "ready in $((SECONDS - t0))s (PID $PID)"
		print_env
		return 0
	fi
	# Clients know the ports, so a restart keeps them and a clash is fatal.
	# The data stays for another restart, or for stop to remove.
	((rc == 2)) && log "port $CQL_PORT or $STORAGE_PORT is taken by another process now"
	tail_logs "$RUN" 60
	kill_wait "$PID" "$RUN"
	die "Cassandra failed to restart (logs above); its data is kept in $RUN"
}

cmd_stop() {
	if [[ ${1:-} == --keep ]]; then
		read_state || die "not running (no state file $STATE)"
		if ours "$PID" "$RUN"; then
			log "stopping PID $PID, keeping its data in $RUN"
			kill_wait "$PID" "$RUN"
		else
			log "PID $PID is not running; its data stays in $RUN"
		fi
		return 0
	fi
	[[ -z ${1:-} ]] || die "unknown option to stop: $1 (want --keep or nothing)"
	if read_state; then
		if ours "$PID" "$RUN"; then
			log "stopping PID $PID"
			kill_wait "$PID" "$RUN"
		else
			log "PID $PID is gone; cleaning up"
		fi
		[[ -n $RUN && $RUN == "$RUN_BASE"/run.* ]] && rm -rf "$RUN"
		rm -f "$STATE"
	else
		log "not running (no state file $STATE)"
	fi
	# A start interrupted before it wrote the state file leaves only run.*/pid.
	local d p
	for d in "$RUN_BASE"/run.*; do
		[[ -d $d ]] || continue
		p=$(cat "$d/pid" 2>/dev/null || true)
		if ours "$p" "$d"; then
			log "stopping PID $p of an interrupted start"
			kill_wait "$p" "$d"
		fi
		rm -rf "$d"
	done
	rmdir "$RUN_BASE" 2>/dev/null || true
}

cmd_status() {
	if running; then
		log "running: PID $PID, CQL 127.0.0.1:$CQL_PORT, storage port $STORAGE_PORT, auth $AUTH, tls ${TLS_DIR:-off}, dir $RUN"
		return 0
	fi
	if [[ -n ${RUN:-} && -d $RUN ]]; then
		log "not running; the data of the last start is kept in $RUN (restart, or stop to remove it)"
		return 1
	fi
	log "not running"
	return 1
}

cmd_check() {
	find_java quiet >/dev/null || { log "no Java 17 found (install openjdk-17-jre-headless or set KAIROS_JAVA)"; return 1; }
	[[ -f $LIB/cassandra-all-$CASSANDRA_VERSION.jar ]] || command -v mvn >/dev/null ||
		{ log "the jars are not in $LIB and Maven (mvn) is missing to fetch them"; return 1; }
	command -v setsid >/dev/null || { log "setsid (util-linux) is missing"; return 1; }
	[[ $AUTH != 1 ]] || command -v python3 >/dev/null || { log "CASSANDRA_AUTH=1 needs python3"; return 1; }
}

# ---- cluster mode (CASSANDRA_NODES > 1) ----

# read_cluster loads NODES, CQL_PORT and STORAGE_PORT of the cluster.
read_cluster() {
	[[ -f $CLUSTER ]] || return 1
	local k v
	while IFS='=' read -r k v; do
		case $k in
		NODES) NODES=$v ;;
		CQL_PORT) CQL_PORT=$v ;;
		STORAGE_PORT) STORAGE_PORT=$v ;;
		esac
	done <"$CLUSTER"
}

# select_node points NODE, IP, RUN and STATE at node $1.
select_node() {
	NODE=$1 IP=127.0.0.$1 RUN=$RUN_BASE/node$1 STATE=$RUN_BASE/node$1/state
}

node_arg() {
	[[ $1 =~ ^[1-9]$ ]] && (($1 <= NODES)) || die "node '$1': want a number from 1 to $NODES"
}

# node_up reports whether node $1 runs (and loads its state; the cluster's
# ports stay loaded when it has none).
node_up() {
	select_node "$1"
	read_state && ours "$PID" "$RUN" && return 0
	read_cluster
	return 1
}

# sees reports whether the last word of node $1's log on node $2 is $3 (UP
# or DOWN), from the gossiper's "InetAddress /ip:port is now UP|DOWN" and
# "Node /ip:port has restarted, now UP" lines.
sees() {
	local last
	last=$(grep -ahoE "(InetAddress|Node) /127\.0\.0\.$2:$STORAGE_PORT (is now (UP|DOWN)|has restarted, now UP)" \
		"$RUN_BASE/node$1/logs/system.log" 2>/dev/null | tail -n1) || true
	[[ $last == *" $3" ]]
}

# wait_all_up waits until every running node's log says every other running
# node is UP.
wait_all_up() {
	local deadline=$((SECONDS + START_TIMEOUT)) i j missing
	local -a up=()
	for i in $(seq 1 "$NODES"); do
		node_up "$i" && up+=("$i")
	done
	while :; do
		missing=''
		for i in "${up[@]}"; do
			for j in "${up[@]}"; do
				[[ $i == "$j" ]] || sees "$i" "$j" UP || missing+=" $i->$j"
			done
		done
		[[ -z $missing ]] && return 0
		if ((SECONDS >= deadline)); then
			log "nodes do not see each other UP after ${START_TIMEOUT}s (node->peer not UP:$missing)"
			return 1
		fi
		sleep 0.5
	done
}

# stop_nodes stops the running nodes given (TERM to all, then waits).
stop_nodes() {
	local i p
	local -a pids=() runs=()
	for i in "$@"; do
		select_node "$i"
		p=''
		if read_state && ours "$PID" "$RUN"; then
			p=$PID
		else
			# A start interrupted before it wrote the state file.
			p=$(cat "$RUN/pid" 2>/dev/null || true)
			ours "$p" "$RUN" || p=''
		fi
		[[ -n $p ]] || continue
		log "stopping node $i (PID $p)"
		kill -TERM "$p" 2>/dev/null || true
		pids+=("$p") runs+=("$RUN")
	done
	for i in "${!pids[@]}"; do
		kill_wait "${pids[$i]}" "${runs[$i]}"
	done
}

# cluster_remove stops every node and removes the cluster's data.
cluster_remove() {
	stop_nodes $(seq 1 "$NODES")
	rm -rf "$RUN_BASE"/node[1-9]
	rm -f "$CLUSTER"
	rmdir "$RUN_BASE" 2>/dev/null || true
}

# launch_existing starts node $1 again on its data dir and waits until it
# serves CQL.
launch_existing() {
	local java=$1 f rc=0 t0=$SECONDS
	node_up "$2" && { log "node $2 already runs (PID $PID)"; return 0; }
	select_node "$2"
	read_state || die "node $2 has no state file $STATE: start a new cluster"
	[[ -d $RUN && -f $RUN/cassandra.yaml ]] || die "the data dir $RUN of node $2 is gone; start a new cluster"
	for f in system.log stdout.log; do
		[[ -f $RUN/logs/$f ]] && mv -f "$RUN/logs/$f" "$RUN/logs/$f.previous"
	done
	log "starting node $2 again ($IP, CQL port $CQL_PORT, storage port $STORAGE_PORT, dir $RUN)"
	launch "$java"
	wait_ready || rc=$?
	if ((rc == 0)); then
		log "node $2 ready in $((SECONDS - t0))s (PID $PID)"
		return 0
	fi
	((rc == 2)) && log "port $CQL_PORT or $STORAGE_PORT on $IP is taken by another process now"
	tail_logs "$RUN" 60
	kill_wait "$PID" "$RUN"
	die "node $2 failed to start (logs above); its data is kept in $RUN"
}

cluster_env() {
	read_cluster || die "no cluster in $RUN_BASE"
	local i hosts=''
	for i in $(seq 1 "$NODES"); do
		hosts+=${hosts:+,}127.0.0.$i:$CQL_PORT
	done
	printf 'KAIROS_TEST_CASSANDRA=127.0.0.1:%s\nKAIROS_TEST_CASSANDRA_HOSTS=%s\n' "$CQL_PORT" "$hosts"
}

# addrs_bindable reports whether 127.0.0.2 .. 127.0.0.N can be bound.
addrs_bindable() {
	python3 - "$NODES" <<'PY' 2>&1
import socket, sys
for i in range(2, int(sys.argv[1]) + 1):
    s = socket.socket()
    try:
        s.bind(("127.0.0.%d" % i, 0))
    except OSError as e:
        print("cannot bind 127.0.0.%d: %s" % (i, e))
        sys.exit(1)
    finally:
        s.close()
PY
}

cluster_check() {
	[[ ${CASSANDRA_AUTH:-0} != 1 && -z ${CASSANDRA_TLS_DIR:-} ]] || { log "cluster mode offers no CASSANDRA_AUTH or CASSANDRA_TLS_DIR"; return 1; }
	cmd_check || return 1
	command -v python3 >/dev/null || { log "cluster mode needs python3"; return 1; }
	local out
	out=$(addrs_bindable) || { log "cluster mode needs 127.0.0.2 .. 127.0.0.$NODES on lo: $out"; return 1; }
}

cluster_start() {
	if [[ -f $CLUSTER ]]; then
		read_cluster
		local i
		for i in $(seq 1 "$NODES"); do
			if node_up "$i"; then
				log "a cluster already runs in $RUN_BASE (node $i: PID $PID)"
				cluster_env
				return 0
			fi
		done
		cluster_remove
		NODES=${CASSANDRA_NODES:-1}
	fi
	[[ -f $STATE ]] && die "$RUN_BASE holds a single node; stop it first"
	cluster_check || die "cannot run a $NODES-node cluster here (above)"
	AUTH=0 TLS_DIR=''
	local java _ i rc clash failed=0 t0=$SECONDS
	java=$(find_java)
	fetch_jars
	mkdir -p "$RUN_BASE"
	for _ in 1 2 3 4; do
		CQL_PORT=$(pick_port)
		STORAGE_PORT=$(pick_port "$CQL_PORT")
		printf 'NODES=%s\nCQL_PORT=%s\nSTORAGE_PORT=%s\n' "$NODES" "$CQL_PORT" "$STORAGE_PORT" >"$CLUSTER"
		clash=0
		for i in $(seq 1 "$NODES"); do
			select_node "$i"
			mkdir -p "$RUN"
			write_config
			log "starting node $i of $NODES (Cassandra $CASSANDRA_VERSION, java $java, $IP, CQL port $CQL_PORT, storage port $STORAGE_PORT, heap $HEAP, dir $RUN)"
			launch "$java"
			rc=0
			wait_ready || rc=$?
			if ((rc == 2)); then
				clash=1
				break
			fi
			if ((rc != 0)); then
				tail_logs "$RUN" 60
				log "node $i failed to start; its errors: $(grep -m5 -E '^(ERROR|WARN) |Exception' "$RUN/logs/system.log" 2>/dev/null | cut -c1-300)"
				cluster_remove
				((failed++ == 0)) || die "node $i failed to start (logs above)"
				log "starting the whole cluster once more"
				mkdir -p "$RUN_BASE"
				clash=2
				break
			fi
			log "node $i ready after $((SECONDS - t0))s (PID $PID)"
			# The next node joins through the seed: let the gossip settle.
			wait_all_up || { clash=3; break; }
		done
		if ((clash == 2)); then
			continue
		fi
		if ((clash == 3)); then
			for i in $(seq 1 "$NODES"); do tail_logs "$RUN_BASE/node$i" 20; done
			cluster_remove
			die "the nodes do not see each other UP (logs above)"
		fi
		if ((clash)); then
			log "port clash, retrying the whole cluster with other ports"
			cluster_remove
			mkdir -p "$RUN_BASE"
			continue
		fi
		if ! wait_all_up; then
			for i in $(seq 1 "$NODES"); do tail_logs "$RUN_BASE/node$i" 20; done
			cluster_remove
			die "the cluster did not form (logs above)"
		fi
		log "cluster of $NODES nodes ready in $((SECONDS - t0))s"
		cluster_env
		return 0
	done
	cluster_remove
	die "the cluster failed to start: ports kept clashing"
}

cluster_stop() {
	read_cluster
	if [[ ${1:-} == --keep ]]; then
		stop_nodes $(seq 1 "$NODES")
		log "stopped; the data stays in $RUN_BASE/node*"
		return 0
	fi
	[[ -z ${1:-} ]] || die "unknown option to stop: $1 (want --keep or nothing)"
	cluster_remove
}

cluster_restart() {
	read_cluster
	stop_nodes $(seq 1 "$NODES")
	local java i
	java=$(find_java)
	# Node 1, the seed, first.
	for i in $(seq 1 "$NODES"); do
		launch_existing "$java" "$i"
	done
	wait_all_up || die "the restarted nodes do not see each other UP"
	cluster_env
}

cluster_status() {
	read_cluster
	local i n=0
	for i in $(seq 1 "$NODES"); do
		if node_up "$i"; then
			log "node $i: running: PID $PID, $IP CQL port $CQL_PORT, storage port $STORAGE_PORT, dir $RUN"
			n=$((n + 1))
		else
			log "node $i: not running"
		fi
	done
	((n == NODES))
}

cluster_stop_node() {
	read_cluster
	node_arg "$1"
	[[ -z $2 || $2 == --kill ]] || die "unknown option to stop-node: $2 (want --kill or nothing)"
	if ! node_up "$1"; then
		log "node $1 is not running"
		return 0
	fi
	local i _ pid=$PID run=$RUN
	if [[ $2 == --kill ]]; then
		log "killing node $1 (SIGKILL to PID $pid), keeping its data"
		kill -KILL "$pid" 2>/dev/null || true
		for _ in $(seq 1 100); do
			ours "$pid" "$run" || return 0
			sleep 0.1
		done
		die "node $1 (PID $pid) still runs 10 s after SIGKILL"
	fi
	log "stopping node $1 (PID $pid), keeping its data"
	kill_wait "$pid" "$run"
	# A drained node tells the others it shuts down: wait until they know.
	local deadline=$((SECONDS + 30)) missing
	while :; do
		missing=''
		for i in $(seq 1 "$NODES"); do
			[[ $i == "$1" ]] && continue
			node_up "$i" || continue
			sees "$i" "$1" DOWN || missing+=" $i"
		done
		[[ -z $missing ]] && return 0
		if ((SECONDS >= deadline)); then
			log "WARNING: after 30 s nodes$missing still do not see node $1 DOWN"
			return 0
		fi
		sleep 0.25
	done
}

cluster_start_node() {
	read_cluster
	node_arg "$1"
	local java
	java=$(find_java)
	launch_existing "$java" "$1"
	wait_all_up || die "node $1 and the other nodes do not see each other UP"
	cluster_env
}

cmd_env() {
	running || die "not running; start it with scripts/cassandra.sh start"
	print_env
}

[[ $NODES =~ ^[1-9]$ ]] || die "CASSANDRA_NODES=$NODES: want 1 to 9"
case ${1:-} in
start-node | stop-node)
	[[ -f $CLUSTER ]] || die "$1 needs a cluster (CASSANDRA_NODES=N scripts/cassandra.sh start); no $CLUSTER"
	;;
esac
if [[ -f $CLUSTER ]] || { ((NODES > 1)) && [[ ${1:-} == start || ${1:-} == check ]]; }; then
	case ${1:-} in
	start) cluster_start ;;
	stop) cluster_stop "${2:-}" ;;
	restart) cluster_restart ;;
	status) cluster_status ;;
	env) cluster_env ;;
	check) cluster_check ;;
	stop-node) cluster_stop_node "${2:-}" "${3:-}" ;;
	start-node) cluster_start_node "${2:-}" ;;
	*)
		echo "usage: $0 start|stop [--keep]|restart|status|env|check|stop-node I [--kill]|start-node I" >&2
		exit 2
		;;
	esac
	exit
fi
case ${1:-} in
start) cmd_start ;;
stop) cmd_stop "${2:-}" ;;
restart) cmd_restart ;;
status) cmd_status ;;
env) cmd_env ;;
check) cmd_check ;;
*)
	echo "usage: $0 start|stop [--keep]|restart|status|env|check (cluster: CASSANDRA_NODES=N ... start, stop-node I [--kill], start-node I)" >&2
	exit 2
	;;
esac
