/**
 * One table, every front end (#33): the same `rows` run unchanged against tokengate's server
 * (its real HTTPS listener), the gateway, the forward-auth decision API over HTTP (asked as
 * nginx asks) and over Envoy's gRPC ext_authz, the Express, Hono and node:http bindings, and the Fastify plugin
 * over `createTokengate`. Each row checks the status, the audit row the answer left in the
 * store (event and outcome, or none), and that the answer's request id is the audited one.
 *
 * Every front end has its own data directory (SQLite), prepared with the same tenant and
 * keys, and its own limiter, so the 429 row (the failed-authentication limit) of one cannot
 * touch another. A test-only credential kind (`X-Api-Key`) is registered here, with no edit
 * under src/, before any front end is built.
 *
 * Certificate binding (RFC 8705): a row's request may present a client certificate (`mine`,
 * the one the bound PAT names, or `other`, signed by the same CA). Each front end presents it
 * the way its clients do: a TLS client certificate on the HTTPS listener of the server, the
 * gateway and the library bindings (client certificates requested, optional, the test CA);
 * the proxy kind's own field on the decision API (nginx's `X-SSL-Client-Cert` on the HTTP
 * listener, Envoy's `source.certificate` over gRPC), as a trusted proxy sends it.
 *
 * Adding rows: append to `rows` (before the 429 row).
 */
import assert from 'node:assert/strict'
import { hash } from 'node:crypto'
import { writeFileSync } from 'node:fs'
import { createServer, request as httpRequest } from 'node:http'
import { createServer as createHttpsServer, request as httpsRequest } from 'node:https'
import { join } from 'node:path'
import { after, before, describe, test } from 'node:test'
import express from 'express'
import Fastify from 'fastify'
import { Hono } from 'hono'
import { tokengate as expressGate, requirePermission } from '../../src/adapters/express.ts'
import { tokengate as fastifyGate } from '../../src/adapters/fastify.ts'
import {
  tokengate as honoGate,
  requirePermission as honoPermission,
  type TokengateEnv,
} from '../../src/adapters/hono.ts'
import { tokengate as nodeGate } from '../../src/adapters/node-http.ts'
import { createTokengate, type Tokengate } from '../../src/auth/tokengate.ts'
import {
  type CredentialKind,
  registerCredentialKind,
  unregisterCredentialKind,
} from '../../src/core/authenticate.ts'
import type { AuthResult } from '../../src/core/principal.ts'
import { headerValues } from '../../src/core/raw-headers.ts'
import { checkRequest as envoyCheckRequest } from '../decision/envoy-check-requests.ts'
import { connectEnvoyAuthorization } from '../decision/envoy-client.ts'
import { auditRowOf } from '../helpers/audit-rows.ts'
import { TEST_TENANT } from '../helpers/jwt.ts'
import { type Launched, launchTokengate } from '../helpers/launch.ts'
import { listenLocal } from '../helpers/listen.ts'
import { listenHono } from '../helpers/listen-hono.ts'
import { openSeededStore } from '../helpers/seeded-store.ts'
import { startTestServer } from '../helpers/server.ts'
import { tempDir } from '../helpers/temp-dir.ts'
import { createTestCa, type TestCertificate } from '../helpers/test-ca.ts'

/** The route every front end protects the same way: `GET` needs `tokens:read`. */
const PATH = '/api/v1/tokens'
const PERMISSION = 'tokens:read'
/** A path no route of the server has: the form-body row is refused before any routing. */
const FORM_PATH = '/api/v1/things'
const POLICY = `default: authenticated
rules:
  - methods: [GET]
    path: ${PATH}
    permissions: [${PERMISSION}]
`
/**
 * The failed-authentication limit of every front end: 4 per 2 s window per address (the
 * rows before the 429 row fail authentication four times).
 */
const RATE_LIMIT = { failedAuth: { max: 4, windowSec: 2 } }

/** The CA whose client certificates every HTTPS front end requests (optional mode). */
const caDir = tempDir('tg-frontends-ca-')
const ca = createTestCa(caDir)
const serverCertificate = ca.server('front-end')
const CERTIFICATES: Record<'mine' | 'other', TestCertificate> = {
  mine: ca.client('client-mine'),
  other: ca.client('client-other'),
}
/** The HTTPS options of the library bindings' own servers: client certificates asked for. */
const APP_TLS = {
  cert: serverCertificate.cert,
  key: serverCertificate.key,
  ca: ca.cert,
  requestCert: true,
  rejectUnauthorized: false,
}
/** tokengate's own listener (server, gateway): client certificates asked for, optional. */
const CLIENT_CERTIFICATES = { caFile: ca.certFile, mode: 'optional' }

