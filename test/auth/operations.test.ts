import assert from 'node:assert/strict'
import { generateKeyPairSync } from 'node:crypto'
import { join } from 'node:path'
import { after, before, describe, it } from 'node:test'
import { auditRecord, authFailureRecord, storeAuditSink } from '../../src/auth/audit-events.ts'
import { addIssuer, listIssuers, removeIssuer } from '../../src/auth/issuer-operations.ts'
import { OperationRefused } from '../../src/auth/operations.ts'
import {
  findPatByRef,
  issueTenantPat,
  listTenantPats,
  type PatOperationDeps,
  patStatus,
  revokeLeakedPats,
  revokeTenantPat,
  rotateTenantPat,
} from '../../src/auth/pat-lifecycle.ts'
import { createTenant, listTenants, setTenantEnabled } from '../../src/auth/tenant-operations.ts'
import { generatePat } from '../../src/core/pat.ts'
import { openSqliteStore, type SqliteStore } from '../../src/stores/sqlite.ts'
import type { AuditEventInput } from '../../src/stores/write-behind.ts'
import { NOW, testClock } from '../helpers/clock.ts'
import { HOUR_MS } from '../helpers/core-fakes.ts'
import { tempDir } from '../helpers/temp-dir.ts'

const DAY_MS = 24 * HOUR_MS

