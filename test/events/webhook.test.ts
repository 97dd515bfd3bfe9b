import assert from 'node:assert/strict'
import { createHmac } from 'node:crypto'
import { describe, it } from 'node:test'
import {
  createWebhookSender,
  signWebhook,
  verifyWebhookSignature,
  webhookBody,
} from '../../src/events/webhook.ts'
import type { StoredAuditEvent } from '../../src/stores/store.ts'
import { startReceiver } from './receiver.ts'

const SECRET = 'whsec_0123456789abcdef'
const T = 1_767_225_600

const sample: StoredAuditEvent = {
  id: 'evt-1',
  time: Date.UTC(2026, 0, 1, 0, 0, 0, 123),
  type: 'pat.revoked',
  tenantId: 'acme',
  actor: 'cli:ops',
  outcome: 'ok',
  clientAddress: null,
  requestId: null,
  details: { tokenId: 'tok_1', nested: { a: [1, 2] } },
}

describe('webhook signature', () => {
  it('is t=<unix>,v1=<hex HMAC-SHA256 of "t.body">, computed independently here', () => {
    const body = webhookBody([sample])
    const expected = createHmac('sha256', SECRET).update(`${T}.${body}`).digest('hex')
    assert.equal(signWebhook(SECRET, body, T), `t=${T},v1=${expected}`)
    assert.equal(signWebhook(SECRET, body, T + 0.9), `t=${T},v1=${expected}`, 'whole seconds')
  })

  it('verifies the exact body and refuses any change, another secret or an old timestamp', () => {
    const body = webhookBody([sample])
    const header = signWebhook(SECRET, body, T)
    assert.equal(verifyWebhookSignature(SECRET, header, body, T), true)
    assert.equal(verifyWebhookSignature(SECRET, header, body, T + 300), true, 'at tolerance')
    assert.equal(verifyWebhookSignature(SECRET, header, body, T + 301), false, 'replay too old')
    assert.equal(verifyWebhookSignature(SECRET, header, `${body} `, T), false, 'body changed')
    assert.equal(verifyWebhookSignature(`${SECRET}x`, header, body, T), false, 'other secret')
    const otherTime = header.replace(`t=${T}`, `t=${T + 1}`)
    assert.equal(verifyWebhookSignature(SECRET, otherTime, body, T), false, 'time is signed')
  })

  it('accepts any listed v1 (secret rollover) and refuses malformed headers', () => {
    const body = '{"events":[]}'
    const good = signWebhook(SECRET, body, T).split(',')[1] as string
    const rollover = `t=${T},v1=${'0'.repeat(64)},${good}`
    assert.equal(verifyWebhookSignature(SECRET, rollover, body, T), true)
    for (const bad of [
      undefined,
      '',
      'v1=abc',
      `t=${T}`,
      `t=abc,${good}`,
      `t=${T},v1=${'z'.repeat(64)}`,
      `t=${T},v1=${good.slice(3, 40)}`,
      `t=${T},v0=${good.slice(3)}`,
    ]) {
      assert.equal(verifyWebhookSignature(SECRET, bad, body, T), false, String(bad))
    }
  })

  it('the body has the documented event schema, time as ISO 8601', () => {
    assert.deepEqual(JSON.parse(webhookBody([sample])), {
      events: [
        {
          id: 'evt-1',
          type: 'pat.revoked',
          time: '2026-01-01T00:00:00.123Z',
          tenantId: 'acme',
          actor: 'cli:ops',
          outcome: 'ok',
          clientAddress: null,
          requestId: null,
          details: { tokenId: 'tok_1', nested: { a: [1, 2] } },
        },
      ],
    })
  })
})

describe('webhook sender (real HTTP receiver)', () => {
  it('POSTs the signed body; the receiver verifies it against the bytes it got', async (t) => {
    const receiver = await startReceiver()
    t.after(() => receiver.stop())
    const sender = createWebhookSender({ url: receiver.url, secret: SECRET, timeoutMs: 2000 })
    const result = await sender.send([sample])
    assert.deepEqual(result, { ok: true, status: 204 })
    const [delivery] = receiver.deliveries
    assert.ok(delivery)
    assert.equal(delivery.headers['content-type'], 'application/json')
    assert.match(String(delivery.headers['x-tokengate-delivery']), /^[0-9a-f-]{36}$/)
    const header = String(delivery.headers['x-tokengate-signature'])
    assert.equal(verifyWebhookSignature(SECRET, header, delivery.body, Date.now() / 1000), true)
    assert.equal(delivery.events[0]?.id, 'evt-1')
  })

  it('a non-2xx, a refused connection and a hang are failures with a log-safe reason', async (t) => {
    const receiver = await startReceiver('fail')
    t.after(() => receiver.stop())
    receiver.retryAfter = 7
    const sender = createWebhookSender({ url: receiver.url, secret: SECRET, timeoutMs: 300 })
    assert.deepEqual(await sender.send([sample]), {
      ok: false,
      error: 'HTTP 503',
      retryAfterMs: 7000,
    })
    receiver.mode = 'hang'
    const started = Date.now()
    assert.deepEqual(await sender.send([sample]), { ok: false, error: 'timeout after 300 ms' })
    assert.ok(Date.now() - started < 2000)
    await receiver.stop()
    const refused = await sender.send([sample])
    assert.deepEqual(refused, { ok: false, error: 'ECONNREFUSED' })
  })

  it('refuses a short secret and a non-http URL at creation', () => {
    assert.throws(
      () => createWebhookSender({ url: 'http://127.0.0.1:1/x', secret: 'short', timeoutMs: 1 }),
      /at least 16 characters/,
    )
    assert.throws(
      () => createWebhookSender({ url: 'ftp://example.com/x', secret: SECRET, timeoutMs: 1 }),
      /http:\/\/ or https:\/\//,
    )
  })
})