// ---------------------------------------------------------------------------------------
// The test-only credential kind: registered here, served by every front end.
const API_KEY = 'k-frontends-0123456789'
const apiKeyKind: CredentialKind = {
  name: 'apikey-table',
  challengeScheme: 'ApiKey',
  create: () => ({
    kind: 'apikey-table',
    claim: (request) => {
      const values = headerValues(request.headers, 'x-api-key')
      return values.length === 1 ? values[0] : undefined
    },
    authenticate(credential): AuthResult {
      if (credential !== API_KEY) {
        const detail = 'The access token is not valid.'
        return { ok: false, failure: { code: 'invalid_token', reason: 'unknown_token', detail } }
      }
      return {
        ok: true,
        principal: {
          tokenType: 'apikey-table',
          tenantId: TEST_TENANT,
          subject: 'key:table',
          permissions: [PERMISSION],
          tokenId: 'table',
          expiresAt: null,
          fingerprint: `apikey:${hash('sha256', credential, 'hex').slice(0, 8)}`,
        },
      }
    },
  }),
  fingerprint: (credential) => `apikey:${hash('sha256', credential, 'hex').slice(0, 8)}`,
  limiterKey: (principal) => `apikey:${principal.tokenId}`,
  storedKeyId: () => undefined,
}
registerCredentialKind(apiKeyKind)
after(() => unregisterCredentialKind('apikey-table'))

// ---------------------------------------------------------------------------------------
// The rows.

interface Keys {
  /** A PAT holding `tokens:read`. */
  readonly reader: string
  /** A PAT holding nothing. */
  readonly weak: string
  /** A well-formed PAT no store holds. */
  readonly unknown: string
  /** A PAT holding `tokens:read`, bound to the `mine` client certificate. */
  readonly bound: string
}

interface Sent {
  readonly method: string
  readonly path: string
  readonly lines: [string, string][]
  /** An `application/x-www-form-urlencoded` body. */
  readonly form?: string
  /** The client certificate presented (TLS, or the proxy's field on the decision API). */
  readonly certificate?: 'mine' | 'other'
}

interface Row {
  readonly name: string
  readonly request: (keys: Keys) => Sent
  readonly status: number
  /** The audit row the answer leaves (`type`, `outcome`, and `reason` when set); null: none. */
  readonly audit: { type: string; outcome: string; reason?: string } | null
  /** Sent again (at most 10 times) until this status answers: the limit row. */
  readonly repeatUntil?: boolean
  /** Needs the request body, which a forward-auth decision never sees. */
  readonly body?: boolean
}

const bearer = (token: string): [string, string] => ['Authorization', `Bearer ${token}`]

/** A row's request: `GET PATH` with one of the keys, presenting `certificate` when given. */
const getWith =
  (key: keyof Keys, certificate?: Sent['certificate']) =>
  (keys: Keys): Sent => ({
    method: 'GET',
    path: PATH,
    lines: [bearer(keys[key])],
    ...(certificate && { certificate }),
  })

