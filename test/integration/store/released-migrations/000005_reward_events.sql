-- The reward events feed: write_reward_pages records each change of a reward in the statement,
-- so the transaction, of the change itself: no event without its change, no change without its
-- event, none for an unchanged re-sync. $4 of the new overload lists the types to record
-- (EVENT_TYPES); the 3-argument function stays, for an older build, and records none.
-- data.reward is the reward as stored: amount is the numeric's text ("12.50"), times are UTC
-- with milliseconds ("2026-01-02T03:04:05.000Z"), transaction and brand are null when both
-- their columns are.
--
-- Order: a statement first marks its consumers in reward_event_pending (an upsert that sets
-- dispatched_at back to null and holds the row lock to commit), then takes ids, in reward id
-- order. So two writes of one consumer take their ids in commit order: a reader of one
-- consumer's events past a delivered id skips none. Across consumers ids may commit out of
-- order, and a rolled-back write leaves a gap.
--
-- Each statement that adds events sends NOTIFY perks_reward_events with the highest id added
-- (a statement trigger reading its transition table); NOTIFY is delivered at commit only.
-- No foreign keys here: each would be a per-row trigger on the write path.
--
-- The CTEs added to 000003's statement: `reported` (the changes, of the types asked for),
-- `pending` (the marks) and `events` (the rows). `previous` also says whether the stored row
-- was missing, `written` and `missing` return the stored columns.
-- Same SET clauses as 000002, for the same reasons (they multiply the write rate).

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

