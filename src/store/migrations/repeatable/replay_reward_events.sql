-- replay_reward_events(from_id): delivers every event from from_id on again, their failures
-- forgotten: the cursors of their consumers move back before from_id and the consumers are
-- marked pending, each mark as old as its consumer's oldest event replayed or still undelivered.
-- Returns how many consumers.

create or replace function replay_reward_events(from_id bigint)
returns int
language sql
set search_path from current
as $function$
  -- Locks in the order of record_reward_event_failure and advance_reward_event_cursor
  -- (failures, cursors, then marks): a delivery holding its cursor while it waits for its mark
  -- must not find this statement holding the mark and waiting for the cursor.
  delete from reward_event_failures where event_id >= $1;
  with replayed as (
    select consumer_id, min(created_at) as oldest_at from reward_events where id >= $1
     group by consumer_id
  ),
  rewound as (
    update reward_event_cursors c
       set delivered_through = least(c.delivered_through, $1 - 1), updated_at = now()
      from replayed r
     where c.consumer_id = r.consumer_id
    returning c.consumer_id
  ),
  marked as (
    -- Its one-time filter runs `rewound` to the end before the first mark is taken.
    insert into reward_event_pending as p (consumer_id, oldest_at)
    select consumer_id, oldest_at from replayed
     where (select count(*) from rewound) >= 0
     order by consumer_id -- the page statement's order: two marks, no deadlock
    on conflict (consumer_id) do update
      set dispatched_at = null, oldest_at = least(p.oldest_at, excluded.oldest_at)
  )
  select count(*)::int from replayed
$function$;

comment on function replay_reward_events(bigint) is
  'The worker''s own: delivers reward events again from an id on (perks-worker events replay); see its file, migrations/repeatable/replay_reward_events.sql.';
