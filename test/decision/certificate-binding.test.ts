/**
 * Certificate-bound PATs (RFC 8705) in forward-auth mode, through REAL nginx and REAL Caddy
 * with the shipped examples (examples/forward-auth/, their "#mtls " lines turned on), mutual
 * TLS from the client to the proxy with a CA made here, the proxy forwarding the verified
 * certificate to the decision listener in its own header: the right certificate 200, another
 * CA-signed one or none 401 invalid_token; a client sending the certificate header itself
 * (over plain HTTP or TLS without a certificate) does not bind; the upstream never sees a
 * client's copy of that header. Unbound PATs pass with or without a certificate.
 */
import assert from 'node:assert/strict'
import { rmSync } from 'node:fs'
import https from 'node:https'
import { after, before, describe, it } from 'node:test'
import { cliJson } from '../cli/helpers.ts'
import { TEST_TENANT } from '../helpers/jwt.ts'
import { skipReason } from '../helpers/services.ts'
import { tempDir } from '../helpers/temp-dir.ts'
import { createTestCa, type TestCa, type TestCertificate } from '../helpers/test-ca.ts'
import {
  exampleConfig,
  freePort,
  type ProxyProcess,
  runCaddy,
  runNginx,
  type Stack,
  startStack,
} from './harness.ts'

const PATH = '/api/v1/orders/1'

interface Answer {
  readonly status: number
  readonly body: Record<string, unknown>
}

function call(
  url: string,
  headers: Record<string, string>,
  ca: string,
  client?: TestCertificate,
): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = https.request(
      url,
      {
        ca,
        // The proxies' TLS sites are named localhost (Caddy: SNI must equal the Host).
        servername: 'localhost',
        headers: { Host: `localhost:${new URL(url).port}`, ...headers },
        agent: false,
        ...(client ? { cert: client.cert, key: client.key } : {}),
      },
      (res) => {
        let text = ''
        res.setEncoding('utf8')
        res.on('data', (chunk: string) => (text += chunk))
        res.on('end', () => {
          let body: Record<string, unknown> = {}
          try {
            body = JSON.parse(text)
          } catch {}
          resolve({ status: res.statusCode ?? 0, body })
        })
      },
    )
    req.setTimeout(10_000, () => req.destroy(new Error('request timed out')))
    req.on('error', reject)
    req.end()
  })
}

async function plainCall(url: string, headers: Record<string, string>): Promise<Answer> {
  const response = await fetch(url, { headers })
  const text = await response.text()
  let body: Record<string, unknown> = {}
  try {
    body = JSON.parse(text)
  } catch {}
  return { status: response.status, body }
}

/** The certificate as each proxy puts it in its header, for a client to forge. */
const FORGED_HEADER: Record<string, (certificate: TestCertificate) => [string, string]> = {
  nginx: (c) => ['X-SSL-Client-Cert', encodeURIComponent(c.cert)],
  caddy: (c) => [
    'X-Client-Certificate',
    c.cert.replace(/-----[A-Z ]+-----/g, '').replace(/\s+/g, ''),
  ],
}

interface ProxyUnderTest {
  readonly name: 'nginx' | 'caddy'
  /** The header the proxy forwards the verified certificate in. */
  readonly header: string
  /** Its shipped example under examples/forward-auth/. */
  readonly file: string
  /** The example's TLS site address for a port (8443 in the example). */
  site(port: number): string
  run(config: string, proxyPort: number, tlsPort: number): Promise<ProxyProcess>
}

const PROXIES: readonly ProxyUnderTest[] = [
  {
    name: 'nginx',
    header: 'x-ssl-client-cert',
    file: 'nginx.conf',
    site: (port) => `127.0.0.1:${port}`,
    run: (config, proxyPort) => runNginx(config, proxyPort),
  },
  {
    name: 'caddy',
    header: 'x-client-certificate',
    file: 'Caddyfile',
    site: (port) => `https://localhost:${port}`,
    run: (config, proxyPort, tlsPort) => runCaddy(config, [proxyPort, tlsPort]),
  },
]

/**
 * The proxy with its shipped example, "#mtls " lines on: plain HTTP on one port, TLS with
 * `server`'s certificate on another, asking clients for certificates signed by `ca`.
 */
