/**
 * The SQLite schema, as an ordered list of migrations. A migration is never edited once
 * released: a change is a new entry with the next version. `sqlite.ts` applies the pending
 * ones in one transaction and records each version in `schema_migrations`.
 *
 * Times are epoch milliseconds (INTEGER); JSON columns hold TEXT. Tables are STRICT so a
 * wrongly typed value fails loudly instead of being stored as whatever SQLite coerces.
 */
import type { Migration } from './rows.ts'

/** Every pats column but last_used_at (migration 7's trigger; see there). */
const PAT_CHANGE_COLUMNS = `id, token_hash, tenant_id, subject, name, permissions, last4,
  created_at, expires_at, revoked_at, rotated_from, superseded_at, grace_until`
/** The columns migration 10 added to pats (keys as a product), logged from then on. */
const PAT_KEY_COLUMNS = 'disabled_at, rate_limit, quota, metadata, external_id'

/**
 * A trigger that logs `kind` with `subject` (an expression over NEW or OLD) in change_log
 * after `event` (e.g. `DELETE ON pats`). Generated once per shipped migration: the SQL it
 * yields for a version never changes.
 */
function logged(name: string, event: string, kind: string, subject: string): string {
  return `CREATE TRIGGER ${name}_logged AFTER ${event}
      BEGIN
        INSERT INTO change_log (kind, subject, at)
        VALUES ('${kind}', ${subject}, CAST(unixepoch('subsec') * 1000 AS INTEGER));
      END;`
}

