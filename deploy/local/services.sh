#!/usr/bin/env bash
# services.sh makes the local services lockstream needs available on 127.0.0.1:
# PostgreSQL (5432), Redis (6379), ClickHouse (9000 native, 8123 HTTP), RabbitMQ
# (5672, for the AMQP bridge) and Mosquitto (1883, for the MQTT bridge), plus kcat and
# headless Chromium (with fonts) for the console's browser test. The chaos soak runs
# private instances of Postgres, Redis, RabbitMQ and Mosquitto from the same packages
# (internal/servicetest, bridgetest.StartNode) and restarts those, never these.
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

# wait_for NAME CMD...: retries CMD for up to $WAIT_SECONDS (default 60) seconds.
wait_for() {
  local name=$1 limit=${WAIT_SECONDS:-60}; shift
  for _ in $(seq 1 $((limit * 2))); do
    if "$@" >/dev/null 2>&1; then log "$name is up"; return 0; fi
    sleep 0.5
  done
  die "$name did not come up within $limit s"
}

# has CMD: true when CMD is on the PATH or in /usr/sbin (daemons live there, and
# some PATHs lack it).
has() { command -v "$1" >/dev/null || [ -x "/usr/sbin/$1" ]; }

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
has rabbitmq-server || missing+=(rabbitmq-server)
has mosquitto || missing+=(mosquitto)
if [[ " ${missing[*]} " == *" rabbitmq-server "* ]] && [ ! -e /etc/rabbitmq/rabbitmq-env.conf ]; then
  # Before the package's first start: a node name that does not depend on the host
  # name resolving (containers), and AMQP on the loopback only, like the other services.
  log "configuring RabbitMQ for 127.0.0.1 (/etc/rabbitmq)"
  $SUDO mkdir -p /etc/rabbitmq
  printf '%s\n' 'NODENAME=rabbit@localhost' 'ERL_EPMD_ADDRESS=127.0.0.1' \
    'export ERL_FLAGS="-kernel inet_dist_use_interface {127,0,0,1}"' | $SUDO tee /etc/rabbitmq/rabbitmq-env.conf >/dev/null
  [ -e /etc/rabbitmq/rabbitmq.conf ] || echo 'listeners.tcp.local = 127.0.0.1:5672' | $SUDO tee /etc/rabbitmq/rabbitmq.conf >/dev/null
fi
if [ ${#missing[@]} -gt 0 ]; then
  log "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  # policy-rc.d keeps the packages' init scripts from starting daemons the way systemd would;
  # this script starts them itself below. --force-confold keeps the files written above.
  $SUDO apt-get install -y -qq --no-install-recommends -o Dpkg::Options::=--force-confdef \
    -o Dpkg::Options::=--force-confold "${missing[@]}" >/dev/null
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
# The suite runs two packages at once, each with parallel tests on pools of their
# own, and the chaos soak runs the shipped topology (18 processes): Debian's 100
# connections run out. 400 is set once (ALTER SYSTEM) and takes a restart.
if [ "$(pg_admin -c 'SHOW max_connections')" -lt 400 ]; then
  log "raising PostgreSQL's max_connections to 400 (a restart)"
  pg_admin -c "ALTER SYSTEM SET max_connections = 400"
  read -r ver cluster _ < <(pg_lsclusters -h | head -1)
  $SUDO pg_ctlcluster --skip-systemctl-redirect "$ver" "$cluster" restart
  wait_for PostgreSQL port_open 127.0.0.1 5432
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

# --- RabbitMQ (the AMQP bridge) ---------------------------------------------------------
if ! port_open 127.0.0.1 5672; then
  log "starting RabbitMQ"
  for d in /var/lib/rabbitmq /var/log/rabbitmq; do
    $SUDO mkdir -p "$d"
    if id rabbitmq >/dev/null 2>&1; then $SUDO chown rabbitmq: "$d"; fi
  done
  # The package's wrapper runs the server as the rabbitmq user.
  rabbitmq_server=$(command -v rabbitmq-server || echo /usr/sbin/rabbitmq-server)
  $SUDO "$rabbitmq_server" -detached
fi
# The AMQP listener opens last, once the node has booted: a cold start takes a while.
WAIT_SECONDS=180 wait_for RabbitMQ port_open 127.0.0.1 5672

# --- Mosquitto (the MQTT bridge) --------------------------------------------------------
# Mosquitto keeps at most max_queued_messages (1000 by default) QoS 1 messages for a
# session that is away, the ones it had in flight included, and drops the rest: room
# for a bridge restart or a Kafka outage. Debian's mosquitto.conf reads conf.d; a
# running Mosquitto takes the file at its next start.
if [ -d /etc/mosquitto/conf.d ] && [ ! -e /etc/mosquitto/conf.d/lockstream.conf ]; then
  log "configuring Mosquitto (/etc/mosquitto/conf.d/lockstream.conf)"
  printf '%s\n' '# lockstream: room for the QoS 1 messages of a bridge session that is away' \
    'max_queued_messages 100000' | $SUDO tee /etc/mosquitto/conf.d/lockstream.conf >/dev/null
fi
if ! port_open 127.0.0.1 1883; then
  log "starting Mosquitto"
  for d in /run/mosquitto /var/lib/mosquitto /var/log/mosquitto; do
    $SUDO mkdir -p "$d"
    if id mosquitto >/dev/null 2>&1; then $SUDO chown mosquitto: "$d"; fi
  done
  # With no listener configured (Debian's default) Mosquitto 2 listens on the
  # loopback only, port 1883, and lets anonymous clients in.
  mosquitto_bin=$(command -v mosquitto || echo /usr/sbin/mosquitto)
  $SUDO "$mosquitto_bin" -d -c /etc/mosquitto/mosquitto.conf
fi
wait_for Mosquitto port_open 127.0.0.1 1883

log "all services answer: postgres 127.0.0.1:5432, redis 127.0.0.1:6379, clickhouse 127.0.0.1:9000, rabbitmq 127.0.0.1:5672, mosquitto 127.0.0.1:1883 (chromium: $(command -v chromium))"
