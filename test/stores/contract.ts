/**
 * The behaviour every `Store` backend must have. A backend's test file calls
 * `storeContract(name, makeStore)` and then adds its own, backend-specific cases.
 *
 * `makeStore` must return a store over an empty database that has NOT been migrated yet
 * (each test migrates it), and a `cleanup` that closes the store (close is idempotent) and
 * removes whatever the test created. Each test gets its own store.
 *
 * Beyond the TSDoc of `Store`, this suite fixes these details, so backends agree:
 * - `migrate()` applies versions in ascending order and returns `[]` once up to date;
 * - tenant ids are compared exactly (case-sensitive, no trimming); `listTenants` is by id;
 * - `insertPat` for an unknown tenant rejects; `createdAt` of an issuer is kept on replace;
 * - a page of exactly `limit` remaining rows has `nextCursor: null` (no empty last page);
 *   a malformed cursor rejects;
 * - `appendAudit` ignores an event whose id is already stored, so a retried batch whose
 *   first attempt did commit (outcome unknown to the writer) is not duplicated;
 * - `watch` delivery may be synchronous or asynchronous; the suite waits up to 5 s.
 */
import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'
import { describe, it, type TestContext } from 'node:test'
import type { IssuerConfig } from '../../src/core/issuer.ts'
import type { PatRecord } from '../../src/core/ports.ts'
import {
  ConflictError,
  type Store,
  type StoreChange,
  type StoredAuditEvent,
} from '../../src/stores/store.ts'
import { jwtRevocationsContract } from './jwt-revocations-contract.ts'
import { keysContract } from './keys-contract.ts'
import { outboxDestinationsContract } from './outbox-destinations-contract.ts'
import { ssfReceivedContract } from './ssf-received-contract.ts'

/** Raw SQL on the store's database, outside its methods (as a DBA or another tool would). */
export type RawSql = (text: string) => Promise<Record<string, unknown>[]>

export type MakeStore = () => Promise<{ store: Store; cleanup: () => Promise<void>; sql: RawSql }>

export const T0 = Date.UTC(2026, 0, 1)

export function sha256(text: string): string {
  return createHash('sha256').update(text).digest('hex')
}

export function pat(id: string, tenantId: string, overrides: Partial<PatRecord> = {}): PatRecord {
  return {
    id,
    tokenHash: sha256(`pat_${id}`),
    tenantId,
    subject: `user-${id}`,
    name: `token ${id}`,
    permissions: ['tokens:read'],
    last4: id.slice(-4).padStart(4, 'x'),
    createdAt: T0,
    expiresAt: null,
    revokedAt: null,
    lastUsedAt: null,
    rotatedFrom: null,
    supersededAt: null,
    graceUntil: null,
    disabledAt: null,
    rateLimit: null,
    quota: null,
    metadata: null,
    externalId: null,
    certificateThumbprint: null,
    ...overrides,
  }
}

export function event(id: string, tenantId: string | null, time: number): StoredAuditEvent {
  return {
    id,
    time,
    type: 'auth.failed',
    tenantId,
    actor: null,
    outcome: 'invalid_token',
    clientAddress: '203.0.113.7',
    requestId: `req-${id}`,
    details: {},
  }
}

/** Resolves with the first change matching `predicate`, or rejects after `timeoutMs`. */
export function nextChange(
  store: Store,
  predicate: (change: StoreChange) => boolean,
  timeoutMs = 5000,
): Promise<StoreChange> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      unsubscribe()
      reject(new Error('no matching change delivered'))
    }, timeoutMs)
    const unsubscribe = store.watch((change) => {
      if (!predicate(change)) return
      clearTimeout(timer)
      unsubscribe()
      resolve(change)
    })
  })
}

/** Follows `nextCursor` to the end; fails on a runaway loop. */
async function allPages<T>(
  list: (cursor: string | undefined) => Promise<{ items: readonly T[]; nextCursor: string | null }>,
): Promise<{ pages: T[][]; items: T[] }> {
  const pages: T[][] = []
  let cursor: string | undefined
  for (let i = 0; i < 100; i++) {
    const page = await list(cursor)
    pages.push([...page.items])
    if (page.nextCursor === null) return { pages, items: pages.flat() }
    cursor = page.nextCursor
  }
  throw new Error('pagination did not end')
}

