-- mark_not_enrolled(consumer_id, at): the API answered ERR-404-02 (consumer not enrolled) to a
-- request sent at `at`. Not set over an enrollment or a successful sync newer than that: the
-- newest word of the API wins (migration 000003).

create or replace function mark_not_enrolled(consumer_id text, at timestamptz)
returns void
language sql
set search_path from current
as $function$
  insert into consumers as c (consumer_id, not_enrolled_at, updated_at)
  values ($1, $2, now())
  on conflict (consumer_id) do update set not_enrolled_at = excluded.not_enrolled_at,
    updated_at = now()
  where (c.enrolled_at is null or c.enrolled_at < excluded.not_enrolled_at)
    and (c.last_synced_at is null or c.last_synced_at < excluded.not_enrolled_at)
$function$;

comment on function mark_not_enrolled(text, timestamptz) is
  'The worker''s own: sets consumers.not_enrolled_at unless a newer enrollment or sync won the race; see its file, migrations/repeatable/mark_not_enrolled.sql.';
