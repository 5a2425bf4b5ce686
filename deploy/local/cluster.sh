#!/usr/bin/env bash
# cluster.sh: wahook's cluster topology on one machine, as real processes on
# loopback, for development and the cluster tests (deploy/local/clustertest).
#
#   deploy/local/cluster.sh up DIR [--with-wahook]   start everything, data and logs under DIR
#   deploy/local/cluster.sh status DIR               say what runs (exit 3 when something is down)
#   deploy/local/cluster.sh down DIR                 stop every process started with DIR, by pid
#
# up starts:
#   - 3 nats-server processes forming the JetStream cluster `wahook`, each from
#     deploy/nats/nats.conf unmodified (its name and store from the environment,
#     its ports and routes from flags, which win over the file). nats-server is
#     built from the Go module at the version wahook embeds (go.mod) into DIR.
#   - ZooKeeper (Debian's `zookeeper` package; ClickHouse 18.16's coordination
#     service) standalone, on a free loopback port.
#   - 2 clickhouse-server replicas of 1 shard of cluster `wahook`, through
#     scripts/clickhouse.sh, with config.d files carrying the settings of
#     deploy/clickhouse/config.d (remote_servers, macros, zookeeper, the
#     distributed DDL queue) written with this machine's ports: on one host the
#     replicas cannot share port 9000 as deploy's files assume, and 18.16 reads
#     no from_env.
#   - with --with-wahook: `wahook migrate --clickhouse-cluster wahook` with every
#     stream R3, 2 `wahook ingest`, 2 `wahook process` (stage 2 in 8 partitions
#     over members p1 and p2) and 1 `wahook api`, all on the 3 NATS URLs and
#     both ClickHouse replicas. wahook is built from this checkout into DIR
#     unless WAHOOK_BIN names a binary.
#
# up and status print shell-readable KEY=VALUE lines (also kept in
# DIR/cluster.env): NATS_URLS, NATS_PIDS, NATS_NAMES, CLICKHOUSE_DSN (both
# replicas), CLICKHOUSE_DSNS (one per replica, comma-separated),
# CLICKHOUSE_PIDS, CLICKHOUSE_DIRS, ZOOKEEPER_PID, ZOOKEEPER_PORT, and with
# --with-wahook INGEST_URLS, INGEST_PIDS, PROCESS_PIDS, API_URL, API_PID,
# APP_SECRET (generated unless WAHOOK_APP_SECRET is set), API_TOKEN,
# PHONE_HASH_KEY.
#
# Ports are free ones chosen at start; set NATS_PORTS (3 client ports,
# comma-separated), CLICKHOUSE_PORTS (2 native ports) or ZOOKEEPER_PORT to fix
# them. Every process is started in its own session and its pid recorded under
# DIR; down signals those pids only (TERM, then KILL after 30 s).
set -euo pipefail

die() { echo "cluster.sh: $*" >&2; exit 1; }
usage() {
	sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
	exit "${1:-2}"
}

ROOT=$(cd "$(dirname "$0")/../.." && pwd -P)
export PATH="$PATH:/usr/local/go/bin"

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

TAKEN=" "
# free_port prints a port nothing listens on and this run has not handed out,
# below Linux's ephemeral range (32768 and up), where the kernel's own picks,
# for outgoing connections and for listeners on port 0, cannot take it
# between this check and the server's bind.
free_port() {
	local p i
	for ((i = 0; i < 200; i++)); do
		p=$((20000 + RANDOM % 12000))
		[[ $TAKEN == *" $p "* ]] && continue
		port_in_use "$p" && continue
		TAKEN+="$p "
		echo "$p"
		return 0
	done
	die "no free port found"
}

# alive PID PATTERN: true when PID runs and its command line holds PATTERN
# (so that a recycled pid is never taken for ours).
alive() {
	[[ $1 =~ ^[0-9]+$ ]] || return 1
	kill -0 "$1" 2>/dev/null || return 1
	tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | grep -qF -- "$2"
}

