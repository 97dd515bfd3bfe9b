import assert from 'node:assert/strict'
import { generateKeyPairSync } from 'node:crypto'
import { after, before, describe, it } from 'node:test'
import type { IssuerConfig } from '../../src/core/issuer.ts'
import { openStore } from '../../src/stores/open-store.ts'
import { createTestIssuer, signCompact } from '../helpers/jwt.ts'
import { tempDir } from '../helpers/temp-dir.ts'
import { bearer, eventually, type Gate, startGate, tenantHeader } from './harness.ts'

/**
 * One issuer whose stored key the core refuses (here an RSA-PSS-only PEM for PS256, which
 * the core does not bind) must not take the server down, at start or when it arrives through
 * the change feed: it is logged, listed in /readyz, its tokens get 503 `unavailable` with
 * Retry-After, and PATs and every other issuer keep being served.
 */
function badIssuer(issuer: string): { config: IssuerConfig; token: () => string } {
  const pair = generateKeyPairSync('rsa-pss', { modulusLength: 2048 })
  const pem = pair.publicKey.export({ format: 'pem', type: 'spki' }).toString()
  return {
    config: {
      issuer,
      audiences: ['tokengate'],
      keySource: { kind: 'pem', pem, algorithm: 'PS256' },
      algorithms: ['PS256'],
    },
    token: () => {
      const now = Math.floor(Date.now() / 1000)
      return signCompact(
        { alg: 'PS256' },
        { iss: issuer, aud: 'tokengate', sub: 'x', tenant_id: 'demo', iat: now, exp: now + 300 },
        pair.privateKey,
      )
    },
  }
}

async function putIssuers(dataDir: string, issuers: readonly IssuerConfig[]) {
  const store = await openStore({ dataDir })
  try {
    await store.migrate()
    for (const issuer of issuers) await store.putIssuer(issuer, Date.now())
  } finally {
    await store.close()
  }
}

describe('one bad issuer never takes the server down (#11 item 15)', () => {
  const dataDir = tempDir('tg-bad-issuer-')
  const broken = badIssuer('https://broken.test')
  const good = createTestIssuer({ issuer: 'https://good.test', tenantClaim: 'tenant_id' })
  let gate: Gate

  before(async () => {
    await putIssuers(dataDir, [broken.config, good.config])
    gate = await startGate({ dataDir })
  })
  after(() => gate?.close())

  const me = (token: string) =>
    gate.request('/api/v1/me', [...bearer(token), ...tenantHeader('demo')])

  it('the server starts, and logs the refused issuer', () => {
    assert.ok(
      gate.logs.some((line) => line.includes('https://broken.test') && /"level":50/.test(line)),
      gate.logs.join('\n'),
    )
  })

  it("the bad issuer's tokens get 503 unavailable with Retry-After", async () => {
    const response = await me(broken.token())
    assert.equal(response.status, 503, response.text)
    assert.equal(response.json.code, 'unavailable')
    assert.ok(Number(response.headers['retry-after']) > 0)
  })

  it('other issuers and PATs keep being served', async () => {
    assert.equal((await me(await good.sign({ tenant_id: 'demo' }))).status, 200)
    const pat = gate.running.devSeed?.demoPat
    assert.ok(pat)
    assert.equal((await gate.request('/api/v1/me', [...bearer(pat)])).status, 200)
  })

  it('/readyz lists the issuer as not ready, and stays 200 for the rest', async () => {
    const response = await gate.request('/readyz')
    assert.equal(response.status, 200, response.text)
    assert.equal(response.json.status, 'degraded')
    const issuers = (response.json.checks as { issuers: { invalid: string[] } }).issuers
    assert.deepEqual(issuers.invalid, ['https://broken.test'])
  })

  it('a bad issuer arriving through the change feed: 503 for it, the good one beside it loads', async () => {
    const late = badIssuer('https://broken-late.test')
    const lateGood = createTestIssuer({
      issuer: 'https://good-late.test',
      tenantClaim: 'tenant_id',
    })
    await putIssuers(dataDir, [late.config, lateGood.config])
    const goodToken = await lateGood.sign({ tenant_id: 'demo' })
    await eventually(async () => (await me(goodToken)).status === 200, 10_000, 'the good issuer')
    const response = await me(late.token())
    assert.equal(response.status, 503, response.text)
    assert.equal(response.json.code, 'unavailable')
    assert.equal((await me(await good.sign({ tenant_id: 'demo' }))).status, 200)
    const ready = await gate.request('/readyz')
    const issuers = (ready.json.checks as { issuers: { invalid: string[] } }).issuers
    assert.deepEqual(issuers.invalid, ['https://broken-late.test', 'https://broken.test'])
  })
})
