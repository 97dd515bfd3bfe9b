/**
 * nginx caching decisions (examples/forward-auth/nginx.conf, its `#cache ` lines turned on),
 * through the real nginx: a repeated request is answered without asking tokengate, the
 * cache key tells credential, tenant header, method and path apart, a revoked PAT stops
 * passing within the documented bound, and an answer carrying an identity token is never
 * cached.
 */
import assert from 'node:assert/strict'
import { after, before, describe, test } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { decodeJwt } from 'jose'
import { hashPat } from '../../src/core/pat.ts'
import { openStore } from '../../src/stores/open-store.ts'
import { PROTECTED_PATH } from '../adapters/spec-table.ts'
import { rawRequest } from '../gateway/raw-request.ts'
import { TEST_TENANT } from '../helpers/jwt.ts'
import { skipReason } from '../helpers/services.ts'
import {
  type ProxyProcess,
  type Stack,
  type StackOptions,
  startNginx,
  startStack,
} from './harness.ts'

/** `proxy_cache_valid 200 5s` in the example, plus the instance's own lookup cache (2 s). */
const REVOCATION_BOUND_MS = 5_000 + 2_000

/**
 * A stack and nginx with the example's decision cache, started before the suite's tests and
 * stopped after them; read `stack.value` / `front.value` inside tests.
 */
function cachedNginx(options: StackOptions) {
  const stack = { value: undefined as unknown as Stack }
  const front = { value: undefined as unknown as ProxyProcess }
  before(async () => {
    stack.value = await startStack({ proxy: 'nginx', ...options })
    const ports = { decision: stack.value.decisionPort, upstream: stack.value.upstream.port }
    front.value = await startNginx(ports, { decisionCache: true })
  })
  after(async () => {
    await front.value?.stop()
    await stack.value?.close()
  })
  return { stack, front }
}

describe('nginx decision cache', { skip: skipReason('nginx') }, () => {
  const { stack, front } = cachedNginx({ metrics: true })

  const decisions = async () => {
    const text = await (await fetch(stack.value.running.metricsUrl as string)).text()
    return text
      .split('\n')
      .filter((line) => line.startsWith('tokengate_decisions_total{'))
      .reduce((sum, line) => sum + Number(line.split(' ').at(-1)), 0)
  }

  test('a repeated request is answered from the cache; another method, path or tenant header is not', async () => {
    const reader: [string, string] = ['Authorization', `Bearer ${stack.value.readerPat}`]
    const before = await decisions()
    for (let i = 0; i < 3; i++) {
      const response = await rawRequest(front.value.url, '/api/v1/projects/1', [reader])
      assert.equal(response.status, 200, front.value.log())
    }
    assert.equal((await decisions()) - before, 1, 'one decision for three requests')
    const deleted = await rawRequest(front.value.url, '/api/v1/projects/1', [reader], 'DELETE')
    assert.equal(deleted.status, 403, 'the method is part of the key')
    const other = await rawRequest(front.value.url, '/api/v1/projects/2', [reader])
    assert.equal(other.status, 200)
    const tenant = await rawRequest(front.value.url, '/api/v1/projects/1', [
      reader,
      ['X-Tenant-Id', 'tenant-b'],
    ])
    assert.equal(tenant.status, 401, 'the tenant header is part of the key')
    assert.equal((await decisions()) - before, 4)
  })

  test('a second X-Tenant-Id never rides on a cached decision: the upstream gets the first only', async () => {
    const jwt: [string, string] = ['Authorization', `Bearer ${stack.value.tokens.jwt}`]
    const cached = await rawRequest(front.value.url, PROTECTED_PATH, [
      jwt,
      ['X-Tenant-Id', TEST_TENANT],
    ])
    assert.equal(cached.status, 200)
    const seenBefore = stack.value.upstream.seen.length
    const twice = await rawRequest(front.value.url, PROTECTED_PATH, [
      jwt,
      ['X-Tenant-Id', TEST_TENANT],
      ['X-Tenant-Id', 'tenant-b'],
    ])
    assert.equal(twice.status, 200)
    assert.equal(stack.value.upstream.seen[seenBefore]?.headers['x-tenant-id'], TEST_TENANT)
  })

  test('a revoked PAT stops passing within the documented bound', async () => {
    const token: [string, string] = ['Authorization', `Bearer ${stack.value.tokens.pat}`]
    assert.equal((await rawRequest(front.value.url, PROTECTED_PATH, [token])).status, 200)
    const store = await openStore({ dataDir: stack.value.dataDir })
    const revokedAt = Date.now()
    try {
      const record = await store.findPatByHash(hashPat(stack.value.tokens.pat))
      assert.ok(record)
      await store.revokePat(record.id, revokedAt)
    } finally {
      await store.close()
    }
    assert.equal(
      (await rawRequest(front.value.url, PROTECTED_PATH, [token])).status,
      200,
      'still cached right after the revocation',
    )
    let status = 200
    while (status === 200 && Date.now() - revokedAt < REVOCATION_BOUND_MS + 1_000) {
      await sleep(250)
      status = (await rawRequest(front.value.url, PROTECTED_PATH, [token])).status
    }
    assert.equal(status, 401)
    assert.ok(Date.now() - revokedAt <= REVOCATION_BOUND_MS + 1_000)
  })
})

describe('nginx decision cache with identity tokens', { skip: skipReason('nginx') }, () => {
  const { stack, front } = cachedNginx({ identityToken: true })

  test('an answer carrying an identity token is never cached: each request gets its own jti', async () => {
    const jtis = new Set<unknown>()
    for (let i = 0; i < 3; i++) {
      const seenBefore = stack.value.upstream.seen.length
      const response = await rawRequest(front.value.url, PROTECTED_PATH, [
        ['Authorization', `Bearer ${stack.value.tokens.pat}`],
      ])
      assert.equal(response.status, 200)
      jtis.add(
        decodeJwt(String(stack.value.upstream.seen[seenBefore]?.headers['x-auth-token'])).jti,
      )
    }
    assert.equal(jtis.size, 3)
  })
})
