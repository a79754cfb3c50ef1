-- readyprobe canary schema and least-privilege probe identity for the `mysql` probe kind.
--
-- Run once on the writer of each branch (as an administrator). The table holds one row per
-- (prober_id, branch): every attempt upserts its row with a fresh marker, so the table never grows
-- beyond the number of prober instances times branches (plus one row per prober, branch
-- '~stable_name', for the stable-name probe's end-to-end attempt when it is enabled).
--
-- Replace @PASSWORD@ with the probe secret (the value readyprobe reads from `password = { env = ... }`).
-- The identity has no SUPER / READ ONLY ADMIN privilege on purpose: such privileges bypass
-- `read_only`, and the probe must see exactly what the application sees.

CREATE DATABASE IF NOT EXISTS readyprobe;

CREATE TABLE IF NOT EXISTS readyprobe.canary (
  prober_id   VARCHAR(64)     NOT NULL COMMENT 'readyprobe instance id (prober_id)',
  branch      VARCHAR(64)     NOT NULL COMMENT 'branch name from the config',
  marker      CHAR(32)        NOT NULL COMMENT 'fresh random marker of the last attempt (hex)',
  seq         BIGINT UNSIGNED NOT NULL COMMENT 'attempt sequence number of that prober and branch',
  observed_at DATETIME(3)     NOT NULL COMMENT 'UTC time the attempt wrote the row',
  PRIMARY KEY (prober_id, branch)
) ENGINE = InnoDB;

CREATE USER IF NOT EXISTS 'readyprobe'@'%' IDENTIFIED BY '@PASSWORD@';
GRANT SELECT, INSERT, UPDATE ON readyprobe.canary TO 'readyprobe'@'%';
