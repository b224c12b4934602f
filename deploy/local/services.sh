#!/usr/bin/env bash
# services.sh makes the local services lockstream needs available on 127.0.0.1:
# PostgreSQL (5432), Redis (6379), ClickHouse (9000 native, 8123 HTTP), plus kcat and
# headless Chromium (with fonts) for the console's browser test.
#
# It is idempotent: it installs with apt-get only what is missing, starts only what is
# not answering, and creates the lockstream role and database only if absent. It runs
# as root on a fresh Debian machine (CI) and on machines where Postgres and Redis
# already run. Set LOCKSTREAM_SKIP_SERVICES=1 to skip it entirely (services elsewhere).
set -euo pipefail

[ "${LOCKSTREAM_SKIP_SERVICES:-0}" = 1 ] && { echo "services: skipped (LOCKSTREAM_SKIP_SERVICES=1)"; exit 0; }

log() { printf 'services: %s\n' "$*"; }
die() { printf 'services: error: %s\n' "$*" >&2; exit 1; }

SUDO=""
if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null || die "run as root (or install sudo): installing and starting services needs it"
  SUDO="sudo"
fi

# port_open HOST PORT: true when something accepts TCP connections there.
port_open() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }

# wait_for NAME CMD...: retries CMD for up to 60 s.
wait_for() {
  local name=$1; shift
  for _ in $(seq 1 120); do
    if "$@" >/dev/null 2>&1; then log "$name is up"; return 0; fi
    sleep 0.5
  done
  die "$name did not come up within 60 s"
}

# --- install what is missing ---------------------------------------------------------
missing=()
command -v psql >/dev/null && ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || missing+=(postgresql postgresql-client)
command -v redis-server >/dev/null || missing+=(redis-server)
command -v redis-cli >/dev/null || missing+=(redis-tools)
command -v clickhouse-server >/dev/null || missing+=(clickhouse-server)
command -v clickhouse-client >/dev/null || missing+=(clickhouse-client)
command -v kcat >/dev/null || missing+=(kcat)
# Chromium drives the console's browser test (cmd/lockstream, chromedp); without a font
# its screenshot would show boxes for text.
command -v chromium >/dev/null || missing+=(chromium)
[ -e /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || missing+=(fonts-dejavu-core)
if [ ${#missing[@]} -gt 0 ]; then
  log "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  # policy-rc.d keeps the packages' init scripts from starting daemons the way systemd would;
  # this script starts them itself below.
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# --- PostgreSQL ----------------------------------------------------------------------
if ! port_open 127.0.0.1 5432; then
  log "starting PostgreSQL"
  if command -v pg_lsclusters >/dev/null && [ -n "$(pg_lsclusters -h 2>/dev/null)" ]; then
    read -r ver cluster _ < <(pg_lsclusters -h | head -1)
    $SUDO pg_ctlcluster --skip-systemctl-redirect "$ver" "$cluster" start
  else
    die "no PostgreSQL cluster found; create one with pg_createcluster"
  fi
fi
wait_for PostgreSQL port_open 127.0.0.1 5432

pg_admin() { $SUDO runuser -u postgres -- psql -v ON_ERROR_STOP=1 -qAt "$@"; }
if [ "$(pg_admin -c "SELECT 1 FROM pg_roles WHERE rolname='lockstream'")" != 1 ]; then
  log "creating role lockstream"
  pg_admin -c "CREATE ROLE lockstream LOGIN PASSWORD 'lockstream' CREATEDB"
fi
if [ "$(pg_admin -c "SELECT 1 FROM pg_database WHERE datname='lockstream'")" != 1 ]; then
  log "creating database lockstream"
  pg_admin -c "CREATE DATABASE lockstream OWNER lockstream"
fi
# A password login over TCP must work whatever the cluster's pg_hba says (trust or md5/scram).
wait_for "PostgreSQL login as lockstream" env PGPASSWORD=lockstream psql -h 127.0.0.1 -U lockstream -d lockstream -c 'SELECT 1'

# --- Redis ---------------------------------------------------------------------------
if ! port_open 127.0.0.1 6379; then
  log "starting Redis"
  $SUDO mkdir -p /var/lib/redis /var/log/redis
  $SUDO redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/lockstream.log
fi
wait_for Redis redis-cli -h 127.0.0.1 -p 6379 ping

# --- ClickHouse ----------------------------------------------------------------------
if ! port_open 127.0.0.1 9000; then
  log "starting ClickHouse"
  ch_server=$(command -v clickhouse-server || echo /usr/sbin/clickhouse-server)
  for d in /var/lib/clickhouse /var/log/clickhouse-server /var/run/clickhouse-server; do
    $SUDO mkdir -p "$d"
    if id clickhouse >/dev/null 2>&1; then $SUDO chown clickhouse: "$d"; fi
  done
  if id clickhouse >/dev/null 2>&1; then
    $SUDO start-stop-daemon --start --oknodo --background --chuid clickhouse \
      --exec "$ch_server" -- --config-file=/etc/clickhouse-server/config.xml
  else
    $SUDO start-stop-daemon --start --oknodo --background \
      --exec "$ch_server" -- --config-file=/etc/clickhouse-server/config.xml
  fi
fi
wait_for ClickHouse clickhouse-client --host 127.0.0.1 --port 9000 --query 'SELECT 1'

log "all services answer: postgres 127.0.0.1:5432, redis 127.0.0.1:6379, clickhouse 127.0.0.1:9000 (chromium: $(command -v chromium))"
