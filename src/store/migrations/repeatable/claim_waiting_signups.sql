-- claim_waiting_signups(max_rows): the oldest waiting rows of signup_outbox, locked until the
-- caller's transaction ends (it marks them with mark_signups_processed before committing).
-- Skip locked: replicas draining at once take different rows.

create or replace function claim_waiting_signups(max_rows int)
returns table (id bigint, user_id text, extra_consents text[], removed_consents text[])
language sql
set search_path from current
as $function$
  select id, user_id, extra_consents, removed_consents
    from signup_outbox
   where processed_at is null
   order by id
   limit $1
     for update skip locked
$function$;

comment on function claim_waiting_signups(int) is
  'The worker''s own: claims waiting signups; see its file, migrations/repeatable/claim_waiting_signups.sql.';