export function storeContract(name: string, makeStore: MakeStore): void {
  const rawSql = new WeakMap<Store, RawSql>()
  keysContract(name, makeStore)
  jwtRevocationsContract(name, makeStore)
  ssfReceivedContract(name, makeStore)
  outboxDestinationsContract(name, makeStore)
  async function open(t: TestContext, { migrate = true } = {}): Promise<Store> {
    const { store, cleanup, sql } = await makeStore()
    t.after(cleanup)
    rawSql.set(store, sql)
    if (migrate) await store.migrate()
    return store
  }
  const sqlOf = (store: Store) => rawSql.get(store) as RawSql

  async function withTenants(t: TestContext, ...ids: string[]): Promise<Store> {
    const store = await open(t)
    for (const id of ids) await store.createTenant({ id, name: `Tenant ${id}` }, T0)
    return store
  }

  describe(`${name} store contract`, () => {
    describe('migrations and health', () => {
      it('migrate applies versions in ascending order once, then nothing', async (t) => {
        const store = await open(t, { migrate: false })
        const first = await store.migrate()
        assert.ok(first.length > 0, 'a fresh database needs at least one migration')
        assert.deepEqual(
          first,
          [...first].sort((a, b) => a - b),
        )
        assert.deepEqual(await store.migrate(), [])
        assert.deepEqual(await store.migrate(), [])
      })

      it('ping resolves on a working store', async (t) => {
        const store = await open(t)
        await store.ping()
      })

      it('after close every method rejects, and close is idempotent', async (t) => {
        const store = await withTenants(t, 'acme')
        await store.insertPat(pat('p1', 'acme'))
        await store.close()
        const calls: [string, () => Promise<unknown>][] = [
          ['ping', () => store.ping()],
          ['findPatByHash', () => store.findPatByHash(sha256('pat_p1'))],
          ['findTenant', () => store.findTenant('acme')],
          ['createTenant', () => store.createTenant({ id: 'x', name: 'X' }, T0)],
          ['listTenants', () => store.listTenants()],
          ['setTenantEnabled', () => store.setTenantEnabled('acme', false)],
          ['insertPat', () => store.insertPat(pat('p2', 'acme'))],
          ['getPat', () => store.getPat('p1')],
          ['listPats', () => store.listPats('acme', { limit: 10 })],
          ['revokePat', () => store.revokePat('p1', T0)],
          ['recordPatUse', () => store.recordPatUse(new Map([['p1', T0]]))],
          [
            'rotatePat',
            () => store.rotatePat('p1', pat('p9', 'acme', { rotatedFrom: 'p1' }), T0, T0),
          ],
          ['revokePatFamily', () => store.revokePatFamily('p1', T0)],
          ['claimOutbox', () => store.claimOutbox(T0, 10, 1000)],
          ['completeOutbox', () => store.completeOutbox(['e1'])],
          ['retryOutbox', () => store.retryOutbox(['e1'], T0, 'x')],
          ['outboxStats', () => store.outboxStats()],
          ['clearOutbox', () => store.clearOutbox()],
          ['putIssuer', () => store.putIssuer(issuerA, T0)],
          ['listIssuers', () => store.listIssuers()],
          ['removeIssuer', () => store.removeIssuer(issuerA.issuer)],
          ['appendAudit', () => store.appendAudit([event('e1', 'acme', T0)])],
          ['listAudit', () => store.listAudit('acme', { limit: 10 })],
          ['pruneAudit', () => store.pruneAudit(T0, 10)],
          ['updatePat', () => store.updatePat('p1', { name: 'x' })],
          ['updateTenant', () => store.updateTenant('acme', { name: 'x' })],
          ['reserveQuota', () => store.reserveQuota('p1', 0, 10, 1)],
          ['releaseQuota', () => store.releaseQuota('p1', 0, 0, 1)],
          ['readQuota', () => store.readQuota(['p1'])],
          ['resetQuota', () => store.resetQuota('p1')],
          ['addUsage', () => store.addUsage([])],
          [
            'readUsage',
            () =>
              store.readUsage({
                scope: 'all',
                subject: '',
                resolution: 'minute',
                since: 0,
                until: T0,
              }),
          ],
          ['topKeys', () => store.topKeys('acme', 'hour', 0, T0, 10)],
          ['pruneUsage', () => store.pruneUsage('minute', T0, 10)],
        ]
        for (const [method, call] of calls) {
          await assert.rejects(call(), Error, `${method} after close`)
        }
        await store.close()
      })
    })

    describe('tenants', () => {
      it('createTenant returns the enabled tenant and findTenant finds it', async (t) => {
        const store = await open(t)
        const created = await store.createTenant({ id: 'acme', name: 'Acme Inc.' }, T0 + 5)
        const expected = {
          id: 'acme',
          name: 'Acme Inc.',
          enabled: true,
          createdAt: T0 + 5,
          rateLimit: null,
        }
        assert.deepEqual({ ...created }, expected)
        assert.deepEqual({ ...(await store.findTenant('acme')) }, expected)
      })

      it('a duplicate tenant id is a ConflictError and leaves the first unchanged', async (t) => {
        const store = await open(t)
        await store.createTenant({ id: 'acme', name: 'First' }, T0)
        await assert.rejects(
          store.createTenant({ id: 'acme', name: 'Second' }, T0 + 1),
          ConflictError,
        )
        assert.equal((await store.findTenant('acme'))?.name, 'First')
      })

      it('tenant ids are exact: case and surrounding spaces make other tenants', async (t) => {
        const store = await open(t)
        await store.createTenant({ id: 'Acme', name: 'A' }, T0)
        await store.createTenant({ id: 'acme', name: 'B' }, T0)
        assert.equal((await store.findTenant('Acme'))?.name, 'A')
        assert.equal((await store.findTenant('acme'))?.name, 'B')
        assert.equal(await store.findTenant('ACME'), undefined)
        assert.equal(await store.findTenant('acme '), undefined)
        assert.equal(await store.findTenant(' acme'), undefined)
      })

      it('findTenant of an unknown id is undefined', async (t) => {
        const store = await open(t)
        assert.equal(await store.findTenant('nobody'), undefined)
      })

      it('listTenants lists every tenant, ordered by id', async (t) => {
        const store = await open(t)
        assert.deepEqual(await store.listTenants(), [])
        await store.createTenant({ id: 'charlie', name: 'C' }, T0)
        await store.createTenant({ id: 'alpha', name: 'A' }, T0 + 1)
        await store.createTenant({ id: 'bravo', name: 'B' }, T0 + 2)
        const tenants = await store.listTenants()
        assert.deepEqual(
          tenants.map((tenant) => tenant.id),
          ['alpha', 'bravo', 'charlie'],
        )
        assert.deepEqual(
          { ...tenants[0] },
          { id: 'alpha', name: 'A', enabled: true, createdAt: T0 + 1, rateLimit: null },
        )
      })

      it('setTenantEnabled disables and re-enables; unknown id is undefined', async (t) => {
        const store = await withTenants(t, 'acme', 'other')
        const disabled = await store.setTenantEnabled('acme', false)
        assert.equal(disabled?.enabled, false)
        assert.equal(disabled?.id, 'acme')
        assert.equal((await store.findTenant('acme'))?.enabled, false)
        assert.equal((await store.findTenant('other'))?.enabled, true)
        assert.equal((await store.setTenantEnabled('acme', true))?.enabled, true)
        assert.equal((await store.findTenant('acme'))?.enabled, true)
        assert.equal(await store.setTenantEnabled('nobody', false), undefined)
      })
    })

    describe('personal access tokens', () => {
      it('insertPat round-trips every field through getPat and findPatByHash', async (t) => {
        const store = await withTenants(t, 'acme')
        const old = pat('p-old', 'acme')
        const record = pat('p-new', 'acme', {
          subject: 'ci-bot',
          name: 'deploy pipeline',
          permissions: ['tokens:read', 'tokens:revoke', 'audit:read'],
          last4: 'Zz09',
          createdAt: T0 + 1,
          expiresAt: T0 + 90 * 86_400_000,
          rotatedFrom: 'p-old',
        })
        await store.insertPat(old)
        await store.insertPat(record)
        assert.deepEqual({ ...(await store.getPat('p-new')) }, record)
        assert.deepEqual({ ...(await store.findPatByHash(record.tokenHash)) }, record)
        assert.deepEqual({ ...(await store.getPat('p-old')) }, old)
      })

      it('an empty permission list round-trips as an empty list', async (t) => {
        const store = await withTenants(t, 'acme')
        await store.insertPat(pat('p1', 'acme', { permissions: [] }))
        assert.deepEqual((await store.getPat('p1'))?.permissions, [])
      })

      it('unknown hash and unknown id are undefined', async (t) => {
        const store = await withTenants(t, 'acme')
        await store.insertPat(pat('p1', 'acme'))
        assert.equal(await store.findPatByHash(sha256('pat_unknown')), undefined)
        assert.equal(await store.findPatByHash(sha256('pat_p1').toUpperCase()), undefined)
        assert.equal(await store.getPat('p2'), undefined)
      })

      it('a duplicate id or a duplicate hash is a ConflictError', async (t) => {
        const store = await withTenants(t, 'acme')
        const first = pat('p1', 'acme')
        await store.insertPat(first)
        await assert.rejects(
          store.insertPat(pat('p1', 'acme', { tokenHash: sha256('other') })),
          ConflictError,
        )
        await assert.rejects(
          store.insertPat(pat('p2', 'acme', { tokenHash: first.tokenHash })),
          ConflictError,
        )
        assert.deepEqual({ ...(await store.findPatByHash(first.tokenHash)) }, first)
        assert.equal(await store.getPat('p2'), undefined)
      })

      it('insertPat for an unknown tenant rejects', async (t) => {
        const store = await withTenants(t, 'acme')
        await assert.rejects(store.insertPat(pat('p1', 'nobody')))
        assert.equal(await store.getPat('p1'), undefined)
      })

      it('listPats pages newest first, ties by id, with no duplicates or gaps', async (t) => {
        const store = await withTenants(t, 'acme', 'other')
        const records: PatRecord[] = []
        for (let i = 0; i < 25; i++) {
          // Three tokens share each creation time, so the id tie-break is exercised.
          const id = `p${String(i).padStart(3, '0')}`
          records.push(pat(id, 'acme', { createdAt: T0 + Math.floor(i / 3) }))
        }
        // Insertion order differs from the listing order.
        for (const record of [...records].reverse()) await store.insertPat(record)
        for (let i = 0; i < 4; i++) await store.insertPat(pat(`q${i}`, 'other'))

        const expected = [...records]
          .sort((a, b) => b.createdAt - a.createdAt || (a.id < b.id ? 1 : -1))
          .map((r) => r.id)
        const { pages, items } = await allPages((cursor) =>
          store.listPats('acme', { limit: 10, cursor }),
        )
        assert.deepEqual(
          pages.map((page) => page.length),
          [10, 10, 5],
        )
        assert.deepEqual(
          items.map((r) => r.id),
          expected,
        )
        const fromList = items.find((r) => r.id === 'p007')
        assert.deepEqual({ ...fromList }, records[7])
      })

      it('a token created between two page requests causes no duplicate or gap', async (t) => {
        const store = await withTenants(t, 'acme')
        for (let i = 0; i < 6; i++) {
          await store.insertPat(pat(`p${i}`, 'acme', { createdAt: T0 + i }))
        }
        const first = await store.listPats('acme', { limit: 3 })
        await store.insertPat(pat('p-newest', 'acme', { createdAt: T0 + 100 }))
        assert.ok(first.nextCursor)
        const second = await store.listPats('acme', { limit: 3, cursor: first.nextCursor })
        assert.deepEqual(
          [...first.items, ...second.items].map((r) => r.id),
          ['p5', 'p4', 'p3', 'p2', 'p1', 'p0'],
        )
        assert.equal(second.nextCursor, null)
      })

      it('a page holding exactly the remaining tokens has no next cursor', async (t) => {
        const store = await withTenants(t, 'acme')
        assert.deepEqual(await store.listPats('acme', { limit: 10 }), {
          items: [],
          nextCursor: null,
        })
        for (let i = 0; i < 10; i++) await store.insertPat(pat(`p${i}`, 'acme'))
        const page = await store.listPats('acme', { limit: 10 })
        assert.equal(page.items.length, 10)
        assert.equal(page.nextCursor, null)
      })

      it('listPats is isolated by tenant', async (t) => {
        const store = await withTenants(t, 'acme', 'other')
        await store.insertPat(pat('a1', 'acme'))
        await store.insertPat(pat('o1', 'other'))
        await store.insertPat(pat('o2', 'other'))
        const acme = await store.listPats('acme', { limit: 50 })
        assert.deepEqual(
          acme.items.map((r) => r.id),
          ['a1'],
        )
        const other = await store.listPats('other', { limit: 50 })
        assert.deepEqual(other.items.map((r) => r.id).sort(), ['o1', 'o2'])
        assert.deepEqual((await store.listPats('nobody', { limit: 50 })).items, [])
      })

      it('a malformed cursor rejects', async (t) => {
        const store = await withTenants(t, 'acme')
        await store.insertPat(pat('p1', 'acme'))
        await assert.rejects(store.listPats('acme', { limit: 10, cursor: 'not a cursor!' }))
        await assert.rejects(store.listAudit('acme', { limit: 10, cursor: 'bm9wZQ' }))
      })

      it('expiringBefore keeps only unrevoked tokens of the tenant expiring before it', async (t) => {
        const store = await withTenants(t, 'acme', 'other')
        const soon = T0 + 1000
        await store.insertPat(pat('expired', 'acme', { createdAt: T0, expiresAt: T0 - 10 }))
        await store.insertPat(pat('soon', 'acme', { createdAt: T0 + 1, expiresAt: soon - 1 }))
        await store.insertPat(pat('at-bound', 'acme', { createdAt: T0 + 2, expiresAt: soon }))
        await store.insertPat(pat('later', 'acme', { createdAt: T0 + 3, expiresAt: soon + 1 }))
        await store.insertPat(pat('never', 'acme', { createdAt: T0 + 4, expiresAt: null }))
        await store.insertPat(
          pat('revoked', 'acme', { createdAt: T0 + 5, expiresAt: T0 + 5, revokedAt: T0 + 6 }),
        )
        await store.insertPat(pat('other', 'other', { expiresAt: T0 + 5 }))
        const soonA = pat('soon-2', 'acme', { createdAt: T0 + 6, expiresAt: T0 + 7 })
        await store.insertPat(soonA)
        await store.revokePat('soon-2', T0 + 8)

        const { items } = await allPages((cursor) =>
          store.listPats('acme', { limit: 1, cursor }, { expiringBefore: soon }),
        )
        assert.deepEqual(
          items.map((r) => r.id),
          ['soon', 'expired'],
        )
        const all = await store.listPats('acme', { limit: 50 }, {})
        assert.equal(all.items.length, 7)
      })

      it('revokePat keeps the first revocation time; unknown id is undefined', async (t) => {
        const store = await withTenants(t, 'acme')
        await store.insertPat(pat('p1', 'acme'))
        await store.insertPat(pat('p2', 'acme'))
        const revoked = await store.revokePat('p1', T0 + 10)
        assert.equal(revoked?.id, 'p1')
        assert.equal(revoked?.revokedAt, T0 + 10)
        const again = await store.revokePat('p1', T0 + 20)
        assert.equal(again?.revokedAt, T0 + 10)
        assert.equal((await store.getPat('p1'))?.revokedAt, T0 + 10)
        assert.equal((await store.findPatByHash(sha256('pat_p1')))?.revokedAt, T0 + 10)
        assert.equal((await store.getPat('p2'))?.revokedAt, null)
        assert.equal(await store.revokePat('nobody', T0), undefined)
      })

      it('recordPatUse only moves last-used times forward and ignores unknown ids', async (t) => {
        const store = await withTenants(t, 'acme')
        await store.insertPat(pat('p1', 'acme'))
        await store.insertPat(pat('p2', 'acme'))
        await store.insertPat(pat('p3', 'acme'))
        await store.recordPatUse(
          new Map([
            ['p1', T0 + 100],
            ['p2', T0 + 200],
            ['ghost', T0 + 300],
          ]),
        )
        assert.equal((await store.getPat('p1'))?.lastUsedAt, T0 + 100)
        assert.equal((await store.getPat('p2'))?.lastUsedAt, T0 + 200)
        assert.equal((await store.getPat('p3'))?.lastUsedAt, null)
        assert.equal(await store.getPat('ghost'), undefined)

        await store.recordPatUse(
          new Map([
            ['p1', T0 + 50],
            ['p2', T0 + 250],
          ]),
        )
        assert.equal((await store.getPat('p1'))?.lastUsedAt, T0 + 100, 'never moves back')
        assert.equal((await store.getPat('p2'))?.lastUsedAt, T0 + 250)
        await store.recordPatUse(new Map())
      })
    })

    describe('rotation', () => {
      it('rotatePat inserts the replacement and marks the old token superseded with its grace', async (t) => {
        const store = await withTenants(t, 'acme')
        await store.insertPat(pat('p1', 'acme'))
        const next = pat('p2', 'acme', { rotatedFrom: 'p1', createdAt: T0 + 5 })
        const changed = nextChange(store, (c) => c.kind === 'pat_changed')
        const old = await store.rotatePat('p1', next, T0 + 5, T0 + 3_600_005)
        assert.equal(old?.id, 'p1')
        assert.equal(old?.supersededAt, T0 + 5)
        assert.equal(old?.graceUntil, T0 + 3_600_005)
        assert.equal(old?.revokedAt, null)
        assert.deepEqual(
          { ...(await changed) },
          { kind: 'pat_changed', tokenHash: sha256('pat_p1') },
        )
        assert.deepEqual({ ...(await store.getPat('p2')) }, next)
        const stored = await store.findPatByHash(sha256('pat_p1'))
        assert.equal(stored?.supersededAt, T0 + 5)
        assert.equal(stored?.graceUntil, T0 + 3_600_005)
      })

      it('only a current token rotates: rotated, revoked or unknown ones write nothing', async (t) => {
        const store = await withTenants(t, 'acme')
        await store.insertPat(pat('p1', 'acme'))
        await store.insertPat(pat('r1', 'acme', { revokedAt: T0 }))
        assert.ok(await store.rotatePat('p1', pat('p2', 'acme', { rotatedFrom: 'p1' }), T0, T0))
        const twice = await store.rotatePat('p1', pat('p3', 'acme', { rotatedFrom: 'p1' }), T0, T0)
        assert.equal(twice, undefined)
        assert.equal(await store.getPat('p3'), undefined, 'no second replacement')
        const revoked = await store.rotatePat(
          'r1',
          pat('p4', 'acme', { rotatedFrom: 'r1' }),
          T0,
          T0,
        )
        assert.equal(revoked, undefined)
        assert.equal(await store.getPat('p4'), undefined)
        const ghost = await store.rotatePat(
          'ghost',
          pat('p5', 'acme', { rotatedFrom: 'ghost' }),
          T0,
          T0,
        )
        assert.equal(ghost, undefined)
        assert.equal(await store.getPat('p5'), undefined)
      })

      it('a replacement that conflicts leaves the old token current (all or nothing)', async (t) => {
        const store = await withTenants(t, 'acme')
        await store.insertPat(pat('p1', 'acme'))
        await store.insertPat(pat('p2', 'acme'))
        const clash = pat('p3', 'acme', { rotatedFrom: 'p1', tokenHash: sha256('pat_p2') })
        await assert.rejects(store.rotatePat('p1', clash, T0, T0), ConflictError)
        assert.equal((await store.getPat('p1'))?.supersededAt, null)
        assert.equal(await store.getPat('p3'), undefined)
      })

      it('rotatePat rejects a replacement not linked to the old id, or a grace before now', async (t) => {
        const store = await withTenants(t, 'acme')
        await store.insertPat(pat('p1', 'acme'))
        await assert.rejects(store.rotatePat('p1', pat('p2', 'acme'), T0, T0), RangeError)
        const linked = pat('p2', 'acme', { rotatedFrom: 'p1' })
        await assert.rejects(store.rotatePat('p1', linked, T0, T0 - 1), RangeError)
        assert.equal((await store.getPat('p1'))?.supersededAt, null)
      })

      it('revokePatFamily revokes ancestors, descendants and siblings, once', async (t) => {
        const store = await withTenants(t, 'acme')
        // a -> b -> c, a -> x (a sibling branch), d unrelated, c2 already revoked under c.
        await store.insertPat(pat('a', 'acme'))
        await store.insertPat(pat('b', 'acme', { rotatedFrom: 'a' }))
        await store.insertPat(pat('c', 'acme', { rotatedFrom: 'b' }))
        await store.insertPat(pat('c2', 'acme', { rotatedFrom: 'c', revokedAt: T0 + 1 }))
        await store.insertPat(pat('x', 'acme', { rotatedFrom: 'a' }))
        await store.insertPat(pat('d', 'acme'))
        const seen: string[] = []
        const unwatch = store.watch((c) => {
          if (c.kind === 'pat_changed') seen.push(c.tokenHash)
        })
        t.after(unwatch)
        const revoked = await store.revokePatFamily('b', T0 + 50)
        assert.deepEqual(revoked.map((r) => r.id).sort(), ['a', 'b', 'c', 'x'])
        for (const r of revoked) assert.equal(r.revokedAt, T0 + 50)
        assert.equal((await store.getPat('c2'))?.revokedAt, T0 + 1, 'first revocation kept')
        assert.equal((await store.getPat('d'))?.revokedAt, null, 'other families untouched')
        for (let i = 0; i < 100 && seen.length < 4; i++) await new Promise((r) => setTimeout(r, 50))
        assert.deepEqual(
          [...new Set(seen)].sort(),
          ['a', 'b', 'c', 'x'].map((id) => sha256(`pat_${id}`)).sort(),
        )
        assert.deepEqual(await store.revokePatFamily('c', T0 + 60), [])
        assert.deepEqual(await store.revokePatFamily('ghost', T0 + 60), [])
        assert.equal((await store.getPat('a'))?.revokedAt, T0 + 50)
      })

      it('revokePatFamily of a token never rotated revokes just that token', async (t) => {
        const store = await withTenants(t, 'acme')
        await store.insertPat(pat('solo', 'acme'))
        await store.insertPat(pat('other', 'acme'))
        const revoked = await store.revokePatFamily('solo', T0 + 1)
        assert.deepEqual(
          revoked.map((r) => r.id),
          ['solo'],
        )
        assert.equal((await store.getPat('other'))?.revokedAt, null)
      })
    })

    describe('issuers', () => {
      it('putIssuer stores the config as given, nested key sources included', async (t) => {
        const store = await open(t)
        assert.deepEqual(await store.listIssuers(), [])
        await store.putIssuer(issuerA, T0)
        await store.putIssuer(issuerB, T0 + 1)
        await store.putIssuer(issuerC, T0 + 2)
        const listed = [...(await store.listIssuers())].sort((a, b) =>
          a.issuer < b.issuer ? -1 : 1,
        )
        assert.deepEqual(
          listed.map((i) => ({ ...i })),
          [
            { ...issuerA, createdAt: T0 },
            { ...issuerB, createdAt: T0 + 1 },
            { ...issuerC, createdAt: T0 + 2 },
          ],
        )
      })

      it('putIssuer replaces by issuer, keeping the first creation time', async (t) => {
        const store = await open(t)
        await store.putIssuer(issuerA, T0)
        await store.putIssuer(issuerB, T0)
        const replaced: IssuerConfig = {
          issuer: issuerA.issuer,
          audiences: ['api-v2'],
          keySource: { kind: 'jwks_url', url: 'https://idp.example/v2/jwks.json' },
        }
        await store.putIssuer(replaced, T0 + 50)
        const listed = await store.listIssuers()
        assert.equal(listed.length, 2)
        const found = listed.find((i) => i.issuer === issuerA.issuer)
        assert.deepEqual({ ...found }, { ...replaced, createdAt: T0 })
      })

      it('removeIssuer removes once, then reports false', async (t) => {
        const store = await open(t)
        await store.putIssuer(issuerA, T0)
        await store.putIssuer(issuerB, T0)
        assert.equal(await store.removeIssuer(issuerA.issuer), true)
        assert.equal(await store.removeIssuer(issuerA.issuer), false)
        assert.equal(await store.removeIssuer('https://never.example'), false)
        assert.deepEqual(
          (await store.listIssuers()).map((i) => i.issuer),
          [issuerB.issuer],
        )
      })
    })

    describe('audit events', () => {
      it('listAudit pages newest first, ties by id, isolated by tenant', async (t) => {
        const store = await open(t)
        await store.appendAudit([
          event('e1', 'acme', T0 + 1),
          event('e2', 'acme', T0 + 3),
          event('e3', 'acme', T0 + 2),
          event('e5', 'acme', T0 + 2),
          event('e4', 'other', T0 + 4),
          event('e6', null, T0 + 5),
        ])
        await store.appendAudit([event('e7', 'acme', T0 + 9)])
        const { pages, items } = await allPages((cursor) =>
          store.listAudit('acme', { limit: 2, cursor }),
        )
        assert.deepEqual(
          pages.map((page) => page.map((e) => e.id)),
          [['e7', 'e2'], ['e5', 'e3'], ['e1']],
        )
        assert.equal(items.length, 5)
        const other = await store.listAudit('other', { limit: 10 })
        assert.deepEqual(
          other.items.map((e) => e.id),
          ['e4'],
        )
        assert.deepEqual((await store.listAudit('nobody', { limit: 10 })).items, [])
      })

      it('every field, nested details included, round-trips', async (t) => {
        const store = await open(t)
        const full: StoredAuditEvent = {
          id: 'evt-1',
          time: T0 + 42,
          type: 'pat.revoked',
          tenantId: 'acme',
          actor: 'cli:alice',
          outcome: 'ok',
          clientAddress: '2001:db8::1',
          requestId: 'req-77',
          details: { patId: 'p1', reasons: ['rotated', 'leak'], nested: { n: 3, ok: true } },
        }
        const sparse: StoredAuditEvent = {
          ...event('evt-0', 'acme', T0),
          actor: null,
          clientAddress: null,
          requestId: null,
        }
        await store.appendAudit([full, sparse])
        const { items } = await store.listAudit('acme', { limit: 10 })
        assert.deepEqual(
          items.map((e) => ({ ...e })),
          [full, sparse],
        )
      })

      it('appending an already stored event id keeps one copy; empty batches are fine', async (t) => {
        const store = await open(t)
        await store.appendAudit([])
        await store.appendAudit([event('e1', 'acme', T0), event('e2', 'acme', T0 + 1)])
        await store.appendAudit([event('e1', 'acme', T0), event('e3', 'acme', T0 + 2)])
        const { items } = await store.listAudit('acme', { limit: 10 })
        assert.deepEqual(
          items.map((e) => e.id),
          ['e3', 'e2', 'e1'],
        )
      })
    })

    describe('event outbox', () => {
      it('a batch of 150 with stored ids among them: each new event stored and queued once, in batch order', async (t) => {
        // 150 crosses every size SQLite writes a batch in (64, 16, 4, 1 rows per statement).
        const store = await open(t)
        const ids = Array.from({ length: 150 }, (_, i) => `b${String(i).padStart(3, '0')}`)
        const stored = new Set(['b000', 'b063', 'b064', 'b130', 'b149'])
        await store.appendAudit(
          [...stored].map((id) => event(id, 'acme', T0)),
          { queue: false },
        )
        await store.appendAudit(
          ids.map((id, i) => ({ ...event(id, 'acme', T0 + i), details: { i } })),
        )
        const fresh = ids.filter((id) => !stored.has(id))
        assert.deepEqual(await store.outboxStats(), { pending: fresh.length, oldestTime: T0 + 1 })
        const claimed = await store.claimOutbox(T0, 200, 60_000)
        assert.deepEqual(
          claimed.map((c) => c.event.id),
          fresh,
        )
        assert.deepEqual(
          claimed.map((c) => c.event.details),
          fresh.map((id) => ({ i: ids.indexOf(id) })),
        )
        const { items } = await store.listAudit('acme', { limit: 200 })
        assert.equal(items.length, 150)
      })

      it('appendAudit queues every new event once, in order, with every field', async (t) => {
        const store = await open(t)
        const full: StoredAuditEvent = {
          ...event('e1', 'acme', T0),
          actor: 'pat_…abcd',
          details: { nested: { list: [1, 'two'] }, reason: 'revoked' },
        }
        await store.appendAudit([full, event('e2', null, T0 + 1)])
        await store.appendAudit([event('e3', 'other', T0 - 5)])
        assert.deepEqual(await store.outboxStats(), { pending: 3, oldestTime: T0 - 5 })
        const claimed = await store.claimOutbox(T0, 10, 60_000)
        assert.deepEqual(
          claimed.map((c) => c.event.id),
          ['e1', 'e2', 'e3'],
          'queue order, not event time',
        )
        assert.deepEqual({ ...claimed[0]?.event }, full)
        assert.deepEqual(
          claimed.map((c) => c.attempts),
          [0, 0, 0],
        )
      })

      it('a retried batch re-queues nothing: neither a waiting nor a delivered event', async (t) => {
        const store = await open(t)
        await store.appendAudit([event('e1', 'acme', T0), event('e2', 'acme', T0)])
        await store.completeOutbox(['e1'])
        await store.appendAudit([event('e1', 'acme', T0), event('e2', 'acme', T0)])
        const claimed = await store.claimOutbox(T0, 10, 1000)
        assert.deepEqual(
          claimed.map((c) => c.event.id),
          ['e2'],
        )
      })

      it('a claim hides entries until its lease ends; limit bounds a claim', async (t) => {
        const store = await open(t)
        await store.appendAudit(['e1', 'e2', 'e3'].map((id) => event(id, 'acme', T0)))
        const first = await store.claimOutbox(T0, 2, 1000)
        assert.deepEqual(
          first.map((c) => c.event.id),
          ['e1', 'e2'],
        )
        const second = await store.claimOutbox(T0 + 10, 10, 1000)
        assert.deepEqual(
          second.map((c) => c.event.id),
          ['e3'],
        )
        assert.deepEqual(await store.claimOutbox(T0 + 999, 10, 1000), [])
        // The first worker died: its lease ends and the entries are claimable again.
        const reclaimed = await store.claimOutbox(T0 + 1000, 10, 1000)
        assert.deepEqual(
          reclaimed.map((c) => c.event.id),
          ['e1', 'e2'],
        )
      })

      it('concurrent claims never return the same entry', async (t) => {
        const store = await open(t)
        const ids = Array.from({ length: 40 }, (_, i) => `e${String(i).padStart(2, '0')}`)
        await store.appendAudit(ids.map((id) => event(id, 'acme', T0)))
        const claims = await Promise.all(
          Array.from({ length: 4 }, () => store.claimOutbox(T0, 15, 60_000)),
        )
        const got = claims.flatMap((c) => c.map((e) => e.event.id))
        assert.equal(new Set(got).size, got.length, 'no entry claimed twice')
        assert.deepEqual([...got].sort(), ids)
      })

      it('retryOutbox counts the attempt and defers the entry; completeOutbox removes it', async (t) => {
        const store = await open(t)
        await store.appendAudit([event('e1', 'acme', T0), event('e2', 'acme', T0)])
        await store.claimOutbox(T0, 10, 60_000)
        await store.retryOutbox(['e1', 'e2'], T0 + 5000, 'HTTP 503')
        assert.deepEqual(await store.claimOutbox(T0 + 4999, 10, 60_000), [], 'not due yet')
        const due = await store.claimOutbox(T0 + 5000, 10, 60_000)
        assert.deepEqual(
          due.map((c) => [c.event.id, c.attempts]),
          [
            ['e1', 1],
            ['e2', 1],
          ],
        )
        await store.completeOutbox(['e1', 'ghost'])
        await store.retryOutbox(['e2'], T0 + 6000, 'x'.repeat(10_000))
        assert.deepEqual(await store.outboxStats(), { pending: 1, oldestTime: T0 })
        const last = await store.claimOutbox(T0 + 6000, 10, 60_000)
        assert.deepEqual(
          last.map((c) => [c.event.id, c.attempts]),
          [['e2', 2]],
        )
        await store.completeOutbox(['e2'])
        await store.completeOutbox([])
        await store.retryOutbox([], T0, 'nothing')
        assert.deepEqual(await store.outboxStats(), { pending: 0, oldestTime: null })
        assert.equal((await store.listAudit('acme', { limit: 10 })).items.length, 2, 'audit kept')
      })

      it('queue: false stores the events (all fields) without queuing them', async (t) => {
        const store = await open(t)
        const full: StoredAuditEvent = {
          ...event('e1', 'acme', T0),
          actor: 'pat_…abcd',
          details: { nested: { list: [1, 'two'] } },
        }
        await store.appendAudit([full, event('e2', null, T0 + 1)], { queue: false })
        await store.appendAudit([event('e3', 'acme', T0 + 2)], { queue: true })
        await store.appendAudit([event('e4', 'acme', T0 + 3)], {})
        const { items } = await store.listAudit('acme', { limit: 10 })
        assert.deepEqual(
          items.map((e) => e.id),
          ['e4', 'e3', 'e1'],
        )
        assert.deepEqual({ ...items[2] }, full)
        const claimed = await store.claimOutbox(T0, 10, 1000)
        assert.deepEqual(
          claimed.map((c) => c.event.id),
          ['e3', 'e4'],
          'queue: true and the default queue; queue: false does not',
        )
        // Retried (here with queue) after storing: already stored, so neither stored again
        // nor queued now; an event is queued only when it is first stored.
        await store.appendAudit([full], { queue: true })
        assert.equal((await store.listAudit('acme', { limit: 10 })).items.length, 3)
        assert.deepEqual(await store.outboxStats(), { pending: 2, oldestTime: T0 + 2 })
      })

      it('clearOutbox empties the queue and keeps the audit log', async (t) => {
        const store = await open(t)
        await store.appendAudit([event('e1', 'acme', T0), event('e2', 'acme', T0)])
        assert.equal(await store.clearOutbox(), 2)
        assert.equal(await store.clearOutbox(), 0)
        assert.deepEqual(await store.claimOutbox(T0, 10, 1000), [])
        assert.equal((await store.listAudit('acme', { limit: 10 })).items.length, 2)
      })
    })

    describe('watch', () => {
      it('delivers pat_changed with the hash when a token is revoked', async (t) => {
        const store = await withTenants(t, 'acme')
        const record = pat('p1', 'acme')
        await store.insertPat(record)
        const change = nextChange(store, (c) => c.kind === 'pat_changed')
        await store.revokePat('p1', T0 + 1)
        assert.deepEqual(
          { ...(await change) },
          { kind: 'pat_changed', tokenHash: record.tokenHash },
        )
      })

      it('logs every change of every pats column but last_used_at, in commit order', async (t) => {
        // Derived from the schema: a column added to pats without a change-log entry for its
        // edits (the SQLite trigger lists columns) fails here.
        const store = await withTenants(t, 'acme', 'beta')
        const record = pat('p1', 'acme')
        await store.insertPat(record)
        const seen: StoreChange[] = []
        const unwatch = store.watch((c) => seen.push(c))
        t.after(unwatch)
        await store.recordPatUse(new Map([['p1', T0 + 5]]))
        await store.revokePat('p1', T0 + 6)
        const columns = await patColumns(store, sqlOf(store))
        assert.ok(columns.includes('revoked_at') && !columns.includes('last_used_at'))
        for (const column of columns) {
          const before = seen.filter((c) => c.kind === 'pat_changed').length
          await updatePatColumn(store, sqlOf(store), 'p1', column)
          const deadline = Date.now() + 5000
          while (seen.filter((c) => c.kind === 'pat_changed').length === before) {
            assert.ok(Date.now() < deadline, `an update of pats.${column} was not logged`)
            await new Promise((r) => setTimeout(r, 20))
          }
        }
        const lastUse = seen.length
        await store.recordPatUse(new Map([['p1', T0 + 500]]))
        await store.setTenantEnabled('beta', false)
        const deadline = Date.now() + 5000
        while (!seen.slice(lastUse).some((c) => c.kind === 'tenant_changed')) {
          assert.ok(Date.now() < deadline, 'the tenant change was not delivered')
          await new Promise((r) => setTimeout(r, 20))
        }
        assert.deepEqual(
          seen.slice(lastUse),
          [{ kind: 'tenant_changed', id: 'beta' }],
          'a last-used write is not a change, and changes arrive in order',
        )
      })

      it('delivers tenant_changed when a tenant is disabled or enabled', async (t) => {
        const store = await withTenants(t, 'acme')
        const disabled = nextChange(store, (c) => c.kind === 'tenant_changed')
        await store.setTenantEnabled('acme', false)
        assert.deepEqual({ ...(await disabled) }, { kind: 'tenant_changed', id: 'acme' })
        const enabled = nextChange(store, (c) => c.kind === 'tenant_changed')
        await store.setTenantEnabled('acme', true)
        assert.deepEqual({ ...(await enabled) }, { kind: 'tenant_changed', id: 'acme' })
      })

      it('delivers issuers_changed on put and on remove', async (t) => {
        const store = await open(t)
        const put = nextChange(store, (c) => c.kind === 'issuers_changed')
        await store.putIssuer(issuerA, T0)
        assert.deepEqual({ ...(await put) }, { kind: 'issuers_changed' })
        const removed = nextChange(store, (c) => c.kind === 'issuers_changed')
        await store.removeIssuer(issuerA.issuer)
        assert.deepEqual({ ...(await removed) }, { kind: 'issuers_changed' })
      })

      it('an unsubscribed listener receives nothing more', async (t) => {
        const store = await withTenants(t, 'acme')
        await store.insertPat(pat('p1', 'acme'))
        const seen: StoreChange[] = []
        const unsubscribe = store.watch((change) => seen.push(change))
        unsubscribe()
        // A listener still subscribed tells us when delivery has happened.
        const delivered = nextChange(store, (c) => c.kind === 'pat_changed')
        await store.revokePat('p1', T0 + 1)
        await delivered
        assert.deepEqual(seen, [])
      })

      it('entries pruned past the cursor, the whole log included, make the follower resync', async (t) => {
        const store = await withTenants(t, 'acme')
        await store.insertPat(pat('p1', 'acme'))
        const seen: StoreChange[] = []
        t.after(store.watch((c) => seen.push(c)))
        // The revocation and a later change are logged, then pruned (retention passed), in one
        // commit: no read can see the revocation, so only a resync can drop a cached copy.
        await store.transaction(async (tx) => {
          await tx.revokePat('p1', T0 + 1)
          await tx.createTenant({ id: 'later', name: 'Later' }, T0 + 2)
          // Both stores' transaction views have the store's own prune (not part of the type).
          const prunable = tx as unknown as { pruneChangeLog(before: number): Promise<number> }
          await prunable.pruneChangeLog(Date.now() + 86_400_000)
        })
        assert.ok(
          seen.some((c) => c.kind === 'resync'),
          `expected a resync, got ${JSON.stringify(seen)}`,
        )
      })
    })

    describe('transaction', () => {
      /** A store with tenant acme, watched from before it was created. */
      async function watched(t: TestContext) {
        const store = await open(t)
        const seen: StoreChange[] = []
        t.after(store.watch((c) => seen.push(c)))
        await store.createTenant({ id: 'acme', name: 'Tenant acme' }, T0)
        // Its own change is delivered before the call resolves.
        seen.length = 0
        return { store, seen }
      }

      it('commits every write of the work together, audit events included', async (t) => {
        const { store, seen } = await watched(t)
        const result = await store.transaction(async (tx) => {
          await tx.createTenant({ id: 'beta', name: 'Beta' }, T0)
          await tx.setTenantEnabled('acme', false)
          await tx.putIssuer(issuerA, T0)
          await tx.appendAudit([event('e1', 'beta', T0), event('e2', 'beta', T0 + 1)])
          // The work reads its own writes.
          return (await tx.findTenant('beta'))?.name
        })
        assert.equal(result, 'Beta')
        assert.equal((await store.findTenant('acme'))?.enabled, false)
        assert.deepEqual(
          (await store.listIssuers()).map((i) => i.issuer),
          [issuerA.issuer],
        )
        assert.equal((await store.listAudit('beta', { limit: 10 })).items.length, 2)
        // Watchers have every change once the transaction resolves.
        assert.deepEqual(
          seen.map((c) => (c.kind === 'tenant_changed' ? `tenant ${c.id}` : c.kind)),
          ['tenant beta', 'tenant acme', 'issuers_changed'],
        )
      })

      it('a work that rejects leaves nothing, and its error is the one thrown', async (t) => {
        const { store, seen } = await watched(t)
        await store.insertPat(pat('p1', 'acme'))
        const failure = new Error('stop here')
        await assert.rejects(
          store.transaction(async (tx) => {
            await tx.createTenant({ id: 'beta', name: 'Beta' }, T0)
            await tx.revokePat('p1', T0 + 1)
            await tx.putIssuer(issuerA, T0)
            await tx.appendAudit([event('e1', 'acme', T0)])
            throw failure
          }),
          (error) => error === failure,
        )
        assert.equal(await store.findTenant('beta'), undefined)
        assert.equal((await store.getPat('p1'))?.revokedAt, null)
        assert.deepEqual(await store.listIssuers(), [])
        assert.equal((await store.listAudit('acme', { limit: 10 })).items.length, 0)
        assert.deepEqual(seen, [])
      })

      it('a write the store refuses mid-way (a conflict) undoes the writes before it', async (t) => {
        const store = await withTenants(t, 'acme')
        await assert.rejects(
          store.transaction(async (tx) => {
            await tx.createTenant({ id: 'beta', name: 'Beta' }, T0)
            await tx.createTenant({ id: 'acme', name: 'again' }, T0)
          }),
          ConflictError,
        )
        assert.deepEqual(
          (await store.listTenants()).map((x) => x.id),
          ['acme'],
        )
      })

      it('other calls on the store are not part of it: they never see it uncommitted', async (t) => {
        const store = await withTenants(t, 'acme')
        let outside: string | undefined = 'unread'
        await store.transaction(async (tx) => {
          await tx.setTenantEnabled('acme', false)
          outside = String((await store.findTenant('acme'))?.enabled)
        })
        assert.equal(outside, 'true')
        assert.equal((await store.findTenant('acme'))?.enabled, false)
      })

      it('the transaction cannot be used once it has ended', async (t) => {
        const store = await withTenants(t, 'acme')
        let kept: Parameters<Parameters<Store['transaction']>[0]>[0] | undefined
        await store.transaction(async (tx) => {
          kept = tx
        })
        await assert.rejects(async () => kept?.findTenant('acme'), Error)
        assert.ok(await store.findTenant('acme'))
      })
    })
  })
}

