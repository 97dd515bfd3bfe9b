/**
 * `createTokengate`, in process: the whole pipeline on a real SQLite store behind the Express
 * and Fastify adapters (the SPEC table), revocation through the store's change feed, audit
 * of refusals, last-used write-behind, and the Fastify adapter's `X-Request-Id`.
 */
import assert from 'node:assert/strict'
import type { Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { after, describe, test } from 'node:test'
import express from 'express'
import Fastify from 'fastify'
import { tokengate as expressTokengate, requirePermission } from '../../src/adapters/express.ts'
import { tokengate as fastifyTokengate } from '../../src/adapters/fastify.ts'
import { createTokengate, type Tokengate } from '../../src/auth/tokengate.ts'
import { issuePat } from '../../src/core/pat.ts'
import { createTokengate as fromIndex } from '../../src/index.ts'
import { missingPackageError } from '../../src/missing-package.ts'
import {
  PROTECTED_PATH,
  REQUIRED_PERMISSION,
  runSpecTable,
  type SpecFixture,
  send,
} from '../adapters/spec-table.ts'
import { createTestIssuer, TEST_TENANT } from '../helpers/jwt.ts'
import { tempDir } from '../helpers/temp-dir.ts'

async function seededGate(
  fixture: Pick<SpecFixture, 'issuer' | 'pats'>,
  dataDir = tempDir('tokengate-lib-'),
) {
  const seed = await createTokengate({ dataDir })
  const now = Date.now()
  await seed.store.createTenant({ id: TEST_TENANT, name: TEST_TENANT }, now)
  await seed.store.putIssuer(fixture.issuer, now)
  for (const pat of fixture.pats) await seed.store.insertPat(pat)
  await seed.close()
  return { dataDir, gate: await createTokengate({ dataDir, auth: { lookupCacheTtlMs: 600_000 } }) }
}

function expressApp(gate: Tokengate) {
  const app = express()
  app.use('/api/v1', expressTokengate(gate))
  app.get(PROTECTED_PATH, requirePermission(REQUIRED_PERMISSION), (req, res) => {
    res.json({ tenantId: req.principal?.tenantId, subject: res.locals.principal?.subject })
  })
  return new Promise<{ url: string; close(): Promise<void> }>((resolve) => {
    const server: Server = app.listen(0, '127.0.0.1', () =>
      resolve({
        url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
        close: async () => {
          server.closeAllConnections()
          server.close()
          await gate.close()
        },
      }),
    )
  })
}

async function fastifyApp(gate: Tokengate) {
  const app = Fastify()
  await app.register(fastifyTokengate, gate)
  app.get(PROTECTED_PATH, { config: { permissions: [REQUIRED_PERMISSION] } }, async (request) => ({
    tenantId: request.principal?.tenantId,
    subject: request.principal?.subject,
  }))
  const url = await app.listen({ host: '127.0.0.1', port: 0 })
  return {
    url,
    close: async () => {
      await app.close()
      await gate.close()
    },
  }
}

runSpecTable('createTokengate + tokengate/express', async (_, fixture) =>
  expressApp((await seededGate(fixture)).gate),
)
runSpecTable('createTokengate + tokengate/fastify', async (_, fixture) =>
  fastifyApp((await seededGate(fixture)).gate),
)

describe('createTokengate', () => {
  const issued = () =>
    issuePat({
      tenantId: TEST_TENANT,
      subject: 'ci-bot',
      name: 'lib',
      permissions: [REQUIRED_PERMISSION],
      expiresAt: null,
      now: Date.now(),
    })
  const bearer = (token: string): [string, string][] => [['Authorization', `Bearer ${token}`]]
  const closers: (() => Promise<void>)[] = []
  after(() => Promise.all(closers.map((close) => close())))

  test('gate.pats issues under the lifetime policy, as the CLI and the console do', async () => {
    const { dataDir, gate: seeded } = await seededGate({ issuer: noIssuer(), pats: [] })
    await seeded.close()
    const gate = await createTokengate({
      dataDir,
      pat: { defaultExpiresInDays: 7, maxExpiresInDays: 30 },
    })
    const app = await expressApp(gate)
    closers.push(app.close)
    const request = { tenantId: TEST_TENANT, subject: 'lib', name: 'lib', permissions: [] }
    for (const lifetime of ['never', 31 * 86_400_000] as const) {
      await assert.rejects(gate.pats.issue({ ...request, lifetime }), {
        name: 'OperationRefused',
        code: 'lifetime_exceeded',
      })
    }
    const issued = await gate.pats.issue({
      ...request,
      permissions: [REQUIRED_PERMISSION],
      lifetime: 'default',
    })
    assert.ok(
      issued.record.expiresAt !== null && issued.record.expiresAt <= Date.now() + 30 * 86_400_000,
    )
    const ok = await send(app.url, PROTECTED_PATH, bearer(issued.token))
    assert.equal(ok.status, 200)
  })

  test('is exported from the package root', () => {
    assert.equal(fromIndex, createTokengate)
  })

  test('a revocation by another process reaches the app through the change feed, not the cache TTL', async () => {
    const pat = issued()
    const { dataDir, gate } = await seededGate({ issuer: noIssuer(), pats: [pat.record] })
    const app = await expressApp(gate)
    closers.push(app.close)
    assert.equal((await send(app.url, PROTECTED_PATH, bearer(pat.token))).status, 200)

    // Another connection (as `tokengate pat revoke` is); the lookup cache TTL is 10 minutes.
    const operator = await createTokengate({ dataDir })
    await operator.store.revokePat(pat.record.id, Date.now())
    await operator.close()
    const revokedAt = performance.now()
    let status = 200
    while (status === 200 && performance.now() - revokedAt < 10_000) {
      await new Promise((resolve) => setTimeout(resolve, 50))
      status = (await send(app.url, PROTECTED_PATH, bearer(pat.token))).status
    }
    assert.equal(status, 401)
  })

  test('audits a refusal with its request id and records a PAT last use', async () => {
    const pat = issued()
    const readOnly = issuePat({ ...pat.record, permissions: [], expiresAt: null, now: Date.now() })
    const { dataDir, gate } = await seededGate({
      issuer: noIssuer(),
      pats: [pat.record, readOnly.record],
    })
    const app = await expressApp(gate)
    assert.equal((await send(app.url, PROTECTED_PATH, bearer(pat.token))).status, 200)
    const denied = await send(app.url, PROTECTED_PATH, [
      ...bearer(readOnly.token),
      ['X-Request-Id', 'audit-me-1'],
    ])
    assert.equal(denied.status, 403)
    const unknown = await send(app.url, PROTECTED_PATH, bearer(issued().token))
    assert.equal(unknown.status, 401)
    await app.close()
    const reopened = await createTokengate({ dataDir })
    closers.push(() => reopened.close())
    const events = await reopened.store.listAudit(TEST_TENANT, { limit: 10 })
    const forbidden = events.items.find((event) => event.type === 'auth.forbidden')
    assert.equal(forbidden?.requestId, 'audit-me-1')
    assert.equal(forbidden?.outcome, 'insufficient_permission')
    assert.match(String(forbidden?.actor), /^pat_…/)
    assert.notEqual((await reopened.store.getPat(pat.record.id))?.lastUsedAt, null)
  })

  test('an audited refusal keeps no token from its path, and at most 512 characters of it', async () => {
    const readOnly = issuePat({
      ...issued().record,
      permissions: [],
      expiresAt: null,
      now: Date.now(),
    })
    const { dataDir, gate } = await seededGate({ issuer: noIssuer(), pats: [readOnly.record] })
    const app = express()
    app.use('/api/v1', expressTokengate(gate))
    app.get('/api/v1/things/*rest', requirePermission(REQUIRED_PERMISSION), (_req, res) => {
      res.json({})
    })
    const server: Server = await new Promise((resolve) => {
      const listening = app.listen(0, '127.0.0.1', () => resolve(listening))
    })
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
    const leaked = issued().token
    const path = `/api/v1/things/${leaked}/${'a'.repeat(3000)}`
    assert.equal((await send(url, path, bearer(readOnly.token))).status, 403)
    server.closeAllConnections()
    server.close()
    await gate.close()
    const reopened = await createTokengate({ dataDir })
    closers.push(() => reopened.close())
    const events = await reopened.store.listAudit(TEST_TENANT, { limit: 10 })
    const forbidden = events.items.find((event) => event.type === 'auth.forbidden')
    const stored = String(forbidden?.details.path)
    assert.ok(stored.startsWith('/api/v1/things/'), stored)
    assert.ok(!stored.includes(leaked), 'no token in the audited path')
    assert.ok(stored.length <= 512 + 20, `audited path of ${stored.length}`)
  })

  test('keys as a product in code: a quota is spent through Express (429, never 401), a disable refuses', async () => {
    const { gate } = await seededGate({ issuer: noIssuer(), pats: [] })
    const app = await expressApp(gate)
    closers.push(app.close)
    const { token, record } = await gate.pats.issue({
      tenantId: TEST_TENANT,
      subject: 'lib-quota',
      name: 'quota',
      permissions: [REQUIRED_PERMISSION],
      lifetime: 'default',
      quota: { limit: 2, refill: 'none' },
    })
    const statuses = []
    for (let i = 0; i < 3; i++) {
      statuses.push((await send(app.url, PROTECTED_PATH, bearer(token))).status)
    }
    assert.deepEqual(statuses, [200, 200, 429])
    const spent = await send(app.url, PROTECTED_PATH, bearer(token))
    assert.equal(JSON.parse(spent.body).code, 'quota_exhausted')
    await gate.pats.edit(record.id, { quota: { limit: 10, refill: 'none' } })
    assert.equal((await send(app.url, PROTECTED_PATH, bearer(token))).status, 200)
    const { changed } = await gate.pats.setDisabled(record.id, true)
    assert.equal(changed, true)
    const refused = await send(app.url, PROTECTED_PATH, bearer(token))
    assert.equal(refused.status, 401)
    assert.equal(JSON.parse(refused.body).code, 'invalid_token')
  })

  test('usage: a request the route refuses after the gate allowed it counts as 403, not as allowed', async () => {
    const { dataDir, gate } = await seededGate({ issuer: noIssuer(), pats: [] })
    const app = await expressApp(gate)
    const { token, record } = await gate.pats.issue({
      tenantId: TEST_TENANT,
      subject: 'lib-usage',
      name: 'no permission',
      permissions: [],
      lifetime: 'default',
    })
    assert.equal((await send(app.url, PROTECTED_PATH, bearer(token))).status, 403)
    await app.close() // closes the gate: the usage counts are written
    const reader = await createTokengate({ dataDir })
    try {
      const rows = await reader.store.readUsage({
        scope: 'key',
        subject: record.id,
        resolution: 'day',
        since: 0,
        until: Date.now() + 86_400_000,
      })
      assert.deepEqual(
        rows.map((r) => [r.allowed, r.forbidden]),
        [[0, 1]],
      )
    } finally {
      await reader.close()
    }
  })

  test('tokengate/fastify keeps a safe incoming X-Request-Id and answers with it', async () => {
    const pat = issued()
    const app = await fastifyApp(
      (await seededGate({ issuer: noIssuer(), pats: [pat.record] })).gate,
    )
    closers.push(app.close)
    const ok = await send(app.url, PROTECTED_PATH, [
      ...bearer(pat.token),
      ['X-Request-Id', 'req-42'],
    ])
    assert.equal(ok.status, 200)
    assert.equal(ok.headers['x-request-id'], 'req-42')
    const refused = await send(app.url, PROTECTED_PATH, [['X-Request-Id', 'req-43']])
    assert.equal(refused.status, 401)
    assert.equal(refused.headers['x-request-id'], 'req-43')
    assert.equal(JSON.parse(refused.body).requestId, 'req-43')
    const unsafe = await send(app.url, PROTECTED_PATH, [['X-Request-Id', 'a b']])
    assert.match(String(unsafe.headers['x-request-id']), /^[A-Za-z0-9_-]{11}-[0-9a-z]+$/)
  })

  test('a missing optional package is named with the command that installs it', () => {
    const error = Object.assign(
      new Error("Cannot find package 'pg' imported from /app/node_modules/tokengate/dist/x.js"),
      { code: 'ERR_MODULE_NOT_FOUND' },
    )
    assert.match(String(missingPackageError(error)?.message), /'pg'.*npm install pg$/)
    assert.equal(missingPackageError(new Error('other')), undefined)
  })
})

function noIssuer() {
  return createTestIssuer().config
}