async function startMtlsProxy(
  under: ProxyUnderTest,
  stack: Stack,
  ca: TestCa,
  server: TestCertificate,
): Promise<{ proxy: ProxyProcess; plainUrl: string; tlsUrl: string }> {
  const proxyPort = await freePort()
  const tlsPort = await freePort()
  const upstreamPort = Number(new URL(stack.upstream.url).port)
  const shipped = exampleConfig(under.file, {
    proxy: proxyPort,
    decision: stack.decisionPort,
    upstream: upstreamPort,
  })
  const tls = `/etc/${under.name}/tls`
  const config = shipped
    .replaceAll('#mtls ', '')
    .replace(under.site(8443), under.site(tlsPort))
    .replace(`${tls}/server.pem`, server.certFile)
    .replace(`${tls}/server.key`, server.keyFile)
    .replace(`${tls}/client-ca.pem`, ca.certFile)
  assert.notEqual(config, shipped, `${under.file} has no "#mtls " lines`)
  return {
    proxy: await under.run(config, proxyPort, tlsPort),
    plainUrl: `http://127.0.0.1:${proxyPort}`,
    tlsUrl: `https://127.0.0.1:${tlsPort}`,
  }
}

for (const proxyUnderTest of PROXIES) {
  const { name } = proxyUnderTest
  describe(`certificate-bound PAT through ${name} with mutual TLS (the shipped example)`, {
    skip: skipReason(name),
  }, () => {
    const dir = tempDir(`tg-${name}-mtls-`)
    let stack: Stack
    let ca: TestCa
    let mine: TestCertificate
    let other: TestCertificate
    let started: { proxy: ProxyProcess; plainUrl: string; tlsUrl: string }
    let boundPat: string

    before(async () => {
      ca = createTestCa(dir)
      mine = ca.client('client-a')
      other = ca.client('client-b')
      stack = await startStack({ proxy: name })
      const flags = ['--subject', 'bound-bot', '--bind-cert', mine.certFile]
      const issued = await cliJson<{ token: string }>(
        ['pat', 'issue', '--tenant', TEST_TENANT, ...flags],
        { dataDir: stack.dataDir },
      )
      boundPat = issued.token
      started = await startMtlsProxy(proxyUnderTest, stack, ca, ca.server('proxy-server'))
    })
    after(async () => {
      await started?.proxy.stop()
      await stack?.close()
      rmSync(dir, { recursive: true, force: true })
    })

    const bearer = (token: string) => ({ Authorization: `Bearer ${token}` })

    it('the right certificate: 200, and the upstream gets no certificate header from the client', async () => {
      const answer = await call(`${started.tlsUrl}${PATH}`, bearer(boundPat), ca.cert, mine)
      assert.equal(answer.status, 200, `${JSON.stringify(answer.body)} ${started.proxy.log()}`)
      const seen = stack.upstream.seen.at(-1)
      assert.equal(seen?.headers['x-auth-token-type'], 'pat')
    })

    it('another CA-signed certificate, or none: 401 invalid_token', async () => {
      for (const client of [other, undefined]) {
        const answer = await call(`${started.tlsUrl}${PATH}`, bearer(boundPat), ca.cert, client)
        assert.equal(answer.status, 401, JSON.stringify(answer.body))
        assert.equal(answer.body.code, 'invalid_token')
      }
    })

    it('the certificate header sent by the client itself does not bind (plain HTTP, and TLS without a certificate)', async () => {
      const [header, value] = (FORGED_HEADER[name] as (c: TestCertificate) => [string, string])(
        mine,
      )
      const forged = { ...bearer(boundPat), [header]: value }
      const plain = await plainCall(`${started.plainUrl}${PATH}`, forged)
      assert.equal(plain.status, 401, JSON.stringify(plain.body))
      assert.equal(plain.body.code, 'invalid_token')
      const tls = await call(`${started.tlsUrl}${PATH}`, forged, ca.cert)
      assert.equal(tls.status, 401, JSON.stringify(tls.body))
      // And an unbound PAT with a forged header passes, the header never reaching the upstream.
      const before = stack.upstream.seen.length
      const unbound = await plainCall(`${started.plainUrl}${PATH}`, {
        ...bearer(stack.tokens.pat),
        [header]: value,
      })
      assert.equal(unbound.status, 200, JSON.stringify(unbound.body))
      const seen = stack.upstream.seen.slice(before)
      assert.equal(seen.length, 1)
      assert.equal(seen[0]?.headers[proxyUnderTest.header], undefined)
    })

    it('an unbound PAT passes with or without a client certificate', async () => {
      for (const client of [mine, undefined]) {
        const answer = await call(
          `${started.tlsUrl}${PATH}`,
          bearer(stack.tokens.pat),
          ca.cert,
          client,
        )
        assert.equal(answer.status, 200, JSON.stringify(answer.body))
      }
    })
  })
}