const issuerA: IssuerConfig = {
  issuer: 'https://a.idp.example',
  audiences: ['api'],
  keySource: {
    kind: 'jwks',
    jwks: {
      keys: [
        { kty: 'EC', crv: 'P-256', x: 'f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU', alg: 'ES256' },
        {
          kty: 'OKP',
          crv: 'Ed25519',
          x: '11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo',
          alg: 'EdDSA',
        },
      ],
    },
  },
  algorithms: ['ES256', 'EdDSA'],
  tenant: { claim: 'org_id' },
  permissionsClaim: 'scope',
}

const issuerB: IssuerConfig = {
  issuer: 'https://b.idp.example',
  audiences: ['api', 'admin'],
  keySource: {
    kind: 'pem',
    pem: '-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEA11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo=\n-----END PUBLIC KEY-----\n',
    algorithm: 'EdDSA',
    kid: 'k1',
  },
  tenant: { fixed: 'acme' },
}

const issuerC: IssuerConfig = {
  issuer: 'https://c.idp.example/realms/x',
  audiences: ['api'],
  keySource: { kind: 'jwks_url', url: 'https://c.idp.example/realms/x/certs' },
}

/** The pats columns whose changes must be logged: all but last_used_at. */
async function patColumns(store: Store, sql: RawSql): Promise<string[]> {
  const names = await sql(
    store.kind === 'postgres'
      ? "SELECT column_name AS name FROM information_schema.columns WHERE table_name = 'pats'"
      : "SELECT name FROM pragma_table_info('pats')",
  )
  return names.map((row) => String(row.name)).filter((name) => name !== 'last_used_at')
}

