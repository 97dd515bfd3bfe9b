/**
 * The store contract of issue #24 (keys as a product), run by `storeContract` for every
 * backend: PAT and tenant edits (atomic before/after, change events), the new PAT fields,
 * external-id search, quota counts (atomic reservations, periods, release, reset), usage
 * buckets and retention.
 */
import assert from 'node:assert/strict'
import { describe, it, type TestContext } from 'node:test'
import type { Quota } from '../../src/core/ports.ts'
import type { Store, UsageRow } from '../../src/stores/store.ts'
import { event, type MakeStore, nextChange, pat, T0 } from './contract.ts'

const HOUR = 3_600_000
/** An `x5t#S256` (base64url SHA-256 of a certificate's DER). */
const THUMBPRINT = 'lEIq3-ZRHtP3l5kJ2S5sFj2e2Ak4WaWfG9rnh3ZgT1c'

function usage(overrides: Partial<UsageRow>): UsageRow {
  return {
    scope: 'key',
    subject: 'p1',
    resolution: 'minute',
    bucketStart: T0,
    tenantId: 'acme',
    allowed: 0,
    unauthorized: 0,
    forbidden: 0,
    limited: 0,
    ...overrides,
  }
}

export function keysContract(name: string, makeStore: MakeStore): void {
  async function withTenants(t: TestContext, ...ids: string[]): Promise<Store> {
    const { store, cleanup } = await makeStore()
    t.after(cleanup)
    await store.migrate()
    for (const id of ids) await store.createTenant({ id, name: `Tenant ${id}` }, T0)
    return store
  }

  const quota: Quota = { limit: 10, refill: 'daily', counter: 'p1' }

  describe(`${name} store contract: keys as a product`, () => {
    it('a PAT with every product field round-trips', async (t) => {
      const store = await withTenants(t, 'acme')
      const record = pat('p1', 'acme', {
        disabledAt: T0 + 1,
        rateLimit: { max: 30, windowSec: 10 },
        quota: { limit: 5, refill: 'interval', intervalSec: 3600, anchorAt: T0, counter: 'p1' },
        metadata: { plan: 'pro', seats: 3, tags: ['a', 'b'], nested: { ok: true } },
        externalId: 'cus_123',
        certificateThumbprint: THUMBPRINT,
      })
      await store.insertPat(record)
      assert.deepEqual({ ...(await store.getPat('p1')) }, record)
      assert.deepEqual({ ...(await store.findPatByHash(record.tokenHash)) }, record)
    })

    it('updatePat changes what it is given, keeps the rest, and answers before and after', async (t) => {
      const store = await withTenants(t, 'acme')
      const before = pat('p1', 'acme', { externalId: 'old', metadata: { a: 1 } })
      await store.insertPat(before)
      const changed = await store.updatePat('p1', {
        name: 'renamed',
        permissions: ['audit:read'],
        expiresAt: T0 + HOUR,
        rateLimit: { max: 5, windowSec: 60 },
        quota,
        externalId: null,
      })
      assert.ok(changed)
      assert.deepEqual({ ...changed.before }, before)
      const after = {
        ...before,
        name: 'renamed',
        permissions: ['audit:read'],
        expiresAt: T0 + HOUR,
        rateLimit: { max: 5, windowSec: 60 },
        quota,
        externalId: null,
      }
      assert.deepEqual({ ...changed.after }, after)
      assert.deepEqual({ ...(await store.getPat('p1')) }, after)
      const cleared = await store.updatePat('p1', { quota: null, metadata: null, disabledAt: T0 })
      assert.deepEqual(
        [cleared?.after.quota, cleared?.after.metadata, cleared?.after.disabledAt],
        [null, null, T0],
      )
      assert.equal((await store.getPat('p1'))?.name, 'renamed')
    })

    it('updatePat of an unknown or revoked token writes nothing and is undefined', async (t) => {
      const store = await withTenants(t, 'acme')
      await store.insertPat(pat('p1', 'acme'))
      await store.revokePat('p1', T0)
      assert.equal(await store.updatePat('p1', { name: 'x' }), undefined)
      assert.equal(await store.updatePat('nope', { name: 'x' }), undefined)
      assert.equal((await store.getPat('p1'))?.name, 'token p1')
    })

    it('a certificate binding is set and cleared by updatePat, each a pat_changed (caches drop the key)', async (t) => {
      const store = await withTenants(t, 'acme')
      const record = pat('p1', 'acme')
      await store.insertPat(record)
      let change = nextChange(store, (c) => c.kind === 'pat_changed')
      const bound = await store.updatePat('p1', { certificateThumbprint: THUMBPRINT })
      assert.deepEqual(
        [bound?.before.certificateThumbprint, bound?.after.certificateThumbprint],
        [null, THUMBPRINT],
      )
      assert.deepEqual(await change, { kind: 'pat_changed', tokenHash: record.tokenHash })
      assert.equal((await store.findPatByHash(record.tokenHash))?.certificateThumbprint, THUMBPRINT)
      change = nextChange(store, (c) => c.kind === 'pat_changed')
      await store.updatePat('p1', { certificateThumbprint: null })
      assert.deepEqual(await change, { kind: 'pat_changed', tokenHash: record.tokenHash })
      assert.equal((await store.getPat('p1'))?.certificateThumbprint, null)
    })

    it('updatePat emits pat_changed with the token hash (caches drop the key)', async (t) => {
      const store = await withTenants(t, 'acme')
      const record = pat('p1', 'acme')
      await store.insertPat(record)
      const change = nextChange(store, (c) => c.kind === 'pat_changed')
      await store.updatePat('p1', { disabledAt: T0 })
      assert.deepEqual(await change, { kind: 'pat_changed', tokenHash: record.tokenHash })
    })

    it('updateTenant changes name and rate limit, answers before and after, emits tenant_changed', async (t) => {
      const store = await withTenants(t, 'acme')
      const change = nextChange(store, (c) => c.kind === 'tenant_changed')
      const changed = await store.updateTenant('acme', { rateLimit: { max: 100, windowSec: 1 } })
      assert.deepEqual(await change, { kind: 'tenant_changed', id: 'acme' })
      assert.equal(changed?.before.rateLimit, null)
      assert.deepEqual(changed?.after.rateLimit, { max: 100, windowSec: 1 })
      assert.deepEqual((await store.findTenant('acme'))?.rateLimit, { max: 100, windowSec: 1 })
      const renamed = await store.updateTenant('acme', { name: 'Acme' })
      assert.deepEqual(renamed?.after.rateLimit, { max: 100, windowSec: 1 })
      assert.equal((await store.findTenant('acme'))?.name, 'Acme')
      await store.updateTenant('acme', { rateLimit: null })
      assert.equal((await store.findTenant('acme'))?.rateLimit, null)
      assert.equal(await store.updateTenant('nobody', { name: 'x' }), undefined)
    })

    it('searchPats finds tokens by exact external id, across tenants', async (t) => {
      const store = await withTenants(t, 'acme', 'beta')
      await store.insertPat(pat('p1', 'acme', { externalId: 'cus_1' }))
      await store.insertPat(pat('p2', 'beta', { externalId: 'cus_1', createdAt: T0 + 1 }))
      await store.insertPat(pat('p3', 'acme', { externalId: 'cus_10' }))
      await store.insertPat(pat('p4', 'acme'))
      const found = await store.admin.searchPats({ externalId: 'cus_1' }, { limit: 10 })
      assert.deepEqual(
        found.items.map((p) => p.id),
        ['p2', 'p1'],
      )
      const inTenant = await store.admin.searchPats(
        { externalId: 'cus_1', tenantId: 'acme' },
        { limit: 10 },
      )
      assert.deepEqual(
        inTenant.items.map((p) => p.id),
        ['p1'],
      )
    })

    it('reserveQuota grants blocks up to the limit, then nothing', async (t) => {
      const store = await withTenants(t)
      assert.deepEqual(await store.reserveQuota('c1', T0, 10, 4), {
        granted: 4,
        used: 4,
        periodStart: T0,
        generation: 0,
      })
      assert.deepEqual(await store.reserveQuota('c1', T0, 10, 4), {
        granted: 4,
        used: 8,
        periodStart: T0,
        generation: 0,
      })
      assert.deepEqual(await store.reserveQuota('c1', T0, 10, 4), {
        granted: 2,
        used: 10,
        periodStart: T0,
        generation: 0,
      })
      assert.deepEqual(await store.reserveQuota('c1', T0, 10, 4), {
        granted: 0,
        used: 10,
        periodStart: T0,
        generation: 0,
      })
      // A lowered limit grants nothing more; counters are independent.
      assert.equal((await store.reserveQuota('c1', T0, 3, 1)).granted, 0)
      assert.equal((await store.reserveQuota('c2', T0, 3, 5)).granted, 3)
    })

    it('a later period starts the count again; an earlier one never resets it', async (t) => {
      const store = await withTenants(t)
      await store.reserveQuota('c1', T0, 5, 5)
      assert.deepEqual(await store.reserveQuota('c1', T0 + HOUR, 5, 2), {
        granted: 2,
        used: 2,
        periodStart: T0 + HOUR,
        generation: 0,
      })
      // An instance whose clock is behind asks for the old period: counted in the current one.
      assert.deepEqual(await store.reserveQuota('c1', T0, 5, 2), {
        granted: 2,
        used: 4,
        periodStart: T0 + HOUR,
        generation: 0,
      })
    })

    it('concurrent reservations never grant more than the limit in all', async (t) => {
      const store = await withTenants(t)
      const grants = await Promise.all(
        Array.from({ length: 40 }, () => store.reserveQuota('c1', T0, 25, 3)),
      )
      assert.equal(
        grants.reduce((sum, g) => sum + g.granted, 0),
        25,
      )
    })

    it('releaseQuota gives back uses of the same period only; resetQuota forgets the counter', async (t) => {
      const store = await withTenants(t)
      await store.reserveQuota('c1', T0, 10, 10)
      await store.releaseQuota('c1', T0, 0, 3)
      assert.deepEqual((await store.readQuota(['c1'])).get('c1'), { periodStart: T0, used: 7 })
      await store.releaseQuota('c1', T0 - HOUR, 0, 5)
      await store.releaseQuota('c1', T0, 0, 50)
      assert.deepEqual((await store.readQuota(['c1', 'none'])).get('c1'), {
        periodStart: T0,
        used: 0,
      })
      assert.equal((await store.readQuota(['none'])).size, 0)
      await store.resetQuota('c1')
      assert.deepEqual((await store.readQuota(['c1'])).get('c1'), { periodStart: T0, used: 0 })
      assert.equal((await store.reserveQuota('c1', T0, 10, 10)).granted, 10)
    })

    it('a reset starts a new generation: a release of uses reserved before it changes nothing', async (t) => {
      const store = await withTenants(t)
      const before = await store.reserveQuota('c1', T0, 10, 4)
      await store.resetQuota('c1')
      const after = await store.reserveQuota('c1', T0, 10, 10)
      assert.deepEqual([after.granted, after.used], [10, 10])
      assert.notEqual(after.generation, before.generation)
      await store.releaseQuota('c1', T0, before.generation, 3)
      assert.equal((await store.readQuota(['c1'])).get('c1')?.used, 10)
      await store.releaseQuota('c1', T0, after.generation, 3)
      assert.equal((await store.readQuota(['c1'])).get('c1')?.used, 7)
    })

    it('listPatFamily returns every token linked by rotation, both ways, oldest first', async (t) => {
      const store = await withTenants(t, 'acme')
      const first = pat('f1', 'acme')
      const second = pat('f2', 'acme', { createdAt: T0 + 1, rotatedFrom: 'f1' })
      const third = pat('f3', 'acme', { createdAt: T0 + 2, rotatedFrom: 'f2' })
      await store.insertPat(first)
      assert.ok(await store.rotatePat('f1', second, T0 + 1, T0 + HOUR))
      assert.ok(await store.rotatePat('f2', third, T0 + 2, T0 + 2))
      for (const id of ['f1', 'f2', 'f3']) {
        assert.deepEqual(
          (await store.listPatFamily(id)).map((p) => p.id),
          ['f1', 'f2', 'f3'],
        )
      }
      assert.deepEqual(await store.listPatFamily('nobody'), [])
    })

    it('addUsage adds to existing buckets; readUsage returns one subject in range, oldest first', async (t) => {
      const store = await withTenants(t)
      await store.addUsage([
        usage({ allowed: 2, unauthorized: 1 }),
        usage({ bucketStart: T0 + 60_000, forbidden: 4 }),
        usage({ subject: 'p2', allowed: 7 }),
        usage({ resolution: 'hour', allowed: 2, unauthorized: 1 }),
      ])
      await store.addUsage([usage({ allowed: 3, limited: 5 })])
      const rows = await store.readUsage({
        scope: 'key',
        subject: 'p1',
        resolution: 'minute',
        since: T0,
        until: T0 + HOUR,
      })
      assert.deepEqual(rows, [
        usage({ allowed: 5, unauthorized: 1, limited: 5 }),
        usage({ bucketStart: T0 + 60_000, forbidden: 4 }),
      ])
      const later = await store.readUsage({
        scope: 'key',
        subject: 'p1',
        resolution: 'minute',
        since: T0 + 60_000,
        until: T0 + 60_001,
      })
      assert.equal(later.length, 1)
    })

    it('topKeys ranks a tenant’s keys by requests in a range', async (t) => {
      const store = await withTenants(t)
      await store.addUsage([
        usage({ subject: 'k1', resolution: 'hour', allowed: 5 }),
        usage({ subject: 'k2', resolution: 'hour', allowed: 1, unauthorized: 9 }),
        usage({ subject: 'k2', resolution: 'hour', bucketStart: T0 + HOUR, allowed: 1 }),
        usage({ subject: 'k3', resolution: 'hour', tenantId: 'beta', allowed: 100 }),
        usage({ subject: 'k1', resolution: 'day', allowed: 1000 }),
      ])
      const top = await store.topKeys('acme', 'hour', T0, T0 + 2 * HOUR, 10)
      assert.deepEqual(
        top.map((k) => [k.tokenId, k.allowed, k.unauthorized]),
        [
          ['k2', 2, 9],
          ['k1', 5, 0],
        ],
      )
      assert.equal((await store.topKeys('acme', 'hour', T0, T0 + 2 * HOUR, 1)).length, 1)
    })

    it('pruneUsage deletes old buckets of one resolution, in batches', async (t) => {
      const store = await withTenants(t)
      await store.addUsage([
        usage({ subject: 'a', allowed: 1 }),
        usage({ subject: 'b', allowed: 1 }),
        usage({ subject: 'c', allowed: 1 }),
        usage({ subject: 'a', bucketStart: T0 + HOUR, allowed: 1 }),
        usage({ subject: 'a', resolution: 'hour', allowed: 1 }),
      ])
      assert.equal(await store.pruneUsage('minute', T0 + 1, 2), 2)
      assert.equal(await store.pruneUsage('minute', T0 + 1, 2), 1)
      assert.equal(await store.pruneUsage('minute', T0 + 1, 2), 0)
      const left = await store.readUsage({
        scope: 'key',
        subject: 'a',
        resolution: 'minute',
        since: 0,
        until: T0 + 2 * HOUR,
      })
      assert.deepEqual(
        left.map((r) => r.bucketStart),
        [T0 + HOUR],
      )
      const hours = await store.readUsage({
        scope: 'key',
        subject: 'a',
        resolution: 'hour',
        since: 0,
        until: T0 + 2 * HOUR,
      })
      assert.equal(hours.length, 1)
    })

    it('pruneAudit deletes old events oldest first, but never one still waiting for delivery', async (t) => {
      const store = await withTenants(t)
      await store.appendAudit(
        [event('e1', 'acme', T0), event('e2', 'acme', T0 + 1), event('e4', null, T0 + 10)],
        { queue: false },
      )
      await store.appendAudit([event('e3', 'acme', T0 + 2)])
      assert.equal(await store.pruneAudit(T0 + 5, 1), 1)
      assert.equal(await store.pruneAudit(T0 + 5, 10), 1)
      assert.equal(await store.pruneAudit(T0 + 5, 10), 0)
      const left = await store.admin.searchAudit({}, { limit: 10 })
      assert.deepEqual(
        left.items.map((e) => e.id),
        ['e4', 'e3'],
      )
      const claimed = await store.claimOutbox(T0 + 100, 10, 1000)
      await store.completeOutbox(claimed.map((c) => c.event.id))
      assert.equal(await store.pruneAudit(T0 + 5, 10), 1)
    })
  })
}
