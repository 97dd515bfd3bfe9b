/**
 * The endpoints a signature authenticates instead of a credential (POST /ssf/events/<name>,
 * POST /leak-reports/github) under the failed-authentication limit, attacked as raw HTTPS
 * requests against the running server: an address posting garbage is answered 429 with
 * Retry-After once over `rateLimit.failedAuth.max`, writes no audit row per refusal beyond
 * it (one `auth.throttled` row with a count), and a valid SET from another address passes.
 * Two source addresses on loopback: 127.0.0.2 attacks, 127.0.0.1 is the transmitter.
 */
import assert from 'node:assert/strict'
import { generateKeyPairSync } from 'node:crypto'
import { writeFileSync } from 'node:fs'
import https from 'node:https'
import { join } from 'node:path'
import { after, before, describe, it } from 'node:test'
import { SET_MEDIA_TYPE, SSF_EVENT } from '../../src/ssf/events.ts'
import { openStore } from '../../src/stores/open-store.ts'
import type { AdminStore, StoredAuditEvent } from '../../src/stores/store.ts'
import { startTestServer, type TestServer } from '../helpers/server.ts'
import { type SsfTestTransmitter, startSsfTransmitter } from '../helpers/ssf-transmitter.ts'
import { tempDir } from '../helpers/temp-dir.ts'

const AUDIENCE = 'https://api.throttle.test/ssf'
const ATTACKER = '127.0.0.2'
const LIMIT = 3
const PUSH_AUTHORIZATION = 'Bearer push-secret-for-the-throttle-test'

interface Answer {
  status: number
  headers: Record<string, string | string[] | undefined>
  json: Record<string, unknown>
}