describe('application layer operations (SQLite store)', () => {
  let store: SqliteStore
  const clock = testClock()
  const written: AuditEventInput[] = []
  let deps: PatOperationDeps

  before(async () => {
    store = openSqliteStore(join(tempDir('tg-auth-'), 'db.sqlite'))
    await store.migrate()
    deps = {
      store,
      clock,
      actor: { actor: 'cli:test', clientAddress: null, requestId: null },
      audit: { write: (record) => void written.push(record) },
      patPolicy: { defaultExpiresInDays: 90, maxExpiresInDays: 0 },
    }
    await createTenant(deps, { id: 'acme', name: 'Acme' })
  })
  after(() => store.close())

  const lastAudit = () => written.at(-1)
  const refusal = (code: string) => (error: unknown) =>
    error instanceof OperationRefused && error.code === code

  describe('tenants', () => {
    it('create audits tenant.created; a second create is refused as tenant_exists', async () => {
      const tenant = await createTenant(deps, { id: 'globex', name: 'Globex' })
      assert.equal(tenant.enabled, true)
      assert.deepEqual(lastAudit(), {
        time: NOW,
        type: 'tenant.created',
        tenantId: 'globex',
        actor: 'cli:test',
        outcome: 'ok',
        clientAddress: null,
        requestId: null,
        details: { name: 'Globex' },
      })
      await assert.rejects(
        createTenant(deps, { id: 'globex', name: 'x' }),
        refusal('tenant_exists'),
      )
      assert.deepEqual(
        (await listTenants(deps)).map((t) => t.id),
        ['acme', 'globex'],
      )
    })

    it('disable/enable audit only a change; an unknown tenant is refused', async () => {
      const count = written.length
      assert.equal((await setTenantEnabled(deps, 'globex', false)).changed, true)
      assert.equal(lastAudit()?.type, 'tenant.disabled')
      assert.equal((await setTenantEnabled(deps, 'globex', false)).changed, false)
      assert.equal(written.length, count + 1)
      assert.equal((await setTenantEnabled(deps, 'globex', true)).tenant.enabled, true)
      assert.equal(lastAudit()?.type, 'tenant.enabled')
      await assert.rejects(setTenantEnabled(deps, 'nope', true), refusal('tenant_unknown'))
    })
  })

  describe('PAT lifecycle', () => {
    const request = {
      tenantId: 'acme',
      subject: 'ci',
      name: 'deploy',
      permissions: ['tokens:read'],
      lifetime: 30 * DAY_MS,
    }

    it('issue stores only the hash, audits pat.issued, and refuses unknown or disabled tenants', async () => {
      const { token, record } = await issueTenantPat(deps, request)
      assert.match(token, /^pat_/)
      assert.notEqual(record.tokenHash, token)
      assert.equal(patStatus(record, clock.now()), 'active')
      assert.equal(lastAudit()?.type, 'pat.issued')
      assert.ok(!JSON.stringify(lastAudit()).includes(token))
      await assert.rejects(
        issueTenantPat(deps, { ...request, tenantId: 'nope' }),
        refusal('tenant_unknown'),
      )
      await setTenantEnabled(deps, 'globex', false)
      await assert.rejects(
        issueTenantPat(deps, { ...request, tenantId: 'globex' }),
        refusal('tenant_disabled'),
      )
      await setTenantEnabled(deps, 'globex', true)
    })

    it('the lifetime policy holds for every caller: default, maximum, and never refused under a maximum', async () => {
      const capped = { ...deps, patPolicy: { defaultExpiresInDays: 7, maxExpiresInDays: 30 } }
      const byDefault = await issueTenantPat(capped, { ...request, lifetime: 'default' })
      assert.equal(byDefault.record.expiresAt, NOW + 7 * DAY_MS)
      await assert.rejects(
        issueTenantPat(capped, { ...request, lifetime: 31 * DAY_MS }),
        refusal('lifetime_exceeded'),
      )
      await assert.rejects(
        issueTenantPat(capped, { ...request, lifetime: 'never' }),
        refusal('lifetime_exceeded'),
      )
      await assert.rejects(
        rotateTenantPat(capped, { id: byDefault.record.id, lifetime: 'never', graceMs: 0 }),
        refusal('lifetime_exceeded'),
      )
      const withinMax = await issueTenantPat(capped, { ...request, lifetime: 30 * DAY_MS })
      assert.equal(withinMax.record.expiresAt, NOW + 30 * DAY_MS)
    })

    it('rotate: the old token is `grace` until graceUntil, then `rotated`; a second rotation is refused', async () => {
      const old = await issueTenantPat(deps, request)
      const rotated = await rotateTenantPat(deps, {
        id: old.record.id,
        lifetime: 'never',
        graceMs: HOUR_MS,
      })
      assert.equal(rotated.record.rotatedFrom, old.record.id)
      assert.equal(rotated.graceUntil, NOW + HOUR_MS)
      assert.equal(lastAudit()?.type, 'pat.rotated')
      const stored = await findPatByRef(store, old.token)
      assert.equal(patStatus(stored, NOW), 'grace')
      assert.equal(patStatus(stored, NOW + HOUR_MS), 'rotated')
      await assert.rejects(
        rotateTenantPat(deps, { id: old.record.id, lifetime: 'never', graceMs: 0 }),
        (error) =>
          refusal('token_rotated')(error) && (error as OperationRefused).tenantId === 'acme',
      )
      await assert.rejects(
        rotateTenantPat(deps, { id: 'tok_missing', lifetime: 'never', graceMs: 0 }),
        refusal('token_unknown'),
      )
    })

    it('revoke by id or by token is idempotent, audited once, and scoped to a tenant when asked', async () => {
      const { token, record } = await issueTenantPat(deps, request)
      await assert.rejects(
        revokeTenantPat(deps, record.id, { tenantId: 'globex' }),
        refusal('token_unknown'),
      )
      await assert.rejects(revokeTenantPat(deps, token), (error) => {
        // A plaintext token given where an id belongs is never echoed back.
        assert.ok(refusal('token_unknown')(error))
        assert.ok(!String((error as Error).message).includes(token))
        return true
      })
      const byToken = await findPatByRef(store, token)
      const first = await revokeTenantPat(deps, byToken.id, { tenantId: 'acme', self: true })
      assert.equal(first.changed, true)
      assert.deepEqual(lastAudit()?.details, { tokenId: record.id, self: true })
      const count = written.length
      const second = await revokeTenantPat(deps, record.id)
      assert.equal(second.changed, false)
      assert.equal(written.length, count)
      assert.equal(patStatus(second.record, NOW), 'revoked')
      await assert.rejects(
        rotateTenantPat(deps, { id: record.id, lifetime: 'never', graceMs: 0 }),
        (error) => refusal('token_revoked')(error) && (error as OperationRefused).at === NOW,
      )
      await assert.rejects(revokeTenantPat(deps, 'pat_nope'), refusal('token_unknown'))
      await assert.rejects(revokeTenantPat(deps, 'tok_nope'), refusal('token_unknown'))
    })

    it('revoke-leaked reports each token by fingerprint and never audits the plaintext', async () => {
      const { token, record } = await issueTenantPat(deps, request)
      const unknown = generatePat()
      const results = await revokeLeakedPats(deps, [token, token, unknown, 'pat_garbage'])
      assert.deepEqual(
        results.map((r) => r.outcome),
        ['revoked', 'already_revoked', 'unknown', 'not_a_pat'],
      )
      assert.equal(results[0]?.record?.id, record.id)
      assert.equal(results[0]?.fingerprint, `pat_…${record.last4}`)
      const leak = written.filter((e) => e.type === 'pat.leak_revoked')
      assert.equal(leak.length, 1)
      assert.ok(!JSON.stringify(written).includes(token))
    })

    it('list/search filters by status, text and expiry, across pages', async () => {
      const soon = await issueTenantPat(deps, {
        ...request,
        name: 'Nightly Backup',
        lifetime: DAY_MS,
      })
      const all = await listTenantPats(deps, 'acme', {}, 2)
      assert.ok(all.length >= 6)
      const expiring = await listTenantPats(deps, 'acme', { expiringBefore: NOW + 2 * DAY_MS })
      assert.deepEqual(
        expiring.map((r) => r.id),
        [soon.record.id],
      )
      const byText = await listTenantPats(deps, 'acme', { text: 'backup' })
      assert.deepEqual(
        byText.map((r) => r.id),
        [soon.record.id],
      )
      const graced = await listTenantPats(deps, 'acme', { status: ['grace'] })
      assert.equal(graced.length, 1)
      await assert.rejects(listTenantPats(deps, 'nope'), refusal('tenant_unknown'))
    })
  })

  describe('issuers', () => {
    const rsaPss = generateKeyPairSync('rsa-pss', { modulusLength: 2048 })
    const rsa = generateKeyPairSync('rsa', { modulusLength: 2048 })
    const pemOf = (key: typeof rsa.publicKey) =>
      key.export({ type: 'spki', format: 'pem' }).toString()
    const base = { issuer: 'https://idp.example', audiences: ['api'] }

    it('add refuses what the core would refuse at start (an rsa-pss key for PS256), storing nothing', async () => {
      await assert.rejects(
        addIssuer(deps, {
          ...base,
          keySource: { kind: 'pem', pem: pemOf(rsaPss.publicKey), algorithm: 'PS256' },
        }),
        (error) =>
          refusal('invalid_input')(error) && /rsa-pss key cannot be used/.test(String(error)),
      )
      assert.deepEqual(await listIssuers(deps), [])
    })

    it('add stores, audits, reports a replacement; remove audits; unknown ones are refused', async () => {
      const source = { kind: 'pem', pem: pemOf(rsa.publicKey), algorithm: 'PS256' } as const
      const first = await addIssuer(deps, { ...base, keySource: source, tenant: { fixed: 'acme' } })
      assert.equal(first.replaced, false)
      assert.equal(lastAudit()?.type, 'issuer.added')
      assert.equal(lastAudit()?.tenantId, 'acme')
      assert.equal((await addIssuer(deps, { ...base, keySource: source })).replaced, true)
      await assert.rejects(
        addIssuer(deps, { ...base, keySource: source, tenant: { fixed: 'nope' } }),
        refusal('tenant_unknown'),
      )
      await addIssuer(deps, {
        issuer: 'https://remote.example',
        audiences: ['api'],
        keySource: { kind: 'jwks_url', url: 'https://remote.example/jwks.json' },
      })
      assert.equal((await listIssuers(deps)).length, 2)
      await removeIssuer(deps, base.issuer)
      assert.deepEqual(lastAudit()?.details, { issuer: base.issuer })
      await assert.rejects(removeIssuer(deps, base.issuer), refusal('issuer_unknown'))
    })
  })

  describe('audit events', () => {
    it('auditRecord carries the event outcome (ok by default) and the actor', () => {
      const record = auditRecord(
        {
          type: 'pat.reuse_detected',
          tenantId: 't',
          outcome: 'family_revoked',
          details: { tokenId: 'a', revokedTokenIds: [] },
        },
        { actor: 'pat_…abcd', clientAddress: '10.0.0.1', requestId: 'r1' },
      )
      assert.equal(record.outcome, 'family_revoked')
      assert.equal(record.clientAddress, '10.0.0.1')
      assert.equal('time' in record, false)
    })

    it('authFailureRecord: 403 is auth.forbidden, 401 is auth.failed (with the reason), 503 is not audited', () => {
      const where = {
        method: 'GET',
        url: '/api/v1/me?access=1',
        tenantId: 't',
        actor: 'pat_…abcd',
        clientAddress: '127.0.0.1',
        requestId: 'r1',
      }
      const forbidden = authFailureRecord(
        { code: 'insufficient_permission', required: ['x'] },
        where,
      )
      assert.equal(forbidden?.type, 'auth.forbidden')
      assert.equal(forbidden?.actor, 'pat_…abcd')
      assert.equal(forbidden?.requestId, 'r1')
      assert.deepEqual(
        authFailureRecord({ code: 'invalid_token', reason: 'revoked', detail: '' }, where)?.details,
        { method: 'GET', path: '/api/v1/me', reason: 'revoked' },
      )
      assert.equal(
        authFailureRecord({ code: 'missing_authorization' }, where)?.outcome,
        'missing_authorization',
      )
      assert.equal(
        authFailureRecord(
          { code: 'unavailable', dependency: 'store', retryAfterSeconds: 1 },
          where,
        ),
        undefined,
      )
    })

    it('storeAuditSink appends a complete record to the store', async () => {
      const sink = storeAuditSink(store, () => NOW)
      await sink.write(
        auditRecord({ type: 'tenant.enabled', tenantId: 'acme', details: {} }, { actor: 'cli:x' }),
      )
      const page = await store.listAudit('acme', { limit: 10 })
      const event = page.items.find((e) => e.actor === 'cli:x')
      assert.equal(event?.type, 'tenant.enabled')
      assert.equal(event?.time, NOW)
      assert.match(event?.id ?? '', /^[0-9a-f-]{36}$/)
    })
  })
})
