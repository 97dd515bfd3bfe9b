import assert from 'node:assert/strict'
import { writeFileSync } from 'node:fs'
import { createServer } from 'node:http'
import { join } from 'node:path'
import { after, before, describe, it } from 'node:test'
import { type Listening, listenLocal } from '../helpers/listen.ts'
import { skipReason } from '../helpers/services.ts'
import { tempDir } from '../helpers/temp-dir.ts'
import {
  bearer,
  cli,
  type Instance,
  insertPat,
  startTwoInstances,
  type TwoInstances,
  waitFor,
} from './cluster.ts'

/**
 * The gateway policy kept in the store (issue #25): `tokengate policy set` once, and every
 * instance in gateway mode applies it within a second, without SIGHUP or a file per host.
 */
describe('gateway policy in the store', { skip: skipReason('postgres') }, () => {
  let two: TwoInstances
  let url: string
  let upstream: Listening
  let a: Instance
  let b: Instance
  let token: string

  before(async () => {
    upstream = await listenLocal(
      createServer((_request, response) => response.end('upstream says hi')),
    )
    two = await startTwoInstances({
      overrides: {
        gateway: { upstream: upstream.url, policyStore: true },
        store: { changePollMs: 500 },
      },
      prepare: async (admin) => {
        token = (await insertPat(admin, 'acme', ['tokens:read'])).token
      },
    })
    ;({ databaseUrl: url, a, b } = two)
  })
  after(async () => {
    await two?.close()
    await upstream?.close()
  })

  const status = async (instance: Instance) =>
    (await instance.request('/api/v1/reports/q3', bearer(token))).status

  it('a policy set once is enforced by both instances within 1 s, and removed the same way', async (t) => {
    assert.equal(await status(a), 200, 'no stored policy: authenticated callers pass')
    assert.equal(await status(b), 200)
    const file = join(tempDir('tg-policy-'), 'policy.yaml')
    writeFileSync(
      file,
      'default: authenticated\nrules:\n  - methods: [GET]\n    path: /api/v1/reports/*\n    permissions: [reports:read]\n',
    )
    const set = await cli(url, 'policy', 'set', file)
    assert.equal(set.code, 0, set.stderr)
    const since = performance.now()
    const [onA, onB] = await Promise.all(
      [a, b].map((instance) =>
        waitFor(async () => (await status(instance)) === 403, 'policy applied', {
          since,
          timeoutMs: 3000,
          intervalMs: 10,
        }),
      ),
    )
    t.diagnostic(
      `policy set → 403 on A after ${onA?.toFixed(0)} ms, on B after ${onB?.toFixed(0)} ms`,
    )
    assert.ok((onA ?? 0) < 1000 && (onB ?? 0) < 1000)

    writeFileSync(file, 'rules:\n  - methods: [get]\n    path: /api/v1/x\n')
    const bad = await cli(url, 'policy', 'set', file)
    assert.equal(bad.code, 1)
    assert.match(bad.stderr, /policy\.yaml:2:\d+: rules\[0\]\.methods/)
    assert.equal(await status(b), 403, 'an invalid file changes nothing')

    assert.equal((await cli(url, 'policy', 'remove')).code, 0)
    await waitFor(async () => (await status(a)) === 200 && (await status(b)) === 200, 'removed', {
      timeoutMs: 3000,
    })
  })
})