# wait_port PORT PID NAME LOG: wait up to 60 s for PORT to accept connections.
wait_port() {
	local i
	for ((i = 0; i < 600; i++)); do
		port_in_use "$1" && return 0
		if ! kill -0 "$2" 2>/dev/null; then
			echo "$3 exited during start; last log lines:" >&2
			tail -n 20 "$4" >&2 2>/dev/null || true
			return 1
		fi
		sleep 0.1
	done
	die "$3 (pid $2) did not listen on $1 within 60s; see $4"
}

# stop_pid PID PATTERN NAME: TERM, then KILL after 30 s.
stop_pid() {
	local pid=$1 i
	alive "$pid" "$2" || return 0
	kill -TERM "$pid" 2>/dev/null || true
	for ((i = 0; i < 300; i++)); do
		alive "$pid" "$2" || { echo "$3 (pid $pid) stopped"; return 0; }
		sleep 0.1
	done
	echo "$3 (pid $pid) still runs after 30s; killing it" >&2
	kill -KILL "$pid" 2>/dev/null || true
}

build_nats() {
	local dir=$1
	[[ -x $dir/bin/nats-server ]] && return 0
	mkdir -p "$dir/bin"
	(cd "$ROOT" && go build -o "$dir/bin/nats-server" github.com/nats-io/nats-server/v2) ||
		die "go build github.com/nats-io/nats-server/v2 failed"
}

# start_nats DIR I PORT CLUSTERPORT MONPORT ROUTES
start_nats() {
	local dir=$1 i=$2 port=$3 cport=$4 mport=$5 routes=$6 nd pid
	nd=$dir/nats-$i
	mkdir -p "$nd/store"
	NATS_SERVER_NAME=nats-$i NATS_CLUSTER_NAME=wahook NATS_STORE_DIR=$nd/store \
		setsid "$dir/bin/nats-server" -c "$ROOT/deploy/nats/nats.conf" -a 127.0.0.1 -p "$port" -m "$mport" \
		--cluster "nats://127.0.0.1:$cport" --routes "$routes" \
		</dev/null >>"$nd/nats.log" 2>&1 &
	pid=$!
	echo "$pid" >"$nd/pid"
	{
		echo "PORT=$port"
		echo "CLUSTER_PORT=$cport"
		echo "MONITOR_PORT=$mport"
		echo "ROUTES=$routes"
	} >"$nd/ports"
}

# restart_nats DIR I: start node I again on its ports and store (the cluster tests' restart).
cmd_restart_nats() {
	local dir=$1 i=$2
	# shellcheck disable=SC1090,SC1091
	source "$dir/nats-$i/ports"
	start_nats "$dir" "$i" "$PORT" "$CLUSTER_PORT" "$MONITOR_PORT" "$ROUTES"
	wait_port "$PORT" "$(<"$dir/nats-$i/pid")" "nats-$i" "$dir/nats-$i/nats.log"
	echo "NATS_PID_$i=$(<"$dir/nats-$i/pid")"
}

zk_cp() { echo "$1/zookeeper:/usr/share/java/zookeeper.jar"; }

start_zookeeper() {
	local dir=$1 port=$2 zd pid
	zd=$dir/zookeeper
	mkdir -p "$zd/data"
	cat >"$zd/zoo.cfg" <<EOF
# Generated by deploy/local/cluster.sh: ZooKeeper standalone for ClickHouse's
# replicated tables and ON CLUSTER DDL.
tickTime=2000
dataDir=$zd/data
clientPort=$port
clientPortAddress=127.0.0.1
admin.enableServer=false
maxClientCnxns=0
4lw.commands.whitelist=srvr,ruok,stat
EOF
	echo "$port" >"$zd/port"
	setsid java -Xmx256m -Dzookeeper.log.dir="$zd" -cp "$(zk_cp "$dir")" \
		org.apache.zookeeper.server.ZooKeeperServerMain "$zd/zoo.cfg" \
		</dev/null >>"$zd/zookeeper.log" 2>&1 &
	pid=$!
	echo "$pid" >"$zd/pid"
	wait_port "$port" "$pid" zookeeper "$zd/zookeeper.log"
	# The port opens before sessions are served; 18.16's DDL worker crashes
	# the server when its first connection fails, so wait for an answer.
	local i
	for ((i = 0; i < 300; i++)); do
		[[ $(zk_ask "$port" srvr) == *"Mode: standalone"* ]] && return 0
		sleep 0.1
	done
	die "zookeeper (pid $pid) does not serve on $port within 30s; see $zd/zookeeper.log"
}

