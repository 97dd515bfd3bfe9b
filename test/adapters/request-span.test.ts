/**
 * The request span (tracing on) through each library binding, on real servers on 127.0.0.1:
 * the Fastify plugin, Express, Hono on @hono/node-server and node:http must all start one
 * span per gated request, run the app's handler in it, and end it exactly once, whatever the
 * answer: a normal one, the gate's 401/403, a handler that throws, or a client that closes
 * its connection before the answer is done (while the gate checks, while the form body is
 * read, or mid-answer). A span left open there is a leak: it is never exported and its
 * memory stays held.
 *
 * The tracing here is a recorder of `RequestTracing` (auth/request-span.ts), with its own
 * AsyncLocalStorage as the active context, so the test sees what the bindings do with
 * spans without an OpenTelemetry SDK (test/auth/tracing.test.ts covers the SDK's spans).
 */
import assert from 'node:assert/strict'
import { AsyncLocalStorage } from 'node:async_hooks'
import { once } from 'node:events'
import { createServer, type IncomingMessage } from 'node:http'
import { connect } from 'node:net'
import { after, before, describe, test } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { context, SpanStatusCode, trace } from '@opentelemetry/api'
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks'
import { InMemorySpanExporter, SimpleSpanProcessor, TracerProvider } from '@opentelemetry/sdk-trace'
import express from 'express'
import Fastify from 'fastify'
import { Hono } from 'hono'
import {
  tokengate as expressGate,
  requirePermission as expressPermission,
} from '../../src/adapters/express.ts'
import { tokengate as fastifyGate } from '../../src/adapters/fastify.ts'
import {
  tokengate as honoGate,
  requirePermission as honoPermission,
  type TokengateEnv,
} from '../../src/adapters/hono.ts'
import { tokengate as nodeGate } from '../../src/adapters/node-http.ts'
import { createGate, type Gate } from '../../src/auth/gate.ts'
import type { RequestSpan, RequestTracing } from '../../src/auth/request-span.ts'
import { createTracing } from '../../src/auth/tracing.ts'
import type { AuthenticateMaybeSync } from '../../src/core/authenticate.ts'
import { type Listening, listenLocal } from '../helpers/listen.ts'
import { listenHono } from '../helpers/listen-hono.ts'
import {
  createSpecFixture,
  PROTECTED_PATH,
  REQUIRED_PERMISSION,
  type SpecFixture,
  send,
} from './spec-table.ts'

/** One span the bindings started: each `end` (its status) or `abort` that reached it. */
interface Recorded {
  readonly ends: { status?: number; aborted: boolean }[]
}

const active = new AsyncLocalStorage<Recorded>()
const spans: Recorded[] = []
const tracing: RequestTracing = {
  start(): RequestSpan {
    const span: Recorded = { ends: [] }
    spans.push(span)
    return {
      run: (work) => active.run(span, work),
      end: (status) => void span.ends.push({ status, aborted: false }),
      abort: () => void span.ends.push({ aborted: true }),
    }
  },
}

/** What the app's handlers saw as the active span: at once, and after an await. */
const seen: { now: Recorded | undefined; later: Recorded | undefined }[] = []

/** Until the span has ended or `ms` passed (an abort's end comes with the socket's close). */
async function endedWithin(span: Recorded, ms: number): Promise<void> {
  for (const stop = Date.now() + ms; span.ends.length === 0 && Date.now() < stop; ) await sleep(10)
}

/** Paths every app serves under the prefix (GET and POST `things` need the permission). */
const THROWS = '/api/v1/throws'
const THROWS_STRING = '/api/v1/throws-string'
const HANGS = '/api/v1/hangs'

/** Until the request's connection is gone (the client closed it). */
const closed = (req: IncomingMessage) =>
  req.socket.destroyed ? Promise.resolve() : once(req.socket, 'close').then(() => undefined)

async function noteSpan(): Promise<string> {
  const now = active.getStore()
  await sleep(1)
  seen.push({ now, later: active.getStore() })
  return 'ok'
}

interface Binding {
  readonly name: string
  /** Whether a handler's throw is the framework's 500 (node:http has no error handling). */
  readonly catchesThrows: boolean
  start(gate: Gate): Promise<Listening>
}