create function write_reward_pages(jsonb, jsonb, uuid[], text[])
returns table (p int, inserted int, updated int, status_changes int, marked_missing int)
language plpgsql
set search_path from current
set plan_cache_mode = force_generic_plan
set enable_seqscan = off
set jit = off
as $function$
#variable_conflict use_column
begin
  return query
  with page as (
    select * from jsonb_to_recordset($2::jsonb) as f(
      p int, consumer_id text, observed_at timestamptz, finish boolean, mark_missing boolean,
      scan_started_at timestamptz, at timestamptz)
  ),
  input as (
    -- stored_write: null when the reward is not stored, else whether the stored version needs
    -- this write (the statement's snapshot; `previous` checks again under the row lock). One
    -- index probe per row: lateral with offset 0, never flattened into a join the planner may
    -- turn into a scan of the whole table. The other columns are read from raw in `written`,
    -- for the rows it writes only: an unchanged reward costs its probe and nothing else.
    select f.p, f.observed_at, r.*, s.write as stored_write
    from jsonb_to_recordset($1::jsonb) as b(consumer_id text, body jsonb)
    cross join lateral jsonb_array_elements(b.body->'items') as e(raw)
    join page f on f.consumer_id = b.consumer_id
    cross join lateral (
      select (e.raw->>'id')::uuid as id, b.consumer_id as consumer_id, e.raw as raw
    ) r
    left join lateral (
      select x.observed_at < f.observed_at
             and ((x.consumer_id, x.raw) is distinct from (r.consumer_id, r.raw)
                  or x.missing_since is not null
                  or x.last_seen_at < f.observed_at - interval '1 hour') as write
      from rewards x where x.id = r.id offset 0
    ) s on true
  ),
  consumer as (
    insert into consumers as c (consumer_id, last_synced_at)
    select f.consumer_id, case when f.finish then f.at end from page f
    order by f.consumer_id
    on conflict (consumer_id) do update set
      last_synced_at = greatest(c.last_synced_at, excluded.last_synced_at),
      -- A sync whose last request went out after the not-enrolled mark proves the consumer
      -- enrolled: it rejoins reconciliation.
      not_enrolled_at = case when c.not_enrolled_at < excluded.last_synced_at then null
                             else c.not_enrolled_at end,
      updated_at = now()
    where excluded.last_synced_at is not null
  ),
  missing as (
    -- The candidates come from each page's own index scan (lateral; offset 0 keeps it from
    -- being flattened into a join that may scan the whole table), and are then updated by id
    -- (an array: an index lookup whatever the planner thinks of its size). The conditions are
    -- stated on the updated row again: a row changed concurrently is re-checked in its new
    -- version.
    update rewards r set missing_since = f.at
    from page f
    where r.id = any(array(
        select x.id
        from page f cross join lateral (
          select c.id from rewards c
          where c.consumer_id = f.consumer_id
            and c.missing_since is null
            and c.first_seen_at < f.scan_started_at
            and c.observed_at < f.scan_started_at
            -- Not `<> all($3)`: with a generic plan the array is a parameter, which PostgreSQL
          -- searches element by element for every row; this subquery is hashed once.
          and $3 is not null and c.id not in (select n.id from unnest($3::uuid[]) as n(id))
          offset 0
        ) x
        where f.finish and f.mark_missing))
      and f.finish and f.mark_missing and r.consumer_id = f.consumer_id
      and r.missing_since is null
      and r.first_seen_at < f.scan_started_at
      and r.observed_at < f.scan_started_at
    returning f.p, r.id, r.consumer_id, r.amount, r.type, r.status, r.consumer_status,
      r.created_at, r.transaction_external_id, r.transaction_executed_at, r.brand_name,
      r.brand_logo
  ),
  previous as (
    select r.id, r.status, r.consumer_status,
           (r.consumer_id, r.raw) is distinct from (i.consumer_id, i.raw)
             or r.missing_since is not null as changed,
           r.missing_since is not null as was_missing
    from rewards r join input i on i.id = r.id
    where r.id = any(array(select w.id from input w where w.stored_write))
      and r.observed_at < i.observed_at
      and ((r.consumer_id, r.raw) is distinct from (i.consumer_id, i.raw)
           or r.missing_since is not null
           or r.last_seen_at < i.observed_at - interval '1 hour')
    order by r.id
    for update of r
  ),
  written as (
    insert into rewards as rewards (
      id, consumer_id, amount, type, status, consumer_status, created_at,
      transaction_external_id, transaction_executed_at, brand_name, brand_logo, raw,
      first_seen_at, last_seen_at, observed_at)
    select i.id, i.consumer_id, w.amount, w.type, w.status, w.consumer_status, w.created_at,
           w.transaction->>'external_id', (w.transaction->>'executed_at')::timestamptz,
           w.brand->>'name', w.brand->>'logo', i.raw,
           i.observed_at, i.observed_at, i.observed_at
    from input i left join previous p on p.id = i.id
    cross join lateral jsonb_to_record(i.raw) as w(
      amount numeric, type text, status text, consumer_status text, created_at timestamptz,
      transaction jsonb, brand jsonb)
    -- A stored reward that needs no write is left out: ON CONFLICT DO UPDATE would lock it (a
    -- WAL record per row) only to find nothing to do.
    where i.stored_write is null or p.id is not null
    order by i.id
    on conflict (id) do update set
      consumer_id = excluded.consumer_id, amount = excluded.amount, type = excluded.type,
      status = excluded.status, consumer_status = excluded.consumer_status,
      created_at = excluded.created_at, transaction_external_id = excluded.transaction_external_id,
      transaction_executed_at = excluded.transaction_executed_at,
      brand_name = excluded.brand_name, brand_logo = excluded.brand_logo, raw = excluded.raw,
      last_seen_at = excluded.observed_at, observed_at = excluded.observed_at, missing_since = null
    where rewards.observed_at < excluded.observed_at
      and ((rewards.consumer_id, rewards.raw) is distinct from (excluded.consumer_id, excluded.raw)
           or rewards.missing_since is not null
           or rewards.last_seen_at < excluded.observed_at - interval '1 hour')
    -- first_seen_at is never updated and an update needs a newer observation than the stored
    -- one (itself never older than first_seen_at): the two are equal exactly on an insert.
    returning id, consumer_id, amount, type, status, consumer_status, created_at,
      transaction_external_id, transaction_executed_at, brand_name, brand_logo,
      first_seen_at = observed_at as inserted
  ),
  changes as (
    insert into reward_status_changes (
      reward_id, consumer_id, old_status, new_status, old_consumer_status, new_consumer_status,
      observed_at)
    select w.id, i.consumer_id, p.status, w.status, p.consumer_status, w.consumer_status,
           i.observed_at
    from written w join previous p on p.id = w.id join input i on i.id = w.id
    where not w.inserted
      and (p.status, p.consumer_status) is distinct from (w.status, w.consumer_status)
    order by w.id
    returning reward_id
  ),
  reported as (
    -- rank orders the events of one reward. A branch whose type $4 leaves out is not run: its
    -- filter is a constant, checked once.
    select * from (
      select 'reward.created' as type, 1 as rank, w.id, w.consumer_id, w.amount,
             w.type as reward_type, w.status, w.consumer_status, w.created_at,
             w.transaction_external_id, w.transaction_executed_at, w.brand_name, w.brand_logo,
             null::text as previous_status, null::text as previous_consumer_status
      from written w where w.inserted
      union all
      select 'reward.restored', 2, w.id, w.consumer_id, w.amount, w.type, w.status,
             w.consumer_status, w.created_at, w.transaction_external_id,
             w.transaction_executed_at, w.brand_name, w.brand_logo, null, null
      from written w join previous p on p.id = w.id
      where not w.inserted and p.was_missing
      union all
      -- The rows of `changes`, read as it reads them: joined to `changes` instead, the planner
      -- would guess millions of rows (it knows nothing of a CTE's output).
      select 'reward.status_changed', 3, w.id, w.consumer_id, w.amount, w.type, w.status,
             w.consumer_status, w.created_at, w.transaction_external_id,
             w.transaction_executed_at, w.brand_name, w.brand_logo, p.status, p.consumer_status
      from written w join previous p on p.id = w.id
      where not w.inserted
        and (p.status, p.consumer_status) is distinct from (w.status, w.consumer_status)
      union all
      select 'reward.missing', 4, m.id, m.consumer_id, m.amount, m.type, m.status,
             m.consumer_status, m.created_at, m.transaction_external_id,
             m.transaction_executed_at, m.brand_name, m.brand_logo, null, null
      from missing m
    ) e
    where e.type = any($4::text[])
  ),
  pending as (
    -- An event is inserted only once its consumer's mark is (`events` joins them): the mark's
    -- row lock, held to commit, makes a concurrent write of that consumer take its ids after.
    insert into reward_event_pending as q (consumer_id)
    select distinct e.consumer_id from reported e
    order by e.consumer_id
    on conflict (consumer_id) do update set dispatched_at = null
    returning q.consumer_id
  ),
  events as (
    insert into reward_events (type, consumer_id, user_id, reward_id, data)
    select e.type, e.consumer_id,
           (select u.user_id from consumers u where u.consumer_id = e.consumer_id),
           e.id,
           case when e.type = 'reward.status_changed'
             then jsonb_build_object('reward', r.reward, 'previous_status', e.previous_status,
                                     'previous_consumer_status', e.previous_consumer_status)
             else jsonb_build_object('reward', r.reward) end
    from reported e join pending q on q.consumer_id = e.consumer_id
    cross join lateral (
      select jsonb_build_object(
        'id', e.id, 'amount', e.amount::text, 'type', e.reward_type, 'status', e.status,
        'consumer_status', e.consumer_status,
        'created_at', to_char(e.created_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
        'transaction', case
          when e.transaction_external_id is not null or e.transaction_executed_at is not null
          then jsonb_build_object('external_id', e.transaction_external_id, 'executed_at',
            to_char(e.transaction_executed_at at time zone 'UTC',
                    'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')) end,
        'brand', case when e.brand_name is not null or e.brand_logo is not null
          then jsonb_build_object('name', e.brand_name, 'logo', e.brand_logo) end) as reward
    ) r
    order by e.id, e.rank
  )
  select p, sum(inserted)::int as inserted, sum(updated)::int as updated,
    sum(status_changes)::int as status_changes, sum(marked_missing)::int as marked_missing
  from (
    select i.p, w.inserted::int as inserted,
           (not w.inserted and coalesce(p.changed, true))::int as updated,
           0 as status_changes, 0 as marked_missing
    from written w join input i on i.id = w.id left join previous p on p.id = w.id
    union all
    select i.p, 0, 0, 1, 0 from changes c join input i on i.id = c.reward_id
    union all
    select m.p, 0, 0, 0, 1 from missing m
  ) counted
  group by p;
end
$function$;

comment on function write_reward_pages(jsonb, jsonb, uuid[], text[]) is
  'Writes pages of rewards (and the ends of their syncs) in one statement, with the reward events of the types in the fourth parameter; see the migrations 000002 and 000005.';
