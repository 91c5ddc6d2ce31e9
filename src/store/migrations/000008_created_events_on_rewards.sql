-- The feed's reward.created events are held by the reward rows themselves: a first sync of
-- millions of rewards writes its rows and no second row per reward. reward_events becomes a view
-- of the feed: reward_event_log (the table 000005 created, renamed: every other event, and a
-- created event moved there when its reward changes) plus each reward row holding an event_id.
-- Ids, columns and order are those of the table it replaces; readers see no difference.
--
-- rewards.event_id is taken from the feed's sequence in the statement that inserts the row,
-- after its consumer's reward_event_pending mark, as every event id is: one consumer's events
-- still commit in id order. When a later write changes the reward's content (what data.reward
-- shows), that write moves the event, with the reward as it was, into reward_event_log under its
-- id, and clears event_id: an event never shows a content it did not have.
--
-- NOTIFY perks_reward_events now comes from write_reward_pages (one per statement, highest id
-- added): the statement trigger on the log table saw only half the events.

alter table reward_events rename to reward_event_log;
alter sequence reward_events_id_seq rename to reward_event_ids;
alter index reward_events_consumer_idx rename to reward_event_log_consumer_idx;
drop trigger reward_events_notify on reward_event_log;
drop function notify_reward_events();
-- Its declared row type was the table's (none on a new schema: repeatable files run after
-- these); its repeatable file creates it again over the view.
drop function if exists undelivered_reward_events(text, int);

comment on table reward_event_log is
  'Events of the feed not held by their reward row: every reward.status_changed, reward.missing and reward.restored, and a reward.created moved here when its reward changed. Read the feed through reward_events.';

comment on column reward_event_log.id is 'The event''s id in the feed (reward_events.id).';
comment on column reward_event_log.type is 'As reward_events.type.';
comment on column reward_event_log.data is 'As reward_events.data.';
comment on column reward_event_log.created_at is 'When the event was recorded.';

alter table rewards add column event_id bigint;

comment on column rewards.event_id is
  'Id in the feed (reward_events) of the reward''s reward.created event while this row holds it; null once the event is moved to reward_event_log (the reward changed), pruned, or not recorded (EVENT_TYPES).';

-- Delivery reads one consumer's events past its cursor; feed readers, replay and retention read
-- by id. Partial: a reward whose event is gone costs neither.
create index rewards_event_consumer_idx on rewards (consumer_id, event_id)
  where event_id is not null;
create index rewards_event_idx on rewards (event_id) where event_id is not null;

-- data.reward of an event: the reward as stored, amount as the numeric's text ("12.50"), times
-- in UTC with milliseconds, transaction and brand null when both their columns are. Stable SQL
-- with no volatile call: inlined into its callers, the view and write_reward_pages.
create function reward_event_json(
  id uuid, amount numeric, type text, status text, consumer_status text,
  created_at timestamptz, transaction_external_id text, transaction_executed_at timestamptz,
  brand_name text, brand_logo text)
returns jsonb
language sql
stable
as $function$
  select jsonb_build_object(
    'id', id, 'amount', amount::text, 'type', type, 'status', status,
    'consumer_status', consumer_status,
    'created_at', to_char(created_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
    'transaction', case
      when transaction_external_id is not null or transaction_executed_at is not null
      then jsonb_build_object('external_id', transaction_external_id, 'executed_at',
        to_char(transaction_executed_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')) end,
    'brand', case when brand_name is not null or brand_logo is not null
      then jsonb_build_object('name', brand_name, 'logo', brand_logo) end)
$function$;

comment on function reward_event_json(uuid, numeric, text, text, text, timestamptz, text,
  timestamptz, text, text) is
  'data.reward of a reward event: the reward as stored (migration 000008).';

-- The filter is outside the union on purpose: a WHERE inside a branch keeps PostgreSQL (15)
-- from reading that branch in index order, and `order by id limit n` would sort every reward.
create view reward_events as
  select * from (
    select l.id, l.type, l.consumer_id, l.user_id, l.reward_id, l.data, l.created_at
      from reward_event_log l
    union all
    select r.event_id, 'reward.created', r.consumer_id,
           (select c.user_id from consumers c where c.consumer_id = r.consumer_id),
           r.id,
           jsonb_build_object('reward', reward_event_json(r.id, r.amount, r.type, r.status,
             r.consumer_status, r.created_at, r.transaction_external_id,
             r.transaction_executed_at, r.brand_name, r.brand_logo)),
           r.first_seen_at
      from rewards r
  ) feed
  where feed.id is not null;

comment on view reward_events is
  'The reward events feed, one row per change of a reward, written in the transaction of the change itself: reward_event_log, and the reward.created events their reward rows hold. The feed webhooks deliver.';
comment on column reward_events.id is
  'Increasing id, in the order the events were recorded. One consumer''s events commit in id order; a rolled-back write leaves a gap.';
comment on column reward_events.type is
  'reward.created (first sighting), reward.status_changed, reward.missing (a complete sync no longer lists it) or reward.restored (listed again); only those of EVENT_TYPES are recorded.';
comment on column reward_events.consumer_id is 'Consumer of the reward.';
comment on column reward_events.user_id is
  'Your own user id of the consumer (consumers.user_id); for a reward.created its reward row still holds, as the consumer has it now.';
comment on column reward_events.reward_id is 'The reward the event is about.';
comment on column reward_events.data is
  '{"reward": the reward as stored: id, amount (decimal string, "12.50"), type, status, consumer_status, created_at, transaction ({external_id, executed_at} or null), brand ({name, logo} or null); times in UTC, "2026-01-02T03:04:05.000Z"}. reward.status_changed adds previous_status and previous_consumer_status.';
comment on column reward_events.created_at is
  'When the event was recorded: the start of the transaction that wrote the change; for a reward.created, when the page that first showed the reward was read.';