# zk_ask PORT WORD: ZooKeeper's answer to a four-letter word.
zk_ask() {
	timeout 2 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1" && printf %s "$2" >&3 && cat <&3' _ "$1" "$2" 2>/dev/null || true
}

cmd_restart_zookeeper() {
	local dir=$1
	start_zookeeper "$dir" "$(<"$dir/zookeeper/port")"
	echo "ZOOKEEPER_PID=$(<"$dir/zookeeper/pid")"
}

# ch_config DIR I PORT INTERSERVER PORT1 PORT2 ZKPORT: config.d of replica I.
ch_config() {
	local cd=$1/clickhouse-$2/config.d
	mkdir -p "$cd"
	cat >"$cd/cluster.xml" <<EOF
<?xml version="1.0"?>
<!-- Generated by deploy/local/cluster.sh: deploy/clickhouse/config.d's
     settings (remote_servers.xml, macros.xml, zookeeper.xml) with this
     machine's ports. -->
<yandex>
    <interserver_http_host>127.0.0.1</interserver_http_host>
    <interserver_http_port>$4</interserver_http_port>
    <remote_servers>
        <wahook>
            <shard>
                <internal_replication>true</internal_replication>
                <replica><host>127.0.0.1</host><port>$5</port></replica>
                <replica><host>127.0.0.1</host><port>$6</port></replica>
            </shard>
        </wahook>
    </remote_servers>
    <macros>
        <cluster>wahook</cluster>
        <shard>01</shard>
        <replica>clickhouse-$2</replica>
    </macros>
    <zookeeper>
        <node><host>127.0.0.1</host><port>$7</port></node>
        <session_timeout_ms>30000</session_timeout_ms>
    </zookeeper>
    <distributed_ddl>
        <path>/clickhouse/task_queue/ddl</path>
    </distributed_ddl>
</yandex>
EOF
	echo "$3" >"$1/clickhouse-$2/port"
}

start_clickhouse() {
	local dir=$1 i=$2
	HTTP_PORT=$(free_port) "$ROOT/scripts/clickhouse.sh" start "$dir/clickhouse-$i" "$(<"$dir/clickhouse-$i/port")" >/dev/null
}

cmd_restart_clickhouse() {
	local dir=$1 i=$2
	start_clickhouse "$dir" "$i"
	echo "CLICKHOUSE_PID_$i=$(<"$dir/clickhouse-$i/clickhouse-server.pid")"
}

wahook_bin() {
	local dir=$1
	if [[ -n ${WAHOOK_BIN:-} ]]; then echo "$WAHOOK_BIN"; return 0; fi
	if [[ ! -x $dir/bin/wahook ]]; then
		(cd "$ROOT" && go build -o "$dir/bin/wahook" ./cmd/wahook) || die "go build ./cmd/wahook failed"
	fi
	echo "$dir/bin/wahook"
}

# wait_http URL PID NAME LOG: wait up to 60 s for URL to answer 200.
wait_http() {
	local i
	for ((i = 0; i < 600; i++)); do
		curl -fsS -o /dev/null "$1" 2>/dev/null && return 0
		if ! kill -0 "$2" 2>/dev/null; then
			echo "$3 exited during start; last log lines:" >&2
			tail -n 20 "$4" >&2 2>/dev/null || true
			return 1
		fi
		sleep 0.1
	done
	die "$3 (pid $2) not ready at $1 within 60s; see $4"
}

# start_process DIR BIN I PORT HASHKEY: wahook process member pI.
start_process() {
	local dir=$1 bin=$2 i=$3 port=$4 wd=$1/wahook
	# shellcheck disable=SC1091
	source "$dir/cluster.env"
	WAHOOK_PHONE_HASH_KEY=$5 setsid "$bin" process --nats-url "$NATS_URLS" --log-level "${WAHOOK_LOG_LEVEL:-warn}" \
		--clickhouse-dsn "$CLICKHOUSE_DSN" --clickhouse-cluster wahook --replicas 3 --events-replicas 3 \
		--stage2-partitions 8 --stage2-member "p$i" --stage2-members p1,p2 \
		--listen "127.0.0.1:$port" --data-dir "$wd/process-$i" \
		</dev/null >>"$wd/process-$i.log" 2>&1 &
	echo "$!" >"$wd/process-$i.pid"
}

