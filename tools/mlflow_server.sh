#!/usr/bin/env bash
# A team MLflow tracking server on PostgreSQL, on this machine:
#   tools/mlflow_server.sh start [DIR]    PostgreSQL cluster of its own under DIR (initdb on first
#                                         start), then `mlflow server` on it; prints the URI
#   tools/mlflow_server.sh stop [DIR]     stop both (the server's whole process group, then PostgreSQL)
#   tools/mlflow_server.sh uri [DIR]      print the URI of the running server
#   tools/mlflow_server.sh credentials [DIR]  print the path of its credentials file
#   tools/mlflow_server.sh env [DIR]      print `export MLFLOW_TRACKING_URI=... MLFLOW_TRACKING_USERNAME=...
#                                         MLFLOW_TRACKING_PASSWORD=...` for eval "$(...)" (mlflow's clients read them)
# DIR defaults to results/mlflow-server. Both listen on 127.0.0.1 only, each on a free port
# (MLFLOW_PORT / PG_PORT pick them; MLFLOW_HOST=0.0.0.0 serves other machines, e.g. a cluster's
# compute nodes, by the names that MLflow's MLFLOW_SERVER_ALLOWED_HOSTS lists). The database trusts local TCP logins: it is bound to loopback; give it a password
# and pg_hba rules before opening it up. Artifacts (figures, records) go to DIR/artifacts, served
# by the tracking server itself (`mlflow-artifacts:`), so clients need no access to that folder.
# Login: MLflow's basic-auth app (`--app-name repro-basic-auth`: mlflow.server.auth's app plus the
# /repro page of repro.pipeline.mlflow_app; plain `basic-auth` where that plugin is not installed).
# Every route but /health and the static files needs a login. On first start DIR/credentials is made
# (mode 600): MLFLOW_TRACKING_USERNAME=admin and a generated MLFLOW_TRACKING_PASSWORD; it is the
# admin's password from then on (each start sets it in the user database: edit the file and restart
# to change it). Users, one per colleague, live in the PostgreSQL database mlflow_auth (admin: the
# UI's /signup page or mlflow.server.get_app_client("basic-auth")); default permission READ.
# DIR/server.secret (mode 600) holds the Flask secret key that the app's CSRF protection needs.
# A checked login is remembered for 5 minutes (auth_cache_ttl_seconds: each check costs a password
# hash, ~0.1 s, which an ingestion's hundreds of requests would otherwise pay each time); a password
# changed through the server's API takes effect at once, one changed in the file at the restart.
# Point the pipeline at it: snakemake --cores all --config mlflow_uri="$(tools/mlflow_server.sh uri)" \
#     mlflow_credentials="$(tools/mlflow_server.sh credentials)"
# MLflow's job runner (GenAI jobs, four more processes) stays off unless MLFLOW_SERVER_ENABLE_JOB_EXECUTION=true.
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

secret() { "$PY" -c 'import secrets; print(secrets.token_urlsafe(24))'; }

credential() {  # credential KEY: its value in DIR/credentials (as repro.pipeline.tracking.read_credentials
    # reads it: an `export ` prefix and one pair of quotes allowed)
    sed -nE "s/^[[:space:]]*(export[[:space:]]+)?$1=[[:space:]]*//p" "$DIR/credentials" | tail -1 \
        | sed -E "s/[[:space:]]+\$//; s/^'(.*)'\$/\1/; s/^\"(.*)\"\$/\1/"
}

make_secrets() {  # DIR/credentials and DIR/server.secret, mode 600, made once
    if [[ ! -s $DIR/credentials ]]; then
        (umask 077; printf '%s\n' \
            "# MLflow basic-auth login of the server in this folder (made by tools/mlflow_server.sh on first start)." \
            "# The admin's password: each start sets it; to change it, edit it here and restart." \
            "MLFLOW_TRACKING_USERNAME=admin" "MLFLOW_TRACKING_PASSWORD=$(secret)" > "$DIR/credentials.tmp")
        mv "$DIR/credentials.tmp" "$DIR/credentials"
        echo "mlflow_server: made $DIR/credentials (mode 600): the admin login" >&2
    fi
    if [[ ! -s $DIR/server.secret ]]; then
        (umask 077; secret > "$DIR/server.secret.tmp")
        mv "$DIR/server.secret.tmp" "$DIR/server.secret"
    fi
    chmod 600 "$DIR/credentials" "$DIR/server.secret"
}

