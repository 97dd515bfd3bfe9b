import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import { eventually } from '../../helpers/eventually.ts'
import { startTestServer, type TestServer } from '../../helpers/server.ts'

describe('GET /api/v1/tokens reports PAT status as the CLI and the core see it', () => {
  let server: TestServer
  before(async () => {
    server = await startTestServer()
    assert.equal((await server.cli('tenant', 'create', 'acme')).code, 0)
  })
  after(() => server.close())

  async function cliJson(...args: string[]) {
    const result = await server.cli(...args, '--json')
    assert.equal(result.code, 0, result.stderr)
    return JSON.parse(result.stdout) as { id: string; token: string; status: string }
  }

  it('a rotated-out PAT inside its grace period is `grace`, and still authenticates', async () => {
    const old = await cliJson(
      'pat',
      'issue',
      '--tenant',
      'acme',
      '--subject',
      'deploy',
      '--permission',
      'tokens:read',
    )
    const replacement = await cliJson('pat', 'rotate', old.id, '--grace', '1h')
    const auth = ['Authorization', `Bearer ${replacement.token}`]

    const list = await server.request('/api/v1/tokens', auth)
    assert.equal(list.status, 200, list.text)
    const items = list.json.items as { id: string; status: string }[]
    assert.equal(items.find((t) => t.id === old.id)?.status, 'grace')
    assert.equal(items.find((t) => t.id === replacement.id)?.status, 'active')

    const one = await server.request(`/api/v1/tokens/${old.id}`, auth)
    assert.equal(one.json.status, 'grace')
    const stillWorks = await server.request('/api/v1/me', ['Authorization', `Bearer ${old.token}`])
    assert.equal(stillWorks.status, 200)
  })

  it('DELETE /tokens/{id} without tokens:revoke is 403 and audited as auth.forbidden', async () => {
    const target = await cliJson('pat', 'issue', '--tenant', 'acme', '--subject', 'target')
    const caller = await cliJson(
      'pat',
      'issue',
      '--tenant',
      'acme',
      '--subject',
      'reader',
      '--permission',
      'tokens:read',
    )
    const auditor = await cliJson(
      'pat',
      'issue',
      '--tenant',
      'acme',
      '--subject',
      'auditor',
      '--permission',
      'audit:read',
    )
    const refused = await server.request(
      `/api/v1/tokens/${target.id}`,
      ['Authorization', `Bearer ${caller.token}`],
      'DELETE',
    )
    assert.equal(refused.status, 403)
    const requestId = refused.headers['x-request-id']
    assert.ok(requestId)
    const event = await eventually(async () => {
      const page = await server.request('/api/v1/audit-events?limit=100', [
        'Authorization',
        `Bearer ${auditor.token}`,
      ])
      const items = page.json.items as { type: string; requestId: string; outcome: string }[]
      return items.find((e) => e.requestId === requestId)
    })
    assert.equal(event.type, 'auth.forbidden')
    assert.equal(event.outcome, 'insufficient_permission')
  })
})
