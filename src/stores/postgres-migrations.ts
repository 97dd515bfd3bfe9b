/**
 * The Postgres schema, as ordered migrations. Applied by `PostgresStore.migrate()` in one
 * transaction under an advisory lock (see `postgres.ts`), so a version is recorded in
 * `schema_migrations` exactly when its DDL committed. Append new versions; never edit one
 * that has shipped.
 *
 * The logical schema matches the SQLite store: times are bigint epoch milliseconds (what
 * the `Store` interface speaks, and no time-zone conversions), PATs are found by a unique
 * index on their SHA-256, lists are served newest first by `(tenant, time, id)` indexes.
 * Ids are `COLLATE "C"` so keyset pagination orders ties by bytes, as SQLite does, whatever
 * the database's default collation.
 */

import type { Migration } from './rows.ts'

/** Each step's `sql` may hold several statements; it must be valid in a transaction. */
export const postgresMigrations: readonly Migration[] = [
  {
    version: 1,
    sql: `
      CREATE TABLE tenants (
        id text COLLATE "C" PRIMARY KEY,
        name text NOT NULL,
        enabled boolean NOT NULL DEFAULT true,
        created_at bigint NOT NULL
      );

      CREATE TABLE pats (
        id text COLLATE "C" PRIMARY KEY,
        token_hash text COLLATE "C" NOT NULL,
        tenant_id text COLLATE "C" NOT NULL REFERENCES tenants (id),
        subject text NOT NULL,
        name text NOT NULL,
        permissions text[] NOT NULL,
        last4 text NOT NULL,
        created_at bigint NOT NULL,
        expires_at bigint,
        revoked_at bigint,
        last_used_at bigint,
        rotated_from text COLLATE "C"
      );
      CREATE UNIQUE INDEX pats_token_hash ON pats (token_hash);
      CREATE INDEX pats_tenant_created ON pats (tenant_id, created_at, id);

      CREATE TABLE issuers (
        issuer text COLLATE "C" PRIMARY KEY,
        config jsonb NOT NULL,
        created_at bigint NOT NULL
      );

      -- No foreign key on tenant_id: failed authentications name tenants that may not exist.
      CREATE TABLE audit_events (
        id text COLLATE "C" PRIMARY KEY,
        time bigint NOT NULL,
        type text NOT NULL,
        tenant_id text COLLATE "C",
        actor text,
        outcome text NOT NULL,
        client_address text,
        request_id text,
        details jsonb NOT NULL DEFAULT '{}'
      );
      CREATE INDEX audit_events_tenant_time ON audit_events (tenant_id, time, id);
    `,
  },
  {
    // PAT rotation with a grace period (issue #7): the old token records when it was
    // replaced and until when it keeps working; families are walked by rotated_from.
    version: 2,
    sql: `
      ALTER TABLE pats ADD COLUMN superseded_at bigint;
      ALTER TABLE pats ADD COLUMN grace_until bigint;
      CREATE INDEX pats_rotated_from ON pats (rotated_from) WHERE rotated_from IS NOT NULL;
    `,
  },
  {
    // Webhook delivery outbox (issue #7): appendAudit queues each new event here in the same
    // statement, so an event is stored exactly when it is queued; delivered rows are
    // deleted. seq orders delivery (roughly: ids are taken before commit); claimed_until is
    // a worker's lease, claimed with FOR UPDATE SKIP LOCKED so instances never share a row.
    version: 3,
    sql: `
      CREATE TABLE event_outbox (
        seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        event_id text COLLATE "C" NOT NULL UNIQUE REFERENCES audit_events (id) ON DELETE CASCADE,
        attempts integer NOT NULL DEFAULT 0,
        next_attempt_at bigint NOT NULL DEFAULT 0,
        claimed_until bigint,
        last_error text
      );
      CREATE INDEX event_outbox_due ON event_outbox (next_attempt_at, seq);
    `,
  },
  {
    // Tenant-less events (every 401: nothing proves a tenant) leave the tenant index. They
    // are the bulk of a flood of failed authentications, and each one cost an insert into
    // this index that no query reads: listAudit filters `tenant_id = $1`, which implies
    // NOT NULL (= is strict), so the partial index still serves it, generic plans included
    // (test/stores/postgres.test.ts checks the plan). Same name and columns. Not CONCURRENTLY
    // (migrations run in one transaction): audit writes and lists wait while the index is
    // rebuilt, one pass over audit_events (see docs/scale-out.md).
    version: 4,
    sql: `
      DROP INDEX audit_events_tenant_time;
      CREATE INDEX audit_events_tenant_time ON audit_events (tenant_id, time, id)
        WHERE tenant_id IS NOT NULL;
    `,
  },
  {
    // Admin tokens (issue #16): operator credentials for the admin API and console, kept
    // apart from PATs (another prefix, another table), stored by SHA-256 only.
    version: 6,
    sql: `
      CREATE TABLE admin_tokens (
        id text COLLATE "C" PRIMARY KEY,
        token_hash text COLLATE "C" NOT NULL UNIQUE,
        name text NOT NULL,
        role text NOT NULL CHECK (role IN ('read-only', 'operator')),
        last4 text NOT NULL,
        created_at bigint NOT NULL,
        expires_at bigint NOT NULL,
        revoked_at bigint
      );
    `,
  },
  {
    // The change log (issue #25): every change another instance may have cached gets a
    // sequence number, written by triggers so that any writer (tokengate, an older version
    // during a rolling upgrade, a DBA's SQL) is logged. Instances follow it by sequence;
    // NOTIFY only wakes them. The trigger takes the log's lock before drawing a number, so
    // numbers are drawn in commit order: a reader that has seen N can never later find a
    // smaller number committed (store methods take the same lock first, before any row lock,
    // so two multi-row changes cannot deadlock). A pats update that only moves last_used_at
    // (write-behind) is not a change; every other column, present or added later, is.
    version: 7,
    sql: `
      CREATE TABLE change_log (
        seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        kind text NOT NULL,
        subject text NOT NULL,
        at bigint NOT NULL
      );

      CREATE FUNCTION tokengate_log_change() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        LOCK TABLE change_log IN EXCLUSIVE MODE;
        INSERT INTO change_log (kind, subject, at) VALUES (
          TG_ARGV[0],
          (CASE WHEN TG_OP = 'DELETE' THEN to_jsonb(OLD) ELSE to_jsonb(NEW) END) ->> TG_ARGV[1],
          (extract(epoch FROM clock_timestamp()) * 1000)::bigint);
        PERFORM pg_notify('tokengate_changes', '');
        RETURN NULL;
      END $$;

      CREATE TRIGGER pats_updated_logged AFTER UPDATE ON pats FOR EACH ROW
        WHEN ((to_jsonb(OLD) - 'last_used_at') IS DISTINCT FROM (to_jsonb(NEW) - 'last_used_at'))
        EXECUTE FUNCTION tokengate_log_change('pat', 'token_hash');
      CREATE TRIGGER pats_deleted_logged AFTER DELETE ON pats FOR EACH ROW
        EXECUTE FUNCTION tokengate_log_change('pat', 'token_hash');
      CREATE TRIGGER tenants_updated_logged AFTER UPDATE ON tenants FOR EACH ROW
        WHEN (OLD IS DISTINCT FROM NEW)
        EXECUTE FUNCTION tokengate_log_change('tenant', 'id');
      CREATE TRIGGER tenants_written_logged AFTER INSERT OR DELETE ON tenants FOR EACH ROW
        EXECUTE FUNCTION tokengate_log_change('tenant', 'id');
      CREATE TRIGGER issuers_logged AFTER INSERT OR UPDATE OR DELETE ON issuers FOR EACH ROW
        EXECUTE FUNCTION tokengate_log_change('issuer', 'issuer');
    `,
  },
  {
    // Console sessions in the store (issue #25), so that any instance serves any page: the
    // cookie's SHA-256 only, the operator it signed in, its CSRF token, and a one-shot
    // notice and flash (a new token, sealed with a key derived from the cookie: the store
    // alone cannot open it). Capped per credential by insertSession.
    version: 8,
    sql: `
      CREATE TABLE console_sessions (
        id_hash text COLLATE "C" PRIMARY KEY,
        credential text COLLATE "C" NOT NULL,
        operator jsonb NOT NULL,
        csrf text NOT NULL,
        created_at bigint NOT NULL,
        expires_at bigint NOT NULL,
        last_seen bigint NOT NULL,
        flash text,
        notice jsonb
      );
      CREATE INDEX console_sessions_credential ON console_sessions (credential, created_at);
    `,
  },
  {
    // The gateway policy may live in the store (issue #25): one row per policy name, written
    // by `tokengate policy set` or `apply`; the change log tells every instance to reload.
    version: 9,
    sql: `
      CREATE TABLE policies (
        name text COLLATE "C" PRIMARY KEY,
        text text NOT NULL,
        updated_at bigint NOT NULL
      );
      CREATE TRIGGER policies_logged AFTER INSERT OR UPDATE OR DELETE ON policies FOR EACH ROW
        EXECUTE FUNCTION tokengate_log_change('policy', 'name');
    `,
  },
  {
    // Keys as a product (issue #24): a PAT may be disabled without being revoked, and carries
    // its own rate limit and quota, operator metadata and an external id (searchable); a
    // tenant may carry its own rate limit. Quota counts live apart from the token row, one
    // row per counter (the rotation family's first token id); last_grant is what the latest
    // reservation granted (RETURNING sees only the new row). Adding nullable columns is a
    // catalogue change only: no table rewrite.
    version: 10,
    sql: `
      ALTER TABLE pats ADD COLUMN disabled_at bigint;
      ALTER TABLE pats ADD COLUMN rate_limit jsonb;
      ALTER TABLE pats ADD COLUMN quota jsonb;
      ALTER TABLE pats ADD COLUMN metadata jsonb;
      ALTER TABLE pats ADD COLUMN external_id text COLLATE "C";
      CREATE INDEX pats_external_id ON pats (external_id, created_at, id)
        WHERE external_id IS NOT NULL;
      ALTER TABLE tenants ADD COLUMN rate_limit jsonb;
      CREATE TABLE quota_usage (
        counter text COLLATE "C" PRIMARY KEY,
        period_start bigint NOT NULL,
        used bigint NOT NULL,
        last_grant bigint NOT NULL DEFAULT 0
      );
    `,
  },
  {
    // Usage analytics (issue #24): requests by outcome per key, per tenant and in all, in
    // minute, hour and day buckets, added to by every instance's write-behind. Retention
    // deletes by resolution and age, and the audit log by time (hence its time index; not
    // CONCURRENTLY, as migrations run in one transaction: one pass over audit_events).
    version: 11,
    sql: `
      CREATE TABLE usage_counts (
        scope text NOT NULL CHECK (scope IN ('key', 'tenant', 'all')),
        subject text COLLATE "C" NOT NULL,
        resolution text NOT NULL CHECK (resolution IN ('minute', 'hour', 'day')),
        bucket_start bigint NOT NULL,
        tenant_id text COLLATE "C",
        allowed bigint NOT NULL DEFAULT 0,
        unauthorized bigint NOT NULL DEFAULT 0,
        forbidden bigint NOT NULL DEFAULT 0,
        limited bigint NOT NULL DEFAULT 0,
        PRIMARY KEY (scope, subject, resolution, bucket_start)
      );
      CREATE INDEX usage_counts_tenant_key ON usage_counts (tenant_id, resolution, bucket_start)
        WHERE scope = 'key';
      CREATE INDEX usage_counts_age ON usage_counts (resolution, bucket_start);
      CREATE INDEX audit_events_time ON audit_events (time);
    `,
  },
  {
    // Quota generations (issue #31): a reset moves the counter to a new generation instead
    // of deleting it, and a release names the generation it reserved in, so uses reserved
    // before a reset and given back after it never lower the new count.
    version: 12,
    sql: `ALTER TABLE quota_usage ADD COLUMN generation bigint NOT NULL DEFAULT 0;`,
  },
  {
    // Usage counts applied once (issue #32): each write of a journaled segment's counts
    // carries a mark recorded in the same transaction, so a replay after a kill skips what
    // was stored before it (stores/usage-journal.ts). Pruned with the minute buckets.
    version: 13,
    sql: `
      CREATE TABLE usage_applied (
        mark text PRIMARY KEY,
        applied_at bigint NOT NULL
      );
      CREATE INDEX usage_applied_by_age ON usage_applied (applied_at);
    `,
  },
  {
    // JWT revocation rules (issue #34): one per (issuer, kind, value), deleted by retention
    // once expired; every write is logged so each instance's in-memory set follows.
    version: 14,
    sql: `
      CREATE TABLE jwt_revocations (
        id text COLLATE "C" PRIMARY KEY,
        issuer text COLLATE "C" NOT NULL,
        kind text NOT NULL CHECK (kind IN ('jti', 'sid', 'sub', 'tenant')),
        value text COLLATE "C" NOT NULL,
        issued_before bigint,
        reason text,
        created_at bigint NOT NULL,
        created_by text,
        expires_at bigint NOT NULL,
        UNIQUE (issuer, kind, value)
      );
      CREATE INDEX jwt_revocations_expiry ON jwt_revocations (expires_at);
      CREATE TRIGGER jwt_revocations_logged
        AFTER INSERT OR UPDATE OR DELETE ON jwt_revocations FOR EACH ROW
        EXECUTE FUNCTION tokengate_log_change('jwt_revocation', 'id');
    `,
  },
  {
    // SETs received from CAEP/SSF transmitters (issue #34), by (transmitter, jti): a second
    // delivery of one SET, to any instance, is refused as a replay by the insert's row count.
    // Kept until the SET could no longer be accepted anyway (its iat + the age bound).
    version: 15,
    sql: `
      CREATE TABLE ssf_received (
        transmitter text COLLATE "C" NOT NULL,
        jti text COLLATE "C" NOT NULL,
        received_at bigint NOT NULL,
        expires_at bigint NOT NULL,
        PRIMARY KEY (transmitter, jti)
      );
      CREATE INDEX ssf_received_expiry ON ssf_received (expires_at);
    `,
  },
  {
    // Outbox destinations (issue #34, the CAEP transmitter): one row per (event, destination).
    // '' is the webhook, as before; every destination listed in outbox_destinations (a CAEP
    // receiver) gets its own row for the event types it takes, in the transaction that stores
    // the event, so each is retried on its own and none waits on another.
    version: 16,
    sql: `
      ALTER TABLE event_outbox ADD COLUMN destination text COLLATE "C" NOT NULL DEFAULT '';
      ALTER TABLE event_outbox DROP CONSTRAINT event_outbox_event_id_key;
      ALTER TABLE event_outbox ADD CONSTRAINT event_outbox_event_destination
        UNIQUE (event_id, destination);
      DROP INDEX event_outbox_due;
      CREATE INDEX event_outbox_due ON event_outbox (destination, next_attempt_at, seq);
      CREATE TABLE outbox_destinations (
        name text COLLATE "C" PRIMARY KEY,
        event_types text NOT NULL
      );
    `,
  },
  {
    // Certificate-bound PATs (issue #33, RFC 8705): the x5t#S256 thumbprint of the one client
    // certificate the key may be used with; NULL: not bound. The change log's trigger compares
    // whole rows, so it logs an edit of this column as it is.
    version: 17,
    sql: `
      ALTER TABLE pats ADD COLUMN certificate_thumbprint text COLLATE "C";
    `,
  },
]
