-- claim_waiting_signups(max_rows, derivable): the oldest waiting rows of signup_outbox, locked
-- until the caller's transaction ends (it marks them with mark_signups_processed before
-- committing). Skip locked: replicas draining at once take different rows.
-- derivable false (a replica without PERKS_CONSUMER_ID_KEY): only rows whose user_id is a
-- consumer id as it is (the API's pattern, isConsumerId in perks/schemas.ts); the others wait
-- for a replica with the key, and block no row behind them.

create or replace function claim_waiting_signups(max_rows int, derivable boolean)
returns table (id bigint, user_id text, extra_consents text[], removed_consents text[])
language sql
set search_path from current
as $function$
  select id, user_id, extra_consents, removed_consents
    from signup_outbox
   where processed_at is null
     and (derivable or user_id ~ '^[a-zA-Z0-9_-]{2,100}$')
   order by id
   limit max_rows
     for update skip locked
$function$;

comment on function claim_waiting_signups(int, boolean) is
  'The worker''s own: claims waiting signups; see its file, migrations/repeatable/claim_waiting_signups.sql.';
