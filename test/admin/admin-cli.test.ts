import assert from 'node:assert/strict'
import { after, describe, test } from 'node:test'
import { hashAdminToken } from '../../src/auth/admin-tokens.ts'
import { cli, cliJson, tempDataDir, withDataStore } from '../cli/helpers.ts'

describe('tokengate admin token', () => {
  const data = tempDataDir()
  after(() => data.cleanup())
  const run = (...args: string[]) => cli(args, { dataDir: data.dir, env: { USER: 'root' } })

  test('issue prints the token once, labelled; only its hash is stored', async () => {
    const result = await run('admin', 'token', 'issue', '--name', 'alice', '--role', 'operator')
    assert.equal(result.code, 0, result.stderr)
    const token = /\b(tga_[0-9A-Za-z]{40})\b/.exec(result.stdout)?.[1] as string
    assert.ok(token)
    assert.match(result.stdout, /shown once/)
    assert.match(result.stdout, /for alice \(operator\)/)
    await withDataStore(data.dir, async (store) => {
      const [stored] = await store.admin.listAdminTokens()
      assert.ok(stored)
      assert.equal(stored.tokenHash, hashAdminToken(token))
      assert.ok(!JSON.stringify(stored).includes(token))
      assert.equal(stored.expiresAt - stored.createdAt, 30 * 86_400_000)
    })
  })

  test('list and revoke, human and JSON; revoking twice is harmless; unknown is exit 1', async () => {
    const issued = await cliJson<{ id: string; status: string }>(
      ['admin', 'token', 'issue', '--name', 'ro', '--role', 'read-only', '--expires-in', '2h'],
      { dataDir: data.dir },
    )
    assert.equal(issued.status, 'active')
    const listed = await run('admin', 'token', 'list')
    assert.match(
      listed.stdout,
      new RegExp(`${issued.id}\\s+tga_…\\w{4}\\s+ro\\s+read-only\\s+active`),
    )
    const revoked = await run('admin', 'token', 'revoke', issued.id)
    assert.equal(revoked.stdout, `Revoked admin token ${issued.id}.\n`)
    const again = await cliJson<{ changed: boolean; status: string }>(
      ['admin', 'token', 'revoke', issued.id],
      { dataDir: data.dir },
    )
    assert.deepEqual([again.changed, again.status], [false, 'revoked'])
    assert.equal(
      (await run('admin', 'token', 'revoke', issued.id)).stdout,
      `${issued.id} was already revoked.\n`,
    )
    const json = await cliJson<{ tokens: { id: string; status: string }[] }>(
      ['admin', 'token', 'list'],
      {
        dataDir: data.dir,
      },
    )
    assert.equal(json.tokens.find((t) => t.id === issued.id)?.status, 'revoked')
    const unknown = await run('admin', 'token', 'revoke', 'adm_nope')
    assert.equal(unknown.code, 1)
    assert.match(unknown.stderr, /no admin token adm_nope/)
    await withDataStore(data.dir, async (store) => {
      const page = await store.admin.searchAudit({ type: 'admin_token.revoked' }, { limit: 10 })
      assert.equal(page.items.length, 1)
      assert.equal(page.items[0]?.actor, 'cli:root')
    })
  })

  test('usage errors: role, name, lifetime', async () => {
    for (const [args, message] of [
      [['--name', 'a', '--role', 'admin'], /--role: 'admin' is not a role/],
      [['--name', 'a b', '--role', 'operator'], /--name: expected/],
      [['--name', 'a', '--role', 'operator', '--expires-in', '400d'], /up to 366d/],
      [['--name', 'a', '--role', 'operator', '--expires-in', 'soon'], /not a duration/],
      [['--role', 'operator'], /--name/],
    ] as const) {
      const result = await run('admin', 'token', 'issue', ...args)
      assert.equal(result.code, 2, args.join(' '))
      assert.match(result.stderr, message)
    }
    const help = await run('admin', '--help')
    assert.match(help.stdout, /admin token issue/)
    const missing = await run('admin', 'token')
    assert.equal(missing.code, 2)
  })
})
