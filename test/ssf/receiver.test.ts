/**
 * The CAEP/SSF receiver in one process on SQLite, against the test transmitter: what it
 * records, audits and answers for each kind of SET (applied, replayed, issuer not trusted,
 * too old to matter, unmapped, store down), the stream client's refusals (another issuer,
 * endpoints elsewhere, a 409 on creation), and a poller that creates its stream, applies,
 * acknowledges and stops on close. The two-instance behaviour is test/scale/ssf-receiver.test.ts.
 */
import assert from 'node:assert/strict'
import { randomUUID } from 'node:crypto'
import { join } from 'node:path'
import { after, before, describe, it } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import Fastify from 'fastify'
import { CAEP_EVENT, DELIVERY_METHOD } from '../../src/ssf/events.ts'
import { createSsfReceiver, type ReceiverSettings } from '../../src/ssf/receiver.ts'
import { ssfPushRoutes } from '../../src/ssf/receiver-push.ts'
import { createStreamClient } from '../../src/ssf/receiver-stream.ts'
import { openSqliteStore, type SqliteStore } from '../../src/stores/sqlite.ts'
import { createTestIssuer } from '../helpers/jwt.ts'
import { type SsfTestTransmitter, startSsfTransmitter } from '../helpers/ssf-transmitter.ts'
import { tempDir } from '../helpers/temp-dir.ts'

const JWT_ISSUER = 'https://idp.receiver.test'
const AUDIENCE = 'https://api.receiver.test/ssf'
const LIFETIME = { maxLifetimeSec: 3600, clockToleranceSec: 30 }

