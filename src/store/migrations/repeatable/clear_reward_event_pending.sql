-- clear_reward_event_pending(consumer_id): drops the consumer's pending mark once nothing is
-- left to deliver. A write recording an event resets dispatched_at to null in its transaction,
-- so a mark is never dropped under a newer event.

create or replace function clear_reward_event_pending(consumer_id text)
returns void
language sql
set search_path from current
as $function$
  delete from reward_event_pending p
   where p.consumer_id = $1
     and p.dispatched_at is not null
     and not exists (
       select 1 from reward_events e
        where e.consumer_id = $1
          and e.id > coalesce((select c.delivered_through from reward_event_cursors c
                                where c.consumer_id = $1), 0))
$function$;

comment on function clear_reward_event_pending(text) is
  'The worker''s own: drops a consumer from reward_event_pending once delivered; see its file, migrations/repeatable/clear_reward_event_pending.sql.';
