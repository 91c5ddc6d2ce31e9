-- write_reward_pages(rewards, pages, not_missing, event_types): writes reward pages of distinct
-- consumers in one statement: creates missing consumer rows, upserts the rewards, records status
-- changes and reward events, removes the rejected_rewards a valid version answers and, on a
-- sync's last page (`finish`), marks unlisted rewards missing and sets last_synced_at (never
-- backwards). Returns p and the counts of each page that did something.
-- $1 jsonb [{ consumer_id, body }]: body is the API's response as sent; each of its `items`
--    is stored as `raw`, the columns read from it. $2 jsonb [{ p, consumer_id, observed_at,
--    finish, mark_missing, scan_started_at, at }], one per page, with rows or not;
--    scan_started_at when the scan was complete and consistent, mark_missing when it also
--    rejected no item. $3 uuid[]: ids never marked missing besides this call's rows (the
--    finishing scans' ids of earlier pages). $4 text[]: the event types to record (EVENT_TYPES).
-- Pages of one call share no consumer and no reward id: the statement cannot touch a row twice.
--
-- Stale-write guard: a stored row is only overwritten by a strictly newer observation
-- (rewards.observed_at < new observed_at), so concurrent syncs converge on the newest. A
-- reward another sync inserted after this statement began fails it (a unique violation on
-- rewards_pkey): the writer runs it again, and the new snapshot sees the row stored.
-- A stored reward is rewritten only when its content changed, it comes back from missing or
-- its last_seen_at is over an hour old; others are not even locked and write no WAL. Only a
-- complete scan whose total did not move and that rejected no item (it may be a stored
-- reward's) marks rewards missing, never one seen since it began.
--
-- Not enrolled: a successful sync whose last request went out after consumers.not_enrolled_at
-- clears it (in the `consumer` step), so the consumer rejoins reconciliation. A trigger would
-- do the same, but slowed the small-page first sync of bench scenario 1 by about a tenth.
--
-- Events: each change of a reward is recorded in this statement, so in the transaction of the
-- change itself: no event without its change, none for an unchanged re-sync. A new reward's
-- reward.created is its row's event_id (migration 000008): the first sync of a reward writes no
-- second row. The others go to reward_event_log, with a reward.created its row held until its
-- content changed here (moved with the content it showed, under its id). The statement marks
-- each consumer with events in reward_event_pending (an upsert that sets dispatched_at back to
-- null, keeps the oldest of its events' times in oldest_at, and holds the row lock to commit) before it takes the consumer's event ids, in reward id
-- order: two writes of one consumer take their ids in commit order. data.reward:
-- reward_event_json.
-- It sends NOTIFY perks_reward_events with the highest id added (delivered at commit).
--
-- Locks: the rows to update are read `for update` in id order before any insert, and new
-- rows are inserted in id order, so two writers cannot deadlock; the lock returns a
-- concurrently committed version, so a status change records the status it really replaces.
--
-- A function, with SET clauses: it plans once per session (planning every call was most of a
-- small page's database time) and its settings hold through PgBouncer transaction pooling.
-- force_generic_plan: jsonb arrays are estimated at 100 rows whatever they hold; enable_seqscan
-- off: every access is by key, and a plan made on empty tables would keep scanning them;
-- jit off: a few rows must never pay a JIT compile. search_path from current: this schema.

create or replace function write_reward_pages(jsonb, jsonb, uuid[], text[])
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
    -- turn into a scan of the whole table. The other columns are read from raw in `content`,
    -- for the rows that may be written only: an unchanged reward costs its probe alone.
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
  cleared as (
    -- Refused items (rejected_rewards) this call answers: a valid version of the reward read
    -- since, and at the end of a complete scan each one that scan did not see. Found by an
    -- index probe per page's consumer (an array: never a scan of the table), not per row.
    delete from rejected_rewards x
    using page f
    where x.consumer_id = any(array(select g.consumer_id from page g))
      and x.consumer_id = f.consumer_id
      and (x.last_seen_at <= f.observed_at and x.reward_id in (select i.id from input i)
           or f.finish and x.last_seen_at < f.scan_started_at)
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
    -- version. observed_at moves to the scan's start, which saw it gone: a page read before
    -- then (a slow sync's) is older and cannot bring it back.
    update rewards r set missing_since = f.at, observed_at = f.scan_started_at
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
            -- searches element by element for every row; these subqueries are hashed once.
            and $3 is not null and c.id not in (select n.id from unnest($3::uuid[]) as n(id))
            and c.id not in (select i.id from input i)
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
    -- Each comparison once: `pending`, `updated`, `moved`, `changes` and `reported` read them.
    select r.id, r.status, r.consumer_status,
           m.content_changed or r.missing_since is not null as changed,
           r.missing_since is not null as was_missing,
           (r.status, r.consumer_status)
             is distinct from (i.raw->>'status', i.raw->>'consumer_status') as status_changed,
           -- A reward.created the row holds, to move to the log with the content it shows.
           case when m.content_changed then r.event_id end as moved_event_id,
           r.consumer_id as moved_consumer_id, r.first_seen_at,
           case when m.content_changed and r.event_id is not null then
             reward_event_json(r.id, r.amount, r.type, r.status, r.consumer_status, r.created_at,
               r.transaction_external_id, r.transaction_executed_at, r.brand_name, r.brand_logo)
           end as moved_reward
    from rewards r join input i on i.id = r.id
    cross join lateral (
      select (r.consumer_id, r.raw) is distinct from (i.consumer_id, i.raw) as content_changed
    ) m
    where r.id = any(array(select w.id from input w where w.stored_write))
      and r.observed_at < i.observed_at
      and (m.content_changed
           or r.missing_since is not null
           or r.last_seen_at < i.observed_at - interval '1 hour')
    order by r.id
    for update of r
  ),
  pending as (
    -- The consumers this statement records an event for, known before any row is written: a
    -- new reward (reward.created), a locked one `previous` finds missing (reward.restored) or
    -- with another status (reward.status_changed), one `missing` marks. One upsert, in
    -- consumer order. Event ids are taken only once their consumer's mark is (`inserted` and
    -- `events` join this): its row lock, held to commit, makes a concurrent write of that
    -- consumer take its ids after.
    -- oldest_at: its events' created_at, a reward.created's being its page's observed_at.
    insert into reward_event_pending as q (consumer_id, oldest_at)
    select m.consumer_id, min(m.at) from (
      select i.consumer_id, i.observed_at as at from input i
      where i.stored_write is null and 'reward.created' = any($4::text[])
      union all
      select i.consumer_id, now() from previous p join input i on i.id = p.id
      where p.was_missing and 'reward.restored' = any($4::text[])
         or p.status_changed and 'reward.status_changed' = any($4::text[])
      union all
      select x.consumer_id, now() from missing x where 'reward.missing' = any($4::text[])
    ) m
    group by m.consumer_id
    order by m.consumer_id
    on conflict (consumer_id) do update
      set dispatched_at = null, oldest_at = least(q.oldest_at, excluded.oldest_at)
    returning q.consumer_id
  ),
  content as (
    -- The columns of each reward this statement may write, read from raw once; `inserted`
    -- and `updated` take them.
    select i.id, w.amount, w.type, w.status, w.consumer_status, w.created_at,
           w.transaction->>'external_id' as transaction_external_id,
           (w.transaction->>'executed_at')::timestamptz as transaction_executed_at,
           w.brand->>'name' as brand_name, w.brand->>'logo' as brand_logo
    from input i
    cross join lateral jsonb_to_record(i.raw) as w(
      amount numeric, type text, status text, consumer_status text, created_at timestamptz,
      transaction jsonb, brand jsonb)
    where i.stored_write is not false
  ),
  inserted as (
    -- The rewards the snapshot does not hold, by a plain insert: ON CONFLICT's speculative
    -- insertion cost a first sync about a sixth of its database time. A reward another sync
    -- inserted since this statement's snapshot fails it with a unique violation on
    -- rewards_pkey (the writer runs it again, and then sees the row stored). event_id: a new
    -- id for a new reward whose consumer `pending` marked.
    insert into rewards (
      id, consumer_id, amount, type, status, consumer_status, created_at,
      transaction_external_id, transaction_executed_at, brand_name, brand_logo, raw,
      first_seen_at, last_seen_at, observed_at, event_id)
    select i.id, i.consumer_id, c.amount, c.type, c.status, c.consumer_status, c.created_at,
           c.transaction_external_id, c.transaction_executed_at, c.brand_name, c.brand_logo,
           i.raw, i.observed_at, i.observed_at, i.observed_at,
           case when q.consumer_id is not null and 'reward.created' = any($4::text[])
                then nextval('reward_event_ids') end
    from input i join content c on c.id = i.id
    left join pending q on q.consumer_id = i.consumer_id
    where i.stored_write is null
    order by i.id
    returning id, consumer_id, amount, type, status, consumer_status, created_at,
      transaction_external_id, transaction_executed_at, brand_name, brand_logo,
      true as inserted, event_id
  ),
  updated as (
    -- Exactly the rows `previous` locked, whose conditions it checked under the lock. A held
    -- reward.created whose content changes is cleared here, and `moved` logs it.
    update rewards r set
      consumer_id = i.consumer_id, amount = c.amount, type = c.type, status = c.status,
      consumer_status = c.consumer_status, created_at = c.created_at,
      transaction_external_id = c.transaction_external_id,
      transaction_executed_at = c.transaction_executed_at,
      brand_name = c.brand_name, brand_logo = c.brand_logo, raw = i.raw,
      last_seen_at = i.observed_at, observed_at = i.observed_at, missing_since = null,
      event_id = case when p.moved_event_id is not null then null else r.event_id end
    from previous p join input i on i.id = p.id join content c on c.id = p.id
    -- By id (an array: an index lookup whatever the planner thinks of previous's size).
    where r.id = any(array(select x.id from previous x)) and r.id = p.id
    returning r.id, r.consumer_id, r.amount, r.type, r.status, r.consumer_status, r.created_at,
      r.transaction_external_id, r.transaction_executed_at, r.brand_name, r.brand_logo,
      false as inserted, r.event_id
  ),
  written as (
    select * from inserted union all select * from updated
  ),
  moved as (
    insert into reward_event_log (id, type, consumer_id, user_id, reward_id, data, created_at)
    overriding system value
    select p.moved_event_id, 'reward.created', p.moved_consumer_id,
           (select u.user_id from consumers u where u.consumer_id = p.moved_consumer_id),
           p.id, jsonb_build_object('reward', p.moved_reward), p.first_seen_at
    from written w join previous p on p.id = w.id
    where not w.inserted and p.moved_event_id is not null
  ),
  changes as (
    insert into reward_status_changes (
      reward_id, consumer_id, old_status, new_status, old_consumer_status, new_consumer_status,
      observed_at)
    select w.id, i.consumer_id, p.status, w.status, p.consumer_status, w.consumer_status,
           i.observed_at
    from written w join previous p on p.id = w.id join input i on i.id = w.id
    where not w.inserted and p.status_changed
    order by w.id
    returning reward_id
  ),
  reported as (
    -- rank orders the events of one reward. A branch whose type $4 leaves out is not run: its
    -- filter is a constant, checked once.
    select * from (
      select 'reward.restored' as type, 2 as rank, w.id, w.consumer_id, w.amount,
             w.type as reward_type, w.status, w.consumer_status, w.created_at,
             w.transaction_external_id, w.transaction_executed_at, w.brand_name, w.brand_logo,
             null::text as previous_status, null::text as previous_consumer_status
      from written w join previous p on p.id = w.id
      where not w.inserted and p.was_missing
      union all
      -- The rows of `changes`, read as it reads them: joined to `changes` instead, the planner
      -- would guess millions of rows (it knows nothing of a CTE's output).
      select 'reward.status_changed', 3, w.id, w.consumer_id, w.amount, w.type, w.status,
             w.consumer_status, w.created_at, w.transaction_external_id,
             w.transaction_executed_at, w.brand_name, w.brand_logo, p.status, p.consumer_status
      from written w join previous p on p.id = w.id
      where not w.inserted and p.status_changed
      union all
      select 'reward.missing', 4, m.id, m.consumer_id, m.amount, m.type, m.status,
             m.consumer_status, m.created_at, m.transaction_external_id,
             m.transaction_executed_at, m.brand_name, m.brand_logo, null, null
      from missing m
    ) e
    where e.type = any($4::text[])
  ),
  events as (
    insert into reward_event_log (type, consumer_id, user_id, reward_id, data)
    select e.type, e.consumer_id,
           (select u.user_id from consumers u where u.consumer_id = e.consumer_id),
           e.id,
           case when e.type = 'reward.status_changed'
             then jsonb_build_object('reward', r.reward, 'previous_status', e.previous_status,
                                     'previous_consumer_status', e.previous_consumer_status)
             else jsonb_build_object('reward', r.reward) end
    from reported e
    join pending q on q.consumer_id = e.consumer_id
    cross join lateral (
      select reward_event_json(e.id, e.amount, e.reward_type, e.status, e.consumer_status,
        e.created_at, e.transaction_external_id, e.transaction_executed_at, e.brand_name,
        e.brand_logo) as reward
    ) r
    order by e.id, e.rank
    returning id
  ),
  notified as (
    select pg_notify('perks_reward_events', max(x.id)::text)
    from (select w.event_id as id from written w where w.inserted
          union all select v.id from events v) x
    having max(x.id) is not null
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
  -- A one-time filter: evaluated once, and it runs `notified`, which no row reads.
  where (select count(*) from notified) >= 0
  group by p;
end
$function$;

comment on function write_reward_pages(jsonb, jsonb, uuid[], text[]) is
  'Writes pages of rewards (and the ends of their syncs) in one statement, with the reward events of the types in the fourth parameter; see its file, migrations/repeatable/write_reward_pages.sql.';
