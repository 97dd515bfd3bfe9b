/**
 * Issue #31: our dialect layer (src/stores/sql/*) or a query builder (Kysely) for the store's
 * SQL? CPU time of this process per hot statement, over the same driver and database:
 * - `ours`: the store's method (SQL written once, SQLite's rewrite prepared once);
 * - `kysely`: Kysely builds and compiles the statement on every call (as application code
 *   written with it would), then runs it through its driver;
 * - `kysely-once`: the statement compiled once, each call only its parameters
 *   (`executeQuery(CompiledQuery.raw(sql, params))`): Kysely's floor;
 * - SQLite only, `kysely-stock`: Kysely's own SqliteDialect over a better-sqlite3-shaped shim
 *   of node:sqlite, which prepares the statement again on every call (Kysely's `kysely` and
 *   `kysely-once` rows use a node:sqlite driver written here that keeps statements prepared,
 *   the way our layer does, and begins with `BEGIN IMMEDIATE`).
 * Statements: getPat (by token hash), recordPatUse (a batch of 50 last-used times), quota
 * reserve (the upsert), appendAudit (a batch of 50 events plus their outbox rows, one
 * transaction). Variants alternate within each round (a shared machine drifts between
 * minutes, not adjacent runs); the table gives the median of rounds, and per round each
 * variant's ratio to `ours`, whose median is shown.
 *
 * It also starts a worker thread that opens the SQLite file with Kysely over node:sqlite and
 * reserves quota in one `BEGIN IMMEDIATE` transaction, as our writer thread
 * (src/stores/sqlite-writer-worker.ts) does.
 *
 * Kysely is not a dependency: install it into a scratch directory first,
 *   mkdir -p /tmp/kysely-bench && cd /tmp/kysely-bench && npm init -y && npm i --save-exact kysely@0.29.9
 * then run (Postgres from the installed binaries, test/helpers/services.ts):
 *   ./node_modules/.bin/node bench/dialect-vs-kysely.bench.ts [--kysely /tmp/kysely-bench]
 *     [--rounds 15] [--ops 2000] [--store both|sqlite|postgres]
 * Without Kysely there it prints why and exits 0.
 */