/** Run in order on every front end; the 429 row is last (it leaves the address limited). */
export const rows: Row[] = [
  {
    name: 'CORS preflight → 204, never authenticated',
    request: () => ({
      method: 'OPTIONS',
      path: PATH,
      lines: [
        ['Origin', 'https://app.example'],
        ['Access-Control-Request-Method', 'GET'],
      ],
    }),
    status: 204,
    audit: null,
  },
  {
    name: 'PAT holding the permission → 200',
    request: getWith('reader'),
    status: 200,
    audit: null,
  },
  {
    name: 'registered X-Api-Key kind → 200',
    request: () => ({ method: 'GET', path: PATH, lines: [['X-Api-Key', API_KEY]] }),
    status: 200,
    audit: null,
  },
  {
    name: 'PAT without the permission → 403 insufficient_permission',
    request: getWith('weak'),
    status: 403,
    audit: { type: 'auth.forbidden', outcome: 'insufficient_permission' },
  },
  {
    name: 'token also in a form body → 400 invalid_request (RFC 6750 §2)',
    request: (keys) => ({
      method: 'POST',
      path: FORM_PATH,
      lines: [bearer(keys.reader)],
      form: 'name=x&access_token=other',
    }),
    status: 400,
    audit: { type: 'auth.failed', outcome: 'invalid_request' },
    body: true,
  },
  {
    name: 'no Authorization → 401 missing_authorization',
    request: () => ({ method: 'GET', path: PATH, lines: [] }),
    status: 401,
    audit: { type: 'auth.failed', outcome: 'missing_authorization' },
  },
  {
    name: 'PAT bound to a client certificate, presented with it → 200',
    request: getWith('bound', 'mine'),
    status: 200,
    audit: null,
  },
  {
    name: 'bound PAT with another certificate → 401 invalid_token (certificate_mismatch)',
    request: getWith('bound', 'other'),
    status: 401,
    audit: { type: 'auth.failed', outcome: 'invalid_token', reason: 'certificate_mismatch' },
  },
  {
    name: 'bound PAT with no certificate → 401 invalid_token (certificate_required)',
    request: getWith('bound'),
    status: 401,
    audit: { type: 'auth.failed', outcome: 'invalid_token', reason: 'certificate_required' },
  },
  {
    name: 'unknown PAT → 401 invalid_token',
    request: getWith('unknown'),
    status: 401,
    audit: { type: 'auth.failed', outcome: 'invalid_token', reason: 'unknown_token' },
  },
  {
    name: 'over the failed-authentication limit → 429, auth.throttled with its request id',
    request: getWith('unknown'),
    status: 429,
    audit: { type: 'auth.throttled', outcome: 'rate_limited' },
    repeatUntil: true,
  },
]

// ---------------------------------------------------------------------------------------
// The front ends.

interface Answer {
  readonly status: number
  /** The answer's `X-Request-Id`. */
  readonly requestId: string | undefined
}

interface FrontEnd {
  readonly dataDir: string
  readonly seesBody: boolean
  send(sent: Sent): Promise<Answer>
  close(): Promise<void>
}

/** A data directory with the tenant and the keys every front end serves. */
async function prepare(): Promise<{ dataDir: string; keys: Keys }> {
  const dataDir = tempDir('tg-frontends-')
  const seeded = await openSeededStore(dataDir)
  const pat = async (permissions: string[], certificateThumbprint: string | null = null) =>
    (await seeded.pat({ permissions, certificateThumbprint, subject: 'table' })).token
  const keys: Keys = {
    reader: await pat([PERMISSION]),
    weak: await pat([]),
    unknown: (await seeded.pat({ subject: 'x', expiresAt: null, stored: false })).token,
    bound: await pat([PERMISSION], CERTIFICATES.mine.thumbprint),
  }
  await seeded.store.close()
  return { dataDir, keys }
}

/**
 * One HTTP(S) exchange with exactly these header lines (and a form body); over HTTPS the
 * row's client certificate is presented in the handshake.
 */
function exchange(base: string, sent: Sent, trusted?: string): Promise<Answer> {
  const url = new URL(base)
  const body = sent.form === undefined ? undefined : Buffer.from(sent.form)
  const lines: [string, string][] = [['Host', url.host], ...sent.lines]
  if (body) {
    lines.push(['Content-Type', 'application/x-www-form-urlencoded'])
    lines.push(['Content-Length', String(body.length)])
  }
  const request = url.protocol === 'https:' ? httpsRequest : httpRequest
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: url.hostname,
        port: url.port,
        path: sent.path,
        method: sent.method,
        headers: lines.flat() as unknown as Record<string, string>,
        agent: false,
        ...(trusted ? { ca: trusted, servername: 'localhost' } : {}),
        ...(sent.certificate === undefined
          ? {}
          : { cert: CERTIFICATES[sent.certificate].cert, key: CERTIFICATES[sent.certificate].key }),
      },
      (res) => {
        res.resume()
        res.on('end', () =>
          resolve({
            status: res.statusCode ?? 0,
            requestId: res.headers['x-request-id'] as string | undefined,
          }),
        )
      },
    )
    req.on('error', reject)
    req.end(body)
  })
}

/** A front end at `url` over HTTPS with the test CA's server certificate; it sees bodies. */
function overHttps(dataDir: string, url: string, close: () => Promise<void>): FrontEnd {
  return { dataDir, seesBody: true, send: (sent) => exchange(url, sent, ca.cert), close }
}

