/**
 * Certificate-bound credentials (RFC 8705) over the server's real TLS listener, with a CA
 * made here (`server.clientCertificates`): a bound PAT and a `cnf` JWT pass with their client
 * certificate and are refused (401 invalid_token) with another CA-signed certificate, with
 * none, and with a certificate the CA did not sign (optional mode lets that handshake finish;
 * the certificate must not count). Unbound credentials pass with or without a certificate.
 * In required mode a handshake without a CA-signed certificate fails.
 */
import assert from 'node:assert/strict'
import { Buffer } from 'node:buffer'
import { mkdirSync, writeFileSync } from 'node:fs'
import https from 'node:https'
import { join } from 'node:path'
import { after, before, describe, it } from 'node:test'
import { startUpstream, type Upstream } from '../gateway/harness.ts'
import { createTestIssuer, type TestIssuer } from '../helpers/jwt.ts'
import { startTestServer, type TestServer } from '../helpers/server.ts'
import { addIssuerWithCli, issuePatWithCli } from '../helpers/server-cli.ts'
import { tempDir } from '../helpers/temp-dir.ts'
import {
  createTestCa,
  selfSignedCertificate,
  type TestCa,
  type TestCertificate,
} from '../helpers/test-ca.ts'

interface Answer {
  readonly status: number
  readonly body: Record<string, unknown>
  readonly challenge: string | undefined
}

/** One request on a new connection, presenting `client` (or no certificate). */
function call(
  server: TestServer,
  headers: Record<string, string>,
  client?: TestCertificate,
  agent?: https.Agent,
  path = '/api/v1/me',
): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = https.request(
      `${server.url}${path}`,
      {
        ca: server.ca,
        headers,
        ...(agent ? { agent } : { agent: false }),
        ...(client ? { cert: client.cert, key: client.key } : {}),
      },
      (res) => {
        const chunks: Buffer[] = []
        res.on('data', (chunk: Buffer) => chunks.push(chunk))
        res.on('end', () => {
          let body: Record<string, unknown> = {}
          try {
            body = JSON.parse(Buffer.concat(chunks).toString('utf8'))
          } catch {}
          const challenge = res.headers['www-authenticate']
          resolve({ status: res.statusCode ?? 0, body, challenge })
        })
      },
    )
    req.setTimeout(10_000, () => req.destroy(new Error('request timed out')))
    req.on('error', reject)
    req.end()
  })
}

function assertRefused(answer: Answer, reason: string, server: TestServer): void {
  assert.equal(answer.status, 401, JSON.stringify(answer.body))
  assert.equal(answer.body.code, 'invalid_token')
  assert.match(answer.challenge ?? '', /error="invalid_token", error_description="[^"]*certificate/)
  const requestId = answer.body.requestId as string
  const line = server.logs.find((l) => l.includes(requestId) && l.includes('"reason"'))
  assert.ok(line?.includes(`"reason":"${reason}"`), `log line of ${requestId}: ${line}`)
}

