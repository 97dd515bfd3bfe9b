/**
 * The CAEP transmitter on two instances on one Postgres (issue #34 item 3): keys revoked
 * through the CLI (DATABASE_URL, no instance involved) are each announced to the receiver
 * once, by whichever instance claims the outbox entry first (FOR UPDATE SKIP LOCKED per
 * destination), signed with the key set the instances share and verifiable with either's JWKS.
 */
import assert from 'node:assert/strict'
import http from 'node:http'
import { join } from 'node:path'
import { after, before, describe, it } from 'node:test'
import { createLocalJWKSet, jwtVerify } from 'jose'
import { CAEP_EVENT } from '../../src/ssf/events.ts'
import { type Listening, listenLocal } from '../helpers/listen.ts'
import { skipReason } from '../helpers/services.ts'
import { tempDir } from '../helpers/temp-dir.ts'
import {
  cli,
  type Instance,
  issuePatWithCli,
  startTwoInstances,
  summarize,
  type TwoInstances,
  waitFor,
} from './cluster.ts'

const ISSUER = 'https://tokengate.scale.test'
const AUDIENCE = 'https://receiver.scale.test'
const KEYS = 20

describe('CAEP transmitter on two instances on one Postgres', {
  skip: skipReason('postgres'),
}, () => {
  let two: TwoInstances
  let a: Instance
  let b: Instance
  const pushed: { set: string; at: number }[] = []
  let receiver: Listening

  before(async () => {
    receiver = await listenLocal(
      http.createServer((req, res) => {
        let body = ''
        req.setEncoding('utf8')
        req.on('data', (chunk: string) => {
          body += chunk
        })
        req.on('end', () => {
          pushed.push({ set: body, at: performance.now() })
          res.writeHead(202).end()
        })
      }),
    )
    const url = `${receiver.url}/push`
    two = await startTwoInstances({
      overrides: {
        // One key file for both, as docs/caep-transmitter.md asks.
        identityToken: { keysFile: join(tempDir('tg-caep-keys-'), 'identity-keys.json') },
        events: { pollIntervalMs: 25, retryInitialMs: 50, retryMaxMs: 200, timeoutMs: 2000 },
        ssf: { transmitter: { issuer: ISSUER, receivers: [{ url, audience: AUDIENCE }] } },
      },
      tenants: [{ id: 'acme', name: 'acme' }],
    })
    ;({ a, b } = two)
  })

  after(async () => {
    await two?.close()
    await receiver?.close()
  })

  it(`${KEYS} keys revoked through the CLI: one SET each, verifiable with either instance's JWKS`, async (t) => {
    const ids: string[] = []
    for (let i = 0; i < KEYS; i++) {
      ids.push((await issuePatWithCli(two.databaseUrl)).id)
    }
    const revokedAt = new Map<string, number>()
    for (const id of ids) {
      assert.equal((await cli(two.databaseUrl, 'pat', 'revoke', id)).code, 0)
      revokedAt.set(id, performance.now())
    }
    await waitFor(async () => pushed.length >= KEYS, `${KEYS} SETs pushed`, { timeoutMs: 10_000 })
    // Whatever is still in flight lands; a second delivery would show as a duplicate.
    await new Promise((resolve) => setTimeout(resolve, 300))
    const delays: number[] = []

    for (const instance of [a, b]) {
      const jwks = createLocalJWKSet(
        (await instance.request('/.well-known/jwks.json')).json as { keys: [] },
      )
      const subjects: string[] = []
      for (const { set, at } of pushed) {
        const { payload } = await jwtVerify(set, jwks, {
          issuer: ISSUER,
          audience: AUDIENCE,
          typ: 'secevent+jwt',
        })
        const event = (payload.events as Record<string, { change_type: string }>)[
          CAEP_EVENT.credentialChange
        ]
        assert.equal(event?.change_type, 'revoke')
        const id = (payload.sub_id as { id: string }).id
        subjects.push(id)
        if (instance === a) delays.push(at - (revokedAt.get(id) ?? Number.NaN))
      }
      assert.deepEqual([...subjects].sort(), [...ids].sort(), 'each key once, no duplicate')
    }
    const { median, max } = summarize(delays)
    t.diagnostic(
      `${pushed.length} SETs; from the CLI's revoke returning to the SET at the receiver: median ${median.toFixed(0)} ms, max ${max.toFixed(0)} ms`,
    )
  })
})
