-- readyprobe canary schema and least-privilege probe role for the `postgres` probe kind.
--
-- Run once on the writer of each branch, as an administrator, with psql (the `\connect` line is
-- psql's): `psql -v ON_ERROR_STOP=1 -f postgres-canary.sql`. The table holds one row per
-- (prober_id, branch): every attempt upserts its row with a fresh marker, so the table never grows
-- beyond the number of prober instances times branches (plus one row per prober, branch
-- '~stable_name', for the stable-name probe's end-to-end attempt when it is enabled).
--
-- Replace @PASSWORD@ with the probe secret (the value readyprobe reads from `password = { env = ... }`).
-- The password is stored as a SCRAM-SHA-256 verifier (password_encryption's default). The role
-- may connect to the canary database and select, insert and update the canary table, nothing
-- else: no superuser, no role that could leave a read-only transaction, so the probe sees exactly
-- what the application sees.

CREATE ROLE readyprobe LOGIN PASSWORD '@PASSWORD@'
  NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT NOREPLICATION NOBYPASSRLS CONNECTION LIMIT 10;

CREATE DATABASE readyprobe;
REVOKE ALL ON DATABASE readyprobe FROM PUBLIC;
GRANT CONNECT ON DATABASE readyprobe TO readyprobe;

\connect readyprobe

REVOKE ALL ON SCHEMA public FROM PUBLIC;
GRANT USAGE ON SCHEMA public TO readyprobe;

CREATE TABLE public.canary (
  prober_id   varchar(64) NOT NULL,
  branch      varchar(64) NOT NULL,
  marker      char(32)    NOT NULL,
  seq         bigint      NOT NULL,
  observed_at timestamptz NOT NULL,
  PRIMARY KEY (prober_id, branch)
);
COMMENT ON TABLE public.canary IS 'readyprobe: one row per (prober_id, branch), upserted by every attempt';
COMMENT ON COLUMN public.canary.marker IS 'fresh random marker of the last attempt (hex)';
COMMENT ON COLUMN public.canary.seq IS 'attempt sequence number of that prober and branch';

-- The upsert (INSERT ... ON CONFLICT (prober_id, branch) DO UPDATE) needs SELECT on the conflict
-- columns and UPDATE on the columns it sets; the read-back needs SELECT.
GRANT SELECT, INSERT, UPDATE ON public.canary TO readyprobe;
