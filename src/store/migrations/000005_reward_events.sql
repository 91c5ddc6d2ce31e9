-- The reward events feed, written by write_reward_pages (migrations/repeatable/) in the
-- transaction of each change. One consumer's events commit in id order, so a reader of its
-- events past a delivered id skips none; across consumers ids may commit out of order, and a
-- rolled-back write leaves a gap.
--
-- Each statement that adds events sends NOTIFY perks_reward_events with the highest id added
-- (a statement trigger reading its transition table); NOTIFY is delivered at commit only.
-- No foreign keys here: each would be a per-row trigger on the write path.

create table reward_events (
  id bigint generated always as identity primary key,
  type text not null,
  consumer_id text collate "C" not null,
  user_id text,
  reward_id uuid not null,
  data jsonb not null,
  created_at timestamptz not null default now()
);

comment on table reward_events is
  'One row per change of a reward, written in the transaction of the change itself: the feed that webhooks deliver.';
comment on column reward_events.id is
  'Increasing id, in the order the events were recorded. One consumer''s events commit in id order; a rolled-back write leaves a gap.';
comment on column reward_events.type is
  'reward.created (first sighting), reward.status_changed, reward.missing (a complete sync no longer lists it) or reward.restored (listed again); only those of EVENT_TYPES are recorded.';
comment on column reward_events.consumer_id is 'Consumer of the reward.';
comment on column reward_events.user_id is
  'Your own user id of the consumer (consumers.user_id) when known at the time of the event.';
comment on column reward_events.reward_id is 'The reward the event is about.';
comment on column reward_events.data is
  '{"reward": the reward as stored: id, amount (decimal string, "12.50"), type, status, consumer_status, created_at, transaction ({external_id, executed_at} or null), brand ({name, logo} or null); times in UTC, "2026-01-02T03:04:05.000Z"}. reward.status_changed adds previous_status and previous_consumer_status.';
comment on column reward_events.created_at is
  'When the event was recorded (the start of the transaction that wrote the change).';

-- Delivery reads one consumer's events past its cursor, in id order.
create index reward_events_consumer_idx on reward_events (consumer_id, id);

create table reward_event_pending (
  consumer_id text collate "C" primary key,
  dispatched_at timestamptz
);

comment on table reward_event_pending is
  'Consumers with reward events the worker may not have delivered yet; marked by the write that records an event, in its transaction.';
comment on column reward_event_pending.consumer_id is 'Consumer with events to deliver.';
comment on column reward_event_pending.dispatched_at is
  'When a delivery job was added for the consumer; null: not handed to a delivery job yet (a new event sets it back to null).';

create table reward_event_cursors (
  consumer_id text collate "C" primary key,
  delivered_through bigint not null,
  updated_at timestamptz not null default now()
);

comment on table reward_event_cursors is
  'Per consumer, how far webhook delivery has gone in the feed.';
comment on column reward_event_cursors.consumer_id is 'Consumer whose events are delivered.';
comment on column reward_event_cursors.delivered_through is
  'reward_events.id of the last event of the consumer delivered or given up; the next one delivered has a higher id.';
comment on column reward_event_cursors.updated_at is 'When the cursor last moved.';

create table reward_event_failures (
  event_id bigint primary key,
  consumer_id text collate "C" not null,
  failed_at timestamptz not null default now(),
  attempts int not null,
  last_error text not null
);

comment on table reward_event_failures is
  'Reward events webhook delivery gave up on, still refused after WEBHOOK_MAX_AGE_HOURS; the consumer''s cursor has moved past them.';
comment on column reward_event_failures.event_id is 'reward_events.id of the event given up.';
comment on column reward_event_failures.consumer_id is 'Consumer of the event.';
comment on column reward_event_failures.failed_at is 'When the event was given up.';
comment on column reward_event_failures.attempts is 'Delivery attempts made.';
comment on column reward_event_failures.last_error is 'Why the last attempt failed.';

create function notify_reward_events()
returns trigger
language plpgsql
as $function$
declare
  highest bigint;
begin
  select max(id) into highest from added;
  if highest is not null then
    perform pg_notify('perks_reward_events', highest::text);
  end if;
  return null;
end
$function$;

create trigger reward_events_notify
after insert on reward_events
referencing new table as added
for each statement execute function notify_reward_events();
