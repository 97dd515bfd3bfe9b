import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import { run } from '../../src/cli/main.ts'
import { openStore } from '../../src/stores/open-store.ts'
import type { StoredAuditEvent } from '../../src/stores/store.ts'
import { eventually } from '../helpers/eventually.ts'
import { startTestServer, type TestServer } from '../helpers/server.ts'

describe('rotation reuse detection over the real server (SQLite)', () => {
  let server: TestServer
  before(async () => {
    server = await startTestServer()
    assert.equal((await server.cli('tenant', 'create', 'acme')).code, 0)
  })
  after(() => server.close())

  async function issue(subject: string): Promise<{ id: string; token: string }> {
    const result = await server.cli(
      'pat',
      'issue',
      '--tenant',
      'acme',
      '--subject',
      subject,
      '--permission',
      'tokens:read',
      '--json',
    )
    assert.equal(result.code, 0, result.stderr)
    return JSON.parse(result.stdout) as { id: string; token: string }
  }

  /** `pat rotate` as if run at `at`, so a grace can end a moment from now in real time. */
  async function rotate(id: string, grace: string, at = Date.now()) {
    let stdout = ''
    let stderr = ''
    const code = await run(
      ['pat', 'rotate', id, '--grace', grace, '--json', '--data-dir', server.dataDir],
      {
        stdout: { write: (s: string) => (stdout += s) },
        stderr: { write: (s: string) => (stderr += s) },
        env: {},
        now: () => at,
      },
    )
    assert.equal(code, 0, stderr)
    return JSON.parse(stdout) as { id: string; token: string }
  }

  const me = (token: string) => server.request('/api/v1/me', ['Authorization', `Bearer ${token}`])

  async function auditOf(type: string): Promise<StoredAuditEvent[]> {
    const store = await openStore({ dataDir: server.dataDir })
    try {
      await store.migrate()
      const page = await store.listAudit('acme', { limit: 200 })
      return page.items.filter((e) => e.type === type)
    } finally {
      await store.close()
    }
  }

  it('grace 0: the old token is refused at once; presenting it revokes the new one too', async () => {
    const a = await issue('reuse-a')
    assert.equal((await me(a.token)).status, 200)
    const b = await rotate(a.id, '0')
    assert.equal((await me(b.token)).status, 200)

    // The CLI is another process: the server sees the rotation within its change polling.
    const refused = await eventually(async () => {
      const response = await me(a.token)
      return response.status === 401 ? response : undefined
    })
    assert.equal(refused.json.code, 'invalid_token')
    assert.equal(refused.json.detail, 'The access token is not valid.', 'no hint of the rotation')

    await eventually(async () => ((await me(b.token)).status === 401 ? true : undefined))
    const events = await eventually(async () => {
      const found = await auditOf('pat.reuse_detected')
      return found.some((e) => e.details.tokenId === a.id) ? found : undefined
    })
    const event = events.find((e) => e.details.tokenId === a.id) as StoredAuditEvent
    assert.deepEqual(event.details.revokedTokenIds, [a.id, b.id].sort())
    assert.equal(event.outcome, 'family_revoked')
    assert.equal(event.tenantId, 'acme')
    assert.equal(event.actor, `pat_…${a.token.slice(-4)}`)
    assert.equal(event.clientAddress, '127.0.0.1')
    assert.match(String(event.requestId), /.+/)
    assert.ok(!JSON.stringify(events).includes(a.token))

    // Presenting the old token again changes nothing and is not reported twice.
    assert.equal((await me(a.token)).status, 401)
    await new Promise((resolve) => setTimeout(resolve, 400))
    const again = (await auditOf('pat.reuse_detected')).filter((e) => e.details.tokenId === a.id)
    assert.equal(again.length, 1)
  })

  it('within the grace both tokens work and nothing is revoked; after it, reuse revokes the family', async () => {
    const c = await issue('grace-c')
    // --grace 1m as if run 58.5 s ago: the grace ends 1.5 s from now.
    const d = await rotate(c.id, '1m', Date.now() - 58_500)
    await new Promise((resolve) => setTimeout(resolve, 600))
    assert.equal((await me(c.token)).status, 200, 'the old token works during the grace')
    assert.equal((await me(d.token)).status, 200)
    assert.equal((await me(c.token)).status, 200)
    await new Promise((resolve) => setTimeout(resolve, 1200))
    assert.equal((await me(d.token)).status, 200, 'the replacement is untouched so far')
    assert.equal((await me(c.token)).status, 401, 'after the grace the old token is refused')
    await eventually(async () => ((await me(d.token)).status === 401 ? true : undefined))
  })

  it('a family with a branch (rotated twice) is revoked whole, and an unrelated token survives', async () => {
    const e = await issue('chain-e')
    const other = await issue('chain-other')
    const f = await rotate(e.id, '0')
    const g = await rotate(f.id, '0')
    await eventually(async () => ((await me(e.token)).status === 401 ? true : undefined))
    await eventually(async () => ((await me(g.token)).status === 401 ? true : undefined))
    assert.equal((await me(other.token)).status, 200)
    const store = await openStore({ dataDir: server.dataDir })
    try {
      await store.migrate()
      for (const id of [e.id, f.id, g.id]) {
        assert.notEqual((await store.getPat(id))?.revokedAt, null, `${id} revoked`)
      }
      assert.equal((await store.getPat(other.id))?.revokedAt, null)
    } finally {
      await store.close()
    }
  })
})
