import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
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
})