# restart-process DIR I: start process member pI again (the cluster tests' restart).
cmd_restart_process() {
	local dir=$1 i=$2 bin
	bin=$(wahook_bin "$dir")
	# shellcheck disable=SC1091
	source "$dir/cluster.env"
	start_process "$dir" "$bin" "$i" "$(<"$dir/wahook/process-$i.port")" "$PHONE_HASH_KEY"
	echo "PROCESS_PID_$i=$(<"$dir/wahook/process-$i.pid")"
}

start_wahook() {
	local dir=$1 bin urls dsn wd i port mport pid
	bin=$(wahook_bin "$dir")
	# shellcheck disable=SC1091
	source "$dir/cluster.env"
	urls=$NATS_URLS
	dsn=$CLICKHOUSE_DSN
	wd=$dir/wahook
	mkdir -p "$wd"
	local secret=${WAHOOK_APP_SECRET:-$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')}
	local token=${WAHOOK_API_TOKEN:-$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')}
	# The key made once is kept under DIR: ClickHouse keeps the digest of
	# the key its hashes were made with, and refuses another after a down
	# and up of the same DIR.
	local hashkey=${WAHOOK_PHONE_HASH_KEY:-}
	if [[ -z $hashkey && -s $wd/phone-hash-key ]]; then
		hashkey=$(<"$wd/phone-hash-key")
	fi
	if [[ -z $hashkey ]]; then
		hashkey=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
		(umask 077 && printf '%s\n' "$hashkey" >"$wd/phone-hash-key")
	fi
	local common=(--nats-url "$urls" --log-level "${WAHOOK_LOG_LEVEL:-warn}")
	local streams=(--raw-replicas 3)
	"$bin" migrate "${common[@]}" "${streams[@]}" --events-replicas 3 --clickhouse-dsn "$dsn" \
		--clickhouse-cluster wahook >>"$wd/migrate.log" 2>&1 || {
		tail -n 20 "$wd/migrate.log" >&2
		die "wahook migrate failed"
	}
	local ingest_urls=() ingest_pids=() process_pids=()
	for i in 1 2; do
		port=$(free_port)
		mport=$(free_port)
		WAHOOK_APP_SECRET=$secret WAHOOK_VERIFY_TOKEN=local setsid "$bin" ingest "${common[@]}" "${streams[@]}" \
			--listen "127.0.0.1:$port" --metrics-listen "127.0.0.1:$mport" \
			</dev/null >>"$wd/ingest-$i.log" 2>&1 &
		pid=$!
		echo "$pid" >"$wd/ingest-$i.pid"
		ingest_urls+=("http://127.0.0.1:$port/webhook")
		ingest_pids+=("$pid")
		wait_http "http://127.0.0.1:$port/readyz" "$pid" "ingest-$i" "$wd/ingest-$i.log"
	done
	local attempt
	for i in 1 2; do
		port=$(free_port)
		echo "$port" >"$wd/process-$i.port"
		# A member starting while the other provisions stage 2's consumer
		# group on a fresh R3 cluster may be told "no responders" before the
		# group's streams have leaders; it exits, and is started again.
		for attempt in 1 2 3; do
			start_process "$dir" "$bin" "$i" "$port" "$hashkey"
			pid=$(<"$wd/process-$i.pid")
			# Ready, and still running once stage 2 has provisioned its group.
			if wait_http "http://127.0.0.1:$port/readyz" "$pid" "process-$i" "$wd/process-$i.log" &&
				sleep 3 && kill -0 "$pid" 2>/dev/null; then
				break
			fi
			((attempt < 3)) || die "process-$i did not start"
			sleep 2
		done
		process_pids+=("$pid")
	done
	port=$(free_port)
	WAHOOK_API_TOKEN=$token setsid "$bin" api "${common[@]}" --clickhouse-dsn "$dsn" \
		--api-listen "127.0.0.1:$port" \
		</dev/null >>"$wd/api.log" 2>&1 &
	pid=$!
	echo "$pid" >"$wd/api.pid"
	wait_http "http://127.0.0.1:$port/healthz" "$pid" api "$wd/api.log"
	{
		echo "INGEST_URLS=$(
			IFS=,
			echo "${ingest_urls[*]}"
		)"
		echo "INGEST_PIDS=$(
			IFS=,
			echo "${ingest_pids[*]}"
		)"
		echo "PROCESS_PIDS=$(
			IFS=,
			echo "${process_pids[*]}"
		)"
		echo "API_URL=http://127.0.0.1:$port"
		echo "API_PID=$pid"
		echo "APP_SECRET=$secret"
		echo "API_TOKEN=$token"
		echo "PHONE_HASH_KEY=$hashkey"
	} >>"$dir/cluster.env"
}

