-- Reward items a sync refused (a field the reward schema rejects): their page's other rewards
-- are written, each refused item waits here, its fields named, until the API serves it valid.
-- Written by record_rejected_rewards, removed by write_reward_pages (migrations/repeatable/).

create table rejected_rewards (
  consumer_id text collate "C" not null,
  reward_id uuid,
  raw text not null,
  item_key text collate "C" not null
    generated always as (coalesce(reward_id::text, md5(raw))) stored,
  error text not null,
  first_seen_at timestamptz not null,
  last_seen_at timestamptz not null,
  primary key (consumer_id, item_key)
);

comment on table rejected_rewards is
  'One row per reward item a sync refused, per consumer and reward id (per item text when the id is unreadable), upserted at each sighting. Bound: removed when a valid version of the reward is written, and by a complete sync of the consumer that no longer lists it.';
comment on column rejected_rewards.consumer_id is 'Consumer whose reward list held the item.';
comment on column rejected_rewards.reward_id is
  'The item''s id; null when it is not a uuid (or absent).';
comment on column rejected_rewards.raw is 'The item as received, as JSON text.';
comment on column rejected_rewards.item_key is
  'reward_id as text, or the md5 of raw when reward_id is null: the row''s key within the consumer.';
comment on column rejected_rewards.error is
  'Each failing field and why, e.g. "amount: must be a decimal string matching the spec pattern; brand.logo: must be an absolute URI".';
comment on column rejected_rewards.first_seen_at is 'When a sync first read the item (its page''s request time).';
comment on column rejected_rewards.last_seen_at is 'When a sync last read the item.';

comment on column rewards.brand_logo is
  'Brand logo, an absolute URI of any scheme (https:, data:, ...; check the scheme before rendering it); null when the brand has no logo.';
