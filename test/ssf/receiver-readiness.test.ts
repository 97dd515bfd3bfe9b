/**
 * `/readyz` shows each CAEP/SSF receiver of the running server: its stream (set up or failing,
 * since when), its transmitter's keys, and for a poll receiver the last successful poll.
 * A receiver in trouble makes the instance `degraded` (200), never unready (503): the API
 * answers as before. The test transmitter is taken down and brought back while it runs.
 */
import assert from 'node:assert/strict'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { after, before, describe, it } from 'node:test'
import { eventually } from '../helpers/eventually.ts'
import { startTestServer, type TestServer } from '../helpers/server.ts'
import { type SsfTestTransmitter, startSsfTransmitter } from '../helpers/ssf-transmitter.ts'
import { tempDir } from '../helpers/temp-dir.ts'

const AUDIENCE = 'https://api.readiness.test/ssf'

interface ReceiverView {
  name: string
  delivery: string
  state: string
  stream: string
  streamFailingSince?: string
  keys: string
  keysFailingSince?: string
  lastPoll?: string | null
  pollFailingSince?: string
}

describe('readiness: the CAEP/SSF receivers in /readyz', () => {
  let server: TestServer
  let tx: SsfTestTransmitter

  before(async () => {
    tx = await startSsfTransmitter()
    tx.setAudience(AUDIENCE)
    // Down from the start: neither stream can be set up.
    tx.setDown(true)
    const dir = tempDir('tg-ssf-ready-')
    const bearerTokenFile = join(dir, 'tx-token')
    writeFileSync(bearerTokenFile, `${tx.bearerToken}\n`)
    const common = { transmitter: tx.issuer, audience: AUDIENCE, bearerTokenFile }
    server = await startTestServer({
      ssf: {
        receivers: [
          { ...common, name: 'polled', delivery: 'poll', pollIntervalMs: 100, timeoutMs: 500 },
          {
            ...common,
            name: 'pushed',
            delivery: 'push',
            pushUrl: 'https://api.readiness.test/ssf/events/pushed',
          },
        ],
      },
    })
  })
  after(async () => {
    await server?.close()
    await tx?.close()
  })

  /** `/readyz` once every receiver matches `want`; its body. */
  const readyzWhen = (want: (receivers: Map<string, ReceiverView>) => boolean) =>
    eventually(async () => {
      const answer = await server.request('/readyz')
      assert.equal(answer.status, 200, `readyz ${answer.status}: ${answer.text}`)
      const checks = answer.json.checks as { ssf?: ReceiverView[] }
      const receivers = new Map((checks.ssf ?? []).map((r) => [r.name, r]))
      assert.deepEqual([...receivers.keys()].sort(), ['polled', 'pushed'])
      return want(receivers) ? { status: answer.json.status, receivers } : undefined
    }, 20_000)

  it('transmitter down at start: degraded (200), both receivers named with stream failing since when', async () => {
    const seen = await readyzWhen(
      (r) => r.get('polled')?.stream === 'failing' && r.get('pushed')?.stream === 'failing',
    )
    assert.equal(seen.status, 'degraded')
    for (const name of ['polled', 'pushed']) {
      const receiver = seen.receivers.get(name) as ReceiverView
      assert.equal(receiver.state, 'degraded')
      assert.ok(Date.parse(String(receiver.streamFailingSince)) <= Date.now())
    }
    assert.equal(seen.receivers.get('polled')?.lastPoll, null)
  })

  it('transmitter back: streams set up, keys fetched, polls succeed: ready', async () => {
    tx.setDown(false)
    const seen = await readyzWhen(
      (r) =>
        [...r.values()].every((receiver) => receiver.state === 'ok' && receiver.keys === 'fresh') &&
        typeof r.get('polled')?.lastPoll === 'string',
    )
    assert.equal(seen.status, 'ready')
    const polled = seen.receivers.get('polled') as ReceiverView
    const pushed = seen.receivers.get('pushed') as ReceiverView
    assert.equal(polled.stream, 'ready')
    assert.equal(pushed.stream, 'ready')
    assert.equal(polled.keys, 'fresh')
    assert.equal(pushed.keys, 'fresh')
    assert.equal(polled.streamFailingSince, undefined)
    assert.ok(Date.parse(String(polled.lastPoll)) > 0, 'a successful poll')
    assert.equal(pushed.lastPoll, undefined, 'a push receiver does not poll')
  })

  it('transmitter down again: the poll receiver is degraded after its intervals; the push one (keys held) stays ok', async () => {
    tx.setDown(true)
    const seen = await readyzWhen((r) => r.get('polled')?.state === 'degraded')
    assert.equal(seen.status, 'degraded')
    const polled = seen.receivers.get('polled') as ReceiverView
    assert.ok(polled.pollFailingSince, 'pollFailingSince')
    assert.equal(polled.stream, 'ready')
    assert.equal(seen.receivers.get('pushed')?.state, 'ok')
  })

  it('transmitter back again: ready', async () => {
    tx.setDown(false)
    const seen = await readyzWhen((r) =>
      [...r.values()].every((receiver) => receiver.state === 'ok'),
    )
    assert.equal(seen.status, 'ready')
    assert.equal(seen.receivers.get('polled')?.pollFailingSince, undefined)
  })
})

describe('readiness: a receiver whose transmitter keys cannot be fetched', () => {
  let server: TestServer
  let tx: SsfTestTransmitter

  before(async () => {
    tx = await startSsfTransmitter()
    tx.setAudience(AUDIENCE)
    // The configuration answers; the jwks_uri it names does not.
    tx.setJwksUri(`${tx.issuer}/no-such-jwks`)
    const bearerTokenFile = join(tempDir('tg-ssf-keys-'), 'tx-token')
    writeFileSync(bearerTokenFile, `${tx.bearerToken}\n`)
    server = await startTestServer({
      ssf: {
        receivers: [
          {
            name: 'keyless',
            transmitter: tx.issuer,
            audience: AUDIENCE,
            bearerTokenFile,
            delivery: 'push',
            pushUrl: 'https://api.readiness.test/ssf/events/keyless',
          },
        ],
      },
    })
  })
  after(async () => {
    await server?.close()
    await tx?.close()
  })

  const receiver = async () => {
    const answer = await server.request('/readyz')
    assert.equal(answer.status, 200)
    const checks = answer.json.checks as { ssf: ReceiverView[] }
    return { status: answer.json.status, view: checks.ssf[0] as ReceiverView }
  }

  it('stream set up, keys failing: degraded, with since when; keys back (after the cooldown): ready', async () => {
    const failing = await eventually(async () => {
      const seen = await receiver()
      return seen.view.keysFailingSince ? seen : undefined
    })
    assert.equal(failing.status, 'degraded')
    assert.equal(failing.view.state, 'degraded')
    assert.equal(failing.view.stream, 'ready')
    assert.equal(failing.view.keys, 'unavailable')
    tx.setJwksUri(`${tx.issuer}/jwks`)
    // A failed key fetch is retried after the key source's cooldown (30 s), on tokengate's clock.
    server.clock.advance(31_000)
    const back = await eventually(async () => {
      const seen = await receiver()
      return seen.view.state === 'ok' ? seen : undefined
    })
    assert.equal(back.status, 'ready')
    assert.equal(back.view.keys, 'fresh')
    assert.equal(back.view.keysFailingSince, undefined)
  })
})