import { existsSync, mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { DatabaseSync, type SQLInputValue, type StatementSync } from 'node:sqlite'
import { pathToFileURL } from 'node:url'
import { isMainThread, parentPort, Worker, workerData } from 'node:worker_threads'
import pg from 'pg'
import type { PatRecord } from '../src/core/ports.ts'
import { openPostgresStore, type PostgresStore } from '../src/stores/postgres.ts'
import { PAT_COLUMNS, type PatRow, toPat } from '../src/stores/rows.ts'
import type { SqlStore } from '../src/stores/sql/sql-store.ts'
import { openSqliteStore } from '../src/stores/sqlite.ts'
import type { Store, StoredAuditEvent } from '../src/stores/store.ts'
import { skipReason, startPostgres } from '../test/helpers/services.ts'
import { readCli } from './cli.ts'
import { median } from './latency-stats.ts'

// biome-ignore lint/suspicious/noExplicitAny: Kysely is loaded at run time from a scratch directory, without its types
type Loose = any

const { values } = readCli({
  script: 'bench/dialect-vs-kysely.bench.ts',
  options: {
    kysely: { type: 'string', value: 'DIR', default: '/tmp/kysely-bench' },
    rounds: { type: 'number', integer: true, default: 15 },
    ops: { type: 'number', integer: true, default: 2000 },
    store: { type: 'choice', choices: ['both', 'sqlite', 'postgres'], default: 'both' },
  },
})

const kyselyEntry = join(values.kysely, 'node_modules', 'kysely', 'dist', 'index.js')

/** Kysely's driver for node:sqlite: statements prepared once per text, `BEGIN IMMEDIATE`. */
function nodeSqliteDialect(K: Loose, db: DatabaseSync): Loose {
  const prepared = new Map<string, { statement: StatementSync; reader: boolean }>()
  const connection = {
    async executeQuery(query: { sql: string; parameters: readonly unknown[] }) {
      let entry = prepared.get(query.sql)
      if (!entry) {
        const statement = db.prepare(query.sql)
        entry = { statement, reader: statement.columns().length > 0 }
        prepared.set(query.sql, entry)
      }
      const params = query.parameters as SQLInputValue[]
      if (entry.reader) return { rows: entry.statement.all(...params) }
      const { changes } = entry.statement.run(...params)
      return { numAffectedRows: BigInt(changes), rows: [] }
    },
    streamQuery() {
      throw new Error('not used')
    },
  }
  const raw = (sql: string) => connection.executeQuery({ sql, parameters: [] })
  return {
    createAdapter: () => new K.SqliteAdapter(),
    createQueryCompiler: () => new K.SqliteQueryCompiler(),
    createIntrospector: (kdb: Loose) => new K.SqliteIntrospector(kdb),
    createDriver: () => ({
      init: async () => {},
      acquireConnection: async () => connection,
      beginTransaction: () => raw('BEGIN IMMEDIATE'),
      commitTransaction: () => raw('COMMIT'),
      rollbackTransaction: () => raw('ROLLBACK'),
      releaseConnection: async () => {},
      destroy: async () => db.close(),
    }),
  }
}

/** node:sqlite shaped as better-sqlite3, for Kysely's own SqliteDialect (prepares per call). */
function betterSqliteShim(db: DatabaseSync): Loose {
  return {
    close: () => db.close(),
    prepare(sql: string) {
      const statement = db.prepare(sql)
      return {
        reader: statement.columns().length > 0,
        all: (params: readonly unknown[]) => statement.all(...(params as SQLInputValue[])),
        run: (params: readonly unknown[]) => statement.run(...(params as SQLInputValue[])),
        iterate: (params: readonly unknown[]) => statement.iterate(...(params as SQLInputValue[])),
      }
    },
  }
}

type Kind = 'sqlite' | 'postgres'

/** node:sqlite with no layer: a statement prepared once per text, run with its parameters. */
function sqliteDriver(db: DatabaseSync) {
  const prepared = new Map<string, StatementSync>()
  return async (sql: string, params: unknown[]): Promise<unknown[]> => {
    let statement = prepared.get(sql)
    if (!statement) {
      statement = db.prepare(sql)
      prepared.set(sql, statement)
    }
    return statement.all(...(params as SQLInputValue[]))
  }
}

/** The four statements written with Kysely's builder, as a port of our SQL would be. */
function kyselyStatements(K: Loose, kind: Kind) {
  const { sql } = K
  const pgKind = kind === 'postgres'
  const bigint = (eb: Loose, v: unknown) => (pgKind ? eb.cast(eb.val(v), 'bigint') : eb.val(v))
  const least = (eb: Loose, a: unknown, b: unknown) => eb.fn(pgKind ? 'least' : 'min', [a, b])
  const greatest = (eb: Loose, a: unknown, b: unknown) => eb.fn(pgKind ? 'greatest' : 'max', [a, b])
  const columns = PAT_COLUMNS.split(',').map((c) => c.trim())
  const usesTable = (json: string) =>
    pgKind
      ? sql`(SELECT (e.v->>0)::text AS c0, (e.v->>1)::bigint AS c1 FROM jsonb_array_elements(${json}::jsonb) AS e(v))`.as(
          'b',
        )
      : sql`(SELECT e.value ->> 0 AS c0, e.value ->> 1 AS c1 FROM json_each(${json}) AS e)`.as('b')
  return {
    getPat: (db: Loose, hash: string) =>
      db.selectFrom('pats').select(columns).where('token_hash', '=', hash),
    recordPatUse: (db: Loose, uses: ReadonlyMap<string, number>) =>
      db
        .updateTable('pats')
        .from(usesTable(JSON.stringify([...uses])))
        .set((eb: Loose) => ({ last_used_at: eb.ref('b.c1') }))
        .whereRef('pats.id', '=', 'b.c0')
        .where((eb: Loose) =>
          eb.or([
            eb('pats.last_used_at', 'is', null),
            eb('pats.last_used_at', '<', eb.ref('b.c1')),
          ]),
        ),
    reserveQuota: (db: Loose, counter: string, start: number, limit: number, want: number) =>
      db
        .insertInto('quota_usage')
        .values((eb: Loose) => ({
          counter,
          period_start: start,
          used: least(eb, bigint(eb, want), bigint(eb, limit)),
          last_grant: least(eb, bigint(eb, want), bigint(eb, limit)),
        }))
        .onConflict((oc: Loose) =>
          oc.column('counter').doUpdateSet((eb: Loose) => {
            const grant = greatest(
              eb,
              eb.lit(0),
              least(eb, bigint(eb, want), eb(bigint(eb, limit), '-', eb.ref('quota_usage.used'))),
            )
            const newer = eb('quota_usage.period_start', '<', eb.ref('excluded.period_start'))
            return {
              last_grant: eb.case().when(newer).then(eb.ref('excluded.used')).else(grant).end(),
              used: eb
                .case()
                .when(newer)
                .then(eb.ref('excluded.used'))
                .else(eb(eb.ref('quota_usage.used'), '+', grant))
                .end(),
              period_start: greatest(
                eb,
                eb.ref('quota_usage.period_start'),
                eb.ref('excluded.period_start'),
              ),
            }
          }),
        )
        .returning(['last_grant', 'used', 'period_start', 'generation']),
    /**
     * One transaction: the audit rows, the outbox's destinations, the outbox rows of the events
     * stored (src/stores/sql/audit.ts).
     */
    appendAudit: async (db: Loose, events: readonly StoredAuditEvent[]) =>
      db.transaction().execute(async (trx: Loose) => {
        const stored = await trx
          .insertInto('audit_events')
          .values(
            events.map((e) => ({
              id: e.id,
              time: e.time,
              type: e.type,
              tenant_id: e.tenantId,
              actor: e.actor,
              outcome: e.outcome,
              client_address: e.clientAddress,
              request_id: e.requestId,
              details: JSON.stringify(e.details),
            })),
          )
          .onConflict((oc: Loose) => oc.column('id').doNothing())
          .returning('id')
          .execute()
        if (stored.length === 0) return
        // As the store does: the webhook ('') and each further destination taking the type.
        const now = new Set(stored.map((row: { id: string }) => row.id))
        const fresh = events.filter((e) => now.has(e.id))
        const queued = fresh.map((e) => ({ event_id: e.id, destination: '' }))
        const destinations = await trx
          .selectFrom('outbox_destinations')
          .select(['name', 'event_types'])
          .execute()
        for (const d of destinations as { name: string; event_types: string }[]) {
          const types = new Set(JSON.parse(d.event_types) as string[])
          for (const e of fresh)
            if (types.has(e.type)) queued.push({ event_id: e.id, destination: d.name })
        }
        await trx.insertInto('event_outbox').values(queued).execute()
      }),
  }
}

const TENANT = 'bench-tenant'
const PATS = 1000
const BATCH = 50

function patRecord(i: number, now: number): PatRecord {
  return {
    id: `tok_${i.toString().padStart(8, '0')}`,
    tokenHash: hashOf(i),
    tenantId: TENANT,
    subject: `user-${i}`,
    name: `key ${i}`,
    permissions: ['tokens:read', 'tokens:write'],
    last4: 'abcd',
    createdAt: now,
    expiresAt: null,
    revokedAt: null,
    lastUsedAt: null,
    rotatedFrom: null,
  }
}
const hashOf = (i: number) => i.toString(16).padStart(64, '0')
const idOf = (i: number) => `tok_${(i % PATS).toString().padStart(8, '0')}`

interface Case {
  readonly statement: string
  readonly variant: string
  /** Runs one statement; `i` counts calls (fresh ids, advancing times). */
  run(i: number): Promise<unknown>
}

let clock = Date.now()
let auditSeq = 0
const usesBatch = (i: number) => {
  clock += 1
  const uses = new Map<string, number>()
  for (let j = 0; j < BATCH; j++) uses.set(idOf(i * BATCH + j), clock)
  return uses
}
const auditBatch = (variant: string): StoredAuditEvent[] =>
  Array.from({ length: BATCH }, () => ({
    id: `ev-${variant}-${auditSeq++}`,
    time: clock,
    type: 'auth.failed',
    tenantId: TENANT,
    actor: 'pat_…abcd',
    outcome: 'invalid_token',
    clientAddress: '127.0.0.1',
    requestId: 'req-1',
    details: { reason: 'unknown_token' },
  }))

/** The cases of one database: our store, Kysely per call, Kysely compiled once (and stock). */
function cases(
  K: Loose,
  kind: Kind,
  store: Store,
  kyselys: Record<string, Loose>,
  driver: (sql: string, params: unknown[]) => Promise<unknown[]>,
): Case[] {
  const q = kyselyStatements(K, kind)
  const out: Case[] = []
  const toPats = (rows: PatRow[]) => (rows[0] ? toPat(rows[0]) : undefined)
  out.push(
    { statement: 'getPat', variant: 'ours', run: (i) => store.findPatByHash(hashOf(i % PATS)) },
    {
      statement: 'recordPatUse',
      variant: 'ours',
      run: (i) => store.recordPatUse(usesBatch(i)),
    },
    {
      statement: 'reserveQuota',
      variant: 'ours',
      run: (i) => store.reserveQuota(`c${i % PATS}`, 0, 1e15, 100),
    },
    { statement: 'appendAudit', variant: 'ours', run: () => store.appendAudit(auditBatch('o')) },
  )
  for (const [variant, db] of Object.entries(kyselys)) {
    out.push(
      {
        statement: 'getPat',
        variant,
        run: async (i) => toPats(await q.getPat(db, hashOf(i % PATS)).execute()),
      },
      {
        statement: 'recordPatUse',
        variant,
        run: (i) => q.recordPatUse(db, usesBatch(i)).execute(),
      },
      {
        statement: 'reserveQuota',
        variant,
        run: (i) => q.reserveQuota(db, `c${i % PATS}`, 0, 1e15, 100).executeTakeFirstOrThrow(),
      },
      { statement: 'appendAudit', variant, run: () => q.appendAudit(db, auditBatch(variant)) },
    )
  }
  // Compiled once: the text kept, each call only its parameters (in the same positions);
  // and that text straight to the driver (the floor: no layer at all).
  const db = kyselys.kysely
  const once = (
    statement: string,
    compiled: Loose,
    params: (i: number) => unknown[],
    map: (rows: Loose) => unknown = (rows) => rows,
  ) =>
    out.push(
      {
        statement,
        variant: 'kysely-once',
        run: async (i) =>
          map((await db.executeQuery(K.CompiledQuery.raw(compiled.sql, params(i)))).rows),
      },
      {
        statement,
        variant: 'driver',
        run: async (i) => map(await driver(compiled.sql, params(i))),
      },
    )
  // Every getPat variant returns a PatRecord (rows.toPat), as the store does.
  once('getPat', q.getPat(db, hashOf(0)).compile(), (i) => [hashOf(i % PATS)], toPats)
  once('recordPatUse', q.recordPatUse(db, usesBatch(0)).compile(), (i) => [
    JSON.stringify([...usesBatch(i)]),
  ])
  const reserve = q.reserveQuota(db, 'c0', 0, 1e15, 100).compile()
  // The compiled parameters in order, with this call's counter in place of 'c0'.
  once('reserveQuota', reserve, (i) =>
    reserve.parameters.map((p: unknown) => (p === 'c0' ? `c${i % PATS}` : p)),
  )
  return out
}

/** Runs every case `reads` times per round (the batches `batches` times), variants alternating. */
async function measure(
  label: string,
  all: Case[],
  rounds: number,
  reads: number,
  batches: number,
): Promise<void> {
  const statements = [...new Set(all.map((c) => c.statement))]
  const ns = new Map<Case, number[]>(all.map((c) => [c, []]))
  let calls = 0
  for (let round = -1; round < rounds; round++) {
    for (const statement of statements) {
      const group = all.filter((c) => c.statement === statement)
      // Rotate the order each round so no variant always runs first.
      const order = group.map((_c, k) => group[(k + Math.max(round, 0)) % group.length] as Case)
      const n = statement === 'getPat' ? reads : batches
      for (const c of order) {
        const start = process.cpuUsage()
        for (let k = 0; k < n; k++) await c.run(calls++)
        const used = process.cpuUsage(start)
        // Round -1 warms up (JIT, statement caches, connections): not recorded.
        if (round >= 0) ns.get(c)?.push(((used.user + used.system) * 1000) / n)
      }
    }
  }
  console.log(`\n${label}: CPU of this process per statement, median of ${rounds} rounds`)
  console.log('| statement | variant | CPU µs / statement | ratio to ours (median of rounds) |')
  console.log('| --- | --- | ---: | ---: |')
  for (const statement of statements) {
    const ours = all.find((c) => c.statement === statement && c.variant === 'ours') as Case
    const base = ns.get(ours) as number[]
    for (const c of all.filter((x) => x.statement === statement)) {
      const own = ns.get(c) as number[]
      const ratio = median(own.map((v, r) => v / (base[r] as number)))
      console.log(
        `| ${statement} | ${c.variant} | ${(median(own) / 1000).toFixed(1)} | ${ratio.toFixed(2)} |`,
      )
    }
  }
}

async function seed(store: Store & Pick<SqlStore, 'insertPats'>): Promise<void> {
  await store.migrate()
  const now = Date.now()
  await store.createTenant({ id: TENANT, name: 'Bench' }, now)
  await store.insertPats(Array.from({ length: PATS }, (_x, i) => patRecord(i, now)))
}

async function benchSqlite(K: Loose, rounds: number, ops: number): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'tokengate-kysely-'))
  const path = join(dir, 'bench.db')
  const store = openSqliteStore(path, { externalChangePollMs: 0 })
  try {
    await seed(store)
    const open = () => {
      const db = new DatabaseSync(path, { enableForeignKeyConstraints: true })
      // The store's settings (sqlite.ts), so every variant commits the same way.
      db.exec('PRAGMA busy_timeout = 5000; PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL')
      return db
    }
    const kysely = new K.Kysely({ dialect: nodeSqliteDialect(K, open()) })
    const stock = new K.Kysely({
      dialect: new K.SqliteDialect({ database: betterSqliteShim(open()) }),
    })
    console.log(`SQLite writer thread with Kysely: ${await kyselyInWorker(path)}`)
    await measure(
      'SQLite (node:sqlite, WAL, synchronous=FULL)',
      cases(K, 'sqlite', store, { kysely, 'kysely-stock': stock }, sqliteDriver(open())),
      rounds,
      ops * 10,
      Math.max(10, ops / 20),
    )
    await kysely.destroy()
    await stock.destroy()
  } finally {
    await store.close()
    rmSync(dir, { recursive: true, force: true })
  }
}

