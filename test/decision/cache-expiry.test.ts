/**
 * What a proxy may keep (src/decision/cache-expiry.ts): an allow of a built-in kind until one
 * second after the last change-log read, less the margin; nothing else. Stated twice: to the
 * second for proxy_cache (`X-Accel-Expires`), and in ms from now for the Lua example
 * (`X-Tokengate-Keep-Ms`), the latter on the same answers, to the millisecond.
 */
import assert from 'node:assert/strict'
import { after, before, describe, test } from 'node:test'
import type { Principal } from '../../src/core/principal.ts'
import { APPLY_MARGIN_MS, createCacheExpiry } from '../../src/decision/cache-expiry.ts'
import type { Answer } from '../../src/decision/decide.ts'
import { PROTECTED_PATH } from '../adapters/spec-table.ts'
import { rawRequest } from '../gateway/raw-request.ts'
import { TEST_TENANT } from '../helpers/jwt.ts'
import { type Stack, startStack } from './harness.ts'

const principal: Principal = {
  tokenType: 'pat',
  tenantId: 't',
  subject: 's',
  permissions: [],
  tokenId: 'tok_1',
  expiresAt: null,
  fingerprint: 'f',
}

const allow = (
  over: Partial<Principal> = {},
  identity: Record<string, string> = { 'x-auth-subject': 's' },
): Answer => ({
  type: 'allow',
  outcome: { allowed: true, principal: { ...principal, ...over }, headers: {}, identity },
  upstream: identity,
  remove: [],
  client: {},
})

/** 12:00:00.400 on some day, in epoch ms. */
const NOW = 1_800_000_000_400
const SECOND = Math.floor(NOW / 1000)
const NOT_KEPT = { accelExpires: '0', keepMs: 0 }

function expiry(readAsOf: number | undefined, now = NOW, settled = () => true) {
  const nudges: number[] = []
  const of = createCacheExpiry(
    { readAsOf: () => readAsOf, catchUp: () => void nudges.push(now), settled },
    () => now,
  )
  return { of, nudges }
}

describe('decision cache expiry', () => {
  test('an allow read this second is kept until the end of that second, and to the ms until one second after the read', () => {
    const { of, nudges } = expiry(NOW - 100)
    // Kept until NOW - 100 - margin + 1000: 850 ms from now.
    const kept = { accelExpires: `@${SECOND}`, keepMs: 900 - APPLY_MARGIN_MS }
    assert.deepEqual(of(allow()), kept)
    assert.deepEqual(of(allow({ tokenType: 'jwt' })), kept)
    assert.deepEqual(nudges, [])
  })

  test('a read older than this second (less the margin): not kept to the second, but to the ms, and asks for a read', () => {
    const second = SECOND * 1000
    const readAsOf = second + APPLY_MARGIN_MS - 1
    const { of, nudges } = expiry(readAsOf)
    // The whole first part of a second that proxy_cache cannot keep: the Lua cache can.
    const keepMs = readAsOf - APPLY_MARGIN_MS + 1000 - NOW
    assert.deepEqual(of(allow()), { accelExpires: '0', keepMs })
    assert.equal(nudges.length, 1)
    assert.deepEqual(of(allow()), { accelExpires: '0', keepMs })
    assert.equal(nudges.length, 1, 'one nudge at a time')
  })

  test('the boundary: kept while at least 1 ms is left, never at or after one second from the read', () => {
    const at = (left: number) => expiry(NOW - 1000 + APPLY_MARGIN_MS + left).of(allow())
    assert.deepEqual(at(1), { accelExpires: '0', keepMs: 1 })
    assert.deepEqual(at(0), NOT_KEPT)
    assert.deepEqual(at(-1), NOT_KEPT)
    assert.deepEqual(at(-10_000), NOT_KEPT)
    // In the first part of a second, before any read of it.
    const early = SECOND * 1000 + 10
    assert.deepEqual(expiry(early - 600, early).of(allow()), {
      accelExpires: '0',
      keepMs: 400 - APPLY_MARGIN_MS,
    })
  })

  test('a stated second always comes with its ms: never shorter than the second', () => {
    for (let readAsOf = NOW - 1200; readAsOf <= NOW; readAsOf += 7) {
      for (const expiresAt of [null, NOW + 333, NOW + 600, NOW + 1_600]) {
        const stated = expiry(readAsOf).of(allow({ expiresAt }))
        if (stated.accelExpires === '0') continue
        const end = (Number(stated.accelExpires.slice(1)) + 1) * 1000
        assert.ok(stated.keepMs >= 1, `@ without ms (read ${readAsOf - NOW})`)
        assert.ok(NOW + stated.keepMs >= end, `ms end before the second's end`)
      }
    }
  })

  test('nothing is kept while the change log cannot be read', () => {
    assert.deepEqual(expiry(undefined).of(allow()), NOT_KEPT)
  })

  test('nothing is kept while a change is still being applied (policy, issuer, JWT rule read)', () => {
    let settled = false
    const { of } = expiry(NOW - 100, NOW, () => settled)
    assert.deepEqual(of(allow()), NOT_KEPT)
    settled = true
    assert.equal(of(allow()).accelExpires, `@${SECOND}`)
  })

  test('never kept: refusals, identity tokens, keys with limits, other kinds, a certificate-bound allow', () => {
    const { of } = expiry(NOW)
    const refusal = { type: 'refuse', outcome: undefined, response: {} } as unknown as Answer
    assert.deepEqual(of(refusal), NOT_KEPT)
    assert.deepEqual(of(allow({}, { 'x-auth-token': 'eyJ...' })), NOT_KEPT)
    assert.deepEqual(
      of(allow({ limits: { rateLimit: { max: 1, windowMs: 1 } } as never })),
      NOT_KEPT,
    )
    assert.deepEqual(of(allow({ tokenType: 'api-key' })), NOT_KEPT)
    assert.deepEqual(of(allow({ tokenType: 'mtls' })), NOT_KEPT)
    assert.deepEqual(of({ ...allow(), withCertificate: true } as Answer), NOT_KEPT)
    // The same allow without what made it unkeepable is kept.
    assert.equal(of(allow()).keepMs, 1000 - APPLY_MARGIN_MS)
  })

  test("never past the credential's own expiry", () => {
    const { of } = expiry(NOW)
    assert.deepEqual(of(allow({ expiresAt: NOW + 300 })), { accelExpires: '0', keepMs: 300 })
    assert.deepEqual(of(allow({ expiresAt: NOW + 1 })), { accelExpires: '0', keepMs: 1 })
    assert.deepEqual(of(allow({ expiresAt: NOW })), NOT_KEPT)
    assert.deepEqual(of(allow({ expiresAt: NOW - 5 })), NOT_KEPT)
    assert.deepEqual(of(allow({ expiresAt: NOW + 1_600 })), {
      accelExpires: `@${SECOND}`,
      keepMs: 1000 - APPLY_MARGIN_MS,
    })
  })
})

