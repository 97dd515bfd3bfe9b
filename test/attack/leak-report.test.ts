/**
 * GitHub secret scanning partner reports (POST /leak-reports/github on the API listener),
 * attacked as raw HTTPS requests: forged, tampered, unsigned, replayed, oversized. Only a
 * report signed by a configured GitHub key revokes anything; a genuine report revokes at once,
 * answers in GitHub's format and never echoes a token.
 */
import assert from 'node:assert/strict'
import { createHash, generateKeyPairSync, type KeyObject, sign } from 'node:crypto'
import { writeFileSync } from 'node:fs'
import https from 'node:https'
import { join } from 'node:path'
import { after, before, describe, it } from 'node:test'
import { startTestServer, type TestServer } from '../helpers/server.ts'
import { tempDir } from '../helpers/temp-dir.ts'

const KEY_ID = 'bcb53661c06b4728e59d897fb6165d5c9cda0fd9cdf9d09ead458168deb7518c'
const OLD_KEY_ID = '90a421169f0a406205f1563a953312f0be898d3c7b6c06b681aa86a874555f4a'

interface Answer {
  status: number
  headers: Record<string, string | string[] | undefined>
  text: string
}

/** A P-256 key pair as GitHub holds one: the private key signs, the public one is published. */
function githubKey(): { privateKey: KeyObject; publicPem: string } {
  const { privateKey, publicKey } = generateKeyPairSync('ec', { namedCurve: 'prime256v1' })
  return { privateKey, publicPem: publicKey.export({ type: 'spki', format: 'pem' }) as string }
}

const signatureOf = (body: string, key: KeyObject) =>
  sign('sha256', Buffer.from(body), key).toString('base64')

/** The order of P-256's group: (r, s) and (r, n - s) are both valid signatures of a message. */
const P256_N = 0xffffffff00000000ffffffffffffffffbce6faada7179e84f3b9cac2fc632551n

/** The other valid ECDSA signature of the same message (DER, base64): s replaced by n - s. */
function malleated(signature: string): string {
  const { r, s } = readDerSignature(Buffer.from(signature, 'base64'))
  return derSignature(r, P256_N - s).toString('base64')
}

function readDerSignature(der: Buffer): { r: bigint; s: bigint } {
  let at = 2 // SEQUENCE, length (< 128 for P-256)
  const integer = () => {
    const length = der[at + 1] as number
    const value = BigInt(`0x${der.subarray(at + 2, at + 2 + length).toString('hex')}`)
    at += 2 + length
    return value
  }
  return { r: integer(), s: integer() }
}

function derSignature(r: bigint, s: bigint): Buffer {
  const integer = (value: bigint) => {
    let hex = value.toString(16)
    if (hex.length % 2) hex = `0${hex}`
    if (Number.parseInt(hex.slice(0, 2), 16) >= 0x80) hex = `00${hex}`
    const bytes = Buffer.from(hex, 'hex')
    return Buffer.concat([Buffer.from([0x02, bytes.length]), bytes])
  }
  const content = Buffer.concat([integer(r), integer(s)])
  return Buffer.concat([Buffer.from([0x30, content.length]), content])
}

