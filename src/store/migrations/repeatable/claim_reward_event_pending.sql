-- claim_reward_event_pending(max_consumers): marks up to that many consumers of
-- reward_event_pending as handed to a delivery job (dispatched_at) and returns them; replicas
-- claiming at once take different rows (skip locked). A mark older than 10 minutes is taken
-- again: a delivery job lost with Redis must not strand the consumer's events. The worker adds
-- the jobs after this commits, so no row stays locked, holding up reward writes, while Redis is
-- slow; a failed dispatch sets the marks back to null.
-- Each kind by its own partial index (migration 000011), read only as far as the limit: the
-- consumers never handed out first, in consumer order, then the oldest stale marks.

create or replace function claim_reward_event_pending(max_consumers int)
returns setof text
language sql
set search_path from current
as $function$
  with waiting as (
    select consumer_id from reward_event_pending
     where dispatched_at is null
     order by consumer_id
     limit $1
       for update skip locked
  ),
  stale as (
    select consumer_id from reward_event_pending
     where dispatched_at < now() - interval '10 minutes'
     order by dispatched_at
     limit $1
       for update skip locked
  )
  update reward_event_pending set dispatched_at = now()
   where consumer_id in (
     select consumer_id from waiting
     union all
     select consumer_id from stale
     limit $1)
  returning consumer_id
$function$;

comment on function claim_reward_event_pending(int) is
  'The worker''s own: claims consumers with reward events to deliver; see its file, migrations/repeatable/claim_reward_event_pending.sql.';