describe('the decision listener states the keep time in ms where an allow may be kept, when asked', () => {
  let stack: Stack
  before(async () => {
    stack = await startStack({
      proxy: 'nginx',
      trustedProxies: ['127.0.0.1', '127.0.0.2=ingress-nginx', '127.0.0.3=caddy'],
    })
  })
  after(() => stack?.close())

  const ASK: [string, string] = ['X-Tokengate-Keep', 'ms']
  const ask = (
    token: string,
    { path = PROTECTED_PATH, method = 'GET', from = '127.0.0.1', asking = true } = {},
  ) => {
    const lines: [string, string][] = [['Authorization', `Bearer ${token}`]]
    if (from === '127.0.0.2')
      lines.push(['X-Original-Method', method], ['X-Original-URL', `http://api.example${path}`])
    else if (from === '127.0.0.3')
      lines.push(['X-Forwarded-Method', method], ['X-Forwarded-Uri', path])
    else lines.push(['X-Original-Method', method], ['X-Original-URI', path])
    if (token === stack.tokens.jwt) lines.push(['X-Tenant-Id', TEST_TENANT])
    if (asking) lines.push(ASK)
    return rawRequest(stack.decisionUrl, '/', lines, 'GET', { localAddress: from })
  }

  test("a PAT's and a JWT's allow to nginx and ingress-nginx: the ms wherever X-Accel-Expires is '@', only when asked", async () => {
    let seconds = 0
    let msAlone = 0
    for (let i = 0; i < 60; i++) {
      for (const token of [stack.tokens.pat, stack.tokens.jwt]) {
        for (const from of ['127.0.0.1', '127.0.0.2']) {
          for (const asking of [true, false]) {
            const response = await ask(token, { from, asking })
            assert.equal(response.status, 200, response.text)
            const accel = String(response.headers['x-accel-expires'])
            const keepMs = response.headers['x-tokengate-keep-ms']
            if (!asking) {
              // Not asked: the answer as before, byte for byte.
              assert.equal(keepMs, undefined)
              continue
            }
            if (accel.startsWith('@')) {
              seconds++
              assert.match(String(keepMs), /^[1-9]\d*$/, `keep ms with ${accel}`)
            } else {
              assert.equal(accel, '0')
              if (keepMs !== undefined) msAlone++
            }
            if (keepMs !== undefined) assert.ok(Number(keepMs) <= 1000, `keep ms ${keepMs}`)
          }
        }
      }
      await new Promise((resolve) => setTimeout(resolve, 15))
    }
    assert.ok(seconds > 0, "never an '@' value")
    console.log(`'@' ${seconds} times; the ms alone (early in a second) ${msAlone} times`)
  })

  test('never on a refusal, nor to a proxy that is told no expiry (caddy), asked or not', async () => {
    for (let i = 0; i < 20; i++) {
      const refusals = [
        await ask('nope'),
        await ask(stack.tokens.patWithoutPermission),
        await ask(stack.tokens.revokedPat),
        await ask(stack.readerPat, { path: '/api/v1/projects/1', method: 'DELETE' }),
        await ask(stack.tokens.pat, { path: '/api/v1/internal/secret', method: 'DELETE' }),
      ]
      for (const refused of refusals) {
        assert.ok(refused.status >= 400, `answered ${refused.status}`)
        assert.equal(refused.headers['x-accel-expires'], '0')
        assert.equal(refused.headers['x-tokengate-keep-ms'], undefined)
      }
      const caddy = await ask(stack.tokens.pat, { from: '127.0.0.3' })
      assert.equal(caddy.status, 200, caddy.text)
      assert.equal(caddy.headers['x-accel-expires'], undefined)
      assert.equal(caddy.headers['x-tokengate-keep-ms'], undefined)
    }
  })
})