async function benchPostgres(K: Loose, rounds: number, ops: number): Promise<void> {
  const reason = skipReason('postgres')
  if (reason) {
    console.log(`Postgres skipped: ${reason}`)
    return
  }
  const server = await startPostgres()
  try {
    const url = await server.createDatabase()
    const store = await openPostgresStore(url, { listen: false })
    const pool = new pg.Pool({ connectionString: url, max: 10 })
    const kysely = new K.Kysely({ dialect: new K.PostgresDialect({ pool }) })
    try {
      // PgStore is a SqlStore (postgres.ts); its public type does not list insertPats.
      await seed(store as PostgresStore & Pick<SqlStore, 'insertPats'>)
      await measure(
        `Postgres ${(await pool.query('SHOW server_version')).rows[0].server_version} (pg, 127.0.0.1)`,
        cases(K, 'postgres', store, { kysely }, async (text, params) => {
          return (await pool.query(text, params)).rows
        }),
        rounds,
        ops,
        Math.max(10, ops / 20),
      )
    } finally {
      await kysely.destroy()
      await store.close()
    }
  } finally {
    await server.stop()
  }
}

/** Opens the file with Kysely in a worker thread and reserves two blocks in one transaction. */
function kyselyInWorker(path: string): Promise<string> {
  return new Promise((resolve) => {
    const worker = new Worker(new URL(import.meta.url), {
      workerData: { path, kysely: kyselyEntry },
    })
    worker.once('message', (answer: string) => {
      resolve(answer)
      void worker.terminate()
    })
    worker.once('error', (error) => resolve(`failed: ${error.message}`))
  })
}

