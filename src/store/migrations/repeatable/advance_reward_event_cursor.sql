-- advance_reward_event_cursor(consumer_id, event_id): the consumer's events through event_id
-- are delivered or given up. Never moves a cursor back (replay_reward_events does that), nor
-- over an event of the consumer it has not passed: a delivery job that read its batch before a
-- replay rewound the cursor leaves it there, and its next read starts from the replayed events.
-- Events of one consumer commit in id order, so none is found there but after a replay.
-- Then the consumer's mark takes the time of its next event (reward_event_lag reads it); with
-- none left it keeps its older time, never a newer one, until clear_reward_event_pending. The
-- mark is written only when that time moves (the events of one page share theirs).

create or replace function advance_reward_event_cursor(consumer_id text, event_id bigint)
returns void
language sql
set search_path from current
as $function$
  insert into reward_event_cursors as c (consumer_id, delivered_through)
  values ($1, $2)
  on conflict (consumer_id) do update
    set delivered_through = excluded.delivered_through, updated_at = now()
    where c.delivered_through < excluded.delivered_through
      and not exists (select from reward_events e
                      where e.consumer_id = $1 and e.id > c.delivered_through and e.id < $2);
  -- A mark held by a write in progress is left as it is (that write keeps the older time): a
  -- delivery never waits for a page write.
  with n as (
    select e.created_at from reward_events e
     where e.consumer_id = $1
       and e.id > (select c.delivered_through from reward_event_cursors c
                    where c.consumer_id = $1)
     order by e.id limit 1),
  m as (
    select q.consumer_id from reward_event_pending q, n
     where q.consumer_id = $1 and q.oldest_at is distinct from n.created_at
       for update of q skip locked)
  update reward_event_pending p
     set oldest_at = n.created_at
    from n, m
   where p.consumer_id = m.consumer_id;
$function$;

comment on function advance_reward_event_cursor(text, bigint) is
  'The worker''s own: moves a consumer''s delivery cursor forward; see its file, migrations/repeatable/advance_reward_event_cursor.sql.';
