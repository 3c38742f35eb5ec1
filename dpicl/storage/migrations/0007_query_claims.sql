-- 0007: claims on pending queries, so that any number of runs (processes, machines) drain one backlog together
-- without answering, or paying for, a query twice (dpicl/storage/queries.py, `claim_pending`). A claim names the
-- run that holds it and lasts until `claimed_until` (seconds since the epoch, the claiming machine's clock); the
-- run renews its claims while it works, so the claims of a run that died expire and other runs take them over.
ALTER TABLE queries ADD COLUMN claimed_by VARCHAR;
ALTER TABLE queries ADD COLUMN claimed_until DOUBLE;
