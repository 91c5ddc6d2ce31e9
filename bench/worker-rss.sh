#!/usr/bin/env bash
# The worker run as users run it: `perks-worker work` as a process of its own, started cold,
# against `perks-worker sandbox` (another process), into a database and queue prefix of its own
# (dropped at the end). Needs a build (npm run build), psql, redis-cli and curl.
# By default a first sync of 200 consumers x 1,000 rewards, and the worker's peak RSS. Each
# consumer a sync job of its own (SYNC_CONCURRENCY at once), or with --reconcile the consumers
# recorded as enrolled and one reconciliation (SYNC_CONCURRENCY x SYNC_CONSUMERS_PER_JOB at once).
# CONSUMERS, REWARDS and LATENCY_MS (added to every API answer) change the load:
#   CONSUMERS=10000 REWARDS=1 LATENCY_MS=20 bash bench/worker-rss.sh --reconcile
# is scenario 8's open run with the worker cold and on its own, timed from the `reconcile`
# command to the last consumer synced; it prints the sandbox's peak of requests in flight P and
# the wall time over Q·L/P. Also prints the CPU time the worker, the sandbox and PostgreSQL's
# server processes spent: on a shared 2-core machine a steadier measure of a change than the rate.
set -euo pipefail
mode=${1:-}
case $mode in '' | --reconcile) ;; *) echo "usage: $0 [--reconcile]" >&2; exit 2 ;; esac
consumers=${CONSUMERS:-200} rewards=${REWARDS:-1000} latency_ms=${LATENCY_MS:-0}
cd "$(dirname "$0")/.."
export REDIS_URL=${REDIS_URL:-redis://127.0.0.1:6379}
admin_url=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}
database=perks_worker_rss
export DATABASE_URL=${admin_url%/*}/$database QUEUE_PREFIX=worker-rss PORT=0
# The default (info): the logging users run with is part of what the worker costs.
export LOG_LEVEL=${LOG_LEVEL:-info}
log_dir=$(mktemp -d)

clear_prefix() {
  redis-cli -u "$REDIS_URL" --scan --pattern "$QUEUE_PREFIX:*" | xargs -r -n 1000 redis-cli -u "$REDIS_URL" del >/dev/null
}
psql "$admin_url" -qc "drop database if exists $database" 2>/dev/null
clear_prefix
node dist/src/index.js sandbox --port 0 --consumers "$consumers" --rewards-min "$rewards" \
  --rewards-max "$rewards" --latency-ms "$latency_ms" >"$log_dir/sandbox.log" 2>&1 &
sandbox=$!
trap 'kill $sandbox ${worker:-} 2>/dev/null || true; psql "$admin_url" -qc "drop database if exists $database" 2>/dev/null; clear_prefix; rm -rf "$log_dir"' EXIT
for _ in $(seq 1 240); do grep -q PERKS_CLIENT_SECRET "$log_dir/sandbox.log" && break; sleep 0.5; done
eval "$(grep -E '^  PERKS_' "$log_dir/sandbox.log" | sed 's/^  /export /')"

node dist/src/index.js migrate >/dev/null
# CPU seconds (user + system) of processes, from /proc/<pid>/stat. PostgreSQL's counts the server
# processes alive at the end: the worker's connections, not the short-lived ones of psql here.
cpu_seconds() {
  local ticks=0 t
  for pid in "$@"; do
    t=$(awk '{print $14 + $15}' "/proc/$pid/stat" 2>/dev/null || echo 0)
    ticks=$((ticks + t))
  done
  echo "scale=1; $ticks / $(getconf CLK_TCK)" | bc
}
# The sandbox's ids: sbx_0001 ... sbx_9999, sbx_10000 ...
ids="select 'sbx_' || case when i < 1000 then lpad(i::text, 4, '0') else i::text end from generate_series(1, $consumers) i"
if [ "$mode" = --reconcile ]; then
  psql "$DATABASE_URL" -qc "insert into perks.consumers (consumer_id, enrolled_at) select c, now() from ($ids) as s(c)"
fi
node dist/src/index.js work >"$log_dir/work.log" 2>&1 &
worker=$!
for _ in $(seq 1 120); do grep -q '"worker started"' "$log_dir/work.log" && break; sleep 0.25; done
postgres_before=$(cpu_seconds $(pgrep -u postgres postgres))
worker_before=$(cpu_seconds $worker)
started=$(date +%s.%N)
if [ "$mode" = --reconcile ]; then
  node dist/src/index.js reconcile >/dev/null
else
  psql "$DATABASE_URL" -tAc "$ids" >"$log_dir/ids"
  node --input-type=module -e "
const { readFileSync } = await import('node:fs');
const { createProducer } = await import('./dist/src/queues/producer.js');
const producer = await createProducer({ redisUrl: process.env.REDIS_URL, queuePrefix: process.env.QUEUE_PREFIX });
for (const consumerId of readFileSync('$log_dir/ids', 'utf8').split('\n').filter(Boolean)) {
  await producer.enqueueRewardSync({ consumerId });
}
await producer.close();"
fi
# One connection polling, not a psql process every poll: those took a share of the 2 cores.
node --input-type=module -e "
const { default: pg } = await import('pg');
const client = new pg.Client(process.env.DATABASE_URL);
await client.connect();
const sql = 'select count(*)::int as n from perks.consumers where last_synced_at is not null';
const deadline = Date.now() + 30 * 60_000;
while ((await client.query(sql)).rows[0].n < $consumers && Date.now() < deadline) {
  await new Promise((resolve) => setTimeout(resolve, 50));
}
await client.end();"
seconds=$(echo "$(date +%s.%N) - $started" | bc)
stored=$(psql "$DATABASE_URL" -tAc "select count(*) from perks.rewards")
echo "rewards stored: $stored in ${seconds} s ($(echo "$stored / $seconds" | bc) rewards/s, $(echo "$consumers / $seconds" | bc) consumers/s)"
grep VmHWM "/proc/$worker/status" | sed 's/VmHWM:/worker peak RSS (VmHWM):/'
if [ "$latency_ms" -gt 0 ]; then
  counters=$(curl -s "$PERKS_BASE_URL/_sandbox/counters")
  requests=$(echo "$counters" | sed 's/.*"listRewards":\([0-9]*\).*/\1/')
  peak=$(echo "$counters" | sed 's/.*"peakInFlight":\([0-9]*\).*/\1/')
  bound=$(echo "scale=3; $requests * $latency_ms / $peak / 1000" | bc)
  echo "requests $requests, peak in flight P $peak, Q·L/P ${bound} s, wall ÷ Q·L/P $(echo "scale=3; $seconds / $bound" | bc)"
fi
postgres=$(echo "$(cpu_seconds $(pgrep -u postgres postgres)) - $postgres_before" | bc)
echo "CPU seconds: worker $(echo "$(cpu_seconds $worker) - $worker_before" | bc), sandbox $(cpu_seconds $sandbox), PostgreSQL $postgres"
