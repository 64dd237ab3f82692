#!/bin/sh
# pg.sh starts a throwaway PostgreSQL server on 127.0.0.1, in a temporary data
# directory, runs a command in examples/ with the variables the ingest test
# reads (FERRY_PG_DSN, FERRY_PG_CTL, FERRY_PG_DATA, and DATABASE_URL for
# `go run ./ingest`), then stops the server and removes its data:
#
#	sh examples/ingest/pg.sh                          # the ingest test, verbose
#	sh examples/ingest/pg.sh go run ./ingest -load -compare
#
# It needs PostgreSQL's programs (on Debian: apt-get install postgresql); it
# takes the newest /usr/lib/postgresql/*/bin, or PGBIN. As root it runs the
# server as the user postgres. PGPORT_TEST sets the port (default: one free
# from 55432 up).
set -eu
cd "$(dirname "$0")/.."
pgbin=${PGBIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)}
if [ -z "$pgbin" ] && command -v pg_ctl >/dev/null; then
	pgbin=$(dirname "$(command -v pg_ctl)")
fi
if [ ! -x "$pgbin/pg_ctl" ]; then
	echo "pg.sh: no PostgreSQL (pg_ctl): apt-get install postgresql, or set PGBIN" >&2
	exit 1
fi
as=""
data=$(mktemp -d /tmp/ferry-pg.XXXXXX)
if [ "$(id -u)" -eq 0 ]; then
	chown postgres:postgres "$data"
	as="runuser -u postgres --"
fi
port=${PGPORT_TEST:-55432}
if [ -z "${PGPORT_TEST:-}" ]; then
	while "$pgbin/pg_isready" -q -h 127.0.0.1 -p "$port"; [ $? -le 1 ]; do
		port=$((port + 1)) # a server answers there
	done
fi
stop() {
	$as "$pgbin/pg_ctl" -D "$data" -m immediate stop >/dev/null 2>&1 || true
	rm -rf "$data"
}
trap stop EXIT
trap 'exit 1' INT TERM
$as "$pgbin/initdb" -D "$data" -A trust -U postgres >/dev/null
$as "$pgbin/pg_ctl" -D "$data" -l "$data/log" -w start -o "-k /tmp -h 127.0.0.1 -p $port" >/dev/null
export FERRY_PG_DSN="postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
export FERRY_PG_CTL="$pgbin/pg_ctl" FERRY_PG_DATA="$data" DATABASE_URL="$FERRY_PG_DSN"
echo "pg.sh: PostgreSQL on 127.0.0.1:$port, data in $data" >&2
if [ $# -eq 0 ]; then
	set -- go test -race -v -run TestIngest ./ingest/
fi
"$@"
