/**
 * The proxy handler's bookkeeping where timing decides, driven directly: an admission slot
 * must be freed however the caller leaves, also while it waits for a connection.
 */
import assert from 'node:assert/strict'
import { EventEmitter } from 'node:events'
import { test } from 'node:test'
import type { FastifyReply, FastifyRequest } from 'fastify'
import type { Dispatcher } from 'undici'
import type { Allowed } from '../../src/auth/gate.ts'
import type { Principal } from '../../src/core/principal.ts'
import type { Admission, UpstreamAdmission } from '../../src/gateway/admission.ts'
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

test('a caller who leaves while it waits for a connection frees its slot, and nothing is sent upstream', async () => {
  let released = 0
  let admit: (admission: Admission) => void = () => {}
  const admission: UpstreamAdmission = {
    admit: () =>
      new Promise<Admission>((resolve) => {
        admit = resolve
      }),
  }
  let dispatched = 0
  const handler = createProxyHandler({
    basePath: '',
    timeoutMs: 10_000,
    stripAuthorization: true,
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
  const outcome: Allowed = {
    allowed: true,
    principal,
    headers: {},
    identity: { 'x-auth-tenant': principal.tenantId },
  }
  const request = {
    principal,
    outcome,
    id: 'req-1',
    url: '/api/v1/projects/p1',
    method: 'GET',
    headers: {},
    raw: { complete: true },
  } as unknown as FastifyRequest
  const reply = { raw } as unknown as FastifyReply

  handler(request, reply)
  // The caller goes away before a connection is free: its response closes now.
  raw.destroyed = true
  raw.emit('close')
  admit({
    ok: true,
    release: () => {
      released++
    },
  })
  await new Promise((resolve) => setImmediate(resolve))

  assert.equal(released, 1)
  assert.equal(dispatched, 0)
})
