-- mark_signups_processed(ids, job_ids, errors): marks rows of signup_outbox processed, each with
-- its job id (enqueued) or its error (refused); the arrays are parallel.

create or replace function mark_signups_processed(ids bigint[], job_ids text[], errors text[])
returns void
language sql
set search_path from current
as $function$
  update signup_outbox as o
     set processed_at = now(), job_id = m.job_id, error = m.error
    from unnest($1, $2, $3) as m(id, job_id, error)
   where o.id = m.id
$function$;

comment on function mark_signups_processed(bigint[], text[], text[]) is
  'The worker''s own: marks claimed signups processed; see its file, migrations/repeatable/mark_signups_processed.sql.';