const bindings: Binding[] = [
  {
    name: 'fastify',
    catchesThrows: true,
    async start(gate) {
      const app = Fastify()
      await app.register(fastifyGate, gate)
      app.addContentTypeParser(
        'application/x-www-form-urlencoded',
        { parseAs: 'string' },
        (_r, body, done) => done(null, body),
      )
      const config = { config: { permissions: [REQUIRED_PERMISSION] } }
      app.get(PROTECTED_PATH, config, () => noteSpan())
      app.post(PROTECTED_PATH, config, () => noteSpan())
      app.get(THROWS, () => {
        throw new Error('boom')
      })
      app.get(THROWS_STRING, () => {
        throw 'boom'
      })
      app.get(HANGS, async (request, reply) => {
        reply.raw.writeHead(200)
        reply.raw.write('first')
        await closed(request.raw)
        reply.raw.end('late')
        return reply
      })
      const url = await app.listen({ host: '127.0.0.1', port: 0 })
      return { url, port: Number(new URL(url).port), close: () => app.close() }
    },
  },
  {
    name: 'express',
    catchesThrows: true,
    start(gate) {
      const app = express()
      app.use('/api/v1', expressGate(gate))
      const respond = (_req: express.Request, res: express.Response) =>
        void noteSpan().then((body) => res.send(body))
      app.get(PROTECTED_PATH, expressPermission(REQUIRED_PERMISSION), respond)
      app.post(PROTECTED_PATH, expressPermission(REQUIRED_PERMISSION), respond)
      app.get(THROWS, () => {
        throw new Error('boom')
      })
      app.get(THROWS_STRING, () => {
        throw 'boom'
      })
      app.get(HANGS, async (req, res) => {
        res.writeHead(200)
        res.write('first')
        await closed(req)
        res.end('late')
      })
      return listenLocal(createServer(app))
    },
  },
  {
    name: 'hono',
    catchesThrows: true,
    start(gate) {
      const app = new Hono<TokengateEnv>()
      app.use('/api/v1/*', honoGate(gate))
      app.get(PROTECTED_PATH, honoPermission(REQUIRED_PERMISSION), async (c) =>
        c.text(await noteSpan()),
      )
      app.post(PROTECTED_PATH, honoPermission(REQUIRED_PERMISSION), async (c) =>
        c.text(await noteSpan()),
      )
      app.get(THROWS, () => {
        throw new Error('boom')
      })
      app.get(THROWS_STRING, () => {
        throw 'boom'
      })
      // Hono answers with the handler's Response: "mid-answer" is while the handler works.
      app.get(HANGS, async (c) => {
        hanging++
        await closed((c.env as { incoming: IncomingMessage }).incoming)
        return c.text('late')
      })
      return listenHono(app.fetch)
    },
  },
  {
    name: 'node:http',
    catchesThrows: false,
    start(gate) {
      const listener = nodeGate(
        gate,
        { prefix: '/api/v1/', permissions: [REQUIRED_PERMISSION] },
        (req, res) => {
          if (req.url === HANGS) {
            res.writeHead(200)
            res.write('first')
            void closed(req).then(() => res.end('late'))
            return
          }
          void noteSpan().then((body) => res.end(body))
        },
      )
      return listenLocal(createServer(listener))
    },
  },
]

/** The fixture's authenticator, held until `held` settles when set (a check still running). */
let held: Promise<void> | undefined
/** Checks the authenticator has finished (the form body is read after it). */
let authenticated = 0
/** Requests in the Hono app's hanging handler (Hono writes nothing before it returns). */
let hanging = 0
let fixture: SpecFixture

/** Sends `head` on a raw connection, waits for `until`, then closes it without reading on. */
async function abortAfter(port: number, head: string, until: 'data' | (() => boolean)) {
  const socket = connect(port, '127.0.0.1')
  await once(socket, 'connect')
  socket.write(head)
  if (until === 'data') await once(socket, 'data')
  else while (!until()) await sleep(5)
  socket.destroy()
}

const bearer = (token: string): [string, string] => ['Authorization', `Bearer ${token}`]

