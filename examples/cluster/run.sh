#!/bin/sh
# run.sh starts a throwaway etcd on 127.0.0.1, its data in a temporary
# directory. It runs a command in examples/ on a throwaway PostgreSQL
# (ingest/pg.sh), with FERRY_ETCD set to etcd's endpoint beside pg.sh's
# variables. Then it stops both and removes their data:
#
#	sh examples/cluster/run.sh          # the cluster test, verbose: 3 nodes, kill -9, SIGTERM, SIGSTOP
#	sh examples/cluster/run.sh nodes    # 3 nodes on 127.0.0.1:8081-8083, until Ctrl-C
#
# It needs etcd (on Debian: apt-get install etcd-server) and PostgreSQL's
# programs (apt-get install postgresql). ETCD_PORT sets etcd's client port
# (default: one free from 52379 up; the peer port is the next).
set -eu
cd "$(dirname "$0")/.."

if [ "${1:-}" = nodes-here ]; then # from `run.sh nodes`, inside pg.sh: the servers run
	bin=$(mktemp -d /tmp/ferry-cluster.XXXXXX)
	go build -o "$bin/cluster" ./cluster
	pids=""
	for n in 1 2 3; do
		"$bin/cluster" -name "n$n" -addr "127.0.0.1:808$n" -etcd "$FERRY_ETCD" &
		pids="$pids $!"
	done
	echo "run.sh: nodes n1, n2, n3 on 127.0.0.1:8081-8083; Ctrl-C stops them. Try:" >&2
	echo "  curl -d '{\"tenant\":\"acme\",\"id\":\"e1\"}' 127.0.0.1:8082/events; curl 127.0.0.1:8081/stats" >&2
	trap 'kill -TERM $pids 2>/dev/null || true' INT TERM
	wait || true
	wait || true # the nodes, after a signal ended the first wait
	rm -rf "$bin"
	exit 0
fi

if ! command -v etcd >/dev/null; then
	echo "run.sh: no etcd: apt-get install etcd-server" >&2
	exit 1
fi
free() { # nothing answers on 127.0.0.1:$1 (curl's 7: refused)
	if curl -s -o /dev/null --max-time 1 "http://127.0.0.1:$1/"; then
		return 1
	else
		[ $? -eq 7 ]
	fi
}
port=${ETCD_PORT:-52379}
if [ -z "${ETCD_PORT:-}" ]; then
	while ! free "$port" || ! free $((port + 1)); do
		port=$((port + 2))
	done
fi
data=$(mktemp -d /tmp/ferry-etcd.XXXXXX)
etcd=""
stop() {
	if [ -n "$etcd" ]; then
		kill "$etcd" 2>/dev/null || true
		wait "$etcd" 2>/dev/null || true
	fi
	rm -rf "$data"
}
trap stop EXIT
trap 'exit 1' INT TERM
url="http://127.0.0.1:$port" peer="http://127.0.0.1:$((port + 1))"
etcd --name ferry --data-dir "$data/data" --logger zap --log-outputs stderr \
	--listen-client-urls "$url" --advertise-client-urls "$url" \
	--listen-peer-urls "$peer" --initial-advertise-peer-urls "$peer" \
	--initial-cluster "ferry=$peer" >"$data/log" 2>&1 &
etcd=$!
i=0
until curl -fs "$url/health" >/dev/null; do
	i=$((i + 1))
	if [ $i -gt 100 ] || ! kill -0 "$etcd" 2>/dev/null; then
		echo "run.sh: etcd did not start:" >&2
		tail -n 20 "$data/log" >&2
		exit 1
	fi
	sleep 0.1
done
export FERRY_ETCD="127.0.0.1:$port"
echo "run.sh: etcd on $FERRY_ETCD, data in $data" >&2
if [ $# -eq 0 ]; then
	set -- go test -race -v -run TestCluster ./cluster/
elif [ "$1" = nodes ]; then
	set -- sh cluster/run.sh nodes-here
fi
sh ingest/pg.sh "$@"