/** A library binding over `createTokengate` on its own data directory. */
async function library(
  dataDir: string,
  start: (gate: Tokengate) => Promise<{ url: string; close(): Promise<void> }>,
): Promise<FrontEnd> {
  const gate = await createTokengate({ dataDir, rateLimit: RATE_LIMIT })
  const running = await start(gate)
  return overHttps(dataDir, running.url, async () => {
    await running.close()
    await gate.close()
  })
}

/** tokengate launched on `dataDir` with `overrides`. */
async function launch(dataDir: string, overrides: Record<string, unknown>): Promise<Launched> {
  return launchTokengate({
    dataDir,
    server: { host: '127.0.0.1', port: 0, plainHttp: true },
    log: { level: 'silent' },
    rateLimit: RATE_LIMIT,
    ...overrides,
  })
}

/** The policy file of the gateway and the decision API. */
function policyIn(dataDir: string): string {
  const file = join(dataDir, 'policy.yaml')
  writeFileSync(file, POLICY)
  return file
}

interface HeaderOption {
  header: { key: string; value: string }
}
interface GrpcCheck {
  http_response: 'ok_response' | 'denied_response'
  ok_response?: { response_headers_to_add?: HeaderOption[] }
  denied_response?: { status?: { code: string | number }; headers?: HeaderOption[] }
}
/**
 * The decision API's gRPC ext_authz service asked as Envoy asks it (`encode_raw_headers`):
 * the answer's status is the denied response's, or 200 for an ok response.
 */
async function grpcFrontEnd(dataDir: string): Promise<FrontEnd> {
  const decision = { host: '127.0.0.1', port: 0, proxy: 'envoy', grpcPort: 0 }
  const running = await launch(dataDir, {
    decision: { ...decision, policyFile: policyIn(dataDir) },
  })
  const client = connectEnvoyAuthorization<GrpcCheck>(running.decisionGrpcUrl as string, {
    numericEnums: true,
  })
  return {
    dataDir,
    seesBody: false,
    async send(sent) {
      const request = envoyCheckRequest(sent.method, sent.path, sent.lines, {
        raw: true,
        source: '127.0.0.1',
      }) as {
        attributes: {
          source: Record<string, unknown>
          request: { http: { header_map: { headers: { key: string }[] } } }
        }
      }
      // Envoy's include_peer_certificate: the client's certificate, URL-escaped PEM.
      if (sent.certificate !== undefined) {
        const certificate = encodeURIComponent(CERTIFICATES[sent.certificate].cert)
        request.attributes.source = { ...request.attributes.source, certificate }
      }
      // The helper's fixed Envoy request id: dropped, so tokengate makes one per request.
      const map = request.attributes.request.http.header_map
      map.headers = map.headers.filter((h) => h.key !== 'x-request-id')
      const response = await client.check(request)
      const denied = response.denied_response
      const headers = denied ? denied.headers : response.ok_response?.response_headers_to_add
      const id = headers?.find((h) => h.header.key.toLowerCase() === 'x-request-id')
      const status = denied ? Number(denied.status?.code) : 200
      return { status, requestId: id?.header.value }
    },
    async close() {
      client.close()
      await running.close()
    },
  }
}

