-- record_rejected_rewards(consumer_id, items, at): upserts the items of one page that the reward
-- schema refused, $2 jsonb [{ reward_id, raw, error }], read at $3 (the page's request time).
-- An older sighting never overwrites a newer one; an item whose reward is stored from a newer
-- page is already answered and left out.

create or replace function record_rejected_rewards(text, jsonb, timestamptz)
returns void
language sql
set search_path from current
as $function$
  insert into rejected_rewards as x (consumer_id, reward_id, raw, error, first_seen_at, last_seen_at)
  -- One row per key: ON CONFLICT may not touch a row twice.
  select distinct on (coalesce(i.reward_id::text, md5(i.raw))) $1, i.reward_id, i.raw, i.error, $3, $3
  from jsonb_to_recordset($2) as i(reward_id uuid, raw text, error text)
  where not exists (select from rewards r where r.id = i.reward_id and r.observed_at > $3)
  on conflict (consumer_id, item_key) do update set
    raw = excluded.raw, error = excluded.error, last_seen_at = excluded.last_seen_at
  where x.last_seen_at <= excluded.last_seen_at
$function$;

comment on function record_rejected_rewards(text, jsonb, timestamptz) is
  'The worker''s own: records refused reward items in rejected_rewards; see its file, migrations/repeatable/record_rejected_rewards.sql.';