for (const binding of bindings) {
  describe(`${binding.name}: the request span`, () => {
    let app: Listening
    before(async () => {
      fixture ??= await createSpecFixture()
      const authenticate: AuthenticateMaybeSync = async (input) => {
        await held
        if (input.authorization[0] === 'Bearer fails') throw new Error('store down')
        const result = await fixture.authenticate(input)
        authenticated++
        return result
      }
      app = await binding.start(createGate({ authenticate, tracing }))
    })
    after(() => app?.close())

    /** The one span the request made, ended once (waits for it to end). */
    async function oneSpan(): Promise<Recorded> {
      assert.equal(spans.length, 1, 'one span per gated request')
      const [span] = spans as [Recorded]
      await endedWithin(span, 1000)
      await sleep(20) // a second end would come right after the first
      assert.equal(span.ends.length, 1, `ended once: ${JSON.stringify(span.ends)}`)
      return span
    }

    const reset = () => {
      spans.length = 0
      seen.length = 0
      held = undefined
      authenticated = 0
      hanging = 0
    }

    test('an allowed request: the handler runs in the span (also after an await); ended with 200', async () => {
      reset()
      const response = await send(app.url, PROTECTED_PATH, [bearer(fixture.tokens.pat)])
      assert.equal(response.status, 200)
      const span = await oneSpan()
      assert.deepEqual(span.ends, [{ status: 200, aborted: false }])
      assert.equal(seen.length, 1)
      assert.equal(seen[0]?.now, span, 'the handler runs in the request span')
      assert.equal(seen[0]?.later, span, 'and its continuations too')
    })

    test("the gate's 401 and 403: the span ends with the refusal's status", async () => {
      for (const [lines, status] of [
        [[], 401],
        [[bearer(fixture.tokens.patWithoutPermission)], 403],
      ] as const) {
        reset()
        const response = await send(app.url, PROTECTED_PATH, [...lines])
        assert.equal(response.status, status)
        assert.deepEqual((await oneSpan()).ends, [{ status, aborted: false }])
        assert.equal(seen.length, 0, 'the handler did not run')
      }
    })

    test("an authenticator that throws: the binding's 500 (node:http closes the connection), the span ends with 500", async () => {
      reset()
      const answered = await send(app.url, PROTECTED_PATH, [bearer('fails')]).then(
        (response) => response.status,
        (error: NodeJS.ErrnoException) => error.code,
      )
      assert.equal(answered, binding.catchesThrows ? 500 : 'ECONNRESET')
      assert.deepEqual((await oneSpan()).ends, [{ status: 500, aborted: false }])
    })

    test('outside the prefix: no span', async () => {
      reset()
      await send(app.url, '/healthz', [bearer(fixture.tokens.pat)])
      assert.equal(spans.length, 0)
    })

    test('a handler that throws (an Error, or not one): the span ends with the 500 answered', {
      skip:
        !binding.catchesThrows &&
        'node:http has no error handling of its own: a throwing listener is an uncaught exception',
    }, async () => {
      for (const path of [THROWS, THROWS_STRING]) {
        reset()
        const response = await send(app.url, path, [bearer(fixture.tokens.pat)])
        assert.equal(response.status, 500, path)
        assert.deepEqual((await oneSpan()).ends, [{ status: 500, aborted: false }], path)
      }
    })

    test('the client closes mid-answer: the span ends (aborted), not left open', async () => {
      reset()
      await abortAfter(
        app.port,
        `GET ${HANGS} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${fixture.tokens.pat}\r\n\r\n`,
        binding.name === 'hono' ? () => hanging > 0 : 'data',
      )
      const span = await oneSpan()
      assert.deepEqual(span.ends, [{ aborted: true }], 'an abort, with no status answered')
    })

    test('the client closes while the gate still checks: the span ends (aborted)', async () => {
      reset()
      let release = () => {}
      held = new Promise((resolve) => {
        release = resolve
      })
      await abortAfter(
        app.port,
        `GET ${PROTECTED_PATH} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${fixture.tokens.pat}\r\n\r\n`,
        () => spans.length > 0,
      )
      const [span] = spans as [Recorded]
      await endedWithin(span, 1000)
      assert.deepEqual(span.ends, [{ aborted: true }], 'aborted while the check is still held')
      release()
      await oneSpan()
    })

    test('the client closes while its form body is read: the span ends (aborted)', async () => {
      reset()
      const head = `POST ${PROTECTED_PATH} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${fixture.tokens.pat}\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 100\r\n\r\na=1`
      await abortAfter(app.port, head, () => authenticated > 0)
      const span = await oneSpan()
      assert.deepEqual(span.ends, [{ aborted: true }], 'an abort, with no status answered')
    })
  })
}

