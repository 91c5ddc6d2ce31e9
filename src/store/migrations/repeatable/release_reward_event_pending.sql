-- release_reward_event_pending(consumer_ids): puts back the marks claim_reward_event_pending set
-- when adding their delivery jobs failed, so that the next dispatch takes them at once.

create or replace function release_reward_event_pending(consumer_ids text[])
returns void
language sql
set search_path from current
as $function$
  update reward_event_pending set dispatched_at = null where consumer_id = any($1)
$function$;

comment on function release_reward_event_pending(text[]) is
  'The worker''s own: unmarks consumers whose delivery jobs could not be added; see its file, migrations/repeatable/release_reward_event_pending.sql.';
