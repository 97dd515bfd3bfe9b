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
import { type ChildProcess, spawn } from 'node:child_process'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import https from 'node:https'
import { createConnection } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, before, describe, it } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { run } from '../../src/cli/main.ts'
import { TEST_TENANT } from '../helpers/jwt.ts'
import { binaryPath, skipReason } from '../helpers/services.ts'
import { tempDir } from '../helpers/temp-dir.ts'
import { createTestCa, type TestCa, type TestCertificate } from '../helpers/test-ca.ts'
import {
  exampleConfig,
  freePort,
  type ProxyProcess,
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
  readonly header: string
  start(
    stack: Stack,
    ca: TestCa,
    server: TestCertificate,
  ): Promise<{ proxy: ProxyProcess; plainUrl: string; tlsUrl: string }>
}

const PROXIES: readonly ProxyUnderTest[] = [
  {
    name: 'nginx',
    header: 'x-ssl-client-cert',
    async start(stack, ca, server) {
      const proxyPort = await freePort()
      const tlsPort = await freePort()
      const upstreamPort = Number(new URL(stack.upstream.url).port)
      const shipped = exampleConfig('nginx.conf', {
        proxy: proxyPort,
        decision: stack.decisionPort,
        upstream: upstreamPort,
      })
      const config = shipped
        .replaceAll('#mtls ', '')
        .replace('127.0.0.1:8443', `127.0.0.1:${tlsPort}`)
        .replace('/etc/nginx/tls/server.pem', server.certFile)
        .replace('/etc/nginx/tls/server.key', server.keyFile)
        .replace('/etc/nginx/tls/client-ca.pem', ca.certFile)
      assert.notEqual(config, shipped, 'nginx.conf has no "#mtls " lines')
      const proxy = await runNginx(config, proxyPort)
      return {
        proxy,
        plainUrl: `http://127.0.0.1:${proxyPort}`,
        tlsUrl: `https://127.0.0.1:${tlsPort}`,
      }
    },
  },
  {
    name: 'caddy',
    header: 'x-client-certificate',
    async start(stack, ca, server) {
      const proxyPort = await freePort()
      const tlsPort = await freePort()
      const upstreamPort = Number(new URL(stack.upstream.url).port)
      const shipped = exampleConfig('Caddyfile', {
        proxy: proxyPort,
        decision: stack.decisionPort,
        upstream: upstreamPort,
      })
      const config = shipped
        .replaceAll('#mtls ', '')
        .replace('https://localhost:8443', `https://localhost:${tlsPort}`)
        .replace('/etc/caddy/tls/server.pem', server.certFile)
        .replace('/etc/caddy/tls/server.key', server.keyFile)
        .replace('/etc/caddy/tls/client-ca.pem', ca.certFile)
      assert.notEqual(config, shipped, 'Caddyfile has no "#mtls " lines')
      const proxy = await runCaddy(config, [proxyPort, tlsPort])
      return {
        proxy,
        plainUrl: `http://127.0.0.1:${proxyPort}`,
        tlsUrl: `https://127.0.0.1:${tlsPort}`,
      }
    },
  },
]

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
      let stdout = ''
      let stderr = ''
      const code = await run(
        [
          'pat',
          'issue',
          '--tenant',
          TEST_TENANT,
          '--subject',
          'bound-bot',
          '--bind-cert',
          mine.certFile,
          '--json',
          '--data-dir',
          stack.dataDir,
        ],
        {
          stdout: { write: (s: string) => (stdout += s) },
          stderr: { write: (s: string) => (stderr += s) },
          env: {},
        },
      )
      assert.equal(code, 0, stderr)
      boundPat = (JSON.parse(stdout) as { token: string }).token
      started = await proxyUnderTest.start(stack, ca, ca.server('proxy-server'))
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

/** Caddy with `caddyfile`, admin API off, waiting until every port in `ports` accepts. */
async function runCaddy(caddyfile: string, ports: readonly number[]): Promise<ProxyProcess> {
  const dir = mkdtempSync(join(tmpdir(), 'tokengate-caddy-mtls-'))
  const file = join(dir, 'Caddyfile')
  writeFileSync(file, caddyfile)
  const child: ChildProcess = spawn(
    binaryPath('caddy') as string,
    ['run', '--config', file, '--adapter', 'caddyfile'],
    {
      stdio: ['ignore', 'ignore', 'pipe'],
      env: { ...process.env, HOME: dir, XDG_DATA_HOME: dir, XDG_CONFIG_HOME: dir },
    },
  )
  let stderr = ''
  child.stderr?.setEncoding('utf8')
  child.stderr?.on('data', (chunk: string) => (stderr += chunk))
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()))
      child.kill('SIGTERM')
      const timer = setTimeout(() => child.kill('SIGKILL'), 5_000)
      await exited
      clearTimeout(timer)
    }
    rmSync(dir, { recursive: true, force: true })
  }
  const deadline = Date.now() + 20_000
  for (const port of ports) {
    while (!(await accepts(port))) {
      if (child.exitCode !== null || Date.now() > deadline) {
        await stop()
        throw new Error(`caddy did not start on ${port}: ${stderr}`)
      }
      await sleep(50)
    }
  }
  return { url: `http://127.0.0.1:${ports[0]}`, dir, log: () => stderr, stop }
}

function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const connection = createConnection({ host: '127.0.0.1', port })
    connection.once('connect', () => {
      connection.destroy()
      resolve(true)
    })
    connection.once('error', () => resolve(false))
  })
}
