-- oldest_reward_event(): the first event of the feed still kept (ids grow with time), for
-- `perks-worker events`; no row when the feed is empty.

create or replace function oldest_reward_event()
returns table (id bigint, created_at timestamptz)
language sql
stable
set search_path from current
as $function$
  select e.id, e.created_at from reward_events e order by e.id limit 1
$function$;

comment on function oldest_reward_event() is
  'The worker''s own: the first reward event kept (perks-worker events); see its file, migrations/repeatable/oldest_reward_event.sql.';
