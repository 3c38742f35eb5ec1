-- Runs once, when the postgres service initialises its data volume: the database the dpicl workers share (their
-- DPICL_DB in compose.yaml). dpicl creates its tables on the first connection. Prefect keeps its own database.
CREATE DATABASE dpicl;
