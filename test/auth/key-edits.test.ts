/**
 * Keys as a product in the application layer (issue #24): issuing with limits, quota,
 * metadata and an external id; editing each (audited before/after, the lifetime policy from
 * creation, bad values named); disable/enable; rotation keeping the quota's counter; tenant
 * edits.
 */
import assert from 'node:assert/strict'
import { join } from 'node:path'
import { after, before, describe, it } from 'node:test'
import { quotaView } from '../../src/auth/key-fields.ts'
import { OperationRefused } from '../../src/auth/operations.ts'
import {
  editTenantPat,
  issueTenantPat,
  MAX_ROTATION_GRACE_MS,
  type PatOperationDeps,
  patMetadata,
  patStatus,
  revokeTenantPat,
  rotateTenantPat,
  setPatDisabled,
} from '../../src/auth/pat-lifecycle.ts'
import { createTenant, editTenant } from '../../src/auth/tenant-operations.ts'
import { openSqliteStore, type SqliteStore } from '../../src/stores/sqlite.ts'
import type { AuditEventInput } from '../../src/stores/write-behind.ts'
import { NOW, testClock } from '../helpers/clock.ts'
import { tempDir } from '../helpers/temp-dir.ts'

const DAY_MS = 86_400_000

describe('keys as a product: issue, edit, disable, rotate (SQLite store)', () => {
  let store: SqliteStore
  const clock = testClock()
  const written: AuditEventInput[] = []
  let deps: PatOperationDeps & { store: SqliteStore }

  before(async () => {
    store = openSqliteStore(join(tempDir('tg-keys-'), 'db.sqlite'))
    await store.migrate()
    deps = {
      store,
      clock,
      actor: { actor: 'cli:test', clientAddress: null, requestId: null },
      audit: { write: (record) => void written.push(record) },
      patPolicy: { defaultExpiresInDays: 90, maxExpiresInDays: 365 },
    }
    await createTenant(deps, { id: 'acme', name: 'Acme' })
  })
  after(() => store.close())

  const lastAudit = () => written.at(-1)
  const refused = (code: string, message?: RegExp) => (error: unknown) =>
    error instanceof OperationRefused &&
    error.code === code &&
    (message === undefined || message.test(error.message))

  const issue = (extra: Partial<Parameters<typeof issueTenantPat>[1]> = {}) =>
    issueTenantPat(deps, {
      tenantId: 'acme',
      subject: 'ci',
      name: 'deploy',
      permissions: ['tokens:read'],
      lifetime: 'default',
      ...extra,
    })

  it('issues a key with its own rate limit, quota, metadata and external id, audited', async () => {
    const { record } = await issue({
      rateLimit: { max: 10, windowSec: 60 },
      quota: { limit: 100, refill: 'monthly' },
      metadata: { plan: 'pro' },
      externalId: 'cus_1',
    })
    assert.deepEqual(record.quota, { limit: 100, refill: 'monthly', counter: record.id })
    assert.deepEqual({ ...(await store.getPat(record.id)) }, { ...record })
    assert.deepEqual(lastAudit()?.details, {
      tokenId: record.id,
      subject: 'ci',
      name: 'deploy',
      permissions: ['tokens:read'],
      expiresAt: new Date(NOW + 90 * DAY_MS).toISOString(),
      rateLimit: { max: 10, windowSec: 60 },
      quota: { limit: 100, refill: 'monthly' },
      metadata: { plan: 'pro' },
      externalId: 'cus_1',
    })
    const view = patMetadata(record, NOW)
    assert.deepEqual(
      [view.rateLimit, view.quota, view.metadata, view.externalId, view.disabledAt],
      [
        { max: 10, windowSec: 60 },
        { limit: 100, refill: 'monthly' },
        { plan: 'pro' },
        'cus_1',
        null,
      ],
    )
  })

  it('refuses bad values at issue, naming the field and the value', async () => {
    const cases: [Partial<Parameters<typeof issueTenantPat>[1]>, RegExp][] = [
      [{ rateLimit: { max: 0, windowSec: 60 } }, /^rate limit: 0 is not valid/],
      [{ rateLimit: { max: 5, windowSec: 90_000 } }, /^rate limit window: 90000 is not valid/],
      [{ quota: { limit: 1.5, refill: 'daily' } }, /^quota: 1.5 is not valid/],
      [{ quota: { limit: 5, refill: 'weekly' as 'daily' } }, /^quota refill: "weekly"/],
      [{ quota: { limit: 5, refill: 'interval', intervalSec: 5 } }, /^quota interval: 5 is not/],
      [{ metadata: [1, 2] as unknown as Record<string, unknown> }, /^metadata: \[1,2\]/],
      [{ metadata: { big: 'x'.repeat(5000) } }, /^metadata: 50\d\d bytes of JSON is too large/],
      [{ externalId: 'a\u202eb' }, /^external id: "a\\u\{202e\}b" is not valid/],
    ]
    for (const [extra, message] of cases) {
      await assert.rejects(issue(extra), refused('invalid_input', message), String(message))
    }
  })

  it('edits each field, audits only what changed (before and after), and nothing for no change', async () => {
    const { record } = await issue({ externalId: 'old' })
    const { record: edited, changed } = await editTenantPat(deps, record.id, {
      name: 'renamed',
      permissions: ['audit:read', 'audit:read'],
      rateLimit: { max: 5, windowSec: 1 },
      quota: { limit: 3, refill: 'interval', intervalSec: 3600 },
      metadata: { team: 'ops' },
      externalId: null,
    })
    assert.equal(changed, true)
    assert.deepEqual(edited.permissions, ['audit:read'])
    assert.deepEqual(edited.quota, {
      limit: 3,
      refill: 'interval',
      intervalSec: 3600,
      anchorAt: NOW,
      counter: record.id,
    })
    assert.deepEqual(lastAudit()?.type, 'pat.updated')
    assert.deepEqual(lastAudit()?.details, {
      tokenId: record.id,
      before: {
        name: 'deploy',
        permissions: ['tokens:read'],
        rateLimit: null,
        quota: null,
        metadata: null,
        externalId: 'old',
      },
      after: {
        name: 'renamed',
        permissions: ['audit:read'],
        rateLimit: { max: 5, windowSec: 1 },
        quota: { limit: 3, refill: 'interval', intervalSec: 3600 },
        metadata: { team: 'ops' },
        externalId: null,
      },
    })
    const count = written.length
    const again = await editTenantPat(deps, record.id, {
      name: 'renamed',
      rateLimit: { max: 5, windowSec: 1 },
    })
    assert.equal(again.changed, false)
    assert.equal(written.length, count)
  })

  it('an edited interval quota keeps its anchor while the interval is unchanged', async () => {
    const { record } = await issue({ quota: { limit: 3, refill: 'interval', intervalSec: 600 } })
    clock.advance(1000)
    const { record: raised } = await editTenantPat(deps, record.id, {
      quota: { limit: 9, refill: 'interval', intervalSec: 600 },
    })
    assert.equal(raised.quota?.anchorAt, record.quota?.anchorAt)
    const { record: longer } = await editTenantPat(deps, record.id, {
      quota: { limit: 9, refill: 'interval', intervalSec: 1200 },
    })
    assert.equal(longer.quota?.anchorAt, clock.now())
  })

  it('expiry edits stay within the maximum lifetime counted from creation', async () => {
    const { record } = await issue()
    clock.advance(300 * DAY_MS)
    // 300 days in: 100 more days would make a 400-day token; the policy allows 365.
    await assert.rejects(
      editTenantPat(deps, record.id, { expiresAt: clock.now() + 100 * DAY_MS }),
      refused('lifetime_exceeded'),
    )
    await assert.rejects(
      editTenantPat(deps, record.id, { expiresAt: 'never' }),
      refused('lifetime_exceeded'),
    )
    // The refusal carries the bound, so each surface words it in its own unit.
    await assert.rejects(editTenantPat(deps, record.id, { expiresAt: 'never' }), (error) => {
      assert.deepEqual((error as OperationRefused).limit, {
        field: 'lifetime',
        maxMs: 365 * DAY_MS,
      })
      return true
    })
    await assert.rejects(
      editTenantPat(deps, record.id, { expiresAt: clock.now() - 1 }),
      refused('invalid_input', /^expiry: .* expected a time in the future/),
    )
    const { record: edited } = await editTenantPat(deps, record.id, {
      expiresAt: record.createdAt + 365 * DAY_MS,
    })
    assert.equal(edited.expiresAt, record.createdAt + 365 * DAY_MS)
    assert.deepEqual(lastAudit()?.details, {
      tokenId: record.id,
      before: { expiresAt: new Date(record.createdAt + 90 * DAY_MS).toISOString() },
      after: { expiresAt: new Date(record.createdAt + 365 * DAY_MS).toISOString() },
    })
  })

  it('disable and enable without revoking: status, audit, idempotence', async () => {
    const { record } = await issue()
    const disabled = await setPatDisabled(deps, record.id, true)
    assert.equal(disabled.changed, true)
    assert.equal(patStatus(disabled.record, clock.now()), 'disabled')
    assert.equal(lastAudit()?.type, 'pat.disabled')
    assert.equal((await setPatDisabled(deps, record.id, true)).changed, false)
    await assert.rejects(
      rotateTenantPat(deps, { id: record.id, graceMs: 0, lifetime: 'default' }),
      refused('token_disabled'),
    )
    const enabled = await setPatDisabled(deps, record.id, false)
    assert.equal(patStatus(enabled.record, clock.now()), 'active')
    assert.equal(lastAudit()?.type, 'pat.enabled')
  })

  it('a revoked key cannot be edited, disabled or enabled; another tenant’s key is unknown', async () => {
    const { record } = await issue()
    await assert.rejects(
      editTenantPat(deps, record.id, { name: 'x' }, { tenantId: 'other' }),
      refused('token_unknown'),
    )
    await revokeTenantPat(deps, record.id)
    await assert.rejects(editTenantPat(deps, record.id, { name: 'x' }), refused('token_revoked'))
    await assert.rejects(setPatDisabled(deps, record.id, true), refused('token_revoked'))
    await assert.rejects(editTenantPat(deps, 'tok_nope', { name: 'x' }), refused('token_unknown'))
  })

  it('rotation keeps the limits, metadata, external id and the quota counter (no refill)', async () => {
    const { record } = await issue({
      rateLimit: { max: 2, windowSec: 1 },
      quota: { limit: 5, refill: 'none' },
      metadata: { a: 1 },
      externalId: 'cus_r',
    })
    await store.reserveQuota(record.id, 0, 5, 4)
    const rotated = await rotateTenantPat(deps, { id: record.id, graceMs: 0, lifetime: 'default' })
    assert.deepEqual(rotated.record.quota, record.quota)
    assert.deepEqual(
      [rotated.record.rateLimit, rotated.record.metadata, rotated.record.externalId],
      [record.rateLimit, record.metadata, record.externalId],
    )
    const view = await quotaView(
      store,
      rotated.record.quota as NonNullable<typeof record.quota>,
      clock.now(),
    )
    assert.deepEqual([view.used, view.remaining], [4, 1])
  })

  it('resetting the quota usage starts the count again, audited', async () => {
    const { record } = await issue({ quota: { limit: 5, refill: 'daily' } })
    const period = Math.floor(clock.now() / DAY_MS) * DAY_MS
    await store.reserveQuota(record.id, period, 5, 5)
    const quota = record.quota as NonNullable<typeof record.quota>
    assert.equal((await quotaView(store, quota, clock.now())).remaining, 0)
    const reset = await editTenantPat(deps, record.id, { resetQuotaUsage: true })
    assert.equal(reset.changed, true)
    assert.deepEqual(lastAudit()?.details, {
      tokenId: record.id,
      before: {},
      after: {},
      quotaUsageReset: true,
    })
    const view = await quotaView(store, quota, clock.now())
    assert.deepEqual(
      [view.used, view.remaining, view.resetsAt],
      [0, 5, new Date(period + DAY_MS).toISOString()],
    )
  })

  it('library callers get the 30-day grace limit too', async () => {
    const { record } = await issue()
    await assert.rejects(
      rotateTenantPat(deps, {
        id: record.id,
        graceMs: MAX_ROTATION_GRACE_MS + 1,
        lifetime: 'default',
      }),
      refused('invalid_input', /grace.*30 days/),
    )
    await assert.rejects(
      rotateTenantPat(deps, { id: record.id, graceMs: -1, lifetime: 'default' }),
      refused('invalid_input', /grace/),
    )
    for (const graceMs of [MAX_ROTATION_GRACE_MS + 1, -1, 1.5]) {
      await assert.rejects(
        rotateTenantPat(deps, { id: record.id, graceMs, lifetime: 'default' }),
        (error) => {
          assert.deepEqual((error as OperationRefused).limit, {
            field: 'grace',
            maxMs: MAX_ROTATION_GRACE_MS,
          })
          return true
        },
      )
    }
    const rotated = await rotateTenantPat(deps, {
      id: record.id,
      graceMs: MAX_ROTATION_GRACE_MS,
      lifetime: 'default',
    })
    assert.equal(rotated.graceUntil, clock.now() + MAX_ROTATION_GRACE_MS)
  })

  it('a rotation family shares one quota and one enabled state (edits from the library)', async () => {
    const { record } = await issue({ quota: { limit: 50, refill: 'monthly' } })
    const rotated = await rotateTenantPat(deps, {
      id: record.id,
      graceMs: DAY_MS,
      lifetime: 'default',
    })
    const edited = await editTenantPat(deps, rotated.record.id, { quota: { limit: 20 } })
    assert.deepEqual(edited.notes, [
      'quota: refill monthly kept',
      `also applied to its rotation family: ${record.id}`,
    ])
    assert.deepEqual((await store.getPat(record.id))?.quota, edited.record.quota)
    await setPatDisabled(deps, record.id, true)
    assert.notEqual((await store.getPat(rotated.record.id))?.disabledAt ?? null, null)
    await setPatDisabled(deps, rotated.record.id, false)
    assert.equal((await store.getPat(record.id))?.disabledAt ?? null, null)
    // A predecessor past its grace is not part of the family any more: left as it was.
    const next = await rotateTenantPat(deps, {
      id: rotated.record.id,
      graceMs: 0,
      lifetime: 'default',
    })
    await editTenantPat(deps, next.record.id, { quota: { limit: 7, refill: 'none' } })
    assert.equal((await store.getPat(rotated.record.id))?.quota?.limit, 20)
    assert.equal((await store.getPat(record.id))?.quota?.limit, 7)
  })

  it('a family edit inside a store transaction (apply) is part of it', async () => {
    const { record } = await issue({ quota: { limit: 9, refill: 'none' } })
    const rotated = await rotateTenantPat(deps, {
      id: record.id,
      graceMs: DAY_MS,
      lifetime: 'default',
    })
    await assert.rejects(
      store.transaction(async (tx) => {
        await editTenantPat({ ...deps, store: tx }, rotated.record.id, { quota: { limit: 3 } })
        throw new Error('abort')
      }),
      /abort/,
    )
    assert.equal((await store.getPat(record.id))?.quota?.limit, 9)
    await store.transaction((tx) =>
      editTenantPat({ ...deps, store: tx }, rotated.record.id, { quota: { limit: 3 } }),
    )
    assert.equal((await store.getPat(record.id))?.quota?.limit, 3)
  })

  it('a quota reset inside a store transaction: reset and edit commit together or not at all', async () => {
    const { record } = await issue({ quota: { limit: 5, refill: 'none' } })
    await store.reserveQuota(record.id, 0, 5, 5)
    await assert.rejects(
      store.transaction(async (tx) => {
        await editTenantPat({ ...deps, store: tx }, record.id, { resetQuotaUsage: true, name: 'n' })
        throw new Error('abort')
      }),
      /abort/,
    )
    assert.equal((await store.readQuota([record.id])).get(record.id)?.used, 5)
    await store.transaction((tx) =>
      editTenantPat({ ...deps, store: tx }, record.id, { resetQuotaUsage: true, name: 'n' }),
    )
    assert.equal((await store.readQuota([record.id])).get(record.id)?.used, 0)
    assert.equal((await store.getPat(record.id))?.name, 'n')
  })

  it('tenant edits: name and rate limit, audited before/after; bad values named', async () => {
    await createTenant(deps, { id: 'beta', name: 'Beta' })
    const { tenant, changed } = await editTenant(deps, 'beta', {
      name: 'Beta Corp',
      rateLimit: { max: 50, windowSec: 10 },
    })
    assert.equal(changed, true)
    assert.deepEqual([tenant.name, tenant.rateLimit], ['Beta Corp', { max: 50, windowSec: 10 }])
    assert.deepEqual(lastAudit()?.details, {
      before: { name: 'Beta', rateLimit: null },
      after: { name: 'Beta Corp', rateLimit: { max: 50, windowSec: 10 } },
    })
    assert.equal((await editTenant(deps, 'beta', { name: 'Beta Corp' })).changed, false)
    await assert.rejects(
      editTenant(deps, 'beta', { rateLimit: { max: -1, windowSec: 10 } }),
      refused('invalid_input', /^rate limit: -1 is not valid/),
    )
    await assert.rejects(
      editTenant(deps, 'beta', { name: '' }),
      refused('invalid_input', /^name: ""/),
    )
    await assert.rejects(editTenant(deps, 'nobody', { name: 'x' }), refused('tenant_unknown'))
    const back = await editTenant(deps, 'beta', { rateLimit: null })
    assert.equal(back.tenant.rateLimit, null)
  })
})
