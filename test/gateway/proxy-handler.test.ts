/**
 * The proxy handler's bookkeeping where timing decides, driven directly: an admission slot
 * must be freed however the caller leaves, also while its identity token is being signed.
 */
import assert from 'node:assert/strict'
import { EventEmitter } from 'node:events'
import { test } from 'node:test'
import type { FastifyReply, FastifyRequest } from 'fastify'
import type { Dispatcher } from 'undici'
import type { Principal } from '../../src/core/principal.ts'
import type { UpstreamAdmission } from '../../src/gateway/admission.ts'
import { DEFAULT_POLICY } from '../../src/gateway/policy.ts'
import { createPolicyMatcher } from '../../src/gateway/policy-matcher.ts'
import { createProxyHandler } from '../../src/gateway/proxy.ts'

const principal: Principal = {
  tokenType: 'pat',
  tenantId: 'tenant-a',
  subject: 'ci-bot',
  permissions: [],
  tokenId: 'tok_1',
  expiresAt: null,
  fingerprint: 'pat_…abcd',
}

test('a caller who leaves while its identity token is signed frees its slot, and nothing is sent upstream', async () => {
  let released = 0
  const admission: UpstreamAdmission = {
    admit: () => ({
      ok: true,
      release: () => {
        released++
      },
    }),
  }
  let sign: (token: string) => void = () => {}
  let dispatched = 0
  const handler = createProxyHandler({
    basePath: '',
    timeoutMs: 10_000,
    stripAuthorization: true,
    matcher: createPolicyMatcher(DEFAULT_POLICY),
    reserved: new Set(['me']),
    internalToken: () =>
      new Promise<string>((resolve) => {
        sign = resolve
      }),
    admission,
    uploadPace: { idleMs: 10_000, minBytesPerSec: 0 },
    pool: {
      dispatch: () => {
        dispatched++
        return true
      },
    } as unknown as Dispatcher,
    upstream: new URL('http://127.0.0.1:9'),
  })
  const raw = Object.assign(new EventEmitter(), { destroyed: false })
  const request = {
    principal,
    id: 'req-1',
    url: '/api/v1/projects/p1',
    method: 'GET',
    headers: {},
    raw: { complete: true },
  } as unknown as FastifyRequest
  const reply = { raw } as unknown as FastifyReply

  handler(request, reply)
  // The caller goes away before the token is ready: its response closes now.
  raw.destroyed = true
  raw.emit('close')
  sign('signed-token')
  await new Promise((resolve) => setImmediate(resolve))

  assert.equal(released, 1)
  assert.equal(dispatched, 0)
})
