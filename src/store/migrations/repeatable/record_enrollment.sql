-- record_enrollment(consumer_id, user_id, at, outcome, extra_consents, removed_consents): an
-- enrollment the API answered (outcome created, or already_enrolled for a 409). Every write of
-- consumers is an upsert: enrollment, sync and errors arrive in any order. The first
-- enrollment's enrolled_at and outcome stand (a retry answered 409) unless the API since said
-- "not enrolled". Consents are stored only when the API created the consumer.

create or replace function record_enrollment(
  consumer_id text,
  user_id text,
  at timestamptz,
  outcome text,
  extra_consents text[],
  removed_consents text[]
)
returns void
language sql
set search_path from current
as $function$
  insert into consumers as c (consumer_id, user_id, enrolled_at, enrollment_outcome,
    extra_consents, removed_consents, updated_at)
  values ($1, $2, $3, $4, case when $4 = 'created' then $5 end,
    case when $4 = 'created' then $6 end, now())
  on conflict (consumer_id) do update set
    user_id = coalesce(excluded.user_id, c.user_id),
    enrolled_at = case when c.enrolled_at is null or c.not_enrolled_at is not null
                       then excluded.enrolled_at else c.enrolled_at end,
    enrollment_outcome = case when c.enrolled_at is null or c.not_enrolled_at is not null
                              then excluded.enrollment_outcome else c.enrollment_outcome end,
    extra_consents = case when excluded.enrollment_outcome = 'created'
                          then excluded.extra_consents else c.extra_consents end,
    removed_consents = case when excluded.enrollment_outcome = 'created'
                            then excluded.removed_consents else c.removed_consents end,
    not_enrolled_at = null,
    last_error = null,
    updated_at = now()
$function$;

comment on function record_enrollment(text, text, timestamptz, text, text[], text[]) is
  'The worker''s own: records an enrollment the Perks API answered; see its file, migrations/repeatable/record_enrollment.sql.';