export const sqliteMigrations: readonly Migration[] = [
  {
    version: 1,
    sql: `
      CREATE TABLE tenants (
        id         TEXT PRIMARY KEY,
        name       TEXT NOT NULL,
        enabled    INTEGER NOT NULL DEFAULT 1 CHECK (enabled IN (0, 1)),
        created_at INTEGER NOT NULL
      ) STRICT;

      -- token_hash is UNIQUE, which gives the index authentication looks tokens up by.
      CREATE TABLE pats (
        id           TEXT PRIMARY KEY,
        token_hash   TEXT NOT NULL UNIQUE,
        tenant_id    TEXT NOT NULL REFERENCES tenants (id),
        subject      TEXT NOT NULL,
        name         TEXT NOT NULL,
        permissions  TEXT NOT NULL,
        last4        TEXT NOT NULL,
        created_at   INTEGER NOT NULL,
        expires_at   INTEGER,
        revoked_at   INTEGER,
        last_used_at INTEGER,
        rotated_from TEXT
      ) STRICT;
      CREATE INDEX pats_by_tenant_newest ON pats (tenant_id, created_at DESC, id DESC);

      CREATE TABLE issuers (
        issuer     TEXT PRIMARY KEY,
        config     TEXT NOT NULL,
        created_at INTEGER NOT NULL
      ) STRICT;

      -- No foreign key on tenant_id: failed authentications name tenants that may not exist.
      CREATE TABLE audit_events (
        id             TEXT PRIMARY KEY,
        time           INTEGER NOT NULL,
        type           TEXT NOT NULL,
        tenant_id      TEXT,
        actor          TEXT,
        outcome        TEXT NOT NULL,
        client_address TEXT,
        request_id     TEXT,
        details        TEXT NOT NULL
      ) STRICT;
      CREATE INDEX audit_events_by_tenant_newest ON audit_events (tenant_id, time DESC, id DESC);
    `,
  },
  {
    // PAT rotation with a grace period (issue #7): the old token records when it was
    // replaced and until when it keeps working; families are walked by rotated_from.
    version: 2,
    sql: `
      ALTER TABLE pats ADD COLUMN superseded_at INTEGER;
      ALTER TABLE pats ADD COLUMN grace_until INTEGER;
      CREATE INDEX pats_by_rotated_from ON pats (rotated_from) WHERE rotated_from IS NOT NULL;
    `,
  },
  {
    // Webhook delivery outbox (issue #7): appendAudit queues each new event here in the same
    // transaction, so an event is stored exactly when it is queued; delivered rows are
    // deleted. seq (the rowid) orders delivery; claimed_until is a worker's lease.
    version: 3,
    sql: `
      CREATE TABLE event_outbox (
        seq             INTEGER PRIMARY KEY,
        event_id        TEXT NOT NULL UNIQUE REFERENCES audit_events (id) ON DELETE CASCADE,
        attempts        INTEGER NOT NULL DEFAULT 0,
        next_attempt_at INTEGER NOT NULL DEFAULT 0,
        claimed_until   INTEGER,
        last_error      TEXT
      ) STRICT;
      CREATE INDEX event_outbox_due ON event_outbox (next_attempt_at, seq);
    `,
  },
  {
    // Tenant-less events (every 401: nothing proves a tenant) leave the tenant index. They
    // are the bulk of a flood of failed authentications, and each one cost an insert into
    // this index that no query reads: listAudit filters `tenant_id = ?`, which implies
    // NOT NULL, so the partial index still serves it (test/stores/sqlite.test.ts checks
    // the plan). Same name and columns; rebuilding it reads the table once.
    version: 4,
    sql: `
      DROP INDEX audit_events_by_tenant_newest;
      CREATE INDEX audit_events_by_tenant_newest ON audit_events (tenant_id, time DESC, id DESC)
        WHERE tenant_id IS NOT NULL;
    `,
  },
  {
    // Admin tokens (issue #16): operator credentials for the admin API and console, kept
    // apart from PATs (another prefix, another table), stored by SHA-256 only.
    version: 6,
    sql: `
      CREATE TABLE admin_tokens (
        id         TEXT PRIMARY KEY,
        token_hash TEXT NOT NULL UNIQUE,
        name       TEXT NOT NULL,
        role       TEXT NOT NULL CHECK (role IN ('read-only', 'operator')),
        last4      TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        expires_at INTEGER NOT NULL,
        revoked_at INTEGER
      ) STRICT;
    `,
  },
  {
    // The change log (issue #25), as in Postgres: triggers log every change other processes
    // may have cached (the CLI and every worker write the same file), and each process
    // follows the log by sequence. AUTOINCREMENT: a number is never reused, even once the
    // newest rows are pruned. SQLite has no generic row comparison, so the pats trigger lists
    // every column but last_used_at (write-behind): a migration that adds a column to pats
    // must recreate it (test/stores/contract.ts updates every column and checks the log).
    version: 7,
    sql: `
      CREATE TABLE change_log (
        seq     INTEGER PRIMARY KEY AUTOINCREMENT,
        kind    TEXT NOT NULL,
        subject TEXT NOT NULL,
        at      INTEGER NOT NULL
      ) STRICT;

      ${logged('pats_updated', `UPDATE OF ${PAT_CHANGE_COLUMNS} ON pats`, 'pat', 'NEW.token_hash')}
      ${logged('pats_deleted', 'DELETE ON pats', 'pat', 'OLD.token_hash')}
      ${logged('tenants_inserted', 'INSERT ON tenants', 'tenant', 'NEW.id')}
      ${logged('tenants_updated', 'UPDATE ON tenants', 'tenant', 'NEW.id')}
      ${logged('tenants_deleted', 'DELETE ON tenants', 'tenant', 'OLD.id')}
      ${logged('issuers_inserted', 'INSERT ON issuers', 'issuer', 'NEW.issuer')}
      ${logged('issuers_updated', 'UPDATE ON issuers', 'issuer', 'NEW.issuer')}
      ${logged('issuers_deleted', 'DELETE ON issuers', 'issuer', 'OLD.issuer')}
    `,
  },
  {
    // Console sessions in the store (issue #25); see the Postgres migration 8.
    version: 8,
    sql: `
      CREATE TABLE console_sessions (
        id_hash    TEXT PRIMARY KEY,
        credential TEXT NOT NULL,
        operator   TEXT NOT NULL,
        csrf       TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        expires_at INTEGER NOT NULL,
        last_seen  INTEGER NOT NULL,
        flash      TEXT,
        notice     TEXT
      ) STRICT;
      CREATE INDEX console_sessions_credential ON console_sessions (credential, created_at);
    `,
  },
  {
    // The gateway policy in the store (issue #25); see the Postgres migration 9.
    version: 9,
    sql: `
      CREATE TABLE policies (
        name       TEXT PRIMARY KEY,
        text       TEXT NOT NULL,
        updated_at INTEGER NOT NULL
      ) STRICT;
      ${logged('policies_inserted', 'INSERT ON policies', 'policy', 'NEW.name')}
      ${logged('policies_updated', 'UPDATE ON policies', 'policy', 'NEW.name')}
      ${logged('policies_deleted', 'DELETE ON policies', 'policy', 'OLD.name')}
    `,
  },
  {
    // Keys as a product (issue #24): a PAT may be disabled without being revoked, and carries
    // its own rate limit and quota (JSON), operator metadata (JSON) and an external id
    // (searchable); a tenant may carry its own rate limit. Quota counts live apart from the
    // token row, one row per counter (the rotation family's first token id): a period's
    // start and the uses reserved in it; last_grant is what the latest reservation granted
    // (an UPSERT's RETURNING sees only the new row).
    version: 10,
    sql: `
      ALTER TABLE pats ADD COLUMN disabled_at INTEGER;
      ALTER TABLE pats ADD COLUMN rate_limit TEXT;
      ALTER TABLE pats ADD COLUMN quota TEXT;
      ALTER TABLE pats ADD COLUMN metadata TEXT;
      ALTER TABLE pats ADD COLUMN external_id TEXT;
      CREATE INDEX pats_by_external_id ON pats (external_id, created_at DESC, id DESC)
        WHERE external_id IS NOT NULL;
      ALTER TABLE tenants ADD COLUMN rate_limit TEXT;
      CREATE TABLE quota_usage (
        counter      TEXT PRIMARY KEY,
        period_start INTEGER NOT NULL,
        used         INTEGER NOT NULL,
        last_grant   INTEGER NOT NULL DEFAULT 0
      ) STRICT;
      -- The change log's pats trigger names its columns: the new ones are logged too.
      DROP TRIGGER pats_updated_logged;
      ${logged('pats_updated', `UPDATE OF ${PAT_CHANGE_COLUMNS}, ${PAT_KEY_COLUMNS} ON pats`, 'pat', 'NEW.token_hash')}
    `,
  },
  {
    // Usage analytics (issue #24): requests by outcome per key ('key', subject = token id,
    // with its tenant), per tenant and in all ('all', subject ''), in minute, hour and day
    // buckets, added to by every instance's write-behind. Retention deletes by resolution
    // and age, and the audit log by time (hence its time index).
    version: 11,
    sql: `
      CREATE TABLE usage_counts (
        scope        TEXT NOT NULL CHECK (scope IN ('key', 'tenant', 'all')),
        subject      TEXT NOT NULL,
        resolution   TEXT NOT NULL CHECK (resolution IN ('minute', 'hour', 'day')),
        bucket_start INTEGER NOT NULL,
        tenant_id    TEXT,
        allowed      INTEGER NOT NULL DEFAULT 0,
        unauthorized INTEGER NOT NULL DEFAULT 0,
        forbidden    INTEGER NOT NULL DEFAULT 0,
        limited      INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (scope, subject, resolution, bucket_start)
      ) STRICT, WITHOUT ROWID;
      CREATE INDEX usage_counts_by_tenant_key ON usage_counts (tenant_id, resolution, bucket_start)
        WHERE scope = 'key';
      CREATE INDEX usage_counts_by_age ON usage_counts (resolution, bucket_start);
      CREATE INDEX audit_events_by_time ON audit_events (time);
    `,
  },
  {
    // Quota generations (issue #31): a reset moves the counter to a new generation instead
    // of deleting it, and a release names the generation it reserved in, so uses reserved
    // before a reset and given back after it never lower the new count.
    version: 12,
    sql: `ALTER TABLE quota_usage ADD COLUMN generation INTEGER NOT NULL DEFAULT 0;`,
  },
  {
    // Usage counts applied once (issue #32): each write of a journaled segment's counts
    // carries a mark recorded in the same transaction, so a replay after a kill skips what
    // was stored before it (stores/usage-journal.ts). Pruned with the minute buckets.
    version: 13,
    sql: `
      CREATE TABLE usage_applied (
        mark TEXT PRIMARY KEY,
        applied_at INTEGER NOT NULL
      ) STRICT, WITHOUT ROWID;
      CREATE INDEX usage_applied_by_age ON usage_applied (applied_at);
    `,
  },
  {
    // JWT revocation rules (issue #34): one per (issuer, kind, value), deleted by retention
    // once expired; every write is logged so each instance's in-memory set follows.
    version: 14,
    sql: `
      CREATE TABLE jwt_revocations (
        id            TEXT PRIMARY KEY,
        issuer        TEXT NOT NULL,
        kind          TEXT NOT NULL CHECK (kind IN ('jti', 'sid', 'sub', 'tenant')),
        value         TEXT NOT NULL,
        issued_before INTEGER,
        reason        TEXT,
        created_at    INTEGER NOT NULL,
        created_by    TEXT,
        expires_at    INTEGER NOT NULL,
        UNIQUE (issuer, kind, value)
      ) STRICT;
      CREATE INDEX jwt_revocations_by_expiry ON jwt_revocations (expires_at);
      ${logged('jwt_revocations_inserted', 'INSERT ON jwt_revocations', 'jwt_revocation', 'NEW.id')}
      ${logged('jwt_revocations_updated', 'UPDATE ON jwt_revocations', 'jwt_revocation', 'NEW.id')}
      ${logged('jwt_revocations_deleted', 'DELETE ON jwt_revocations', 'jwt_revocation', 'OLD.id')}
    `,
  },
  {
    // SETs received from CAEP/SSF transmitters (issue #34), by (transmitter, jti): a second
    // delivery of one SET is refused as a replay by the insert's row count.
    version: 15,
    sql: `
      CREATE TABLE ssf_received (
        transmitter TEXT NOT NULL,
        jti         TEXT NOT NULL,
        received_at INTEGER NOT NULL,
        expires_at  INTEGER NOT NULL,
        PRIMARY KEY (transmitter, jti)
      ) STRICT, WITHOUT ROWID;
      CREATE INDEX ssf_received_by_expiry ON ssf_received (expires_at);
    `,
  },
  {
    // Outbox destinations (issue #34, the CAEP transmitter): one row per (event, destination).
    // '' is the webhook, as before; every destination listed in outbox_destinations (a CAEP
    // receiver) gets its own row for the event types it takes, in the transaction that stores
    // the event, so each is retried on its own and none waits on another. SQLite cannot drop
    // a UNIQUE constraint: the table is rebuilt, keeping every pending row.
    version: 16,
    sql: `
      CREATE TABLE event_outbox_16 (
        seq             INTEGER PRIMARY KEY,
        event_id        TEXT NOT NULL REFERENCES audit_events (id) ON DELETE CASCADE,
        destination     TEXT NOT NULL DEFAULT '',
        attempts        INTEGER NOT NULL DEFAULT 0,
        next_attempt_at INTEGER NOT NULL DEFAULT 0,
        claimed_until   INTEGER,
        last_error      TEXT,
        UNIQUE (event_id, destination)
      ) STRICT;
      INSERT INTO event_outbox_16 (seq, event_id, attempts, next_attempt_at, claimed_until, last_error)
        SELECT seq, event_id, attempts, next_attempt_at, claimed_until, last_error FROM event_outbox;
      DROP TABLE event_outbox;
      ALTER TABLE event_outbox_16 RENAME TO event_outbox;
      CREATE INDEX event_outbox_due ON event_outbox (destination, next_attempt_at, seq);
      CREATE TABLE outbox_destinations (
        name        TEXT PRIMARY KEY,
        event_types TEXT NOT NULL
      ) STRICT;
    `,
  },
  {
    // Certificate-bound PATs (issue #33, RFC 8705): the x5t#S256 thumbprint of the one client
    // certificate the key may be used with; NULL: not bound. The change log's pats trigger
    // names its columns, so it is made again with the new one.
    version: 17,
    sql: `
      ALTER TABLE pats ADD COLUMN certificate_thumbprint TEXT;
      DROP TRIGGER pats_updated_logged;
      ${logged('pats_updated', `UPDATE OF ${PAT_CHANGE_COLUMNS}, ${PAT_KEY_COLUMNS}, certificate_thumbprint ON pats`, 'pat', 'NEW.token_hash')}
    `,
  },
]