auth_setup() {  # auth_setup PG_PORT: DIR/basic_auth.ini, and the admin user with the file's password
    local db_uri="postgresql://repro@127.0.0.1:$1/mlflow_auth"
    (umask 077; printf '%s\n' "[mlflow]" "default_permission = READ" "database_uri = $db_uri" \
        "admin_username = $(credential MLFLOW_TRACKING_USERNAME)" \
        "authorization_function = mlflow.server.auth:authenticate_request_basic_auth" \
        "auth_cache_ttl_seconds = 300" > "$DIR/basic_auth.ini")
    # the credentials file is authoritative: create the admin, or set its password (a rotated or
    # re-made file, a database from before)
    MLFLOW_AUTH_CONFIG_PATH=$DIR/basic_auth.ini MLFLOW_TRACKING_USERNAME=$(credential MLFLOW_TRACKING_USERNAME) \
    MLFLOW_TRACKING_PASSWORD=$(credential MLFLOW_TRACKING_PASSWORD) "$PY" - "$db_uri" <<'PYEOF' 2>>"$DIR/mlflow.log"
import os, sys
from mlflow.server.auth.sqlalchemy_store import SqlAlchemyStore

store = SqlAlchemyStore()
store.init_db(sys.argv[1])
user, password = os.environ["MLFLOW_TRACKING_USERNAME"], os.environ["MLFLOW_TRACKING_PASSWORD"]
if not store.has_user(user, use_primary=True):
    store.create_user(user, password, is_admin=True)
elif not store.authenticate_user(user, password, use_primary=True):
    store.update_user(user, password=password, is_admin=True)
PYEOF
}

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
    local db
    for db in mlflow mlflow_auth; do
        as_pg "$bin/psql" -h 127.0.0.1 -p "$pg_port" -U repro -d postgres -qtAc "SELECT 1 FROM pg_database WHERE datname = '$db'" \
            | grep -q 1 || as_pg "$bin/createdb" -h 127.0.0.1 -p "$pg_port" -U repro "$db"
    done
    if [[ -f $DIR/mlflow.pgid ]] && kill -0 -- "-$(cat "$DIR/mlflow.pgid")" 2>/dev/null; then
        uri; return
    fi
    make_secrets
    : > "$DIR/mlflow.log"
    auth_setup "$pg_port" || { tail -30 "$DIR/mlflow.log" >&2; die "could not set up the login database"; }
    local app=repro-basic-auth
    "$PY" -c "import sys; from repro.pipeline.mlflow_app import registered; sys.exit(not registered())" 2>/dev/null \
        || app=basic-auth
    local port=${MLFLOW_PORT:-$(free_port)}
    mkdir -p "$DIR/artifacts"
    # its own session, hence its own process group: stop kills the server and all its workers
    MLFLOW_AUTH_CONFIG_PATH=$DIR/basic_auth.ini MLFLOW_FLASK_SERVER_SECRET_KEY=$(cat "$DIR/server.secret") \
    MLFLOW_DISABLE_TELEMETRY=true DO_NOT_TRACK=true \
    MLFLOW_SERVER_ENABLE_JOB_EXECUTION=${MLFLOW_SERVER_ENABLE_JOB_EXECUTION:-false} \
    setsid "$MLFLOW" server --app-name "$app" --backend-store-uri "postgresql://repro@127.0.0.1:$pg_port/mlflow" \
        --artifacts-destination "$DIR/artifacts" --host "$HOST" --port "$port" --workers 1 \
        >> "$DIR/mlflow.log" 2>&1 < /dev/null &
    echo $! > "$DIR/mlflow.pgid"
    echo "http://127.0.0.1:$port" > "$DIR/uri"
    for _ in $(seq 120); do
        if "$PY" -c "import sys, urllib.request; urllib.request.urlopen(sys.argv[1] + '/health', timeout=2)" "$(cat "$DIR/uri")" 2>/dev/null; then
            check_login || die "the server refuses the login in $DIR/credentials (log: $DIR/mlflow.log)"
            [[ $app == repro-basic-auth ]] && echo "mlflow_server: UI: $(cat "$DIR/uri")/repro (login: $DIR/credentials)" >&2
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

check_login() {  # the credentials file's login is accepted (and none is not)
    MLFLOW_TRACKING_USERNAME=$(credential MLFLOW_TRACKING_USERNAME) MLFLOW_TRACKING_PASSWORD=$(credential MLFLOW_TRACKING_PASSWORD) \
    "$PY" - "$(cat "$DIR/uri")" <<'PYEOF'
import base64, os, sys, urllib.error, urllib.request

url = sys.argv[1] + "/api/2.0/mlflow/experiments/search?max_results=1"
try:
    urllib.request.urlopen(url, timeout=10)
    sys.exit("mlflow_server: the server answers without a login")
except urllib.error.HTTPError as exc:
    if exc.code != 401:
        raise
token = base64.b64encode(f"{os.environ['MLFLOW_TRACKING_USERNAME']}:{os.environ['MLFLOW_TRACKING_PASSWORD']}".encode()).decode()
urllib.request.urlopen(urllib.request.Request(url, headers={"Authorization": f"Basic {token}"}), timeout=10)
PYEOF
}

uri() {
    [[ -f $DIR/uri ]] || die "not running (no $DIR/uri)"
    cat "$DIR/uri"
}

credentials() {
    [[ -s $DIR/credentials ]] || die "no credentials yet (no $DIR/credentials: start the server once)"
    echo "$DIR/credentials"
}

env_lines() {
    credentials >/dev/null
    printf 'export MLFLOW_TRACKING_URI=%q\n' "$(uri)"
    printf 'export MLFLOW_TRACKING_USERNAME=%q\n' "$(credential MLFLOW_TRACKING_USERNAME)"
    printf 'export MLFLOW_TRACKING_PASSWORD=%q\n' "$(credential MLFLOW_TRACKING_PASSWORD)"
}

case "$CMD" in
    start) start ;;
    stop) stop ;;
    uri) uri ;;
    credentials) credentials ;;
    env) env_lines ;;
    *) die "usage: $0 start|stop|uri|credentials|env [DIR]" ;;
esac
