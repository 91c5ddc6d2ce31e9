-- reward_event_lag(): how far webhook delivery is behind: the consumers with events not yet
-- delivered, when the oldest such event was recorded (the oldest mark, by its index:
-- reward_event_pending.oldest_at says how close that time is), that event's id (a probe of its
-- consumer's events; null when its delivery just ended) and the events given up.

create or replace function reward_event_lag()
returns table (consumers int, oldest_id bigint, oldest_at timestamptz, failed int)
language sql
stable
set search_path from current
as $function$
  select (select count(*)::int from reward_event_pending),
         (select e.id from reward_events e
           where e.consumer_id = o.consumer_id
             and e.id > coalesce((select c.delivered_through from reward_event_cursors c
                                   where c.consumer_id = o.consumer_id), 0)
           order by e.id limit 1),
         o.oldest_at,
         (select count(*)::int from reward_event_failures)
    from (select null) one
    left join lateral (
      select p.consumer_id, p.oldest_at from reward_event_pending p
       order by p.oldest_at limit 1) o on true
$function$;

comment on function reward_event_lag() is
  'The worker''s own: how far webhook delivery is behind; see its file, migrations/repeatable/reward_event_lag.sql.';
