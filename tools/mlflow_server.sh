#!/usr/bin/env bash
# A team MLflow tracking server on PostgreSQL, on this machine:
#   tools/mlflow_server.sh start [DIR]    PostgreSQL cluster of its own under DIR (initdb on first
#                                         start), then `mlflow server` on it; prints the URI
#   tools/mlflow_server.sh stop [DIR]     stop both (the server's whole process group, then PostgreSQL)
#   tools/mlflow_server.sh uri [DIR]      print the URI of the running server
# DIR defaults to results/mlflow-server. Both listen on 127.0.0.1 only, each on a free port
# (MLFLOW_PORT / PG_PORT pick them; MLFLOW_HOST=0.0.0.0 serves other machines, e.g. a cluster's
# compute nodes). The database trusts local TCP logins: it is bound to loopback; give it a password
# and pg_hba rules before opening it up. Artifacts (figures, records) go to DIR/artifacts, served
# by the tracking server itself (`mlflow-artifacts:`), so clients need no access to that folder.
# Point the pipeline at it: snakemake --cores all --config mlflow_uri="$(tools/mlflow_server.sh uri)"
# PostgreSQL comes from Debian (apt-get install postgresql, done here if missing); mlflow talks to it
# through psycopg2 (pyproject's `team` extra). Run as root (PostgreSQL runs as the `postgres` user)
# or as an ordinary user (it runs as you).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
CMD=${1:-}
DIR=${2:-${REPRO_MLFLOW_SERVER_DIR:-$ROOT/results/mlflow-server}}
HOST=${MLFLOW_HOST:-127.0.0.1}
PY=${PYTHON:-$ROOT/.venv/bin/python}
MLFLOW=${MLFLOW:-$(dirname "$PY")/mlflow}

die() { echo "mlflow_server: $*" >&2; exit 1; }

pg_bin() {
    local bin; bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
    if [[ -z $bin ]]; then
        [[ $EUID -eq 0 ]] || die "PostgreSQL is not installed (apt-get install postgresql)"
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql >/dev/null
        bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
    fi
    echo "$bin"
}

free_port() { "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

as_pg() { if [[ $EUID -eq 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi; }

start() {
    local bin; bin=$(pg_bin)
    [[ -x $MLFLOW ]] || die "no mlflow at $MLFLOW (make setup)"
    "$PY" -c "import psycopg2" 2>/dev/null || die "psycopg2 is missing: pip install '.[team]'"
    mkdir -p "$DIR"
    [[ $EUID -eq 0 ]] && chown postgres: "$DIR"
    local pgdata=$DIR/pg
    if [[ ! -s $pgdata/PG_VERSION ]]; then
        as_pg "$bin/initdb" -D "$pgdata" -U repro --auth=trust -E UTF8 >/dev/null
    fi
    if ! as_pg "$bin/pg_ctl" -D "$pgdata" status >/dev/null 2>&1; then
        local pg_port=${PG_PORT:-$(free_port)}
        as_pg "$bin/pg_ctl" -D "$pgdata" -l "$DIR/postgres.log" -w -t 60 \
            -o "-c listen_addresses=127.0.0.1 -c port=$pg_port -c unix_socket_directories=''" start >/dev/null
        echo "$pg_port" > "$DIR/pg_port"
    fi
    local pg_port; pg_port=$(cat "$DIR/pg_port")
    as_pg "$bin/psql" -h 127.0.0.1 -p "$pg_port" -U repro -d postgres -qtAc "SELECT 1 FROM pg_database WHERE datname = 'mlflow'" \
        | grep -q 1 || as_pg "$bin/createdb" -h 127.0.0.1 -p "$pg_port" -U repro mlflow
    if [[ -f $DIR/mlflow.pgid ]] && kill -0 -- "-$(cat "$DIR/mlflow.pgid")" 2>/dev/null; then
        uri; return
    fi
    local port=${MLFLOW_PORT:-$(free_port)}
    mkdir -p "$DIR/artifacts"
    # its own session, hence its own process group: stop kills the server and all its workers
    setsid "$MLFLOW" server --backend-store-uri "postgresql://repro@127.0.0.1:$pg_port/mlflow" \
        --artifacts-destination "$DIR/artifacts" --host "$HOST" --port "$port" --workers 1 \
        > "$DIR/mlflow.log" 2>&1 < /dev/null &
    echo $! > "$DIR/mlflow.pgid"
    echo "http://127.0.0.1:$port" > "$DIR/uri"
    for _ in $(seq 120); do
        if "$PY" -c "import sys, urllib.request; urllib.request.urlopen(sys.argv[1] + '/health', timeout=2)" "$(cat "$DIR/uri")" 2>/dev/null; then
            uri; return
        fi
        kill -0 "$(cat "$DIR/mlflow.pgid")" 2>/dev/null || { tail -30 "$DIR/mlflow.log" >&2; die "mlflow server exited"; }
        sleep 1
    done
    tail -30 "$DIR/mlflow.log" >&2
    die "mlflow server did not answer on $(cat "$DIR/uri") within 120 s"
}

stop() {
    if [[ -f $DIR/mlflow.pgid ]]; then
        local pgid; pgid=$(cat "$DIR/mlflow.pgid")
        if kill -0 -- "-$pgid" 2>/dev/null; then
            kill -TERM -- "-$pgid"
            for _ in $(seq 30); do kill -0 -- "-$pgid" 2>/dev/null || break; sleep 0.5; done
            kill -0 -- "-$pgid" 2>/dev/null && kill -KILL -- "-$pgid"
        fi
        rm -f "$DIR/mlflow.pgid" "$DIR/uri"
    fi
    if [[ -s $DIR/pg/PG_VERSION ]]; then
        local bin; bin=$(pg_bin)
        as_pg "$bin/pg_ctl" -D "$DIR/pg" status >/dev/null 2>&1 && as_pg "$bin/pg_ctl" -D "$DIR/pg" -m fast -w stop >/dev/null
    fi
    echo "mlflow_server: stopped ($DIR)"
}

uri() {
    [[ -f $DIR/uri ]] || die "not running (no $DIR/uri)"
    cat "$DIR/uri"
}

case "$CMD" in
    start) start ;;
    stop) stop ;;
    uri) uri ;;
    *) die "usage: $0 start|stop|uri [DIR]" ;;
esac