describe('attack: leak reports (GitHub secret scanning partner protocol)', () => {
  let server: TestServer
  const github = githubKey()
  const previous = githubKey()
  const attacker = githubKey()

  before(async () => {
    const dir = tempDir('tg-leak-')
    const keysFile = join(dir, 'github-secret-scanning-keys.json')
    // The file as `curl https://api.github.com/meta/public_keys/secret_scanning` saves it.
    writeFileSync(
      keysFile,
      JSON.stringify({
        public_keys: [
          { key_identifier: OLD_KEY_ID, key: previous.publicPem, is_current: false },
          { key_identifier: KEY_ID, key: github.publicPem, is_current: true },
        ],
      }),
    )
    server = await startTestServer({
      rateLimit: { enabled: false },
      leakReports: { githubKeysFile: keysFile, maxBodyBytes: 4096, maxMatches: 5 },
    })
  })
  after(() => server?.close())

  async function issue(): Promise<{ token: string; id: string }> {
    const result = await server.cli(
      'pat',
      'issue',
      '--tenant',
      'demo',
      '--subject',
      'leaky',
      '--json',
    )
    assert.equal(result.code, 0, result.stderr)
    return JSON.parse(result.stdout) as { token: string; id: string }
  }

  const works = async (token: string) =>
    (await server.request('/api/v1/me', ['Authorization', `Bearer ${token}`])).status === 200

  function post(body: string, headers: Record<string, string>, path = '/leak-reports/github') {
    return new Promise<Answer>((resolve, reject) => {
      const req = https.request(
        `${server.url}${path}`,
        {
          method: 'POST',
          ca: server.ca,
          headers: { 'content-type': 'application/json', ...headers },
        },
        (res) => {
          let text = ''
          res.setEncoding('utf8')
          res.on('data', (chunk: string) => (text += chunk))
          res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, text }))
        },
      )
      req.on('error', reject)
      req.end(body)
    })
  }

  const report = (...tokens: string[]) =>
    JSON.stringify(
      tokens.map((token) => ({
        token,
        type: 'tokengate_pat',
        url: 'https://github.com/octocat/hello/blob/abc/config.env',
        source: 'content',
      })),
    )

  const signed = (body: string, key = github.privateKey, keyId = KEY_ID) => ({
    'github-public-key-identifier': keyId,
    'github-public-key-signature': signatureOf(body, key),
  })

  const sha256 = (text: string) => createHash('sha256').update(text).digest('hex')

  it('a genuine report revokes the PAT at once, audited, answered in GitHub’s format', async () => {
    const leaked = await issue()
    assert.ok(await works(leaked.token))
    const body = report(leaked.token)
    const answer = await post(body, signed(body))
    assert.equal(answer.status, 200, answer.text)
    assert.match(String(answer.headers['content-type']), /^application\/json/)
    assert.deepEqual(JSON.parse(answer.text), [
      { token_hash: sha256(leaked.token), token_type: 'tokengate_pat', label: 'true_positive' },
    ])
    assert.ok(!answer.text.includes(leaked.token), 'the token is never echoed')
    assert.equal(await works(leaked.token), false)
    const shown = await server.cli('pat', 'show', leaked.id, '--json')
    assert.equal((JSON.parse(shown.stdout) as { status: string }).status, 'revoked')
  })

  it('a report signed with a previous (not current) GitHub key is still verified', async () => {
    const leaked = await issue()
    const body = report(leaked.token)
    const answer = await post(body, signed(body, previous.privateKey, OLD_KEY_ID))
    assert.equal(answer.status, 200, answer.text)
    assert.equal(await works(leaked.token), false)
  })

  it('the raw body is verified as sent (whitespace and key order untouched)', async () => {
    const leaked = await issue()
    const body = `[\n  {"type": "tokengate_pat", "token": "${leaked.token}", "url": "", "source": "npm"}\n]\n`
    const answer = await post(body, signed(body))
    assert.equal(answer.status, 200, answer.text)
    assert.equal(await works(leaked.token), false)
  })

  it('forged: signed by another key under GitHub’s key id → 403, nothing revoked', async () => {
    const victim = await issue()
    const body = report(victim.token)
    const answer = await post(body, signed(body, attacker.privateKey))
    assert.equal(answer.status, 403)
    assert.equal(JSON.parse(answer.text).code, 'invalid_signature')
    assert.ok(await works(victim.token))
  })

  it('tampered: a genuine signature over another body → 403, nothing revoked', async () => {
    const victim = await issue()
    const genuine = report('pat_unrelated')
    const answer = await post(report(victim.token), signed(genuine))
    assert.equal(answer.status, 403)
    assert.ok(await works(victim.token))
  })

  it('unsigned, unknown key id, garbage or doubled signature headers → 403, nothing revoked', async () => {
    const victim = await issue()
    const body = report(victim.token)
    const good = signed(body)
    const cases: Record<string, string>[] = [
      {},
      { 'github-public-key-identifier': KEY_ID },
      { 'github-public-key-signature': good['github-public-key-signature'] },
      { ...good, 'github-public-key-identifier': 'f'.repeat(64) },
      { ...good, 'github-public-key-signature': 'not base64 !!' },
      { ...good, 'github-public-key-signature': Buffer.from('MEQCIA').toString('base64') },
      { ...good, 'github-public-key-signature': '' },
    ]
    for (const headers of cases) {
      const answer = await post(body, headers)
      assert.equal(answer.status, 403, JSON.stringify(Object.keys(headers)))
      assert.equal(JSON.parse(answer.text).code, 'invalid_signature')
    }
    const doubled = await new Promise<number>((resolve, reject) => {
      const req = https.request(
        `${server.url}/leak-reports/github`,
        { method: 'POST', ca: server.ca },
        (res) => {
          res.resume()
          resolve(res.statusCode ?? 0)
        },
      )
      req.setHeader('content-type', 'application/json')
      req.setHeader('github-public-key-identifier', [KEY_ID, KEY_ID])
      req.setHeader('github-public-key-signature', [
        good['github-public-key-signature'] as string,
        good['github-public-key-signature'] as string,
      ])
      req.on('error', reject)
      req.end(body)
    })
    assert.equal(doubled, 403)
    assert.ok(await works(victim.token))
  })

  it('replayed: the same signed report again revokes nothing new and audits nothing twice', async () => {
    const leaked = await issue()
    const body = report(leaked.token)
    const headers = signed(body)
    const first = await post(body, headers)
    const countEvents = async () => {
      const { openStore } = await import('../../src/stores/open-store.ts')
      const store = await openStore({ dataDir: server.dataDir })
      try {
        const page = await store.admin.searchAudit({ type: 'pat.leak_revoked' }, { limit: 200 })
        return page.items.filter((e) => e.details.tokenId === leaked.id).length
      } finally {
        await store.close()
      }
    }
    assert.equal(await countEvents(), 1)
    const again = await post(body, headers)
    assert.equal(again.status, 200)
    assert.equal(again.text, first.text)
    assert.equal(await countEvents(), 1)
  })

  it('replayed with the malleated twin of its signature (r, n - s): answered from memory, not as a new report', async () => {
    const leaked = await issue()
    const body = report(leaked.token)
    const headers = signed(body)
    const first = await post(body, headers)
    assert.equal(first.status, 200, first.text)
    const twin = malleated(headers['github-public-key-signature'])
    assert.notEqual(twin, headers['github-public-key-signature'])
    const logged = server.logs.length
    const again = await post(body, { ...headers, 'github-public-key-signature': twin })
    // The twin verifies (GitHub does not normalise S, so it cannot be refused), but the report
    // is the same signed body: it must come from the replay memory, with no store lookup.
    assert.equal(again.status, 200, again.text)
    assert.equal(again.text, first.text)
    const lines = server.logs.slice(logged).filter((line) => line.includes('leak report'))
    assert.equal(lines.length, 1, lines.join('\n'))
    assert.match(lines[0] as string, /a replay, answered from memory/)
  })

  it('unknown tokens and strings that are not PATs are false positives; nothing changes', async () => {
    const body = report('pat_0000000000000000000000000000000000000A', 'ghp_notours')
    const answer = await post(body, signed(body))
    assert.equal(answer.status, 200)
    assert.deepEqual(
      (JSON.parse(answer.text) as { label: string }[]).map((r) => r.label),
      ['false_positive', 'false_positive'],
    )
  })

  it('a wrong content type is 415, an oversized body 413, bad JSON or too many matches 400', async () => {
    const leaked = await issue()
    const body = report(leaked.token)
    const asText = await post(body, { ...signed(body), 'content-type': 'text/plain' })
    assert.equal(asText.status, 415)
    assert.equal(JSON.parse(asText.text).code, 'unsupported_media_type')
    const big = JSON.stringify([{ token: leaked.token, type: 'x', url: 'x'.repeat(5000) }])
    assert.equal((await post(big, signed(big))).status, 413)
    const notJson = '{"token": '
    const badJson = await post(notJson, signed(notJson))
    assert.equal(badJson.status, 400)
    assert.equal(JSON.parse(badJson.text).code, 'validation_failed')
    const notArray = '{"token":"x"}'
    assert.equal((await post(notArray, signed(notArray))).status, 400)
    const many = report('a', 'b', 'c', 'd', 'e', 'f')
    const tooMany = await post(many, signed(many))
    assert.equal(tooMany.status, 400)
    assert.ok(await works(leaked.token), 'nothing was revoked by a refused report')
  })

  it('only POST /leak-reports/github on the API listener; not when unconfigured', async () => {
    const body = report('x')
    assert.equal((await post(body, signed(body), '/leak-reports/gitlab')).status, 404)
    const plain = await startTestServer({ rateLimit: { enabled: false } })
    try {
      const answer = await new Promise<number>((resolve, reject) => {
        const req = https.request(
          `${plain.url}/leak-reports/github`,
          {
            method: 'POST',
            ca: plain.ca,
            headers: { 'content-type': 'application/json', ...signed(body) },
          },
          (res) => {
            res.resume()
            resolve(res.statusCode ?? 0)
          },
        )
        req.on('error', reject)
        req.end(body)
      })
      assert.equal(answer, 404)
    } finally {
      await plain.close()
    }
  })

  it('a keys file holding anything but P-256 keys is refused at start, naming the key', async () => {
    const dir = tempDir('tg-leak-bad-')
    const keysFile = join(dir, 'keys.json')
    const rsa = generateKeyPairSync('rsa', { modulusLength: 2048 }).publicKey.export({
      type: 'spki',
      format: 'pem',
    })
    writeFileSync(
      keysFile,
      JSON.stringify({ public_keys: [{ key_identifier: 'rsa-1', key: rsa }] }),
    )
    await assert.rejects(
      startTestServer({ leakReports: { githubKeysFile: keysFile } }),
      /leakReports.githubKeysFile .*rsa-1.* not an ECDSA P-256 public key/,
    )
  })
})