describe('certificate-bound PATs and JWTs over the TLS listener (clientCertificates optional)', () => {
  const dir = tempDir('tg-mtls-')
  let ca: TestCa
  let mine: TestCertificate
  let other: TestCertificate
  let forged: TestCertificate
  let selfMade: TestCertificate
  let server: TestServer
  let idp: TestIssuer
  let boundPat: string
  let selfMadePat: string
  let plainPat: string

  before(async () => {
    ca = createTestCa(dir)
    mine = ca.client('client-a')
    other = ca.client('client-b')
    // Another CA's certificate with the same subject as `mine`: a look-alike.
    const rogueDir = join(dir, 'rogue')
    mkdirSync(rogueDir)
    forged = createTestCa(rogueDir, 'rogue-ca').client('client-a')
    selfMade = selfSignedCertificate(dir, 'self-made')
    server = await startTestServer({
      server: { port: 0, clientCertificates: { caFile: ca.certFile, mode: 'optional' } },
    })
    idp = createTestIssuer({ alg: 'ES256', issuer: 'https://idp.example.test' })
    assert.equal((await server.cli('tenant', 'create', 'tenant-a')).code, 0)
    await addIssuerWithCli(server, idp)
    const issue = (...flags: string[]) => issuePatWithCli(server, 'tenant-a', ...flags)
    const bound = await issue('--bind-cert', mine.certFile)
    assert.equal(bound.certificateThumbprint, mine.thumbprint)
    boundPat = bound.token
    selfMadePat = (await issue('--cert-thumbprint', selfMade.thumbprint)).token
    plainPat = (await issue()).token
    // The server reads the new issuer from the change log (within a second): wait for it.
    const probe = await idp.sign({ tenant_id: 'tenant-a' })
    const headers = { Authorization: `Bearer ${probe}`, 'X-Tenant-Id': 'tenant-a' }
    for (let i = 0; i < 100 && (await call(server, headers)).status !== 200; i++) {
      await new Promise((resolve) => setTimeout(resolve, 50))
    }
  })
  after(() => server?.close())

  const pat = (token: string) => ({ Authorization: `Bearer ${token}` })
  const jwtHeaders = (token: string) => ({
    Authorization: `Bearer ${token}`,
    'X-Tenant-Id': 'tenant-a',
  })

  it('a bound PAT passes with its certificate, also again on one kept-alive connection', async () => {
    const agent = new https.Agent({
      keepAlive: true,
      maxSockets: 1,
      ca: server.ca,
      cert: mine.cert,
      key: mine.key,
    })
    try {
      for (let i = 0; i < 3; i++) {
        const answer = await call(server, pat(boundPat), undefined, agent)
        assert.equal(answer.status, 200, JSON.stringify(answer.body))
        assert.equal(answer.body.tokenType, 'pat')
      }
    } finally {
      agent.destroy()
    }
  })

  it('a bound PAT (now cached) is refused with another CA-signed certificate, with none, and with a look-alike from another CA', async () => {
    assertRefused(await call(server, pat(boundPat), other), 'certificate_mismatch', server)
    assertRefused(await call(server, pat(boundPat)), 'certificate_required', server)
    // The handshake completes (optional mode), but an unverified certificate is no certificate.
    assertRefused(await call(server, pat(boundPat), forged), 'certificate_required', server)
  })

  it('a PAT bound to a self-made certificate is refused even with that certificate: the CA did not sign it', async () => {
    assertRefused(await call(server, pat(selfMadePat), selfMade), 'certificate_required', server)
  })

  it('a JWT with cnf x5t#S256 passes with its certificate and is refused otherwise', async () => {
    const token = await idp.sign({
      tenant_id: 'tenant-a',
      cnf: { 'x5t#S256': mine.thumbprint },
    })
    const ok = await call(server, jwtHeaders(token), mine)
    assert.equal(ok.status, 200, JSON.stringify(ok.body))
    assert.equal(ok.body.tokenType, 'jwt')
    // The same token again, from the verified-token cache.
    assertRefused(await call(server, jwtHeaders(token), other), 'certificate_mismatch', server)
    assertRefused(await call(server, jwtHeaders(token)), 'certificate_required', server)
    assertRefused(await call(server, jwtHeaders(token), forged), 'certificate_required', server)
    assert.equal((await call(server, jwtHeaders(token), mine)).status, 200)
  })

  it('unbound credentials pass with and without a certificate (the binding adds a proof, never a scheme)', async () => {
    const token = await idp.sign({ tenant_id: 'tenant-a' })
    for (const client of [undefined, mine, forged]) {
      assert.equal((await call(server, pat(plainPat), client)).status, 200)
      assert.equal((await call(server, jwtHeaders(token), client)).status, 200)
    }
  })

  it('pat show prints the binding, pat edit --unbind-cert removes it, never printing the token', async () => {
    const list = await server.cli('pat', 'list', '--tenant', 'tenant-a', '--json')
    assert.equal(list.code, 0, list.stderr)
    assert.ok(!list.stdout.includes(boundPat))
    const listed = JSON.parse(list.stdout) as {
      tokens?: { id: string; certificateThumbprint: string | null }[]
    }
    const items =
      listed.tokens ?? (listed as unknown as { id: string; certificateThumbprint: string | null }[])
    const entry = items.find((t) => t.certificateThumbprint === mine.thumbprint)
    assert.ok(entry, list.stdout)
    const shown = await server.cli('pat', 'show', entry.id)
    assert.equal(shown.code, 0, shown.stderr)
    assert.match(shown.stdout, new RegExp(`x5t#S256\\): ${mine.thumbprint}`))
    assert.ok(!shown.stdout.includes(boundPat))
    const bad = await server.cli('pat', 'edit', entry.id, '--cert-thumbprint', 'not-a-thumbprint')
    assert.notEqual(bad.code, 0)
    assert.match(bad.stderr, /certificate thumbprint/)
    const unbound = await server.cli('pat', 'edit', entry.id, '--unbind-cert')
    assert.equal(unbound.code, 0, unbound.stderr)
    // Every instance drops its cached copy within a second; here, the one in-process.
    let status = 0
    for (let i = 0; i < 40 && status !== 200; i++) {
      status = (await call(server, pat(boundPat))).status
      if (status !== 200) await new Promise((r) => setTimeout(r, 50))
    }
    assert.equal(status, 200)
    const rebound = await server.cli('pat', 'edit', entry.id, '--bind-cert', other.certFile)
    assert.equal(rebound.code, 0, rebound.stderr)
    for (let i = 0; i < 40 && status !== 401; i++) {
      status = (await call(server, pat(boundPat), mine)).status
      if (status !== 401) await new Promise((r) => setTimeout(r, 50))
    }
    assert.equal(status, 401)
    assert.equal((await call(server, pat(boundPat), other)).status, 200)
  })
})

