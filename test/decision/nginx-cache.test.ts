/**
 * nginx caching decisions (examples/forward-auth/nginx.conf, its `#cache ` lines turned on),
 * through the real nginx: what every example that keeps decisions promises
 * (kept-decision-cases.ts: answered from the cache, method, path and tenant in the key, a
 * revocation refused within 1 s, identity tokens never kept), and this example's own: the
 * cache key holds a digest of the credential and never the credential (read back from nginx's
 * cache files), and a second X-Tenant-Id never rides on a cached decision.
 */
import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'
import { readdirSync, readFileSync, statSync } from 'node:fs'
import { join } from 'node:path'
import { describe, test } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { PROTECTED_PATH } from '../adapters/spec-table.ts'
import { rawRequest } from '../gateway/raw-request.ts'
import { TEST_TENANT } from '../helpers/jwt.ts'
import { skipReason } from '../helpers/services.ts'
import {
  identityTokensNeverKept,
  keptDecisionCases,
  nginxKeepingDecisions,
  revokedWithinOneSecond,
} from './kept-decision-cases.ts'

/** Every `KEY: ` line nginx wrote into its cache files under `dir`. */
function cacheKeys(dir: string): string[] {
  const keys: string[] = []
  const walk = (at: string) => {
    for (const name of readdirSync(at)) {
      const path = join(at, name)
      if (statSync(path).isDirectory()) walk(path)
      else {
        const key = /\nKEY: ([^\n]*)\n/.exec(readFileSync(path, 'latin1'))?.[1]
        if (key !== undefined) keys.push(key)
      }
    }
  }
  walk(join(dir, 'cache'))
  return keys
}

describe('nginx decision cache', { skip: skipReason('nginx-perl') }, () => {
  const kept = nginxKeepingDecisions({ metrics: true }, { decisionCache: true })
  const { stack, front } = kept

  keptDecisionCases(kept, 'cache')

  test("the cache key holds the credential's digest, never the credential", () => {
    const keys = cacheKeys(front.value.dir)
    assert.ok(keys.length > 0, 'nginx wrote cache files')
    const digest = createHash('sha256')
      .update(`Bearer ${stack.value.readerPat}`)
      .digest('base64')
      .replace(/=+$/, '')
    for (const key of keys) {
      // The messages never quote the key: it would print the credential.
      for (const token of Object.values(stack.value.tokens)) {
        assert.ok(!key.includes(token), 'a cache key holds a credential')
      }
      assert.ok(!key.includes(stack.value.readerPat), 'a cache key holds the credential')
      assert.ok(!key.includes('Bearer'), 'a cache key holds an Authorization value')
    }
    assert.ok(
      keys.some((key) => key.startsWith(`${digest}|`)),
      `a key starts with the SHA-256 of the Authorization header (${keys.length} keys)`,
    )
  })

  test('a second X-Tenant-Id never rides on a cached decision: the upstream gets the first only', async () => {
    const jwt: [string, string] = ['Authorization', `Bearer ${stack.value.tokens.jwt}`]
    // Decided by tokengate, a second value is refused (401); answered from the cache, nginx
    // passes the first value only. Asked until one is answered from the cache.
    let hits = 0
    for (let i = 0; i < 100 && hits === 0; i++) {
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
      if (twice.status === 401) {
        await sleep(20)
        continue
      }
      assert.equal(twice.status, 200)
      assert.equal(stack.value.upstream.seen[seenBefore]?.headers['x-tenant-id'], TEST_TENANT)
      hits++
    }
    assert.equal(hits, 1, 'never answered from the cache')
  })

  revokedWithinOneSecond(kept)
})

describe('nginx decision cache with identity tokens', { skip: skipReason('nginx-perl') }, () => {
  identityTokensNeverKept(nginxKeepingDecisions({ identityToken: true }, { decisionCache: true }))
})