/** Sets one pats column to a new value of its type with plain SQL (as a DBA would). */
async function updatePatColumn(
  store: Store,
  sql: RawSql,
  id: string,
  column: string,
): Promise<void> {
  const fresh = `${column}-${Math.random().toString(36).slice(2)}`
  const values: Record<string, string> = {
    permissions: store.kind === 'postgres' ? "ARRAY['changed']" : `'["changed"]'`,
    tenant_id: "'beta'",
    id: `'${id}'`,
    // JSON columns (jsonb in Postgres, TEXT in SQLite): a JSON object either way.
    rate_limit: `'{"max": ${Math.floor(Math.random() * 1e6)}, "windowSec": 60}'`,
    quota: `'{"limit": ${Math.floor(Math.random() * 1e6)}}'`,
    metadata: `'{"fresh": "${fresh}"}'`,
  }
  const isTime = /_at$|_until$/.test(column)
  const value =
    values[column] ?? (isTime ? String(T0 + Math.floor(Math.random() * 1e6)) : `'${fresh}'`)
  // id: rewritten to itself (the update names the column; Postgres compares rows, so the
  // token hash is changed too to make it a change there).
  const extra = column === 'id' ? `, name = '${fresh}'` : ''
  await sql(`UPDATE pats SET ${column} = ${value}${extra} WHERE id = '${id}'`)
}