describe('clientCertificates required: no CA-signed certificate, no handshake', () => {
  const dir = tempDir('tg-mtls-req-')
  let ca: TestCa
  let server: TestServer
  let plainPat: string

  before(async () => {
    ca = createTestCa(dir)
    server = await startTestServer({
      server: { port: 0, clientCertificates: { caFile: ca.certFile, mode: 'required' } },
    })
    plainPat = (await issuePatWithCli(server, 'demo')).token
  })
  after(() => server?.close())

  it('a client without a certificate, or with a self-made one, cannot connect; a CA-signed one can', async () => {
    const headers = { Authorization: `Bearer ${plainPat}` }
    await assert.rejects(call(server, headers))
    await assert.rejects(call(server, headers, selfSignedCertificate(dir, 'stranger')))
    assert.equal((await call(server, headers, ca.client('member'))).status, 200)
  })
})

describe('gateway mode: a bound PAT is proxied only with its certificate', () => {
  const dir = tempDir('tg-mtls-gw-')
  let ca: TestCa
  let server: TestServer
  let upstream: Upstream
  let mine: TestCertificate
  let boundPat: string

  before(async () => {
    ca = createTestCa(dir)
    mine = ca.client('client-a')
    upstream = await startUpstream()
    const policyFile = join(dir, 'policy.yaml')
    writeFileSync(policyFile, 'default: authenticated\n')
    server = await startTestServer({
      server: { port: 0, clientCertificates: { caFile: ca.certFile, mode: 'optional' } },
      gateway: { upstream: upstream.url, policyFile },
    })
    boundPat = (await issuePatWithCli(server, 'demo', '--bind-cert', mine.certFile)).token
  })
  after(async () => {
    await server?.close()
    await upstream?.close()
  })

  it('200 from the upstream with the certificate; 401 with another or none, never proxied', async () => {
    const headers = { Authorization: `Bearer ${boundPat}` }
    const path = '/api/v1/orders/7'
    const ok = await call(server, headers, mine, undefined, path)
    assert.equal(ok.status, 200, JSON.stringify(ok.body))
    assert.equal(upstream.seen.length, 1)
    assert.equal(upstream.seen[0]?.headers['x-auth-token-type'], 'pat')
    for (const client of [ca.client('client-b'), undefined]) {
      const refused = await call(server, headers, client, undefined, path)
      assert.equal(refused.status, 401, JSON.stringify(refused.body))
      assert.equal(refused.body.code, 'invalid_token')
    }
    assert.equal(upstream.seen.length, 1)
  })
})
