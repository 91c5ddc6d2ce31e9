-- The not-enrolled mark (consumers.not_enrolled_at) follows the newest word of the API:
-- - it is stamped with the time before the refused sync's first request, and is not set over
--   an enrollment or a successful sync newer than that (store/consumers.ts);
-- - a successful sync whose last request went out after the mark clears it, so the consumer
--   rejoins reconciliation: write_reward_pages, as in 000002 but for that one assignment in
--   its `consumer` step, does it on the sync's own update of last_synced_at.
-- A trigger would do the same with no copy of the function, but it slowed the small-page first
-- sync of bench scenario 1 by about a tenth (its floor missed in both runs with it).

create or replace function write_reward_pages(jsonb, jsonb, uuid[])
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
    returning f.p
  ),
  previous as (
    select r.id, r.status, r.consumer_status,
           (r.consumer_id, r.raw) is distinct from (i.consumer_id, i.raw)
             or r.missing_since is not null as changed
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
    returning id, status, consumer_status, first_seen_at = observed_at as inserted
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

comment on function write_reward_pages(jsonb, jsonb, uuid[]) is
  'Writes pages of rewards (and the ends of their syncs) in one statement; see the migration 000002 for the parameters.';

comment on column consumers.not_enrolled_at is
  'When a request the API answered with ERR-404-02 (consumer not enrolled) was sent; cleared by a later enrollment or successful sync. Such consumers are not reconciled.';
