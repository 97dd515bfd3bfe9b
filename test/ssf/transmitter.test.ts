/**
 * The CAEP transmitter end to end: a real SSF receiver (node:http on 127.0.0.1) subscribed by
 * configuration gets a `credential-change` SET for every PAT revoked, leaked, disabled or
 * whose permissions change, verifiable with jose against the JWKS tokengate serves; SETs
 * written while the receiver is down arrive once it is back (the outbox retries).
 */
import assert from 'node:assert/strict'
import { createHash, generateKeyPairSync, sign } from 'node:crypto'
import { writeFileSync } from 'node:fs'
import https from 'node:https'
import { join } from 'node:path'
import { DatabaseSync } from 'node:sqlite'
import { describe, it } from 'node:test'
import { createLocalJWKSet, decodeProtectedHeader, type JWTPayload, jwtVerify } from 'jose'
import { CAEP_EVENT, DELIVERY_METHOD, SET_MEDIA_TYPE } from '../../src/ssf/events.ts'
import { startReceiver } from '../events/receiver.ts'
import { launchTokengate } from '../helpers/launch.ts'
import { startTestServer, type TestServer } from '../helpers/server.ts'
import { tempDir } from '../helpers/temp-dir.ts'

const AUDIENCE = 'https://receiver.example/caep'
const ISSUER = 'https://tokengate.example'
const GITHUB_KEY_ID = 'bcb53661c06b4728e59d897fb6165d5c9cda0fd9cdf9d09ead458168deb7518c'
const FAST_EVENTS = { pollIntervalMs: 25, retryInitialMs: 50, retryMaxMs: 200, timeoutMs: 2000 }

