-- The not-enrolled mark (consumers.not_enrolled_at) follows the newest word of the API:
-- - it is stamped with the time the refused request was sent, and is not set when an
--   enrollment or a successful sync is newer than that (store/consumers.ts);
-- - a successful sync whose last request went out after the mark was stamped clears it, so the
--   consumer rejoins reconciliation. This trigger does that on the sync's own update of
--   last_synced_at (write_reward_pages), at no extra statement.

create function clear_not_enrolled_on_sync() returns trigger
language plpgsql
as $function$
begin
  new.not_enrolled_at := null;
  return new;
end
$function$;

create trigger consumers_clear_not_enrolled
before update of last_synced_at on consumers
for each row
when (new.not_enrolled_at is not null and new.last_synced_at > new.not_enrolled_at)
execute function clear_not_enrolled_on_sync();

comment on column consumers.not_enrolled_at is
  'When a request the API answered with ERR-404-02 (consumer not enrolled) was sent; cleared by a later enrollment or successful sync. Such consumers are not reconciled.';
