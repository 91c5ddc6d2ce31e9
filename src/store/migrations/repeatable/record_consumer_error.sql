-- record_consumer_error(consumer_id, user_id, message): the last error of an enrollment or sync
-- of the consumer, shown to support as is (never a secret). The caller cuts a runaway message.

create or replace function record_consumer_error(consumer_id text, user_id text, message text)
returns void
language sql
set search_path from current
as $function$
  insert into consumers as c (consumer_id, user_id, last_error, updated_at)
  values ($1, $2, $3, now())
  on conflict (consumer_id) do update set
    user_id = coalesce(excluded.user_id, c.user_id),
    last_error = excluded.last_error,
    updated_at = now()
$function$;

comment on function record_consumer_error(text, text, text) is
  'The worker''s own: sets consumers.last_error; see its file, migrations/repeatable/record_consumer_error.sql.';