cmd_up() {
	[[ $# -ge 1 ]] || usage
	local dir=$1 with_wahook=false
	shift
	while [[ $# -gt 0 ]]; do
		case $1 in
		--with-wahook) with_wahook=true ;;
		*) usage ;;
		esac
		shift
	done
	mkdir -p "$dir"
	dir=$(cd "$dir" && pwd -P)
	if [[ -f $dir/cluster.env ]] && cmd_status "$dir" >/dev/null 2>&1; then
		die "a cluster already runs in $dir; run: $0 down $dir"
	fi
	command -v java >/dev/null && [[ -f /usr/share/java/zookeeper.jar ]] ||
		die "ZooKeeper not installed; run: scripts/install-cluster-tools.sh"
	rm -f "$dir/cluster.env"
	build_nats "$dir"

	local nports=() cports=() mports=() i
	if [[ -n ${NATS_PORTS:-} ]]; then IFS=, read -r -a nports <<<"$NATS_PORTS"; fi
	for i in 0 1 2; do
		[[ -n ${nports[$i]:-} ]] || nports[i]=$(free_port)
		cports[i]=$(free_port)
		mports[i]=$(free_port)
	done
	local routes
	routes="nats-route://127.0.0.1:${cports[0]},nats-route://127.0.0.1:${cports[1]},nats-route://127.0.0.1:${cports[2]}"
	for i in 0 1 2; do
		start_nats "$dir" $((i + 1)) "${nports[$i]}" "${cports[$i]}" "${mports[$i]}" "$routes"
	done
	for i in 0 1 2; do
		wait_port "${nports[$i]}" "$(<"$dir/nats-$((i + 1))/pid")" "nats-$((i + 1))" "$dir/nats-$((i + 1))/nats.log"
	done
	# JetStream is ready when the cluster has elected its meta leader.
	local ok=false
	for ((i = 0; i < 300; i++)); do
		if curl -fsS "http://127.0.0.1:${mports[0]}/healthz?js-enabled-only=true" >/dev/null 2>&1 &&
			curl -fsS "http://127.0.0.1:${mports[0]}/jsz" 2>/dev/null | grep -q '"leader": *"nats-'; then
			ok=true
			break
		fi
		sleep 0.1
	done
	$ok || die "the NATS cluster elected no JetStream leader within 30s; see $dir/nats-*/nats.log"

	local zkport=${ZOOKEEPER_PORT:-$(free_port)}
	start_zookeeper "$dir" "$zkport"

	local chports=() interports=()
	if [[ -n ${CLICKHOUSE_PORTS:-} ]]; then IFS=, read -r -a chports <<<"$CLICKHOUSE_PORTS"; fi
	for i in 0 1; do
		[[ -n ${chports[$i]:-} ]] || chports[i]=$(free_port)
		interports[i]=$(free_port)
	done
	for i in 0 1; do
		ch_config "$dir" $((i + 1)) "${chports[$i]}" "${interports[$i]}" "${chports[0]}" "${chports[1]}" "$zkport"
		start_clickhouse "$dir" $((i + 1))
	done
	write_env "$dir" "${nports[*]}" "${chports[*]}"
	if $with_wahook; then start_wahook "$dir"; fi
	cat "$dir/cluster.env"
}

# write_env DIR "NATSPORTS" "CHPORTS"
write_env() {
	local dir=$1 p urls=() npids=() names=() chp=() dsns=() chpids=() chdirs=() i=1
	for p in $2; do
		urls+=("nats://127.0.0.1:$p")
		npids+=("$(<"$dir/nats-$i/pid")")
		names+=("nats-$i")
		i=$((i + 1))
	done
	i=1
	for p in $3; do
		chp+=("127.0.0.1:$p")
		dsns+=("clickhouse://127.0.0.1:$p/wahook")
		chpids+=("$(<"$dir/clickhouse-$i/clickhouse-server.pid")")
		chdirs+=("$dir/clickhouse-$i")
		i=$((i + 1))
	done
	local IFS=,
	{
		echo "CLUSTER_DIR=$dir"
		echo "NATS_URLS=${urls[*]}"
		echo "NATS_PIDS=${npids[*]}"
		echo "NATS_NAMES=${names[*]}"
		echo "CLICKHOUSE_DSN=clickhouse://${chp[*]}/wahook"
		echo "CLICKHOUSE_DSNS=${dsns[*]}"
		echo "CLICKHOUSE_PIDS=${chpids[*]}"
		echo "CLICKHOUSE_DIRS=${chdirs[*]}"
		echo "ZOOKEEPER_PID=$(<"$dir/zookeeper/pid")"
		echo "ZOOKEEPER_PORT=$(<"$dir/zookeeper/port")"
	} >"$dir/cluster.env"
	chmod 600 "$dir/cluster.env" # it gets the app secret, the API token and the phone hash key
}

# each_process DIR: lines "NAME PIDFILE PATTERN" for every process up may have started.
each_process() {
	local dir=$1 f
	for f in "$dir"/wahook/api.pid "$dir"/wahook/ingest-*.pid "$dir"/wahook/process-*.pid; do
		[[ -f $f ]] && echo "wahook-$(basename "$f" .pid) $f wahook"
	done
	for f in "$dir"/clickhouse-*/clickhouse-server.pid; do
		[[ -f $f ]] && echo "$(basename "$(dirname "$f")") $f --config-file=$(dirname "$f")/config.xml"
	done
	[[ -f $dir/zookeeper/pid ]] && echo "zookeeper $dir/zookeeper/pid $dir/zookeeper/zoo.cfg"
	for f in "$dir"/nats-*/pid; do
		[[ -f $f ]] && echo "$(basename "$(dirname "$f")") $f $dir/bin/nats-server"
	done
	return 0
}

cmd_status() {
	[[ $# -eq 1 ]] || usage
	local dir name pidfile pattern pid down=0
	dir=$(cd "$1" 2>/dev/null && pwd -P) || die "no such directory: $1"
	while read -r name pidfile pattern; do
		pid=$(<"$pidfile")
		if alive "$pid" "$pattern"; then
			echo "# $name runs: pid $pid" >&2
		else
			echo "# $name is down (pid $pid)" >&2
			down=1
		fi
	done < <(each_process "$dir")
	[[ -f $dir/cluster.env ]] || { echo "# no cluster in $dir" >&2; return 3; }
	cat "$dir/cluster.env"
	((down == 0)) || return 3
}

cmd_down() {
	[[ $# -eq 1 ]] || usage
	local dir name pidfile pattern
	dir=$(cd "$1" 2>/dev/null && pwd -P) || die "no such directory: $1"
	while read -r name pidfile pattern; do
		stop_pid "$(<"$pidfile")" "$pattern" "$name"
		rm -f "$pidfile"
	done < <(each_process "$dir")
	rm -f "$dir/cluster.env"
}

main() {
	[[ $# -ge 1 ]] || usage
	local cmd=$1
	shift
	case $cmd in
	up) cmd_up "$@" ;;
	down) cmd_down "$@" ;;
	status) cmd_status "$@" ;;
	restart-nats) cmd_restart_nats "$@" ;;
	restart-zookeeper) cmd_restart_zookeeper "$@" ;;
	restart-clickhouse) cmd_restart_clickhouse "$@" ;;
	restart-process) cmd_restart_process "$@" ;;
	-h | --help | help) usage 0 ;;
	*) usage ;;
	esac
}

main "$@"
