/**
 * OpenTelemetry traces (issue #25), through real listeners: tokengate's gateway and decision
 * listeners (HTTP and Envoy's gRPC ext_authz) with `tracing.enabled`, a library binding
 * (node:http over `createTokengate({ tracing: true })`), a recording upstream, and the SDK's
 * in-memory exporter
 * registered as an operator would register an SDK (tracer provider, AsyncLocalStorage context
 * manager, W3C propagator). A request carrying a `traceparent` yields its spans under that
 * parent, the upstream receives the trace, and no span carries a token.
 */
import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'
import { createServer } from 'node:http'
import { type AddressInfo, connect } from 'node:net'
import { after, before, describe, test } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import * as grpc from '@grpc/grpc-js'
import * as protoLoader from '@grpc/proto-loader'
import { context, propagation, SpanKind, SpanStatusCode, trace } from '@opentelemetry/api'
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks'
import { W3CTraceContextPropagator } from '@opentelemetry/core'
import {
  InMemorySpanExporter,
  type ReadableSpan,
  SimpleSpanProcessor,
  TracerProvider,
} from '@opentelemetry/sdk-trace'
import { tokengate as nodeGate } from '../../src/adapters/node-http.ts'
import { createTokengate } from '../../src/auth/tokengate.ts'
import { CHECK_PROTO, PROTO_OPTIONS } from '../../src/decision/envoy-grpc.ts'
import { openStore } from '../../src/stores/open-store.ts'
import { PROTECTED_PATH, REQUIRED_PERMISSION, send } from '../adapters/spec-table.ts'
import { checkRequest } from '../decision/envoy-check-requests.ts'
import { type Stack, startStack } from '../decision/harness.ts'
import { createTestIssuer, type KeyServer, startKeyServer } from '../helpers/jwt.ts'
import { freePort } from '../helpers/services.ts'

const exporter = new InMemorySpanExporter()
const provider = new TracerProvider({ spanProcessors: [new SimpleSpanProcessor({ exporter })] })
trace.setGlobalTracerProvider(provider)
context.setGlobalContextManager(new AsyncLocalStorageContextManager())
propagation.setGlobalPropagator(new W3CTraceContextPropagator())

const TRACE_ID = '4bf92f3577b34da6a3ce929d0e0e4736'
const PARENT_ID = '00f067aa0ba902b7'
const TRACEPARENT = `00-${TRACE_ID}-${PARENT_ID}-01`

const bearer = (token: string): [string, string] => ['Authorization', `Bearer ${token}`]
const spansNamed = (name: string) => exporter.getFinishedSpans().filter((s) => s.name === name)
const parentOf = (span: ReadableSpan) => span.parentSpanContext?.spanId

/** Every secret the stack holds, and their SHA-256: none may appear in any span. */
function assertNoSecret(stack: Stack, extra: readonly string[] = []): void {
  const secrets = [...Object.values(stack.tokens), stack.readerPat, ...extra]
  const text = JSON.stringify(
    exporter.getFinishedSpans().map((s) => [s.name, s.attributes, s.status, s.events]),
  )
  for (const secret of secrets) {
    assert.ok(!text.includes(secret), 'a token in a span')
    assert.ok(!text.includes(createHash('sha256').update(secret).digest('hex')), 'a token hash')
  }
  assert.doesNotMatch(text, /Bearer|eyJ/)
}

