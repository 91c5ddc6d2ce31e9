-- The three-argument write_reward_pages (no events) that builds before 000005 called.
drop function if exists write_reward_pages(jsonb, jsonb, uuid[]);
