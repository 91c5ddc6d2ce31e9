-- The not-enrolled mark (consumers.not_enrolled_at) follows the newest word of the API: it is
-- stamped with the time before the refused sync's first request and is not set over an
-- enrollment or a successful sync newer than that (store/consumers.ts); a later successful sync
-- clears it (write_reward_pages, migrations/repeatable/).

comment on column consumers.not_enrolled_at is
  'When a request the API answered with ERR-404-02 (consumer not enrolled) was sent; cleared by a later enrollment or successful sync. Such consumers are not reconciled.';
