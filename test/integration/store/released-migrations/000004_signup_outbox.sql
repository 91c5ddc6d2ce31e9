-- The signup outbox: your services call enqueue_enrollment() inside their own signup
-- transaction, and the worker turns each committed row into an enrollment job
-- (src/intake/outbox.ts). A rolled-back signup leaves no row, so no job.
--
-- The worker claims unprocessed rows `for update skip locked`, in id order, so replicas share
-- them; it enqueues a batch while its rows are locked, then marks them processed in the same
-- transaction. A crash between the two enqueues a row again, which the enrollment queue's
-- deduplication by consumer id absorbs.
--
-- An insert wakes the worker through NOTIFY on the channel perks_signup_outbox, the payload
-- being this schema's name, so that workers of another schema in the same database ignore it.
-- NOTIFY is sent at commit (never for a rolled-back insert), once per transaction and payload.
-- LISTEN does not work through PgBouncer's transaction pooling: the worker then polls.

create table signup_outbox (
  id bigint generated always as identity primary key,
  user_id text not null,
  extra_consents text[],
  removed_consents text[],
  created_at timestamptz not null default now(),
  processed_at timestamptz,
  job_id text,
  error text
);

comment on table signup_outbox is
  'Signups waiting for enrollment, added by enqueue_enrollment() inside your own transactions; the worker enqueues each committed row once and marks it processed.';
comment on column signup_outbox.id is
  'Increasing id, returned by enqueue_enrollment().';
comment on column signup_outbox.user_id is
  'Your own user id; the consumer id is derived from it as for any enrollment.';
comment on column signup_outbox.extra_consents is
  'Consents to send as extra_consents (BASIC, TRANSACTION_TRIGGERS, ...); null for none.';
comment on column signup_outbox.removed_consents is
  'Consents to send as removed_consents; null for none.';
comment on column signup_outbox.created_at is
  'When the row was added (the start of the transaction that added it).';
comment on column signup_outbox.processed_at is
  'When the worker enqueued the enrollment or refused the row; null while it waits. Processed rows are deleted after OUTBOX_RETENTION_DAYS.';
comment on column signup_outbox.job_id is
  'Id of the enrollment job (the pending one when an enrollment of this consumer was already pending); null when the row was refused.';
comment on column signup_outbox.error is
  'Why the row was refused, naming the field (user_id: must be at most 256 characters); null when enqueued.';

-- The worker reads the waiting rows in id order; this index holds only them, so it stays small
-- however many processed rows the table keeps.
create index signup_outbox_waiting_idx on signup_outbox (id) where processed_at is null;
-- The retention delete takes the oldest processed rows.
create index signup_outbox_processed_idx on signup_outbox (processed_at)
  where processed_at is not null;

create function enqueue_enrollment(
  user_id text,
  extra_consents text[] default null,
  removed_consents text[] default null
)
returns bigint
language sql
set search_path from current
as $function$
  insert into signup_outbox (user_id, extra_consents, removed_consents)
  values ($1, $2, $3)
  returning id
$function$;

comment on function enqueue_enrollment(text, text[], text[]) is
  'Adds a signup to signup_outbox and returns its id. Call it inside the transaction that records the signup: the enrollment is enqueued once that transaction commits, never if it rolls back.';

create function notify_signup_outbox()
returns trigger
language plpgsql
as $function$
begin
  perform pg_notify('perks_signup_outbox', tg_table_schema);
  return null;
end
$function$;

create trigger signup_outbox_notify
after insert on signup_outbox
for each statement execute function notify_signup_outbox();