describe('tracing on: spans through the gateway and the decision listener', () => {
  let stack: Stack
  let keys: KeyServer
  before(async () => {
    stack = await startStack({ tracing: true, grpc: true })
  })
  after(async () => {
    await stack?.close()
    await keys?.close()
  })

  test('a traceparent request: its span, authenticate and the store lookups under it, the upstream in the same trace', async () => {
    exporter.reset()
    const response = await send(stack.gatewayUrl, PROTECTED_PATH, [
      bearer(stack.tokens.pat),
      ['traceparent', TRACEPARENT],
    ])
    assert.equal(response.status, 200, response.body)

    const [request, ...others] = spansNamed('tokengate.request')
    assert.ok(request && others.length === 0)
    assert.equal(request.kind, SpanKind.SERVER)
    assert.equal(request.spanContext().traceId, TRACE_ID)
    assert.equal(parentOf(request), PARENT_ID)
    assert.equal(request.attributes['http.request.method'], 'GET')
    assert.equal(request.attributes['http.route'], '/api/v1/*')
    assert.equal(request.attributes['http.response.status_code'], 200)
    const requestId = request.spanContext().spanId

    const [authenticate, ...more] = spansNamed('tokengate.authenticate')
    assert.ok(authenticate && more.length === 0)
    assert.equal(authenticate.spanContext().traceId, TRACE_ID)
    assert.equal(parentOf(authenticate), requestId)
    assert.equal(authenticate.attributes['tokengate.token_type'], 'pat')
    assert.equal(authenticate.attributes['tokengate.outcome'], 'ok')
    assert.match(String(authenticate.attributes['tokengate.fingerprint']), /^pat_…\w{4}$/)

    // The first use of the token: a cache miss, so the store was read, inside authenticate.
    const lookups = spansNamed('tokengate.store.lookup')
    assert.deepEqual(lookups.map((s) => s.attributes['tokengate.lookup']).sort(), ['pat', 'tenant'])
    for (const lookup of lookups) {
      assert.equal(lookup.spanContext().traceId, TRACE_ID)
      assert.equal(parentOf(lookup), authenticate.spanContext().spanId)
      assert.equal(lookup.kind, SpanKind.CLIENT)
      assert.equal(lookup.attributes['db.system.name'], 'sqlite')
      assert.equal(lookup.attributes['tokengate.found'], true)
    }

    const [upstream] = spansNamed('tokengate.upstream')
    assert.ok(upstream)
    assert.equal(upstream.kind, SpanKind.CLIENT)
    assert.equal(upstream.spanContext().traceId, TRACE_ID)
    assert.equal(parentOf(upstream), requestId)
    assert.equal(upstream.attributes['http.response.status_code'], 200)
    assert.equal(upstream.attributes['server.address'], new URL(stack.upstream.url).host)
    // The upstream continues the trace from tokengate's span, not from the caller's.
    const seen = stack.upstream.seen.at(-1)
    assert.equal(seen?.headers.traceparent, `00-${TRACE_ID}-${upstream.spanContext().spanId}-01`)
    assertNoSecret(stack)
  })

  test('the same token again is a cache hit: authenticate, and no store lookup', async () => {
    exporter.reset()
    const response = await send(stack.gatewayUrl, PROTECTED_PATH, [
      bearer(stack.tokens.pat),
      ['traceparent', TRACEPARENT],
    ])
    assert.equal(response.status, 200)
    assert.equal(spansNamed('tokengate.authenticate').length, 1)
    assert.deepEqual(spansNamed('tokengate.store.lookup'), [])
  })

  test('without a traceparent the request starts a trace of its own, with every span in it', async () => {
    exporter.reset()
    await send(stack.gatewayUrl, PROTECTED_PATH, [bearer(stack.tokens.pat)])
    const [request] = spansNamed('tokengate.request')
    assert.ok(request)
    assert.equal(parentOf(request), undefined)
    assert.notEqual(request.spanContext().traceId, TRACE_ID)
    for (const name of ['tokengate.authenticate', 'tokengate.upstream']) {
      const [span] = spansNamed(name)
      assert.equal(span?.spanContext().traceId, request.spanContext().traceId, name)
      assert.equal(parentOf(span as ReadableSpan), request.spanContext().spanId, name)
    }
  })

  test('the decision span continues the forwarded trace; authenticate is its child, refusals carry codes only', async () => {
    exporter.reset()
    const refused = await send(stack.decisionUrl, PROTECTED_PATH, [
      bearer(stack.tokens.unknownPat),
      ['traceparent', TRACEPARENT],
    ])
    assert.equal(refused.status, 401)
    const [decision] = spansNamed('tokengate.decision')
    assert.ok(decision)
    assert.equal(decision.kind, SpanKind.SERVER)
    assert.equal(decision.spanContext().traceId, TRACE_ID)
    assert.equal(parentOf(decision), PARENT_ID)
    assert.equal(decision.attributes['http.response.status_code'], 401)
    const [authenticate] = spansNamed('tokengate.authenticate')
    assert.equal(parentOf(authenticate as ReadableSpan), decision.spanContext().spanId)
    assert.equal(authenticate?.attributes['tokengate.outcome'], 'invalid_token')
    assert.match(String(authenticate?.attributes['tokengate.fingerprint']), /^pat_…\w{4}$/)
    // The unknown token's lookup found nothing: a cache miss, traced as such.
    const [lookup] = spansNamed('tokengate.store.lookup')
    assert.equal(lookup?.attributes['tokengate.found'], false)
    assertNoSecret(stack)
  })

  test('the gRPC ext_authz check is a decision span like the HTTP one: the forwarded trace, authenticate under it', async () => {
    const loaded = grpc.loadPackageDefinition(
      protoLoader.loadSync(CHECK_PROTO, { ...PROTO_OPTIONS, enums: Number }),
    ) as unknown as {
      envoy: { service: { auth: { v3: { Authorization: grpc.ServiceClientConstructor } } } }
    }
    const client = new loaded.envoy.service.auth.v3.Authorization(
      new URL(stack.grpcUrl as string).host,
      grpc.credentials.createInsecure(),
    ) as unknown as grpc.Client & {
      Check(request: object, callback: (error: Error | null, response: object) => void): void
    }
    const check = (token: string) =>
      new Promise<{ http_response: string }>((resolve, reject) =>
        client.Check(
          checkRequest('GET', PROTECTED_PATH, [
            ['authorization', `Bearer ${token}`],
            ['traceparent', TRACEPARENT],
          ]),
          (error, response) =>
            error ? reject(error) : resolve(response as { http_response: string }),
        ),
      )
    try {
      for (const [token, status, outcome] of [
        [stack.tokens.pat, 200, 'ok'],
        [stack.tokens.unknownPat, 401, 'invalid_token'],
      ] as const) {
        exporter.reset()
        const answer = await check(token)
        assert.equal(answer.http_response, status === 200 ? 'ok_response' : 'denied_response')
        const [decision, ...others] = spansNamed('tokengate.decision')
        assert.ok(decision && others.length === 0, 'one decision span')
        assert.equal(decision.kind, SpanKind.SERVER)
        assert.equal(decision.spanContext().traceId, TRACE_ID)
        assert.equal(parentOf(decision), PARENT_ID)
        assert.equal(decision.attributes['http.request.method'], 'GET')
        assert.equal(decision.attributes['http.response.status_code'], status)
        const [authenticate] = spansNamed('tokengate.authenticate')
        assert.equal(parentOf(authenticate as ReadableSpan), decision.spanContext().spanId)
        assert.equal(authenticate?.attributes['tokengate.outcome'], outcome)
      }
      assertNoSecret(stack)
    } finally {
      client.close()
    }
  })

  test('a library binding (node:http over createTokengate with tracing) traces each gated request the same way; the app runs in its span', async () => {
    const gate = await createTokengate({ dataDir: stack.dataDir, tracing: true })
    let appSpanId: string | undefined
    const handler = nodeGate(gate, { prefix: '/api/v1/' }, (_req, res) => {
      appSpanId = trace.getSpan(context.active())?.spanContext().spanId
      res.end('{"ok":true}')
    })
    const server = createServer(handler)
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
    try {
      for (const [token, status, outcome] of [
        [stack.tokens.pat, 200, 'ok'],
        [stack.tokens.unknownPat, 401, 'invalid_token'],
      ] as const) {
        exporter.reset()
        const response = await send(url, PROTECTED_PATH, [
          bearer(token),
          ['traceparent', TRACEPARENT],
        ])
        assert.equal(response.status, status)
        // The span ends when the response has finished: wait for it.
        for (let i = 0; i < 50 && spansNamed('tokengate.request').length === 0; i++) {
          await new Promise((resolve) => setTimeout(resolve, 10))
        }
        const [request, ...others] = spansNamed('tokengate.request')
        assert.ok(request && others.length === 0, 'one request span')
        assert.equal(request.kind, SpanKind.SERVER)
        assert.equal(request.spanContext().traceId, TRACE_ID)
        assert.equal(parentOf(request), PARENT_ID)
        assert.equal(request.attributes['http.response.status_code'], status)
        const [authenticate] = spansNamed('tokengate.authenticate')
        assert.equal(parentOf(authenticate as ReadableSpan), request.spanContext().spanId)
        assert.equal(authenticate?.attributes['tokengate.outcome'], outcome)
        if (status === 200) assert.equal(appSpanId, request.spanContext().spanId)
      }
      // Outside the prefix: not the gate's, no span.
      exporter.reset()
      await send(url, '/healthz', [['traceparent', TRACEPARENT]])
      assert.deepEqual(spansNamed('tokengate.request'), [])
      assertNoSecret(stack)
    } finally {
      await new Promise<void>((resolve) => server.close(() => resolve()))
      await gate.close()
    }
  })

  test('JWKS fetches are spans: the URL without its query, the status; a failing one is an error', async () => {
    const issuer = createTestIssuer({ issuer: 'https://traced.test' })
    keys = await startKeyServer({ keys: [issuer.publicJwk] })
    exporter.reset()
    const store = await openStore({ dataDir: stack.dataDir })
    await store.migrate()
    const jwksUrl = `${keys.url}?client_secret=do-not-trace`
    await store.putIssuer({ ...issuer.config, keySource: { kind: 'jwks_url', url: jwksUrl } }, 0)
    // And one whose JWKS URL refuses connections.
    const closed = `http://127.0.0.1:${await freePort()}/jwks.json`
    const down = createTestIssuer({ issuer: 'https://traced-down.test' })
    await store.putIssuer({ ...down.config, keySource: { kind: 'jwks_url', url: closed } }, 0)
    await store.close()
    const jwt = await issuer.sign({ permissions: [REQUIRED_PERMISSION] })
    // The instance follows the store's change log (500 ms poll), then fetches the keys.
    const deadline = Date.now() + 10_000
    let status = 0
    while (status !== 200 && Date.now() < deadline) {
      status = (
        await send(stack.gatewayUrl, PROTECTED_PATH, [bearer(jwt), ['X-Tenant-Id', 'tenant-a']])
      ).status
      if (status !== 200) await new Promise((resolve) => setTimeout(resolve, 50))
    }
    assert.equal(status, 200)
    const fetched = spansNamed('tokengate.jwks.fetch').find(
      (s) => s.attributes['url.full'] === keys.url,
    )
    assert.ok(fetched, 'a fetch span for the JWKS URL, without its query')
    assert.equal(fetched.kind, SpanKind.CLIENT)
    assert.equal(fetched.attributes['http.response.status_code'], 200)

    // The issuer whose JWKS URL refuses connections: its fetch span is an error.
    const failed = () =>
      spansNamed('tokengate.jwks.fetch').find(
        (s) => s.attributes['url.full'] === closed && s.status.code === SpanStatusCode.ERROR,
      )
    while (!failed() && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50))
    assert.equal(failed()?.attributes['error.type'], 'TypeError')
    assertNoSecret(stack, [jwt, 'do-not-trace'])
  })

  test('a proxy that hangs up while the decision waits (on an issuer’s keys) ends the decision span as aborted', async () => {
    const held = await startKeyServer()
    held.setMode('hang')
    const issuer = createTestIssuer({ issuer: 'https://traced-held.test' })
    const store = await openStore({ dataDir: stack.dataDir })
    await store.migrate()
    await store.putIssuer({ ...issuer.config, keySource: { kind: 'jwks_url', url: held.url } }, 0)
    await store.close()
    const jwt = await issuer.sign({ permissions: [REQUIRED_PERMISSION] })
    const { hostname, port } = new URL(stack.decisionUrl)
    const ask = [
      `GET ${PROTECTED_PATH} HTTP/1.1`,
      `Host: ${hostname}:${port}`,
      `Authorization: Bearer ${jwt}`,
      'X-Tenant-Id: tenant-a',
      `traceparent: ${TRACEPARENT}`,
      '',
      '',
    ].join('\r\n')
    try {
      // Until the instance has seen the issuer (its 500 ms change-log poll) the ask is refused
      // at once; then it waits on the JWKS fetch, and the proxy hangs up.
      const deadline = Date.now() + 10_000
      let waiting = false
      while (!waiting && Date.now() < deadline) {
        exporter.reset()
        const socket = connect(Number(port), hostname)
        socket.write(ask)
        waiting = await new Promise<boolean>((resolve) => {
          const timer = setTimeout(() => resolve(held.requests > 0), 300)
          socket.once('data', () => {
            clearTimeout(timer)
            resolve(false)
          })
        })
        socket.destroy()
      }
      assert.ok(waiting, 'the decision waited on the held JWKS fetch')
      const aborted = () =>
        spansNamed('tokengate.decision').find((s) => s.attributes['error.type'] === 'aborted')
      for (let i = 0; i < 100 && !aborted(); i++) await sleep(10)
      const span = aborted()
      assert.ok(span, 'the decision span ended as aborted when the proxy hung up')
      assert.equal(span.status.code, SpanStatusCode.ERROR)
      assert.equal(span.spanContext().traceId, TRACE_ID)
      assert.equal(span.attributes['http.response.status_code'], undefined)
      assertNoSecret(stack, [jwt])
    } finally {
      await held.close()
    }
  })
})

describe('tracing off (the default)', () => {
  let stack: Stack
  before(async () => {
    stack = await startStack()
  })
  after(() => stack?.close())

  test('the same requests make no span and forward the caller’s traceparent untouched', async () => {
    exporter.reset()
    for (const url of [stack.gatewayUrl, stack.decisionUrl]) {
      const response = await send(url, PROTECTED_PATH, [
        bearer(stack.tokens.pat),
        ['traceparent', TRACEPARENT],
      ])
      assert.equal(response.status, 200)
    }
    assert.deepEqual(exporter.getFinishedSpans(), [])
    assert.equal(stack.upstream.seen.at(-1)?.headers.traceparent, TRACEPARENT)
  })
})
