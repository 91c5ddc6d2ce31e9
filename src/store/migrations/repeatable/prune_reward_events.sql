-- prune_reward_events(cutoff, keep_undelivered, after_id, max_rows): reads the max_rows events
-- after after_id in id order (the primary key: no index on created_at burdens the writes) and
-- deletes those recorded before cutoff, with their failures; with keep_undelivered (webhooks
-- on), never one past its consumer's cursor (not yet delivered nor given up). Returns how many
-- it deleted, the last id read (null: none left) and how many read were older than cutoff
-- (kept ones too). One short statement per batch: no long lock, no long transaction.

create or replace function prune_reward_events(
  cutoff timestamptz,
  keep_undelivered boolean,
  after_id bigint,
  max_rows int
)
returns table (deleted int, last_id bigint, old int)
language sql
set search_path from current
as $function$
  with batch as materialized (
    select e.id, e.consumer_id, e.created_at from reward_events e
     where e.id > $3
     order by e.id
     limit $4
  ),
  gone as (
    delete from reward_events e
     using batch b
     where e.id = b.id
       and b.created_at < $1
       and not ($2 and b.id > coalesce((select c.delivered_through from reward_event_cursors c
                                         where c.consumer_id = b.consumer_id), 0))
    returning e.id
  ),
  forgotten as (
    delete from reward_event_failures f using gone g where f.event_id = g.id
  )
  select (select count(*)::int from gone), max(b.id), (count(*) filter (where b.created_at < $1))::int
    from batch b
$function$;

comment on function prune_reward_events(timestamptz, boolean, bigint, int) is
  'The worker''s own: deletes reward events past EVENT_RETENTION_DAYS, a batch per call; see its file, migrations/repeatable/prune_reward_events.sql.';
