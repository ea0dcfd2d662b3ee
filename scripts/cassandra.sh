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

# port_free reports whether nothing listens on 127.0.0.1:$1 and the port can be bound.
port_free() {
	if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then
		return 1
	fi
	if command -v python3 >/dev/null; then
		python3 - "$1" <<'EOF' 2>/dev/null
import socket, sys
s = socket.socket()
s.bind(("127.0.0.1", int(sys.argv[1])))
s.close()
EOF
	fi
}

# pick_port prints a free port below Linux's ephemeral range (32768+), so that
# outgoing connections do not take it between the probe and the JVM's bind.
pick_port() {
	local p _
	for _ in $(seq 1 200); do
		p=$((20000 + (RANDOM % 12000)))
		[[ $p == "${1:-}" ]] && continue
		if port_free "$p"; then
			printf '%s\n' "$p"
			return 0
		fi
	done
	die "found no free TCP port on 127.0.0.1"
}

# read_state loads PID, CQL_PORT, STORAGE_PORT, RUN, AUTH and TLS_DIR from the
# state file.
read_state() {
	PID='' CQL_PORT='' STORAGE_PORT='' RUN=''
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
	python3 - "$CQL_PORT" "$TLS_DIR" <<'PY' 2>/dev/null
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

s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5)
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
	local -a jamms=("$LIB"/jamm-*.jar)
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
		-Dcassandra.ring_delay_ms=1000 \
		-Dcassandra.superuser_setup_delay_ms=0 \
		-Dcassandra.unsafesystem=true \
		-Dcassandra.skip_sync=true \
		-Dcassandra.test.flush_local_schema_changes=false \
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
	printf 'PID=%s\nCQL_PORT=%s\nSTORAGE_PORT=%s\nRUN=%s\nAUTH=%s\nTLS_DIR=%s\n' "$PID" "$CQL_PORT" "$STORAGE_PORT" "$RUN" "$AUTH" "$TLS_DIR" >"$STATE"
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
			(exec 3<>"/dev/tcp/127.0.0.1/$CQL_PORT") 2>/dev/null &&
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

cmd_env() {
	running || die "not running; start it with scripts/cassandra.sh start"
	print_env
}

case ${1:-} in
start) cmd_start ;;
stop) cmd_stop "${2:-}" ;;
restart) cmd_restart ;;
status) cmd_status ;;
env) cmd_env ;;
check) cmd_check ;;
*)
	echo "usage: $0 start|stop [--keep]|restart|status|env|check" >&2
	exit 2
	;;
esac