test('OpenTelemetry: an aborted request span is an error named `aborted`, with no status code answered', async () => {
  const exporter = new InMemorySpanExporter()
  const provider = new TracerProvider({ spanProcessors: [new SimpleSpanProcessor({ exporter })] })
  trace.setGlobalTracerProvider(provider)
  context.setGlobalContextManager(new AsyncLocalStorageContextManager())
  fixture ??= await createSpecFixture()
  const gate = createGate({
    authenticate: fixture.authenticate,
    tracing: createTracing('sqlite').request,
  })
  const express = bindings.find((binding) => binding.name === 'express') as Binding
  const app = await express.start(gate)
  try {
    const head = `GET ${HANGS} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${fixture.tokens.pat}\r\n\r\n`
    await abortAfter(app.port, head, 'data')
    const requestSpans = () =>
      exporter.getFinishedSpans().filter((s) => s.name === 'tokengate.request')
    for (let i = 0; i < 100 && requestSpans().length === 0; i++) await sleep(10)
    const [span, ...others] = requestSpans()
    assert.ok(span && others.length === 0, 'one request span, ended')
    assert.equal(span.status.code, SpanStatusCode.ERROR)
    assert.equal(span.attributes['error.type'], 'aborted')
    assert.equal(span.attributes['http.response.status_code'], undefined)
  } finally {
    await app.close()
    trace.disable()
    context.disable()
  }
})

describe('one connection, many requests: one close listener, each span ended once', () => {
  let app: Listening
  /** The close listeners on the server's end of the connection, as each handler saw them. */
  const listeners: number[] = []
  before(async () => {
    fixture ??= await createSpecFixture()
    const gate = createGate({ authenticate: fixture.authenticate, tracing })
    const listener = nodeGate(gate, { prefix: '/api/v1/' }, (req, res) => {
      listeners.push(req.socket.listenerCount('close'))
      if (req.url === HANGS) return void res.writeHead(200).write('first')
      res.end('ok')
    })
    app = await listenLocal(createServer(listener))
  })
  after(() => app?.close())

  const get = (path: string) =>
    `GET ${path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${fixture.tokens.pat}\r\n\r\n`

  test('20 requests one after another on a keep-alive connection: no listener added per request', async () => {
    spans.length = 0
    listeners.length = 0
    const socket = connect(app.port, '127.0.0.1')
    await once(socket, 'connect')
    for (let i = 0; i < 20; i++) {
      socket.write(get(PROTECTED_PATH))
      await once(socket, 'data')
    }
    socket.destroy()
    assert.equal(spans.length, 20)
    for (const span of spans) assert.deepEqual(span.ends, [{ status: 200, aborted: false }])
    assert.equal(new Set(listeners).size, 1, `close listeners seen: ${listeners.join(' ')}`)
  })

  test('12 pipelined requests left open, then the connection closes: all 12 aborted, no listener warning', async () => {
    spans.length = 0
    listeners.length = 0
    const warnings: string[] = []
    const onWarning = (warning: Error) => void warnings.push(warning.name)
    process.on('warning', onWarning)
    try {
      await abortAfter(app.port, get(HANGS).repeat(12), () => listeners.length === 12)
      await Promise.all(spans.map((span) => endedWithin(span, 1000)))
      assert.equal(spans.length, 12)
      for (const span of spans) assert.deepEqual(span.ends, [{ aborted: true }])
      assert.equal(new Set(listeners).size, 1, `close listeners seen: ${listeners.join(' ')}`)
      await sleep(20) // a warning is emitted on the next tick
      assert.deepEqual(warnings, [])
    } finally {
      process.off('warning', onWarning)
    }
  })
})
