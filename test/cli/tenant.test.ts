import assert from 'node:assert/strict'
import { after, describe, it } from 'node:test'
import { cli, cliJson, tempDataDir, withDataStore } from './helpers.ts'

describe('tokengate tenant', () => {
  const data = tempDataDir()
  const dataDir = data.dir
  after(() => data.cleanup())

  it('tenant create makes an enabled tenant and says so', async () => {
    const result = await cli(['tenant', 'create', 'acme', '--name', 'Acme Corp'], { dataDir })
    assert.equal(result.code, 0, result.stderr)
    assert.equal(result.stdout, 'Created tenant acme (Acme Corp).\n')
    const tenant = await withDataStore(dataDir, (store) => store.findTenant('acme'))
    assert.equal(tenant?.name, 'Acme Corp')
    assert.equal(tenant?.enabled, true)
  })

  it('tenant create --json prints the tenant; the name defaults to the id', async () => {
    const tenant = await cliJson(['tenant', 'create', 'Beta.Team_2-x'], { dataDir })
    assert.equal(tenant.id, 'Beta.Team_2-x')
    assert.equal(tenant.name, 'Beta.Team_2-x')
    assert.equal(tenant.enabled, true)
    assert.match(String(tenant.createdAt), /^\d{4}-\d\d-\d\dT/)
  })

  it('creating an existing tenant exits 1', async () => {
    const result = await cli(['tenant', 'create', 'acme'], { dataDir })
    assert.equal(result.code, 1)
    assert.match(result.stderr, /tenant acme already exists/)
  })

  it('an invalid tenant id exits 2 and says which characters are allowed', async () => {
    for (const id of ['has space', 'x'.repeat(65), 'ümlaut', 'a/b']) {
      const result = await cli(['tenant', 'create', id], { dataDir })
      assert.equal(result.code, 2, id)
      assert.match(
        result.stderr,
        /not a valid tenant id \(expected 1-64 characters of A-Z a-z 0-9 \. _ -, not only dots and dashes\)/,
      )
    }
  })

  it('tenant create without an ID exits 2', async () => {
    const result = await cli(['tenant', 'create'], { dataDir })
    assert.equal(result.code, 2)
    assert.match(result.stderr, /missing argument ID/)
  })

  it('tenant list shows a table, and --json every tenant', async () => {
    const table = await cli(['tenant', 'list'], { dataDir })
    assert.equal(table.code, 0)
    assert.match(table.stdout, /^ID\s+NAME\s+STATUS\s+RATE LIMIT\s+CREATED\n/)
    assert.match(table.stdout, /\nacme\s+Acme Corp\s+enabled\s+default\s+\d{4}-/)
    const { tenants } = await cliJson<{ tenants: { id: string }[] }>(['tenant', 'list'], {
      dataDir,
    })
    assert.deepEqual(tenants.map((t) => t.id).sort(), ['Beta.Team_2-x', 'acme'])
  })

  it('tenant disable and enable change the state; repeating is harmless', async () => {
    const disabled = await cliJson(['tenant', 'disable', 'acme'], { dataDir })
    assert.equal(disabled.enabled, false)
    assert.equal(disabled.changed, true)
    const again = await cli(['tenant', 'disable', 'acme'], { dataDir })
    assert.equal(again.code, 0)
    assert.match(again.stdout, /already disabled/)
    assert.equal((await withDataStore(dataDir, (s) => s.findTenant('acme')))?.enabled, false)
    const enabled = await cli(['tenant', 'enable', 'acme'], { dataDir })
    assert.equal(enabled.code, 0)
    assert.equal(enabled.stdout, 'Tenant acme is now enabled.\n')
  })

  it('disabling an unknown tenant exits 1', async () => {
    const result = await cli(['tenant', 'disable', 'nobody'], { dataDir })
    assert.equal(result.code, 1)
    assert.match(result.stderr, /no tenant nobody/)
  })

  it('each change is an audit event by the cli actor', async () => {
    const events = await withDataStore(dataDir, (store) => store.listAudit('acme', { limit: 50 }))
    const types = events.items.map((e) => e.type).reverse()
    assert.deepEqual(types, ['tenant.created', 'tenant.disabled', 'tenant.enabled'])
    for (const event of events.items) {
      assert.match(String(event.actor), /^cli:./)
      assert.equal(event.outcome, 'ok')
    }
  })
})