const frontEnds: Record<string, (dataDir: string) => Promise<FrontEnd>> = {
  async server(dataDir) {
    const server = await startTestServer({
      dataDir,
      server: { port: 0, clientCertificates: CLIENT_CERTIFICATES },
      rateLimit: RATE_LIMIT,
      log: { level: 'silent' },
    })
    return {
      dataDir,
      seesBody: true,
      send: (sent) => exchange(server.url, sent, server.ca),
      close: () => server.close(),
    }
  },
  async gateway(dataDir) {
    const upstream = await listenLocal(createServer((_req, res) => res.end('upstream')))
    const running = await launch(dataDir, {
      server: {
        host: '127.0.0.1',
        port: 0,
        tlsCertFile: serverCertificate.certFile,
        tlsKeyFile: serverCertificate.keyFile,
        clientCertificates: CLIENT_CERTIFICATES,
      },
      gateway: { upstream: upstream.url, policyFile: policyIn(dataDir) },
    })
    return overHttps(dataDir, running.url, async () => {
      await running.close()
      await upstream.close()
    })
  },
  // Asked as examples/forward-auth/nginx.conf asks: the original request in
  // X-Original-Method/-URI on the auth subrequest (a preflight, which the example's map
  // routes to @tokengate_preflight, as the client's own request line), the client
  // certificate in X-SSL-Client-Cert. nginx, not Envoy, because Envoy's HTTP ext_authz
  // reports no certificate (proxy-kinds.ts); the Envoy kind is the gRPC front end's.
  async 'decision HTTP'(dataDir) {
    const decision = { host: '127.0.0.1', port: 0, proxy: 'nginx', policyFile: policyIn(dataDir) }
    const running = await launch(dataDir, { decision })
    return {
      dataDir,
      seesBody: false,
      send(sent) {
        const lines: [string, string][] = [
          ['X-Original-Method', sent.method],
          ['X-Original-URI', sent.path],
          ...sent.lines,
        ]
        if (sent.certificate !== undefined) {
          lines.push(['X-SSL-Client-Cert', encodeURIComponent(CERTIFICATES[sent.certificate].cert)])
        }
        const named = (name: string) => sent.lines.some(([n]) => n.toLowerCase() === name)
        const preflight =
          sent.method === 'OPTIONS' && named('origin') && named('access-control-request-method')
        const line = preflight
          ? { method: 'OPTIONS', path: sent.path }
          : { method: 'GET', path: '/' }
        return exchange(running.decisionUrl as string, { ...line, lines })
      },
      close: () => running.close(),
    }
  },
  'decision gRPC': grpcFrontEnd,
  express: (dataDir) =>
    library(dataDir, async (gate) => {
      const app = express()
      app.use(expressGate({ ...gate, prefix: '/api/v1/' }))
      app.get(PATH, requirePermission(PERMISSION), (_req, res) => res.json({ ok: true }))
      return listenLocal(createHttpsServer(APP_TLS, app))
    }),
  hono: (dataDir) =>
    library(dataDir, async (gate) => {
      const app = new Hono<TokengateEnv>()
      app.use('/api/v1/*', honoGate(gate))
      app.get(PATH, honoPermission(PERMISSION), (c) => c.json({ ok: true }))
      return listenHono(app.fetch, APP_TLS)
    }),
  'node:http': (dataDir) =>
    library(dataDir, async (gate) => {
      const options = { prefix: '/api/v1/', permissions: [PERMISSION] }
      const handler = nodeGate(gate, options, (_req, res) => res.end('{"ok":true}'))
      return listenLocal(createHttpsServer(APP_TLS, handler))
    }),
  'createTokengate (Fastify plugin)': (dataDir) =>
    library(dataDir, async (gate) => {
      const app = Fastify({ https: APP_TLS })
      await app.register(fastifyGate, gate)
      app.get(PATH, { config: { permissions: [PERMISSION] } }, async () => ({ ok: true }))
      const url = await app.listen({ host: '127.0.0.1', port: 0 })
      return { url, close: () => app.close() }
    }),
}

for (const [name, start] of Object.entries(frontEnds)) {
  describe(`front-end table: ${name}`, () => {
    let front: FrontEnd
    let keys: Keys
    before(async () => {
      const prepared = await prepare()
      keys = prepared.keys
      front = await start(prepared.dataDir)
    })
    after(() => front?.close())

    for (const row of rows) {
      test(row.name, async (t) => {
        if (row.body && !front.seesBody) {
          // A forward-auth decision gets the request's head only; the proxy streams the body.
          t.skip('a forward-auth decision never sees the request body')
          return
        }
        const sent = row.request(keys)
        let answer = await front.send(sent)
        for (let i = 0; row.repeatUntil && answer.status !== row.status && i < 10; i++) {
          answer = await front.send(sent)
        }
        assert.equal(answer.status, row.status)
        assert.ok(answer.requestId, 'the answer carries X-Request-Id')
        const audited = await auditRowOf(front.dataDir, answer.requestId, row.audit ? 6_000 : 300)
        if (row.audit === null) {
          assert.equal(audited, undefined, 'no audit row for this answer')
          return
        }
        assert.ok(audited, `no audit row with the answer's request id ${answer.requestId}`)
        assert.equal(audited.requestId, answer.requestId)
        assert.equal(audited.type, row.audit.type)
        assert.equal(audited.outcome, row.audit.outcome)
        if (row.audit.reason !== undefined) {
          assert.equal((audited.details as { reason?: string }).reason, row.audit.reason)
        }
      })
    }
  })
}
