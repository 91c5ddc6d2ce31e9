-- The perks datastore: consumers, their rewards, and every observed reward status change.
--
-- Names are unqualified on purpose: the migration runner creates the configured schema
-- (DATABASE_SCHEMA, default perks) and runs this file with `set local search_path` to it,
-- so one file serves any schema name. Released migrations are never edited (checksummed).
--
-- consumer_id is collated "C": consumer ids are ASCII ([a-zA-Z0-9_-]), byte order is the
-- order every reader (and the keyset listing) can reproduce, and it is cheaper to compare.

create table consumers (
  consumer_id text collate "C" primary key,
  user_id text unique,
  enrolled_at timestamptz,
  enrollment_outcome text check (enrollment_outcome in ('created', 'already_enrolled')),
  extra_consents text[],
  removed_consents text[],
  last_synced_at timestamptz,
  not_enrolled_at timestamptz,
  last_error text,
  updated_at timestamptz not null default now()
);

comment on table consumers is
  'One row per Perks consumer this worker enrolled, synced or saw rewards for.';
comment on column consumers.consumer_id is
  'Perks consumer id (2 to 100 of a-z A-Z 0-9 _ -), chosen by us and stable.';
comment on column consumers.user_id is
  'Your own user id the consumer id was derived from, when known.';
comment on column consumers.enrolled_at is
  'When this worker enrolled the consumer; null until enrolled by it (consumers enrolled before the worker existed have rewards but no enrolled_at).';
comment on column consumers.enrollment_outcome is
  'created (the API created the consumer) or already_enrolled (the API answered 409: it already existed).';
comment on column consumers.extra_consents is
  'Consents sent as extra_consents at enrollment (BASIC, TRANSACTION_TRIGGERS, ...); null when unknown.';
comment on column consumers.removed_consents is
  'Consents sent as removed_consents at enrollment; null when unknown.';
comment on column consumers.last_synced_at is
  'When the last complete reward sync of this consumer finished.';
comment on column consumers.not_enrolled_at is
  'When the API last answered ERR-404-02 (consumer not enrolled); cleared by a new enrollment. Such consumers are not reconciled.';
comment on column consumers.last_error is
  'Message of the last enrollment or sync failure; cleared by a successful enrollment.';
comment on column consumers.updated_at is
  'When this row was last written.';

-- The reconciliation reads consumer ids in keyset pages; this skips the not-enrolled ones.
create index consumers_reconciled_idx on consumers (consumer_id) where not_enrolled_at is null;

create table rewards (
  id uuid primary key,
  consumer_id text collate "C" not null references consumers (consumer_id),
  amount numeric not null,
  type text not null,
  status text not null,
  consumer_status text not null,
  created_at timestamptz not null,
  transaction_external_id text,
  transaction_executed_at timestamptz,
  brand_name text,
  brand_logo text,
  raw jsonb not null,
  first_seen_at timestamptz not null,
  last_seen_at timestamptz not null,
  observed_at timestamptz not null,
  missing_since timestamptz
);

comment on table rewards is
  'Rewards of each consumer as last read from the Perks API (one row per reward id).';
comment on column rewards.id is 'Reward id (uuid) given by the Perks API.';
comment on column rewards.consumer_id is 'Consumer the reward belongs to.';
comment on column rewards.amount is
  'Amount, exact decimal as sent by the API (string "+0012.50" is stored as 12.50). Never a float.';
comment on column rewards.type is 'Reward type: CASHBACK, GIFT, or another value the API adds.';
comment on column rewards.status is
  'Moderation status: VALIDATED, PAID_IN, PAID_OUT, or another value the API adds.';
comment on column rewards.consumer_status is
  'Consumer-facing status: VALIDATION, POOLED or PAID.';
comment on column rewards.created_at is 'When the API created the reward.';
comment on column rewards.transaction_external_id is
  'Id of the originating card transaction; null for rewards without one (gifts).';
comment on column rewards.transaction_executed_at is
  'When the originating transaction was executed; null for rewards without one.';
comment on column rewards.brand_name is 'Brand display name; null when the API sends none.';
comment on column rewards.brand_logo is 'Brand logo URL; null when the brand has no logo.';
comment on column rewards.raw is
  'The reward exactly as received from the API, unknown fields included.';
comment on column rewards.first_seen_at is 'When this worker first read the reward.';
comment on column rewards.last_seen_at is
  'When a sync last saw the reward, to within one hour: it is refreshed when the content changes or when the stored value is over an hour old, so unchanged re-syncs write nothing.';
comment on column rewards.observed_at is
  'When the API page holding the stored content was read. A write with an older observation never overwrites a newer one.';
comment on column rewards.missing_since is
  'Set when a complete sync of the consumer no longer lists the reward; cleared when it is listed again.';

-- Apps list a consumer's rewards newest first; this also serves every lookup by consumer_id.
create index rewards_consumer_created_idx on rewards (consumer_id, created_at desc);

create table reward_status_changes (
  id bigint generated always as identity primary key,
  reward_id uuid not null references rewards (id),
  consumer_id text collate "C" not null references consumers (consumer_id),
  old_status text not null,
  new_status text not null,
  old_consumer_status text not null,
  new_consumer_status text not null,
  observed_at timestamptz not null
);

comment on table reward_status_changes is
  'One row per observed change of a reward''s status or consumer_status. The first sighting of a reward is not a change.';
comment on column reward_status_changes.id is 'Increasing id, in the order the changes were recorded.';
comment on column reward_status_changes.reward_id is 'The reward that changed.';
comment on column reward_status_changes.consumer_id is 'Consumer of the reward.';
comment on column reward_status_changes.old_status is 'status before the change.';
comment on column reward_status_changes.new_status is 'status after the change.';
comment on column reward_status_changes.old_consumer_status is 'consumer_status before the change.';
comment on column reward_status_changes.new_consumer_status is 'consumer_status after the change.';
comment on column reward_status_changes.observed_at is
  'When the API page showing the new status was read.';

create index reward_status_changes_reward_idx on reward_status_changes (reward_id, observed_at);
create index reward_status_changes_observed_idx on reward_status_changes (observed_at);
