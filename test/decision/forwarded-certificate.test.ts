/**
 * The client certificate in forward-auth mode (src/decision/forwarded-certificate.ts): read
 * only from the configured proxy kind's own field, never from a direct caller or from another
 * proxy's header; the decision listener and the Envoy gRPC service bind PATs with it; an
 * allow decided with a certificate is never kept by nginx's decision cache (its key holds no
 * certificate). Through real nginx and Caddy: certificate-binding.test.ts.
 */
import assert from 'node:assert/strict'
import { X509Certificate } from 'node:crypto'
import { after, before, describe, test } from 'node:test'
import { readForwardedCertificate } from '../../src/decision/forwarded-certificate.ts'
import { cliJson } from '../cli/helpers.ts'
import { TEST_TENANT } from '../helpers/jwt.ts'
import { tempDir } from '../helpers/temp-dir.ts'
import { createTestCa, type TestCertificate } from '../helpers/test-ca.ts'
import { checkRequest } from './envoy-check-requests.ts'
import { connectEnvoyAuthorization } from './envoy-client.ts'
import { type Stack, startStack } from './harness.ts'

const dir = tempDir('tg-fwd-cert-')
const ca = createTestCa(dir)
const mine = ca.client('client-a')
const other = ca.client('client-b')

const der = (c: TestCertificate) => new X509Certificate(c.cert).raw
const escapedPem = (c: TestCertificate) => encodeURIComponent(c.cert)
const pemBody = (c: TestCertificate) => c.cert.replace(/-----[A-Z ]+-----/g, '').replace(/\s+/g, '')

describe('readForwardedCertificate', () => {
  test("each proxy's own header and encoding, and nothing else", () => {
    const read = (kind: Parameters<typeof readForwardedCertificate>[0], headers: string[]) => {
      const result = readForwardedCertificate(kind, headers)
      assert.ok(result.ok, JSON.stringify(result))
      return result.certificate === undefined ? undefined : Buffer.from(result.certificate.der)
    }
    assert.deepEqual(read('nginx', ['X-SSL-Client-Cert', escapedPem(mine)]), der(mine))
    assert.deepEqual(
      read('caddy', ['X-Client-Certificate', der(mine).toString('base64')]),
      der(mine),
    )
    assert.deepEqual(
      read('traefik', [
        'X-Forwarded-Tls-Client-Cert',
        `${encodeURIComponent(pemBody(mine))},${encodeURIComponent(pemBody(other))}`,
      ]),
      der(mine),
    )
    // No trusted proxy: whatever was sent is ignored.
    assert.equal(read(undefined, ['X-SSL-Client-Cert', escapedPem(mine)]), undefined)
    // Another proxy's header is not this proxy's word.
    assert.equal(read('caddy', ['X-SSL-Client-Cert', escapedPem(mine)]), undefined)
    assert.equal(read('nginx', ['X-Client-Certificate', der(mine).toString('base64')]), undefined)
    assert.equal(read('ingress-nginx', ['X-SSL-Client-Cert', escapedPem(mine)]), undefined)
    // Envoy: only the CheckRequest's source.certificate, never a header.
    assert.equal(read('envoy', ['X-SSL-Client-Cert', escapedPem(mine)]), undefined)
    const fromSource = readForwardedCertificate('envoy', [], escapedPem(mine))
    assert.ok(fromSource.ok && fromSource.certificate)
    // Empty, and Caddy's unresolved placeholder on a plain-HTTP request: no certificate.
    assert.equal(read('nginx', ['X-SSL-Client-Cert', '']), undefined)
    assert.equal(
      read('caddy', ['X-Client-Certificate', '{http.request.tls.client.certificate_der_base64}']),
      undefined,
    )
  })

  test('twice, or not a certificate: refused (a guess could bind the wrong one)', () => {
    const twice = readForwardedCertificate('nginx', [
      'X-SSL-Client-Cert',
      escapedPem(mine),
      'x-ssl-client-cert',
      escapedPem(other),
    ])
    assert.equal(twice.ok, false)
    for (const value of [
      'garbage',
      encodeURIComponent('-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----'),
    ]) {
      assert.equal(readForwardedCertificate('nginx', ['X-SSL-Client-Cert', value]).ok, false)
    }
    assert.equal(readForwardedCertificate('caddy', ['X-Client-Certificate', '%%%']).ok, false)
  })
})

