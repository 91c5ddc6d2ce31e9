-- claim_waiting_signups takes whether the caller can derive consumer ids (repeatable file): the
-- one-argument edition goes. A replica of an older build fails its drain until it is replaced;
-- its rows wait for the others.
drop function if exists claim_waiting_signups(int);
