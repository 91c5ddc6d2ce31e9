#!/usr/bin/env bash
# The worker's own peak RSS on a first sync of 200 consumers x 1,000 rewards: `perks-worker
# work` as a process of its own against `perks-worker sandbox`, into a database and queue
# prefix of its own (dropped at the end). Needs a build (npm run build), psql and redis-cli.
# Each consumer a sync job of its own (SYNC_CONCURRENCY at once), or with --reconcile the 200
# consumers recorded as enrolled and one reconciliation (SYNC_CONCURRENCY x
# SYNC_CONSUMERS_PER_JOB at once). Also prints the CPU time the worker, the sandbox and
# PostgreSQL's server processes spent: on a shared 2-core machine a steadier measure of what a
# change costs than the rate.
set -euo pipefail
mode=${1:-}
case $mode in '' | --reconcile) ;; *) echo "usage: $0 [--reconcile]" >&2; exit 2 ;; esac
cd "$(dirname "$0")/.."
export REDIS_URL=${REDIS_URL:-redis://127.0.0.1:6379}
admin_url=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}
database=perks_worker_rss
export DATABASE_URL=${admin_url%/*}/$database QUEUE_PREFIX=worker-rss PORT=0 LOG_LEVEL=warn
log_dir=$(mktemp -d)

psql "$admin_url" -qc "drop database if exists $database" 2>/dev/null
redis-cli -u "$REDIS_URL" --scan --pattern "$QUEUE_PREFIX:*" | xargs -r redis-cli -u "$REDIS_URL" del >/dev/null
node dist/src/index.js sandbox --port 0 --consumers 200 --rewards-min 1000 --rewards-max 1000 \
  >"$log_dir/sandbox.log" 2>&1 &
sandbox=$!
trap 'kill $sandbox ${worker:-} 2>/dev/null || true; psql "$admin_url" -qc "drop database if exists $database" 2>/dev/null; rm -rf "$log_dir"' EXIT
for _ in $(seq 1 120); do grep -q PERKS_CLIENT_SECRET "$log_dir/sandbox.log" && break; sleep 0.5; done
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
postgres_before=$(cpu_seconds $(pgrep -u postgres postgres))
node dist/src/index.js work >"$log_dir/work.log" 2>&1 &
worker=$!
started=$(date +%s.%N)
if [ "$mode" = --reconcile ]; then
  psql "$DATABASE_URL" -qc "insert into perks.consumers (consumer_id, enrolled_at)
    select 'sbx_' || lpad(i::text, 4, '0'), now() from generate_series(1, 200) i"
  node dist/src/index.js reconcile >/dev/null
else
  node --input-type=module -e "
const { createProducer } = await import('./dist/src/queues/producer.js');
const producer = await createProducer({ redisUrl: process.env.REDIS_URL, queuePrefix: process.env.QUEUE_PREFIX });
for (let i = 1; i <= 200; i++) await producer.enqueueRewardSync({ consumerId: 'sbx_' + String(i).padStart(4, '0') });
await producer.close();"
fi
rows=0
for _ in $(seq 1 1200); do
  rows=$(psql "$DATABASE_URL" -tAc "select count(*) from perks.rewards")
  [ "$rows" -ge 200000 ] && break
  sleep 0.2
done
seconds=$(echo "$(date +%s.%N) - $started" | bc)
echo "rewards stored: $rows in ${seconds} s ($(echo "$rows / $seconds" | bc) rewards/s)"
grep VmHWM "/proc/$worker/status" | sed 's/VmHWM:/worker peak RSS (VmHWM):/'
postgres=$(echo "$(cpu_seconds $(pgrep -u postgres postgres)) - $postgres_before" | bc)
echo "CPU seconds: worker $(cpu_seconds $worker), sandbox $(cpu_seconds $sandbox), PostgreSQL $postgres"
