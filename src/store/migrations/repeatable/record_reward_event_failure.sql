-- record_reward_event_failure(event_id, consumer_id, attempts, last_error): gives an event up:
-- recorded in reward_event_failures, and the consumer's cursor moves past it, in one statement.
-- Calls advance_reward_event_cursor, whose file is applied first (files go in name order).

create or replace function record_reward_event_failure(
  event_id bigint,
  consumer_id text,
  attempts int,
  last_error text
)
returns void
language sql
set search_path from current
as $function$
  insert into reward_event_failures (event_id, consumer_id, attempts, last_error)
  values ($1, $2, $3, $4)
  on conflict (event_id) do update
    set failed_at = now(), attempts = excluded.attempts, last_error = excluded.last_error;
  select advance_reward_event_cursor($2, $1);
$function$;

comment on function record_reward_event_failure(bigint, text, int, text) is
  'The worker''s own: gives a reward event up; see its file, migrations/repeatable/record_reward_event_failure.sql.';
