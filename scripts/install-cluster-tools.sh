#!/usr/bin/env bash
# install-cluster-tools.sh: what the cluster suite (deploy/local/clustertest)
# and deploy/local/cluster.sh need beyond scripts/clickhouse.sh install:
# Debian's zookeeper package (ClickHouse 18.16's coordination service; it
# brings a Java runtime) and curl (cluster.sh and the suite read the
# servers' HTTP endpoints with it). nats-server is built from the Go module
# by cluster.sh itself. With CI=true, a failed install fails.
set -euo pipefail

if [[ -f /usr/share/java/zookeeper.jar ]] && command -v java >/dev/null 2>&1 && command -v curl >/dev/null 2>&1; then
	echo "zookeeper and curl already installed"
	exit 0
fi
sudo=()
if [[ $(id -u) != 0 ]]; then
	if ! command -v sudo >/dev/null 2>&1; then
		echo "install-cluster-tools.sh: installing zookeeper needs root or sudo" >&2
		[[ ${CI:-} == true ]] && exit 1
		exit 0
	fi
	sudo=(sudo)
fi
# A fresh machine's own apt runs (apt-daily) may hold dpkg's lock a while.
"${sudo[@]}" apt-get -o DPkg::Lock::Timeout=300 update
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y zookeeper curl
[[ -f /usr/share/java/zookeeper.jar ]] || { echo "install-cluster-tools.sh: zookeeper.jar still missing" >&2; exit 1; }
echo "installed: zookeeper, curl"