describe('CAEP/SSF receiver (one process, SQLite)', () => {
  let store: SqliteStore
  let tx: SsfTestTransmitter
  const lines: string[] = []
  const log = {
    info: (_fields: object, message: string) => lines.push(message),
    warn: (_fields: object, message: string) => lines.push(message),
  }

  before(async () => {
    store = openSqliteStore(join(tempDir('tg-ssf-rx-'), 'db.sqlite'))
    await store.migrate()
    await store.putIssuer(createTestIssuer({ issuer: JWT_ISSUER }).config, Date.now())
    tx = await startSsfTransmitter()
    tx.setAudience(AUDIENCE)
  })
  after(async () => {
    await tx?.close()
    await store?.close()
  })

  const settings = (over: Partial<ReceiverSettings> = {}): ReceiverSettings => ({
    name: 'idp',
    transmitter: tx.issuer,
    jwtIssuer: JWT_ISSUER,
    audience: AUDIENCE,
    delivery: 'push',
    pushUrl: undefined,
    streamId: undefined,
    bearerToken: tx.bearerToken,
    pushAuthorization: undefined,
    origins: [],
    algorithms: ['ES256'],
    pollIntervalMs: 50,
    maxEvents: 10,
    maxSetAgeSec: 3600,
    timeoutMs: 2000,
    ...over,
  })
  const receiverWith = (over: Partial<ReceiverSettings> = {}, s: SqliteStore = store) =>
    createSsfReceiver(settings(over), {
      store: s,
      clock: { now: () => Date.now() },
      log,
      lifetime: LIFETIME,
    })
  const credentialChange = (sub: string, eventClaims: Record<string, unknown> = {}) =>
    tx.event(CAEP_EVENT.credentialChange, { format: 'iss_sub', iss: JWT_ISSUER, sub }, AUDIENCE, {
      credential_type: 'password',
      change_type: 'update',
      ...eventClaims,
    })
  const audited = async (type: string, jti: string) =>
    (await store.admin.searchAudit({ type }, { limit: 200 })).items.filter(
      (e) => (e.details as { jti?: string }).jti === jti,
    )

  it('applies a SET once: a sub rule, ssf.event_received naming it; the same SET again is a replay', async () => {
    const receiver = receiverWith()
    const sub = `u-${randomUUID()}`
    const { jti, set } = credentialChange(sub)
    const first = await receiver.receive(set, 'push')
    assert.ok(first.ok)
    assert.equal(first.rules.length, 1)
    const [rule] = (await store.listJwtRevocations(Date.now())).filter((r) => r.value === sub)
    assert.equal(rule?.kind, 'sub')
    assert.equal(rule?.createdBy, 'ssf:idp')
    const [received] = await audited('ssf.event_received', jti)
    assert.ok(received)
    assert.deepEqual((received.details as { rules: string[] }).rules, [rule?.id])
    const again = await receiver.receive(set, 'poll')
    assert.equal(again.ok, false)
    assert.equal((again as { err: string; replay?: true }).err, 'invalid_request')
    assert.equal((again as { replay?: true }).replay, true)
    await receiver.close()
  })

  it('a jwtIssuer that is not trusted: access_denied, and the SET is not spent (accepted once trusted)', async () => {
    const other = 'https://not-yet-trusted.test'
    const receiver = receiverWith({ jwtIssuer: other })
    const sub = `u-${randomUUID()}`
    const { set } = tx.event(
      CAEP_EVENT.credentialChange,
      { format: 'iss_sub', iss: other, sub },
      AUDIENCE,
      {},
    )
    const refused = await receiver.receive(set, 'push')
    assert.equal((refused as { err: string }).err, 'access_denied')
    await store.putIssuer(createTestIssuer({ issuer: other }).config, Date.now())
    assert.ok((await receiver.receive(set, 'push')).ok)
    await receiver.close()
  })

  it('an event older than every token it could refuse is received with a note and no rule', async () => {
    const receiver = receiverWith()
    const sub = `u-${randomUUID()}`
    const { jti, set } = credentialChange(sub, {
      event_timestamp: Math.floor(Date.now() / 1000) - 2 * 3600,
    })
    const outcome = await receiver.receive(set, 'push')
    assert.ok(outcome.ok)
    assert.deepEqual(outcome.rules, [])
    const [received] = await audited('ssf.event_received', jti)
    assert.ok(received)
    assert.match(String((received.details as { note?: string }).note), /nothing to revoke/)
    await receiver.close()
  })

  it('a subject it cannot map (a SAML assertion) is received with a note and no rule', async () => {
    const receiver = receiverWith()
    const { jti, set } = tx.event(
      CAEP_EVENT.tokenClaimsChange,
      { format: 'saml_assertion_id', issuer: JWT_ISSUER, assertion_id: '_a1' },
      AUDIENCE,
      { claims: { role: 'x' } },
    )
    const outcome = await receiver.receive(set, 'push')
    assert.ok(outcome.ok)
    assert.deepEqual(outcome.rules, [])
    const [received] = await audited('ssf.event_received', jti)
    assert.ok(received)
    assert.equal((received.details as { note?: string }).note, 'subject format not mapped')
    await receiver.close()
  })

  it('the rule cannot be written: unavailable, the replay record forgotten, and the next delivery applies it', async () => {
    let fail = true
    const flaky = new Proxy(store, {
      get(target, key) {
        if (key === 'putJwtRevocation' && fail) {
          return async () => {
            throw new Error('connection refused')
          }
        }
        const value = Reflect.get(target, key, target)
        return typeof value === 'function' ? value.bind(target) : value
      },
    })
    const receiver = receiverWith({}, flaky)
    const sub = `u-${randomUUID()}`
    const { set } = credentialChange(sub)
    assert.equal(((await receiver.receive(set, 'push')) as { err: string }).err, 'unavailable')
    assert.deepEqual(
      (await store.listJwtRevocations(Date.now())).filter((r) => r.value === sub),
      [],
    )
    fail = false
    const retried = await receiver.receive(set, 'push')
    assert.ok(retried.ok, JSON.stringify(retried))
    assert.equal(
      (await store.listJwtRevocations(Date.now())).filter((r) => r.value === sub).length,
      1,
    )
    await receiver.close()
  })

  it('the replay record cannot be written: unavailable (retried by the transmitter), never a 400, no rule', async () => {
    let attempts = 0
    const broken = new Proxy(store, {
      get(target, key) {
        if (key === 'recordSsfReceived') {
          return async () => {
            attempts++
            throw new Error('connection refused')
          }
        }
        const value = Reflect.get(target, key, target)
        return typeof value === 'function' ? value.bind(target) : value
      },
    })
    const receiver = receiverWith({}, broken)
    const sub = `u-${randomUUID()}`
    const { set } = credentialChange(sub)
    const outcome = await receiver.receive(set, 'push')
    assert.equal((outcome as { err: string }).err, 'unavailable')
    assert.equal(attempts, 1)
    assert.deepEqual(
      (await store.listJwtRevocations(Date.now())).filter((r) => r.value === sub),
      [],
    )
    // Delivered again once the store is back: applied (the failed attempt spent nothing).
    const healthy = receiverWith()
    assert.ok((await healthy.receive(set, 'push')).ok)
    await receiver.close()
    await healthy.close()
  })

  it('polls: creates its poll stream, asks for verification, applies and acknowledges, stops on close', async () => {
    const receiver = receiverWith({ name: 'poller', delivery: 'poll' })
    receiver.start()
    const stream = await waitUntil(() =>
      [...tx.streams.values()].find(
        (s) =>
          s.method === DELIVERY_METHOD.poll && tx.verifications.some((v) => v.streamId === s.id),
      ),
    )
    const sub = `u-${randomUUID()}`
    const { jti, set } = credentialChange(sub)
    tx.enqueue(stream.id, jti, set)
    await waitUntil(() => stream.acked.includes(jti) || undefined)
    assert.equal(
      (await store.listJwtRevocations(Date.now())).filter((r) => r.value === sub).length,
      1,
    )
    await waitUntil(() => lines.includes('SSF stream verified') || undefined)
    await receiver.close()
    const polls = tx.hits.get(`/ssf/poll/${stream.id}`) ?? 0
    await sleep(200)
    assert.equal(tx.hits.get(`/ssf/poll/${stream.id}`) ?? 0, polls, 'no poll after close')
  })

  it('the push route: an unknown receiver is 404; a body over the cap is 413 invalid_request', async () => {
    const receiver = receiverWith()
    const app = Fastify()
    await app.register(ssfPushRoutes([receiver], 1024))
    const unknown = await app.inject({
      method: 'POST',
      url: '/ssf/events/nobody',
      headers: { 'content-type': 'application/secevent+jwt' },
      payload: 'x',
    })
    assert.equal(unknown.statusCode, 404)
    const big = await app.inject({
      method: 'POST',
      url: '/ssf/events/idp',
      headers: { 'content-type': 'application/secevent+jwt' },
      payload: 'x'.repeat(2048),
    })
    assert.equal(big.statusCode, 413)
    assert.equal(big.json().err, 'invalid_request')
    await app.close()
    await receiver.close()
  })
})

