-- datastore_summary(): the counts `perks-worker status` and `demo` print, in one round trip.
-- The columns are named as the worker's summary fields (src/store/summary.ts).

create or replace function datastore_summary()
returns table (
  consumers int,
  "enrolledCreated" int,
  "enrolledAlready" int,
  "notEnrolled" int,
  "withError" int,
  synced int,
  "lastSyncedAt" timestamptz,
  rewards int,
  "rewardsMissing" int,
  "totalAmount" text,
  "rewardsByConsumerStatus" jsonb,
  "statusChanges" int
)
language sql
stable
set search_path from current
as $function$
  select c.*, r.*, (select count(*)::int from reward_status_changes)
  from (
    select count(*)::int,
           count(*) filter (where enrollment_outcome = 'created')::int,
           count(*) filter (where enrollment_outcome = 'already_enrolled')::int,
           count(*) filter (where not_enrolled_at is not null)::int,
           count(*) filter (where last_error is not null)::int,
           count(*) filter (where last_synced_at is not null)::int,
           max(last_synced_at)
    from consumers
  ) c, (
    select count(*)::int,
           count(*) filter (where missing_since is not null)::int,
           coalesce(sum(amount), 0)::text,
           coalesce((select jsonb_object_agg(consumer_status, n) from (
              select consumer_status, count(*) as n from rewards group by consumer_status
            ) g), '{}')
    from rewards
  ) r
$function$;

comment on function datastore_summary() is
  'The worker''s own: the counts perks-worker status prints; see its file, migrations/repeatable/datastore_summary.sql.';