describe('attack: refusals of the SSF push and leak-report endpoints under the failed-auth limit', () => {
  let server: TestServer
  let tx: SsfTestTransmitter
  let dataDir: string

  before(async () => {
    tx = await startSsfTransmitter()
    tx.setAudience(AUDIENCE)
    const dir = tempDir('tg-ssf-throttle-')
    const bearerTokenFile = join(dir, 'tx-token')
    writeFileSync(bearerTokenFile, `${tx.bearerToken}\n`)
    const pushAuthorizationFile = join(dir, 'push-authorization')
    writeFileSync(pushAuthorizationFile, `${PUSH_AUTHORIZATION}\n`)
    const keysFile = join(dir, 'github-keys.json')
    const { publicKey } = generateKeyPairSync('ec', { namedCurve: 'prime256v1' })
    writeFileSync(
      keysFile,
      JSON.stringify({
        public_keys: [
          {
            key_identifier: 'k1',
            key: publicKey.export({ type: 'spki', format: 'pem' }),
            is_current: true,
          },
        ],
      }),
    )
    dataDir = join(dir, 'data')
    server = await startTestServer({
      dataDir,
      rateLimit: { failedAuth: { max: LIMIT, windowSec: 600 } },
      metrics: { enabled: true, port: 0 },
      leakReports: { githubKeysFile: keysFile },
      ssf: {
        receivers: [
          {
            name: 'idp',
            transmitter: tx.issuer,
            audience: AUDIENCE,
            delivery: 'push',
            pushUrl: 'https://api.throttle.test/ssf/events/idp',
            bearerTokenFile,
            algorithms: ['ES256'],
          },
          {
            name: 'shared',
            transmitter: tx.issuer,
            audience: AUDIENCE,
            delivery: 'push',
            pushUrl: 'https://api.throttle.test/ssf/events/shared',
            bearerTokenFile,
            pushAuthorizationFile,
            algorithms: ['ES256'],
          },
        ],
      },
    })
  })
  after(async () => {
    await server?.close()
    await tx?.close()
  })

  function post(
    path: string,
    body: string,
    headers: Record<string, string>,
    localAddress = '127.0.0.1',
  ): Promise<Answer> {
    return new Promise((resolve, reject) => {
      const request = https.request(
        `${server.url}${path}`,
        { method: 'POST', ca: server.ca, localAddress, agent: false, headers },
        (response) => {
          const chunks: Buffer[] = []
          response.on('data', (chunk: Buffer) => chunks.push(chunk))
          response.on('end', () => {
            let json: Record<string, unknown> = {}
            try {
              json = JSON.parse(Buffer.concat(chunks).toString('utf8'))
            } catch {}
            resolve({ status: response.statusCode ?? 0, headers: response.headers, json })
          })
        },
      )
      request.on('error', reject)
      request.end(body)
    })
  }
  const garbageSet = (from: string) =>
    post('/ssf/events/idp', 'not.a.set', { 'content-type': SET_MEDIA_TYPE }, from)

  async function auditRows(type: string): Promise<readonly StoredAuditEvent[]> {
    const store = await openStore({ dataDir })
    try {
      const { admin } = store as unknown as { admin: AdminStore }
      return (await admin.searchAudit({ type }, { limit: 500 })).items
    } finally {
      await store.close()
    }
  }

  it('garbage SETs from one address: 400 up to the limit, then 429 with Retry-After; a valid SET from another address still 202', async () => {
    const answers: Answer[] = []
    for (let i = 0; i < LIMIT + 5; i++) answers.push(await garbageSet(ATTACKER))
    assert.deepEqual(
      answers.map((a) => a.status),
      [...Array(LIMIT).fill(400), ...Array(5).fill(429)],
    )
    const throttled = answers.at(-1) as Answer
    assert.ok(Number(throttled.headers['retry-after']) > 0, 'Retry-After on the 429')
    assert.equal(throttled.json.err, 'rate_limited')
    assert.equal(typeof throttled.json.description, 'string')

    // The transmitter, at another address, is not affected: a verification SET is applied.
    const { set } = tx.event(SSF_EVENT.verification, { format: 'opaque', id: 's1' }, AUDIENCE)
    const valid = await post('/ssf/events/idp', set, { 'content-type': SET_MEDIA_TYPE })
    assert.equal(valid.status, 202)
    // And its own mistakes are still answered as such, not throttled.
    assert.equal((await garbageSet('127.0.0.1')).status, 400)
  })

  it('a throttled address writes no ssf.event_refused row per SET beyond the limit', async () => {
    for (let i = 0; i < 20; i++) assert.equal((await garbageSet(ATTACKER)).status, 429)
    const refused = (await auditRows('ssf.event_refused')).filter(
      (row) => row.clientAddress === ATTACKER,
    )
    assert.equal(refused.length, LIMIT)
  })

  it('a transmitter behind the throttled address passes with its own Authorization; a wrong one gets 429', async () => {
    const { set } = tx.event(SSF_EVENT.verification, { format: 'opaque', id: 's2' }, AUDIENCE)
    const type = { 'content-type': SET_MEDIA_TYPE }
    const wrong = await post(
      '/ssf/events/shared',
      set,
      { ...type, authorization: 'Bearer guess' },
      ATTACKER,
    )
    assert.equal(wrong.status, 429)
    const right = await post(
      '/ssf/events/shared',
      set,
      { ...type, authorization: PUSH_AUTHORIZATION },
      ATTACKER,
    )
    assert.equal(right.status, 202)
  })

  it('tokengate_ssf_events_total counts what the receivers did, by receiver and outcome (throttled requests reach none)', async () => {
    const text = await (await fetch(String(server.running.metricsUrl))).text()
    const value = (receiver: string, outcome: string) =>
      Number(
        new RegExp(
          `^tokengate_ssf_events_total\\{receiver="${receiver}",outcome="${outcome}"\\} (\\d+)$`,
          'm',
        ).exec(text)?.[1] ?? 0,
      )
    // 3 garbage SETs from the attacker before the limit, 1 from the transmitter's address.
    assert.equal(value('idp', 'refused'), LIMIT + 1)
    assert.equal(value('idp', 'received'), 1)
    assert.equal(value('shared', 'received'), 1)
  })

  it('the leak-report endpoint: forged reports from one address get 429 past the limit', async () => {
    const from = '127.0.0.3'
    const statuses: number[] = []
    for (let i = 0; i < LIMIT + 3; i++) {
      const answer = await post(
        '/leak-reports/github',
        '[]',
        {
          'content-type': 'application/json',
          'github-public-key-identifier': 'k1',
          'github-public-key-signature': 'MEUCIQDforged',
        },
        from,
      )
      statuses.push(answer.status)
      if (answer.status === 429) assert.ok(Number(answer.headers['retry-after']) > 0)
    }
    assert.deepEqual(statuses, [...Array(LIMIT).fill(403), ...Array(3).fill(429)])
  })

  it('on shutdown each throttled address is audited once, as auth.throttled with its count', async () => {
    await server.close()
    const rows = (await auditRows('auth.throttled')).filter((row) => row.clientAddress === ATTACKER)
    assert.equal(rows.length, 1)
    // 5 + 20 garbage SETs and the wrong Authorization.
    const details = rows[0]?.details as { refused?: number; path?: string } | undefined
    assert.equal(details?.refused, 26)
    assert.equal(details?.path, '/ssf/events/*')
  })
})