describe('SSF stream client', () => {
  const transmitter = 'https://tx.example'
  /** A fake transmitter: answers by method and path from `routes`. */
  function clientWith(routes: Record<string, (body: unknown) => [number, unknown]>) {
    const seen: string[] = []
    const fetchImpl = (async (input: URL | string, init?: RequestInit) => {
      const url = new URL(String(input))
      const key = `${init?.method ?? 'GET'} ${url.pathname}`
      seen.push(key)
      const route = routes[key]
      const [status, body] = route
        ? route(init?.body === undefined ? undefined : JSON.parse(String(init.body)))
        : [404, undefined]
      return new Response(body === undefined ? null : JSON.stringify(body), { status })
    }) as typeof fetch
    const client = createStreamClient({
      transmitter,
      origins: [],
      bearerToken: 'secret',
      timeoutMs: 1000,
      fetch: fetchImpl,
    })
    return { client, seen }
  }
  const document = (over: Record<string, unknown> = {}) => ({
    issuer: transmitter,
    jwks_uri: `${transmitter}/jwks`,
    delivery_methods_supported: [DELIVERY_METHOD.push],
    configuration_endpoint: `${transmitter}/streams`,
    ...over,
  })

  it('refuses a configuration naming another issuer, or endpoints on another origin', async () => {
    const named = clientWith({
      'GET /.well-known/ssf-configuration': () => [
        200,
        document({ issuer: 'https://evil.example' }),
      ],
    })
    await assert.rejects(named.client.configuration(), /another issuer/)
    const elsewhere = clientWith({
      'GET /.well-known/ssf-configuration': () => [
        200,
        document({ configuration_endpoint: 'http://127.0.0.1:8080/admin' }),
      ],
    })
    await assert.rejects(elsewhere.client.configuration(), /not the transmitter's origin|https/)
  })

  it('a 409 on creation (one stream per receiver) adopts the existing stream', async () => {
    let listed = 0
    const { client } = clientWith({
      'GET /.well-known/ssf-configuration': () => [200, document()],
      'GET /streams': () =>
        listed++ === 0
          ? [200, []]
          : [
              200,
              [
                {
                  stream_id: 's-1',
                  delivery: { method: DELIVERY_METHOD.push, endpoint_url: 'https://me/ssf' },
                },
              ],
            ],
      'POST /streams': () => [409, undefined],
    })
    const config = await client.configuration()
    const stream = await client.stream(
      config,
      { method: 'push', endpointUrl: 'https://me/ssf' },
      undefined,
    )
    assert.equal(stream.streamId, 's-1')
  })

  it('a failed creation and a failed poll throw (retried by the receiver)', async () => {
    const { client } = clientWith({
      'GET /.well-known/ssf-configuration': () => [200, document()],
      'GET /streams': () => [200, []],
      'POST /streams': () => [500, undefined],
      'POST /poll': () => [503, undefined],
    })
    const config = await client.configuration()
    await assert.rejects(
      client.stream(config, { method: 'poll' }, undefined),
      /creating the stream: 500/,
    )
    await assert.rejects(
      client.poll(new URL(`${transmitter}/poll`), [], {}, 10),
      /poll answered 503/,
    )
  })

  it('push with a streamId and no configuration_endpoint is adopted as configured', async () => {
    const { client } = clientWith({
      'GET /.well-known/ssf-configuration': () => [
        200,
        document({ configuration_endpoint: undefined }),
      ],
    })
    const config = await client.configuration()
    assert.deepEqual(await client.stream(config, { method: 'push', endpointUrl: 'x' }, 'given'), {
      streamId: 'given',
      pollUrl: undefined,
    })
    await assert.rejects(
      client.stream(config, { method: 'poll' }, undefined),
      /no configuration_endpoint/,
    )
  })
})

async function waitUntil<T>(probe: () => T | undefined, timeoutMs = 5000): Promise<T> {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const value = probe()
    if (value !== undefined) return value
    if (Date.now() > deadline) throw new Error('not true in time')
    await sleep(20)
  }
}
