-- reward_event_deliveries(failed_only, max_events): the latest events with their delivery state
-- (delivered, pending or failed), newest first; with failed_only, the latest failed ones.

create or replace function reward_event_deliveries(failed_only boolean, max_events int)
returns table (
  id bigint,
  type text,
  consumer_id text,
  created_at timestamptz,
  state text,
  failed_at timestamptz,
  attempts int,
  last_error text
)
language plpgsql
stable
set search_path from current
as $function$
#variable_conflict use_column
begin
  if failed_only then
    return query
    select e.id, e.type, e.consumer_id, e.created_at, 'failed', f.failed_at, f.attempts,
           f.last_error
      from reward_event_failures f
      join reward_events e on e.id = f.event_id
     order by f.event_id desc limit max_events;
  else
    return query
    select e.id, e.type, e.consumer_id, e.created_at,
           case when f.event_id is not null then 'failed'
                when e.id <= coalesce(c.delivered_through, 0) then 'delivered'
                else 'pending' end,
           f.failed_at, f.attempts, f.last_error
      from (select * from reward_events order by id desc limit max_events) e
      left join reward_event_cursors c on c.consumer_id = e.consumer_id
      left join reward_event_failures f on f.event_id = e.id
     order by e.id desc;
  end if;
end
$function$;

comment on function reward_event_deliveries(boolean, int) is
  'The worker''s own: the latest reward events with their delivery state (perks-worker events list); see its file, migrations/repeatable/reward_event_deliveries.sql.';
