-- delete_processed_signups(retention_days, max_rows): deletes up to max_rows rows of
-- signup_outbox processed over retention_days ago, oldest first, never a waiting row; returns
-- how many. A long backlog is deleted a batch per call.

create or replace function delete_processed_signups(retention_days int, max_rows int)
returns int
language sql
set search_path from current
as $function$
  with deleted as (
    delete from signup_outbox
     where id in (
       select id from signup_outbox
        where processed_at < now() - make_interval(days => $1)
        order by processed_at
        limit $2
          for update skip locked)
    returning 1
  )
  select count(*)::int from deleted
$function$;

comment on function delete_processed_signups(int, int) is
  'The worker''s own: deletes signups processed before OUTBOX_RETENTION_DAYS; see its file, migrations/repeatable/delete_processed_signups.sql.';