describe('a leak report is announced by the webhook', () => {
  it('pat.leak_revoked reaches the webhook with its source, the place and the fingerprint only', async (t) => {
    const { startReceiver } = await import('../events/receiver.ts')
    const receiver = await startReceiver()
    t.after(() => receiver.stop())
    const github = githubKey()
    const keysFile = join(tempDir('tg-leak-hook-'), 'keys.json')
    writeFileSync(
      keysFile,
      JSON.stringify({ public_keys: [{ key_identifier: KEY_ID, key: github.publicPem }] }),
    )
    const server = await startTestServer({
      rateLimit: { enabled: false },
      leakReports: { githubKeysFile: keysFile },
      events: {
        webhookUrl: receiver.url,
        webhookSecret: 'whsec_leak_announcement',
        pollIntervalMs: 25,
      },
    })
    t.after(() => server.close())
    const issued = await server.cli('pat', 'issue', '--tenant', 'demo', '--subject', 'x', '--json')
    const { token, id } = JSON.parse(issued.stdout) as { token: string; id: string }
    const body = JSON.stringify([
      { token, type: 'tokengate_pat', url: 'https://github.com/o/r/blob/1/.env', source: 'commit' },
    ])
    const answer = await new Promise<number>((resolve, reject) => {
      const req = https.request(
        `${server.url}/leak-reports/github`,
        {
          method: 'POST',
          ca: server.ca,
          headers: {
            'content-type': 'application/json',
            'github-public-key-identifier': KEY_ID,
            'github-public-key-signature': signatureOf(body, github.privateKey),
          },
        },
        (res) => {
          res.resume()
          resolve(res.statusCode ?? 0)
        },
      )
      req.on('error', reject)
      req.end(body)
    })
    assert.equal(answer, 200)
    const deadline = Date.now() + 10_000
    const announced = () =>
      receiver.deliveries.flatMap((d) => d.events).find((e) => e.type === 'pat.leak_revoked')
    while (!announced() && Date.now() < deadline) await new Promise((r) => setTimeout(r, 25))
    const event = announced()
    assert.ok(event, 'announced')
    assert.equal(event.actor, 'github:secret-scanning')
    assert.deepEqual(event.details, {
      tokenId: id,
      fingerprint: `pat_…${token.slice(-4)}`,
      subject: 'x',
      source: 'github',
      url: 'https://github.com/o/r/blob/1/.env',
    })
    assert.ok(!receiver.deliveries.some((d) => d.body.includes(token)), 'never the token')
  })
})
