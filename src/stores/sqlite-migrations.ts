/**
 * The SQLite schema, as an ordered list of migrations. A migration is never edited once
 * released: a change is a new entry with the next version. `sqlite.ts` applies the pending
 * ones in one transaction and records each version in `schema_migrations`.
 *
 * Times are epoch milliseconds (INTEGER); JSON columns hold TEXT. Tables are STRICT so a
 * wrongly typed value fails loudly instead of being stored as whatever SQLite coerces.
 */
import type { Migration } from './rows.ts'

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
    // Keys as a product (issue #24): a PAT may be disabled without being revoked, and carries
    // its own rate limit and quota (JSON), operator metadata (JSON) and an external id
    // (searchable); a tenant may carry its own rate limit. Quota counts live apart from the
    // token row, one row per counter (the rotation family's first token id): a period's
    // start and the uses reserved in it; last_grant is what the latest reservation granted
    // (an UPSERT's RETURNING sees only the new row).
    version: 7,
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
    `,
  },
  {
    // Usage analytics (issue #24): requests by outcome per key ('key', subject = token id,
    // with its tenant), per tenant and in all ('all', subject ''), in minute, hour and day
    // buckets, added to by every instance's write-behind. Retention deletes by resolution
    // and age, and the audit log by time (hence its time index).
    version: 8,
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
]