/** A PAT of the stack's tenant bound to `mine`, issued by the CLI. */
async function boundPatIn(stack: Stack): Promise<string> {
  const flags = ['--subject', 'bound', '--cert-thumbprint', mine.thumbprint]
  const issued = await cliJson<{ token: string }>(
    ['pat', 'issue', '--tenant', TEST_TENANT, ...flags],
    { dataDir: stack.dataDir },
  )
  return issued.token
}

describe('the decision listener (nginx) binds a PAT with the forwarded certificate', () => {
  let stack: Stack
  let boundPat: string

  before(async () => {
    stack = await startStack({ proxy: 'nginx' })
    boundPat = await boundPatIn(stack)
  })
  after(() => stack?.close())

  const ask = (headers: Record<string, string>) =>
    fetch(`${stack.decisionUrl}/`, {
      headers: { 'X-Original-Method': 'GET', 'X-Original-URI': '/api/v1/orders/1', ...headers },
    })

  test('nginx header: right certificate 200 and never kept by the decision cache; another or none 401', async () => {
    const bearer = { Authorization: `Bearer ${boundPat}` }
    for (let i = 0; i < 5; i++) {
      const ok = await ask({
        ...bearer,
        'X-SSL-Client-Cert': escapedPem(mine),
        'X-Tokengate-Keep': 'ms',
      })
      assert.equal(ok.status, 200, await ok.text())
      assert.equal(ok.headers.get('x-accel-expires'), '0')
      assert.equal(ok.headers.get('x-tokengate-keep-ms'), null)
    }
    const wrong = await ask({ ...bearer, 'X-SSL-Client-Cert': escapedPem(other) })
    assert.equal(wrong.status, 401)
    assert.equal(((await wrong.json()) as { code: string }).code, 'invalid_token')
    assert.equal((await ask(bearer)).status, 401)
    // The same listener keeps an unbound PAT's allow (so '0' above is the certificate's doing).
    let kept = false
    for (let i = 0; i < 40 && !kept; i++) {
      const plain = await ask({ Authorization: `Bearer ${stack.tokens.pat}` })
      assert.equal(plain.status, 200)
      kept = plain.headers.get('x-accel-expires')?.startsWith('@') === true
      if (!kept) await new Promise((r) => setTimeout(r, 50))
    }
    assert.ok(kept, 'an unbound allow was never marked keepable')
  })
})

describe('the Envoy gRPC service binds a PAT with source.certificate', () => {
  let stack: Stack
  let boundPat: string

  before(async () => {
    stack = await startStack({ proxy: 'envoy', grpc: true })
    boundPat = await boundPatIn(stack)
  })
  after(() => stack?.close())

  test('source.certificate binds; a header the client sent does not', async () => {
    const client = connectEnvoyAuthorization<{
      http_response: string
      denied_response?: { status: { code: string } }
    }>(stack.grpcUrl as string)
    const check = (source: string | undefined, lines: [string, string][] = []) => {
      const request = checkRequest('GET', '/api/v1/orders/1', [
        ['authorization', `Bearer ${boundPat}`],
        ...lines,
      ]) as {
        attributes: { source: Record<string, unknown> }
      }
      if (source !== undefined) {
        request.attributes = {
          ...request.attributes,
          source: { ...request.attributes.source, certificate: source },
        }
      }
      return client.check(request)
    }
    try {
      assert.equal((await check(escapedPem(mine))).http_response, 'ok_response')
      const wrong = await check(escapedPem(other))
      assert.equal(wrong.http_response, 'denied_response')
      assert.equal(wrong.denied_response?.status.code, 'Unauthorized')
      const forged = await check(undefined, [['x-ssl-client-cert', escapedPem(mine)]])
      assert.equal(forged.http_response, 'denied_response')
    } finally {
      client.close()
    }
  })
})
