#!/usr/bin/env bash
# demo.sh runs the whole lockstream pipeline on this machine with its embedded
# defaults and shows what happens: `lockstream all` (embedded Kafka broker, consumer,
# history writer, heartbeat, delivery, API), a demo client whose webhooks go to a
# signature-verifying sink and whose phone gets pushes through a fake Swrve, a member
# of that client with an inbox, a live stream, an email address (the sink takes email
# over SMTP too) and a phone, whose unseen messages escalate within the demo's first
# minute, and a simulated fleet, part of which speaks MQTT to Mosquitto (the MQTT
# bridge takes it into Kafka). `make demo` calls it after `make services` and
# `make build`.
# Ctrl-C stops it all.
#
# LOCKSTREAM_DEMO_SECONDS=N stops the demo after N seconds (for scripted runs).
set -euo pipefail
cd "$(dirname "$0")/../.."

BIN=./bin/lockstream
random_token() { head -c 18 /dev/urandom | base64 | tr '+/' '-_'; }
export LOCKSTREAM_ADMIN_TOKEN=${LOCKSTREAM_ADMIN_TOKEN:-$(random_token)}
export LOCKSTREAM_INGEST_TOKEN=${LOCKSTREAM_INGEST_TOKEN:-$(random_token)}
export LOCKSTREAM_PUSH_TOKEN=${LOCKSTREAM_PUSH_TOKEN:-$(random_token)}
export LOCKSTREAM_WEBHOOK_ALLOW_PRIVATE=${LOCKSTREAM_WEBHOOK_ALLOW_PRIVATE:-true}
export LOCKSTREAM_HTTP_ADDR=${LOCKSTREAM_HTTP_ADDR:-127.0.0.1:8080}
export LOCKSTREAM_STATS_INTERVAL=${LOCKSTREAM_STATS_INTERVAL:-1s}
# A short heartbeat timeout, so silent sensors are noticed within a minute.
export LOCKSTREAM_HEARTBEAT_TIMEOUT=${LOCKSTREAM_HEARTBEAT_TIMEOUT:-20s}
export LOCKSTREAM_DATA_DIR=${LOCKSTREAM_DATA_DIR:-./data}
# The intake bridges, on the local RabbitMQ and Mosquitto (`make services` starts
# them), with a queue and an MQTT session of the demo's own.
export LOCKSTREAM_AMQP_URL=${LOCKSTREAM_AMQP_URL-amqp://guest:guest@127.0.0.1:5672/}
export LOCKSTREAM_AMQP_QUEUE=${LOCKSTREAM_AMQP_QUEUE:-lockstream.demo-recorder}
export LOCKSTREAM_MQTT_URL=${LOCKSTREAM_MQTT_URL-mqtt://127.0.0.1:1883}
export LOCKSTREAM_MQTT_CLIENT_ID=${LOCKSTREAM_MQTT_CLIENT_ID:-lockstream-demo}
SINK_ADDR=${LOCKSTREAM_SINK_ADDR:-127.0.0.1:9999}
# Pushes go to the fake Swrve (measured latencies, 300/s limit) unless told otherwise.
FAKE_SWRVE_ADDR=${LOCKSTREAM_FAKE_SWRVE_ADDR:-127.0.0.1:9998}
export LOCKSTREAM_SWRVE_URL=${LOCKSTREAM_SWRVE_URL:-http://$FAKE_SWRVE_ADDR/push}
demo_push_keys=$LOCKSTREAM_DATA_DIR/swrve-push-keys.yaml
export LOCKSTREAM_SWRVE_PUSH_KEYS=${LOCKSTREAM_SWRVE_PUSH_KEYS:-$demo_push_keys}
# Email goes to the sink's SMTP address, which prints each message.
SINK_SMTP_ADDR=${LOCKSTREAM_SINK_SMTP_ADDR:-127.0.0.1:2525}
export LOCKSTREAM_SMTP_URL=${LOCKSTREAM_SMTP_URL:-smtp://$SINK_SMTP_ADDR}
# Escalation within the demo's first minute (defaults 2m and 15m): a message left
# unseen 15 s gets a push to the member's phone, 30 s an email; a round every 5 s.
export LOCKSTREAM_ESCALATE_PUSH_AFTER=${LOCKSTREAM_ESCALATE_PUSH_AFTER:-15s}
export LOCKSTREAM_ESCALATE_EMAIL_AFTER=${LOCKSTREAM_ESCALATE_EMAIL_AFTER:-30s}
export LOCKSTREAM_ESCALATION_INTERVAL=${LOCKSTREAM_ESCALATION_INTERVAL:-5s}
API="http://$LOCKSTREAM_HTTP_ADDR"
AUTH="Authorization: Bearer $LOCKSTREAM_ADMIN_TOKEN"
LOG="$LOCKSTREAM_DATA_DIR/demo.log"

# The demo keeps its state in stores of its own (a Postgres database, a ClickHouse
# database, a Redis prefix). They may outlive the data folder: a fresh embedded broker
# log has new topic ids, and the consumer orders readings by offset only within one
# topic id (DESIGN.md, "Topic identity"), so readings on the new log are applied.
if [ -z "${LOCKSTREAM_PG_URL:-}${LOCKSTREAM_CLICKHOUSE_URL:-}${LOCKSTREAM_REDIS_PREFIX:-}" ]; then
  export LOCKSTREAM_PG_URL="postgres://lockstream:lockstream@127.0.0.1:5432/lockstream_demo?sslmode=disable"
  export LOCKSTREAM_CLICKHOUSE_URL="clickhouse://127.0.0.1:9000/lockstream_demo"
  export LOCKSTREAM_REDIS_PREFIX="lockstream_demo:"
  admin_pg="postgres://lockstream:lockstream@127.0.0.1:5432/lockstream?sslmode=disable"
  if [ "$(psql -qAt "$admin_pg" -c "SELECT 1 FROM pg_database WHERE datname = 'lockstream_demo'")" != 1 ]; then
    psql -q "$admin_pg" -c "CREATE DATABASE lockstream_demo"
  fi
fi
mkdir -p "$LOCKSTREAM_DATA_DIR"
: >"$LOG"
# The message prototypes lockstream pushes: "sensor." and each event type, sensor.unseen
# (escalations), incident.reminder (incident reminders), and the demo's standalone "Hello". The fake Swrve takes any campaign
# key. The demo's keys file is rewritten when it lacks one of them (a data folder from
# an older demo predates some); a file of your own is only checked.
push_prototypes="Hello sensor.unseen sensor.state_changed sensor.connection_lost sensor.connection_restored
  sensor.sensor_open_too_long sensor.site_outage sensor.site_restored sensor.sensor_unstable sensor.sensor_stable
  sensor.maintenance_ended incident.reminder"
missing_prototypes=""
for p in $push_prototypes; do
  grep -qF "'$p':" "$LOCKSTREAM_SWRVE_PUSH_KEYS" 2>/dev/null || missing_prototypes="$missing_prototypes $p"
done
if [ -n "$missing_prototypes" ] && [ "$LOCKSTREAM_SWRVE_PUSH_KEYS" = "$demo_push_keys" ]; then
  {
    echo "swrve:"
    echo "  messagePrototypePushKeys:"
    for p in $push_prototypes; do
      printf "    '%s':\n      IOS: demo-campaign-%s-ios\n      ANDROID: demo-campaign-%s-android\n" "$p" "${p#sensor.}" "${p#sensor.}"
    done
  } >"$demo_push_keys"
elif [ -n "$missing_prototypes" ]; then
  echo "warning: $LOCKSTREAM_SWRVE_PUSH_KEYS has no push key for:$missing_prototypes (those pushes will fail)"
fi

pids=()
stop() {
  trap - EXIT INT TERM
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  echo
  echo "demo stopped; the daemons' log is $LOG"
}
trap stop EXIT INT TERM

if [ "$LOCKSTREAM_SWRVE_URL" = "http://$FAKE_SWRVE_ADDR/push" ]; then
  "$BIN" fake-swrve --fake-swrve-addr "$FAKE_SWRVE_ADDR" >>"$LOG" 2>&1 &
  pids+=($!)
fi

# The stats lines of `all` go to the terminal, its log to $LOG.
"$BIN" all 2>>"$LOG" > >(sed -u 's/^/pipeline  /') &
all_pid=$!
pids+=($all_pid)
for _ in $(seq 1 240); do
  curl -fsS "$API/healthz" >/dev/null 2>&1 && break
  sleep 0.5
done
curl -fsS "$API/readyz" >/dev/null || { echo "lockstream all did not become ready; see $LOG"; tail -20 "$LOG"; exit 1; }

# Register the simulated fleets (ids are "sim" and the index in base 36; the MQTT fleet
# starts at index 1000: simrs …): readings of unregistered ids go to history only, with
# no state and no heartbeat. Every 25th id stays unregistered, so
# GET /v1/sensors/unregistered has something to list. The first 20 sensors and the
# first 5 of the MQTT fleet get a client that watches them.
demo_sensors="sim0 sim1 sim2 sim3 sim4 sim5 sim6 sim7 sim8 sim9 sima simb simc simd sime simf simg simh simi simj"
if [ -n "$LOCKSTREAM_MQTT_URL" ]; then demo_sensors="$demo_sensors simrs simrt simru simrv simrw"; fi
awk 'BEGIN { d = "0123456789abcdefghijklmnopqrstuvwxyz"
  for (i = 0; i < 1200; i++) { if (i % 25 == 24) continue; s = ""; n = i
    do { s = substr(d, n % 36 + 1, 1) s; n = int(n / 36) } while (n > 0); print "sim" s } }' |
  # 409 on a second demo run: the sensor is already registered.
  xargs -P 8 -I{} curl -sS -o /dev/null -X POST "$API/v1/sensors" -H "$AUTH" -d '{"id":"{}","address":"Demo Street, door {}"}'
# A client from an earlier demo run would get webhooks signed with a secret this run's
# sink does not know: remove it first.
for old in $(curl -fsS "$API/v1/clients?limit=1000" -H "$AUTH" | grep -o '"id":"[^"]*","name":"Demo Security"' | cut -d'"' -f4); do
  curl -fsS -o /dev/null -X DELETE "$API/v1/clients/$old" -H "$AUTH"
done
client=$(curl -fsS -X POST "$API/v1/clients" -H "$AUTH" \
  -d "{\"name\":\"Demo Security\",\"webhook_url\":\"http://$SINK_ADDR/hook\",\"push_targets\":[{\"platform\":\"IOS\",\"push_key\":\"demo-phone\"}]}")
client_id=$(printf '%s' "$client" | sed -n 's/.*"id":"\([^"]*\)".*/\1/p')
secret=$(printf '%s' "$client" | sed -n 's/.*"secret":"\([^"]*\)".*/\1/p')
for id in $demo_sensors; do
  curl -fsS -o /dev/null -X PUT "$API/v1/clients/$client_id/sensors/$id" -H "$AUTH"
done

# A member of the client: a person with an inbox of the client's notifications, a live
# stream of them, an email address (the sink's mailbox) and a phone, both of which hear
# of what it leaves unseen (escalation). Its token is shown once, here.
member=$(curl -fsS -X POST "$API/v1/clients/$client_id/members" -H "$AUTH" \
  -d '{"name":"Demo Resident","email":"resident@demo.example","timezone":"Europe/Paris","push_targets":[{"platform":"IOS","push_key":"demo-resident-phone"}]}')
member_token=$(printf '%s' "$member" | sed -n 's/.*"token":"\([^"]*\)".*/\1/p')
member_id=$(printf '%s' "$member" | sed -n 's/.*"id":"\([^"]*\)".*/\1/p')

LOCKSTREAM_SINK_SECRET=$secret LOCKSTREAM_SINK_SMTP_ADDR=$SINK_SMTP_ADDR "$BIN" webhook-sink --sink-addr "$SINK_ADDR" \
  2>>"$LOG" > >(sed -u 's/^/client    /') &
pids+=($!)
# Two standalone pushes: one now (the legacy route), one when the next 10-second window
# opens (SCHEDULED until then).
PUSH_AUTH="Authorization: Bearer $LOCKSTREAM_PUSH_TOKEN"
curl -fsS -o /dev/null -X POST "$API/push" -H "$PUSH_AUTH" \
  -d '{"platform":"ANDROID","messagePrototypeKey":"Hello","pushKey":"demo-tablet","message":"Welcome to the lockstream demo"}'
scheduled_push=$(curl -fsS -X POST "$API/v1/pushes" -H "$PUSH_AUTH" \
  -d '{"platform":"IOS","messagePrototypeKey":"Hello","pushKey":"demo-phone","message":"Scheduled hello","cronExpression":"*/10 * * * * *"}' |
  sed -n 's/.*"id":"\([^"]*\)".*/\1/p')

# 1,000 sensors, 1,000 readings/s; 2 % of them fall silent after 15 s.
"$BIN" simulate --sensors 1000 --rate 1000 --flip 0.05 --silent 0.02 --silent-after 15s >>"$LOG" 2>&1 &
pids+=($!)
# 200 more sensors speak MQTT: 200 readings/s to Mosquitto, which the MQTT bridge
# (part of `all`) takes into Kafka, acknowledging each once Kafka has it.
mqtt_fleet="No MQTT fleet (LOCKSTREAM_MQTT_URL is empty)"
if [ -n "$LOCKSTREAM_MQTT_URL" ]; then
  "$BIN" simulate --mqtt-url "$LOCKSTREAM_MQTT_URL" --sensors 200 --first-sensor 1000 --rate 200 --flip 0.05 \
    --silent -1 >>"$LOG" 2>&1 &
  pids+=($!)
  mqtt_fleet="200 more sensors (simrs …) publish 200 readings/s over MQTT to $LOCKSTREAM_MQTT_URL
(topic lockstream/readings/<sensor id>); the MQTT bridge takes them into Kafka (\"via mqtt/s\")"
fi

# One free-form notification to Demo Resident over AMQP: POST /notification publishes
# it to RabbitMQ, the AMQP bridge (part of `all`) records it in the member's inbox and
# stream, and mails it (email: true) to the sink.
if [ -z "$LOCKSTREAM_AMQP_URL" ]; then
  amqp_note="no AMQP bridge (LOCKSTREAM_AMQP_URL is empty), so no free-form notification over AMQP"
elif curl -fsS -o /dev/null -X POST "$API/notification" -H "$AUTH" \
  -d "{\"member_id\":\"$member_id\",\"type\":\"demo\",\"subject\":\"Hello over AMQP\",\"message\":\"published by POST /notification\",\"email\":true}"; then
  amqp_note="one free-form notification went over AMQP (POST /notification → events.notification.update.demo → the AMQP bridge) to Demo Resident's inbox and stream, and by email to the sink"
else
  amqp_note="POST /notification failed; see $LOG"
fi

cat <<MSG

lockstream is running with the API on $API; the daemons log to $LOG.
The operator console is $API/console/ (sign in with LOCKSTREAM_ADMIN_TOKEN below).
A simulated fleet of 1,000 sensors publishes 1,000 readings/s to the embedded broker
(127.0.0.1:9092: kcat -b 127.0.0.1:9092 -t lockstream.events -C); all but every 25th
are registered (the others are history only: GET /v1/sensors/unregistered lists them),
and 20 are linked to "Demo Security" ($client_id), whose webhooks the sink below
verifies and prints, and whose phone gets a push for each of them through the fake
Swrve ("pushed" counts them). 2 % of the fleet falls silent after 15 s; with a 20 s
heartbeat timeout their connection_lost events follow.
$mqtt_fleet.
AMQP: $amqp_note.

  export LOCKSTREAM_ADMIN_TOKEN=$LOCKSTREAM_ADMIN_TOKEN
  export LOCKSTREAM_INGEST_TOKEN=$LOCKSTREAM_INGEST_TOKEN
  export LOCKSTREAM_PUSH_TOKEN=$LOCKSTREAM_PUSH_TOKEN

"Demo Resident" ($member_id), a member of Demo Security, reads the same notifications
in an inbox of its own, and can watch them arrive live. What it leaves unseen escalates:
after $LOCKSTREAM_ESCALATE_PUSH_AFTER a push to its phone (through the fake Swrve), after $LOCKSTREAM_ESCALATE_EMAIL_AFTER an email to
resident@demo.example, which the sink prints ("client    email   to …"); each escalation
shows as "escalated +n" on the pipeline lines. Its token (shown only now):

  export MEMBER_TOKEN=$member_token

Its live stream (server-sent events; a single-use ticket in the URL, valid 60 s):

  curl -N "$API/v1/stream?ticket=\$(curl -fsS -X POST $API/v1/stream/tickets -H "Authorization: Bearer \$MEMBER_TOKEN" | sed -n 's/.*"ticket":"\([^"]*\)".*/\1/p')"

Its inbox:

  curl -s "$API/v1/messages?limit=5" -H "Authorization: Bearer \$MEMBER_TOKEN"
  curl -s "$API/v1/messages?count-only=true" -H "Authorization: Bearer \$MEMBER_TOKEN"

Try:
  curl -s $API/v1/sensors/sim1 -H "Authorization: Bearer \$LOCKSTREAM_ADMIN_TOKEN"
  curl -s "$API/v1/sensors/sim1/events?limit=5" -H "Authorization: Bearer \$LOCKSTREAM_ADMIN_TOKEN"
  curl -s -X POST $API/v1/readings -H "Authorization: Bearer \$LOCKSTREAM_INGEST_TOKEN" \\
       -d '{"sensor_id":"xa7v9Dfadr7H","data":1}'
  mosquitto_pub -h 127.0.0.1 -q 1 -t lockstream/readings/xa7v9Dfadr7H -m 0      # through the MQTT bridge
  curl -s "$API/v1/clients/$client_id/deliveries" -H "Authorization: Bearer \$LOCKSTREAM_ADMIN_TOKEN"
  curl -s $API/v1/pushes/$scheduled_push -H "Authorization: Bearer \$LOCKSTREAM_PUSH_TOKEN"

Ctrl-C stops the demo.

MSG

if [ -n "${LOCKSTREAM_DEMO_SECONDS:-}" ]; then
  sleep "$LOCKSTREAM_DEMO_SECONDS"
else
  wait "$all_pid"
fi
