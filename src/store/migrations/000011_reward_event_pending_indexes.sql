-- claim_reward_event_pending reads the consumers not handed to a delivery job (in consumer
-- order) and the marks older than 10 minutes (oldest first) by index: without one, every claim
-- (every 500 ms on each replica) read and sorted the whole table, a million rows after a
-- first sync of a million consumers with webhooks on.
create index reward_event_pending_waiting_idx on reward_event_pending (consumer_id)
  where dispatched_at is null;
create index reward_event_pending_dispatched_idx on reward_event_pending (dispatched_at)
  where dispatched_at is not null;
