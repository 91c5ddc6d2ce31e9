-- prune_reward_events(cutoff, keep_undelivered, after_id, max_rows): reads the max_rows events
-- after after_id in id order (reward_events: the primary key and rewards_event_idx, merged; no
-- index on created_at burdens the writes) and removes those recorded before cutoff, with their
-- failures: a reward_event_log row is deleted, a reward.created its reward row holds is cleared
-- (event_id null). With keep_undelivered (webhooks on), never one past its consumer's cursor (not
-- yet delivered nor given up). Returns how many it removed, the last id read (null: none left)
-- and how many read were older than cutoff (kept ones too). One short statement per batch: no
-- long lock, no long transaction.

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
  expired as materialized (
    select b.id from batch b
     where b.created_at < $1
       and not ($2 and b.id > coalesce((select c.delivered_through from reward_event_cursors c
                                         where c.consumer_id = b.consumer_id), 0))
  ),
  gone as (
    delete from reward_event_log e using expired x where e.id = x.id
    returning e.id
  ),
  held as materialized (
    -- Locked in reward id order, the order the page statement locks in: in event id order a
    -- prune and a page refreshing the same old rewards could deadlock. By the array, an index
    -- lookup; a row whose event moved meanwhile is re-checked and left out.
    select r.id, r.event_id from rewards r
     where r.event_id = any(array(select e.id from expired e))
     order by r.id
       for update
  ),
  cleared as (
    update rewards r set event_id = null
      from held h
     where r.id = h.id
    returning h.event_id as id
  ),
  forgotten as (
    delete from reward_event_failures f
     where f.event_id in (select g.id from gone g union all select c.id from cleared c)
  )
  select (select count(*)::int from gone) + (select count(*)::int from cleared), max(b.id),
         (count(*) filter (where b.created_at < $1))::int
    from batch b
$function$;

comment on function prune_reward_events(timestamptz, boolean, bigint, int) is
  'The worker''s own: deletes reward events past EVENT_RETENTION_DAYS, a batch per call; see its file, migrations/repeatable/prune_reward_events.sql.';
