-- undelivered_reward_events(consumer_id, max_events): the consumer's events past its cursor
-- (reward_event_cursors.delivered_through, 0 without one), in id order: delivery goes in id
-- order, and one consumer's events commit in id order. Over the view reward_events (000008):
-- one index range scan of reward_event_log and one of the rewards holding events, merged.

create or replace function undelivered_reward_events(consumer_id text, max_events int)
returns setof reward_events
language sql
stable
set search_path from current
as $function$
  select e.* from reward_events e
   where e.consumer_id = $1
     and e.id > coalesce((select c.delivered_through from reward_event_cursors c
                           where c.consumer_id = $1), 0)
   order by e.id
   limit $2
$function$;

comment on function undelivered_reward_events(text, int) is
  'The worker''s own: the reward events of a consumer not delivered yet; see its file, migrations/repeatable/undelivered_reward_events.sql.';
