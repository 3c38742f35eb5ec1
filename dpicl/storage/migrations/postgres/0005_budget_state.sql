-- 0005: each budget's composed state, updated in the transaction that writes its ledger entries, so that a
-- reservation costs the same however long the ledger is (dpicl/privacy/accounting/composed.py). The ledger stays
-- the record; `dpicl budget verify` recomputes ε from it and compares.

-- How many times each distinct event (its stored JSON) was charged to a dataset.
CREATE TABLE budget_events (
    dataset  VARCHAR NOT NULL,
    event    VARCHAR NOT NULL,
    count    BIGINT NOT NULL CHECK (count > 0),
    PRIMARY KEY (dataset, event)
);
INSERT INTO budget_events SELECT dataset, CAST(event AS VARCHAR), count(*) FROM ledger GROUP BY dataset, CAST(event AS VARCHAR);

-- The ε the last reservation recorded (a sound bound of the state); NULL until the first reservation after this
-- migration, which computes it from the whole state.
CREATE TABLE budget_spent (
    dataset  VARCHAR PRIMARY KEY,
    epsilon  DOUBLE PRECISION
);
INSERT INTO budget_spent SELECT dataset, NULL FROM budgets;

-- PRV bounds of states: ε of (the state named by base_key, i.e. every event but one) + `count` × that event.
-- Derived from public events only; a cache that is never wrong, only looser, when it covers a smaller state.
CREATE TABLE prv_bounds (
    dataset   VARCHAR NOT NULL,
    base_key  VARCHAR NOT NULL,
    event_key VARCHAR NOT NULL,
    count     BIGINT NOT NULL,
    epsilon   DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (dataset, base_key, event_key, count)
);
