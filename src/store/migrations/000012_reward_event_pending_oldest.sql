-- reward_event_lag() found the oldest undelivered event by a probe per pending consumer, at
-- every /metrics scrape: seconds of database time with a million consumers pending. Each mark
-- now keeps when its consumer's oldest undelivered event was recorded, so the lag is read from
-- one index. Kept by: the write recording an event (its events' least created_at), the cursor's
-- moves (advance_reward_event_cursor: the next event's time) and replay_reward_events.
-- The backfill probes each pending consumer once, as the lag did at each scrape, and rewrites
-- the rows whose consumer has events left, with the table locked: writes that record events wait
-- for it (seconds per 100,000 such rows).
alter table reward_event_pending add column oldest_at timestamptz not null default now();

update reward_event_pending p
   set oldest_at = e.created_at
  from (select q.consumer_id,
               (select e.created_at from reward_events e
                 where e.consumer_id = q.consumer_id
                   and e.id > coalesce((select c.delivered_through from reward_event_cursors c
                                         where c.consumer_id = q.consumer_id), 0)
                 order by e.id limit 1) as created_at
          from reward_event_pending q) e
 where e.consumer_id = p.consumer_id and e.created_at is not null;

create index reward_event_pending_oldest_idx on reward_event_pending (oldest_at);

comment on column reward_event_pending.oldest_at is
  'When the consumer''s oldest event not yet delivered was recorded, as of the last write, delivery or replay of its events; older (never newer) while a delivery job finds nothing left, until the mark is dropped.';