/** GitHub's side of a secret-scanning report: a P-256 key, its public half in a keys file. */
function githubReporter() {
  const { privateKey, publicKey } = generateKeyPairSync('ec', { namedCurve: 'prime256v1' })
  const keysFile = join(tempDir('tg-caep-github-'), 'keys.json')
  const key = publicKey.export({ type: 'spki', format: 'pem' }) as string
  writeFileSync(keysFile, JSON.stringify({ public_keys: [{ key_identifier: GITHUB_KEY_ID, key }] }))
  return {
    keysFile,
    /** POSTs a signed report of `token` to the server; resolves with the status. */
    report(server: TestServer, token: string): Promise<number> {
      const body = JSON.stringify([
        {
          token,
          type: 'tokengate_pat',
          url: 'https://github.com/o/r/blob/1/.env',
          source: 'commit',
        },
      ])
      const signature = sign('sha256', Buffer.from(body), privateKey).toString('base64')
      return new Promise((resolve, reject) => {
        const req = https.request(
          `${server.url}/leak-reports/github`,
          {
            method: 'POST',
            ca: server.ca,
            headers: {
              'content-type': 'application/json',
              'github-public-key-identifier': GITHUB_KEY_ID,
              'github-public-key-signature': signature,
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
    },
  }
}

/** An RFC 8935 push receiver: records each SET and answers 202; can go down and come back. */
async function startSetReceiver() {
  const receiver = await startReceiver('ok', { okStatus: 202, events: () => [] })
  return {
    get url() {
      return receiver.url
    },
    /** Each push: its Content-Type, its Authorization and the SET. */
    get pushed() {
      return receiver.deliveries.map((d) => ({
        contentType: d.headers['content-type'],
        authorization: d.headers.authorization,
        set: d.body,
      }))
    },
    start: () => receiver.start(),
    stop: () => receiver.stop(),
  }
}

interface CredentialChange {
  readonly credential_type: string
  readonly change_type: string
  readonly event_timestamp: number
  readonly initiating_entity: string
}

async function waitFor<T>(what: string, find: () => Promise<T | undefined>, timeoutMs = 10_000) {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const found = await find()
    if (found !== undefined) return found
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await new Promise((resolve) => setTimeout(resolve, 25))
  }
}

describe('CAEP transmitter: credential-change SETs for our own keys', () => {
  it('revoke, edit --permission, disable and a leak each push a verifiable SET; a receiver down for a while gets them later', async (t) => {
    const receiver = await startSetReceiver()
    t.after(() => receiver.stop())
    const github = githubReporter()
    const authorizationFile = join(tempDir('tg-caep-auth-'), 'authorization')
    writeFileSync(authorizationFile, 'Bearer receiver-expects-this\n', { mode: 0o600 })
    const server = await startTestServer({
      events: FAST_EVENTS,
      leakReports: { githubKeysFile: github.keysFile },
      ssf: {
        transmitter: {
          issuer: ISSUER,
          receivers: [
            { url: receiver.url, audience: AUDIENCE, authorizationHeaderFile: authorizationFile },
          ],
        },
      },
    })
    t.after(() => server.close())

    // The transmitter's configuration (SSF 1.0 §7.1) and our JWKS, as a receiver finds them.
    const discovery = await server.request('/.well-known/ssf-configuration')
    assert.equal(discovery.status, 200)
    assert.equal(discovery.json.issuer, ISSUER)
    assert.equal(discovery.json.jwks_uri, `${ISSUER}/.well-known/jwks.json`)
    assert.deepEqual(discovery.json.delivery_methods_supported, [DELIVERY_METHOD.push])
    const served = await server.request('/.well-known/jwks.json')
    assert.equal(served.status, 200)
    const jwks = createLocalJWKSet(served.json as { keys: [] })

    const tokens: string[] = []
    const issue = async () => {
      const out = await server.cli('pat', 'issue', '--tenant', 'demo', '--subject', 'svc', '--json')
      assert.equal(out.code, 0, out.stderr)
      const { token, id } = JSON.parse(out.stdout) as { token: string; id: string }
      tokens.push(token)
      return { token, id }
    }
    /** The verified SET about key `id` with `changeType`, once it has arrived. */
    const setFor = (id: string, changeType: string) =>
      waitFor(`a ${changeType} SET for ${id}`, async () => {
        for (const push of receiver.pushed) {
          const { payload, protectedHeader } = await jwtVerify(push.set, jwks, {
            issuer: ISSUER,
            audience: AUDIENCE,
            typ: 'secevent+jwt',
          })
          const event = (payload.events as Record<string, CredentialChange>)[
            CAEP_EVENT.credentialChange
          ]
          const subject = payload.sub_id as Record<string, unknown>
          if (subject?.id === id && event?.change_type === changeType) {
            return { push, payload, protectedHeader, event, subject }
          }
        }
        return undefined
      })
    const check = (found: Awaited<ReturnType<typeof setFor>>, id: string) => {
      assert.equal(found.push.contentType, SET_MEDIA_TYPE)
      assert.equal(found.push.authorization, 'Bearer receiver-expects-this')
      assert.equal(found.protectedHeader.typ, 'secevent+jwt')
      assert.deepEqual(found.subject, { format: 'opaque', id })
      assert.equal(found.payload.exp, undefined, 'a SET has no exp (RFC 8417 §2.2)')
      assert.equal(found.payload.sub, undefined, 'the subject is sub_id, not sub')
      assert.equal(typeof found.payload.jti, 'string')
      assert.equal(found.event.credential_type, 'api_key')
      assert.ok(Math.abs(found.event.event_timestamp - Date.now() / 1000) < 60)
      assert.deepEqual((found.payload as JWTPayload & { tenant_id?: string }).tenant_id, 'demo')
    }

    const edited = await issue()
    const edit = await server.cli('pat', 'edit', edited.id, '--permission', 'tokens:read')
    assert.equal(edit.code, 0, edit.stderr)
    check(await setFor(edited.id, 'update'), edited.id)

    const disabled = await issue()
    assert.equal((await server.cli('pat', 'disable', disabled.id)).code, 0)
    check(await setFor(disabled.id, 'update'), disabled.id)

    const revoked = await issue()
    assert.equal((await server.cli('pat', 'revoke', revoked.id)).code, 0)
    check(await setFor(revoked.id, 'revoke'), revoked.id)

    const leaked = await issue()
    assert.equal((await server.cli('pat', 'revoke-leaked', leaked.token)).code, 0)
    check(await setFor(leaked.id, 'revoke'), leaked.id)

    // A secret-scanning report from GitHub, on the API listener.
    const reported = await issue()
    assert.equal(await github.report(server, reported.token), 200)
    const byGithub = await setFor(reported.id, 'revoke')
    check(byGithub, reported.id)
    assert.equal(byGithub.event.initiating_entity, 'system')

    // An edit that leaves the permissions alone is not a credential change.
    const renamed = await issue()
    assert.equal((await server.cli('pat', 'edit', renamed.id, '--name', 'other')).code, 0)

    // The receiver goes down: what happens meanwhile is delivered once it is back.
    await receiver.stop()
    const whileDown = await issue()
    assert.equal((await server.cli('pat', 'revoke', whileDown.id)).code, 0)
    await new Promise((resolve) => setTimeout(resolve, 600))
    await receiver.start()
    check(await setFor(whileDown.id, 'revoke'), whileDown.id)
    assert.ok(
      server.logs.some((line) => line.includes('event delivery failed; will retry')),
      'the outbox retried while the receiver was down',
    )

    assert.ok(
      !receiver.pushed.some((p) => decodeProtectedHeader(p.set).typ !== 'secevent+jwt'),
      'only SETs are pushed',
    )
    const renamedSets = await Promise.all(
      receiver.pushed.map(async (p) => (await jwtVerify(p.set, jwks)).payload.sub_id),
    )
    assert.ok(
      !renamedSets.some((s) => (s as { id?: string }).id === renamed.id),
      'a rename is no credential change',
    )
    // No webhook is configured: a refused request is audited, but queued for nobody.
    const refused = await server.request('/api/v1/me', ['Authorization', 'Bearer not-a-token'])
    assert.equal(refused.status, 401)
    const db = new DatabaseSync(join(server.dataDir, 'tokengate.db'), { readOnly: true })
    t.after(() => db.close())
    const count = (sql: string) => Number((db.prepare(sql).get() as { n: number }).n)
    await waitFor('the 401 audited', async () =>
      count(`SELECT count(*) AS n FROM audit_events WHERE type = 'auth.failed'`) > 0
        ? true
        : undefined,
    )
    assert.equal(
      count(
        `SELECT count(*) AS n FROM event_outbox o JOIN audit_events a ON a.id = o.event_id
         WHERE a.type = 'auth.failed' AND o.destination = ''`,
      ),
      0,
    )

    // Never the token, nor its hash, in any SET (header, claims or signature bytes).
    for (const push of receiver.pushed) {
      const decoded = push.set
        .split('.')
        .slice(0, 2)
        .map((part) => Buffer.from(part, 'base64url').toString('utf8'))
        .join('\n')
      for (const token of tokens) {
        const hex = createHash('sha256').update(token).digest('hex')
        const b64 = createHash('sha256').update(token).digest('base64url')
        for (const secret of [token, hex, b64, token.slice(4)]) {
          assert.ok(!decoded.includes(secret) && !push.set.includes(secret), 'no token or hash')
        }
      }
    }
  })

  it('a key revoked by the CLI while no server runs is announced by the next start', async (t) => {
    const receiver = await startSetReceiver()
    t.after(() => receiver.stop())
    const ssf = {
      transmitter: { issuer: ISSUER, receivers: [{ url: receiver.url, audience: AUDIENCE }] },
    }
    const first = await startTestServer({ events: FAST_EVENTS, ssf })
    const jwks = createLocalJWKSet(
      (await first.request('/.well-known/jwks.json')).json as { keys: [] },
    )
    const out = await first.cli('pat', 'issue', '--tenant', 'demo', '--subject', 'svc', '--json')
    const { id } = JSON.parse(out.stdout) as { id: string }
    await first.close()
    // The CLI alone: the audit event and one outbox entry per receiver, in one transaction.
    assert.equal((await first.cli('pat', 'revoke', id)).code, 0)
    assert.equal(receiver.pushed.length, 0)

    const second = await launchTokengate({
      dataDir: first.dataDir,
      server: { port: 0, plainHttp: true },
      log: { level: 'silent' },
      events: FAST_EVENTS,
      ssf,
    })
    t.after(() => second.close())
    const found = await waitFor('the SET of the revocation', async () => {
      for (const push of receiver.pushed) {
        const { payload } = await jwtVerify(push.set, jwks, { issuer: ISSUER, audience: AUDIENCE })
        if ((payload.sub_id as { id?: string }).id === id) return payload
      }
      return undefined
    })
    const event = (found.events as Record<string, CredentialChange>)[CAEP_EVENT.credentialChange]
    assert.equal(event?.change_type, 'revoke')
  })
})
