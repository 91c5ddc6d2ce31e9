-- rewards.consumer_id keeps no foreign key: its check, a trigger that looks the consumer up
-- under a key-share lock for each row, was about a ninth of the page statement's database time
-- on a first sync (bench/README, scenario 1). What it guaranteed still holds: write_reward_pages,
-- the only writer of rewards, upserts the consumer row of each page it writes in the same
-- statement, and ON CONFLICT locks that row to commit; no code deletes a consumer. To erase one
-- by hand, delete its reward_status_changes and rewards first.

alter table rewards drop constraint rewards_consumer_id_fkey;

comment on column rewards.consumer_id is
  'Consumer the reward belongs to: a consumers row, written by the same statement (no foreign key: migration 000009).';