async function workerMain(): Promise<void> {
  const { path, kysely } = workerData as { path: string; kysely: string }
  const K = await import(pathToFileURL(kysely).href)
  const db = new K.Kysely({ dialect: nodeSqliteDialect(K, new DatabaseSync(path)) })
  const q = kyselyStatements(K, 'sqlite')
  const granted = await db
    .transaction()
    .execute(async (trx: Loose) => [
      await q.reserveQuota(trx, 'worker-a', 0, 150, 100).executeTakeFirstOrThrow(),
      await q.reserveQuota(trx, 'worker-a', 0, 150, 100).executeTakeFirstOrThrow(),
    ])
  await db.destroy()
  parentPort?.postMessage(
    `ok (two reservations in one BEGIN IMMEDIATE transaction granted ${granted
      .map((row: { last_grant: number }) => row.last_grant)
      .join(' + ')} of 150)`,
  )
}

if (!isMainThread) await workerMain()
else if (!existsSync(kyselyEntry)) {
  console.log(
    `Kysely is not installed at ${values.kysely} (it is not a dependency of tokengate); to run:\n` +
      `  mkdir -p ${values.kysely} && cd ${values.kysely} && npm init -y && npm i --save-exact kysely@0.29.9`,
  )
} else {
  const K = await import(pathToFileURL(kyselyEntry).href)
  const rounds = values.rounds
  const ops = values.ops
  console.log(
    `node ${process.version}; rounds ${rounds}; getPat ${ops} calls per round and variant`,
  )
  if (values.store !== 'postgres') await benchSqlite(K, rounds, ops)
  if (values.store !== 'sqlite') await benchPostgres(K, rounds, ops)
}
