/**
 * Certificate-bound PATs (RFC 8705) in library mode: the Express, Hono, node:http and Fastify
 * bindings over `createTokengate`, each served by the application's own HTTPS server asking
 * for client certificates (optional, a CA made in the test). The same rows for each: the bound
 * PAT with its certificate 200; with another CA-signed certificate, none, or a self-made one
 * (the handshake completes, the certificate did not verify) 401 invalid_token; an unbound PAT
 * 200 with or without one.
 */
import assert from 'node:assert/strict'
import { createServer as createHttpsServer, request } from 'node:https'
import { after, before, describe, test } from 'node:test'
import express from 'express'
import Fastify from 'fastify'
import { Hono } from 'hono'
import { tokengate as expressGate } from '../../src/adapters/express.ts'
import { tokengate as fastifyGate } from '../../src/adapters/fastify.ts'
import { tokengate as honoGate, type TokengateEnv } from '../../src/adapters/hono.ts'
import { tokengate as nodeGate } from '../../src/adapters/node-http.ts'
import { createTokengate, type Tokengate } from '../../src/auth/tokengate.ts'
import { listenLocal } from '../helpers/listen.ts'
import { listenHono } from '../helpers/listen-hono.ts'
import { openSeededStore } from '../helpers/seeded-store.ts'
import { tempDir } from '../helpers/temp-dir.ts'
import {
  createTestCa,
  selfSignedCertificate,
  type TestCa,
  type TestCertificate,
} from '../helpers/test-ca.ts'

const PATH = '/api/v1/things'
const dir = tempDir('tg-lib-mtls-')
const ca: TestCa = createTestCa(dir)
const serverCertificate = ca.server('app-server')
const mine = ca.client('client-a')
const other = ca.client('client-b')
const selfMade = selfSignedCertificate(dir, 'self-made')

/** The HTTPS options an application gives its own server to ask for client certificates. */
const TLS = {
  cert: serverCertificate.cert,
  key: serverCertificate.key,
  ca: ca.cert,
  requestCert: true,
  rejectUnauthorized: false,
}

interface Running {
  readonly url: string
  close(): Promise<void>
}

const BINDINGS: Record<string, (gate: Tokengate) => Promise<Running>> = {
  express: async (gate) => {
    const app = express()
    app.use(expressGate({ ...gate, prefix: '/api/v1/' }))
    app.get(PATH, (_req, res) => res.json({ ok: true }))
    return listenLocal(createHttpsServer(TLS, app))
  },
  hono: async (gate) => {
    const app = new Hono<TokengateEnv>()
    app.use('/api/v1/*', honoGate(gate))
    app.get(PATH, (c) => c.json({ ok: true }))
    return listenHono(app.fetch, TLS)
  },
  'node:http': async (gate) => {
    const handler = nodeGate(gate, { prefix: '/api/v1/' }, (_req, res) => res.end('{"ok":true}'))
    return listenLocal(createHttpsServer(TLS, handler))
  },
  'Fastify plugin': async (gate) => {
    const app = Fastify({ https: TLS })
    await app.register(fastifyGate, gate)
    app.get(PATH, async () => ({ ok: true }))
    const url = await app.listen({ host: '127.0.0.1', port: 0 })
    return { url, close: () => app.close() }
  },
}

function call(url: string, token: string, client?: TestCertificate): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = request(
      `${url}${PATH}`,
      {
        ca: ca.cert,
        agent: false,
        headers: { Authorization: `Bearer ${token}` },
        ...(client ? { cert: client.cert, key: client.key } : {}),
      },
      (res) => {
        res.resume()
        res.on('end', () => resolve(res.statusCode ?? 0))
      },
    )
    req.on('error', reject)
    req.end()
  })
}

for (const [name, bind] of Object.entries(BINDINGS)) {
  describe(`library mode, ${name} over HTTPS with client certificates`, () => {
    let gate: Tokengate
    let running: Running
    let bound: string
    let unbound: string

    before(async () => {
      const dataDir = tempDir('tg-lib-mtls-data-')
      const seeded = await openSeededStore(dataDir)
      const pat = async (certificateThumbprint: string | null) =>
        (await seeded.pat({ certificateThumbprint, subject: 'lib' })).token
      bound = await pat(mine.thumbprint)
      unbound = await pat(null)
      await seeded.store.close()
      gate = await createTokengate({ dataDir })
      running = await bind(gate)
    })
    after(async () => {
      await running?.close()
      await gate?.close()
    })

    test('bound PAT: its certificate 200; another, none or a self-made one 401', async () => {
      assert.equal(await call(running.url, bound, mine), 200)
      assert.equal(await call(running.url, bound, other), 401)
      assert.equal(await call(running.url, bound), 401)
      assert.equal(await call(running.url, bound, selfMade), 401)
      // Again with its certificate (the record now cached).
      assert.equal(await call(running.url, bound, mine), 200)
    })

    test('unbound PAT: 200 with or without a certificate', async () => {
      assert.equal(await call(running.url, unbound), 200)
      assert.equal(await call(running.url, unbound, mine), 200)
    })
  })
}
