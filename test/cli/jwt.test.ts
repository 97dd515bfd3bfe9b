import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { after, before, describe, it } from 'node:test'
import { importJWK, jwtVerify } from 'jose'
import { DEV_AUDIENCE, DEV_ISSUER } from '../../src/dev/issuer.ts'
import { startTestServer, type TestServer } from '../helpers/server.ts'
import { cli, cliJson, tempDataDir } from './helpers.ts'

describe('tokengate jwt mint', () => {
  const data = tempDataDir()
  const dataDir = data.dir
  after(() => data.cleanup())
  before(async () => {
    assert.equal((await cli(['tenant', 'create', 'demo'], { dataDir })).code, 0)
  })

  it('is refused outside dev mode with a clear message', async () => {
    const result = await cli(['jwt', 'mint', '--tenant', 'demo', '--subject', 'alice'], { dataDir })
    assert.equal(result.code, 1)
    assert.equal(result.stdout, '')
    assert.match(result.stderr, /jwt mint works in dev mode only .* add --dev/)
  })

  it('with --dev prints only the token, signed by the dev issuer key', async () => {
    const result = await cli(
      [
        'jwt',
        'mint',
        '--dev',
        '--tenant',
        'demo',
        '--subject',
        'alice',
        '--permission',
        'tokens:read',
        '--ttl',
        '1h',
      ],
      { dataDir },
    )
    assert.equal(result.code, 0, result.stderr)
    const token = result.stdout.trim()
    assert.equal(result.stdout, `${token}\n`)
    const keyFile = JSON.parse(readFileSync(join(dataDir, 'dev-issuer-key.json'), 'utf8'))
    const { payload, protectedHeader } = await jwtVerify(
      token,
      await importJWK(keyFile.publicJwk, 'ES256'),
      {
        issuer: DEV_ISSUER,
        audience: DEV_AUDIENCE,
      },
    )
    assert.equal(protectedHeader.alg, 'ES256')
    assert.equal(payload.sub, 'alice')
    assert.equal(payload.tenant_id, 'demo')
    assert.deepEqual(payload.permissions, ['tokens:read'])
    assert.equal((payload.exp ?? 0) - (payload.iat ?? 0), 3600)
    assert.match(result.stderr, /X-Tenant-Id: demo/)
  })

  it('dev mode from the environment works too, and --json describes the token', async () => {
    const minted = await cliJson(['jwt', 'mint', '--tenant', 'demo', '--subject', 'bob'], {
      dataDir,
      env: { TOKENGATE_DEV: 'true' },
      now: () => Date.UTC(2026, 0, 1),
    })
    assert.equal(minted.issuer, DEV_ISSUER)
    assert.equal(minted.tenantId, 'demo')
    assert.deepEqual(minted.permissions, [])
    assert.equal(minted.expiresAt, new Date(Date.UTC(2026, 0, 1) + 15 * 60_000).toISOString())
    assert.equal(String(minted.token).split('.').length, 3)
  })

  it('a bad or too long --ttl exits 2', async () => {
    const bad = await cli(
      ['jwt', 'mint', '--dev', '--tenant', 'demo', '--subject', 'a', '--ttl', 'soon'],
      { dataDir },
    )
    assert.equal(bad.code, 2)
    assert.match(bad.stderr, /--ttl: 'soon' is not a duration/)
    const long = await cli(
      ['jwt', 'mint', '--dev', '--tenant', 'demo', '--subject', 'a', '--ttl', '2d'],
      { dataDir },
    )
    assert.equal(long.code, 2)
    assert.match(
      long.stderr,
      /longer than the maximum JWT lifetime .*\(1d, auth.maxJwtLifetimeSec\)/,
    )
  })

  it('warns on stderr when the tenant does not exist, but still mints', async () => {
    const result = await cli(['jwt', 'mint', '--dev', '--tenant', 'ghost', '--subject', 'a'], {
      dataDir,
    })
    assert.equal(result.code, 0)
    assert.match(result.stderr, /warning: no tenant ghost/)
    assert.equal(result.stdout.trim().split('.').length, 3)
  })
})

describe('tokengate jwt revoke on a running server (SQLite)', () => {
  let server: TestServer
  before(async () => {
    server = await startTestServer({ rateLimit: { enabled: false } })
    assert.equal((await server.cli('tenant', 'create', 'r34')).code, 0)
  })
  after(() => server?.close())

  const mint = async (subject: string) => {
    const minted = await server.cli('jwt', 'mint', '--dev', '--tenant', 'r34', '--subject', subject)
    assert.equal(minted.code, 0, minted.stderr)
    return minted.stdout.trim()
  }
  const me = (token: string) =>
    server.request('/api/v1/me', [`Authorization`, `Bearer ${token}`, 'X-Tenant-Id', 'r34'])

  it('a cached JWT is refused within 1 s of jwt revoke --sub; a token issued after passes', async (t) => {
    const victim = await mint('alice')
    const bystander = await mint('bob')
    assert.equal((await me(victim)).status, 200)
    assert.equal((await me(victim)).status, 200, 'cached')
    // The rule refuses tokens issued (iat, whole seconds) before now: the next second's pass.
    await new Promise((r) => setTimeout(r, 1100))
    const revoked = await server.cli('jwt', 'revoke', '--issuer', DEV_ISSUER, '--sub', 'alice')
    assert.equal(revoked.code, 0, revoked.stderr)
    const since = performance.now()
    assert.match(revoked.stdout, /^Revoked sub alice of .* issued before .*: rule jrv_\S+\.\n$/)
    assert.match(revoked.stderr, /the rule expires /)
    let status = 200
    while (status !== 401 && performance.now() - since < 3000) {
      status = (await me(victim)).status
      if (status !== 401) await new Promise((r) => setTimeout(r, 10))
    }
    const elapsed = performance.now() - since
    t.diagnostic(`SQLite: CLI jwt revoke --sub → 401 after ${elapsed.toFixed(1)} ms`)
    assert.equal(status, 401)
    assert.ok(elapsed < 1000, `${elapsed} ms`)
    const refused = await me(victim)
    assert.equal(refused.json.code, 'invalid_token')
    assert.equal((await me(bystander)).status, 200)
    await new Promise((r) => setTimeout(r, 1000 - (Date.now() % 1000) + 20))
    assert.equal((await me(await mint('alice'))).status, 200, 'issued after the rule')

    const listed = await server.cli('jwt', 'revocations', 'list', '--json')
    const [rule] = (JSON.parse(listed.stdout) as { revocations: Record<string, unknown>[] })
      .revocations
    assert.equal(rule?.kind, 'sub')
    assert.equal(rule?.value, 'alice')
    assert.equal(rule?.issuer, DEV_ISSUER)
    assert.match(String(rule?.createdBy), /^cli:/)
    // Expires when the longest-lived token it matches does: its time + max lifetime + skew.
    assert.equal(
      Date.parse(String(rule?.expiresAt)) - Date.parse(String(rule?.issuedBefore)),
      (86_400 + 30) * 1000,
    )
    const removed = await server.cli('jwt', 'revocations', 'remove', String(rule?.id))
    assert.equal(removed.code, 0, removed.stderr)
    const back = performance.now()
    while ((await me(victim)).status !== 200) {
      assert.ok(performance.now() - back < 3000, 'the token passes again once the rule is removed')
      await new Promise((r) => setTimeout(r, 20))
    }
  })

  it('refuses what is not a rule: two kinds, --before with --jti, an unknown issuer, a later time', async () => {
    const two = await server.cli(
      'jwt',
      'revoke',
      '--issuer',
      DEV_ISSUER,
      '--sub',
      'a',
      '--sid',
      'b',
    )
    assert.equal(two.code, 2)
    assert.match(two.stderr, /exactly one of --jti, --sid, --sub or --tenant/)
    const before = await server.cli(
      'jwt',
      'revoke',
      '--issuer',
      DEV_ISSUER,
      '--jti',
      'j',
      '--before',
      '1h',
    )
    assert.equal(before.code, 2)
    assert.match(before.stderr, /--before goes with --sub or --tenant/)
    const unknown = await server.cli(
      'jwt',
      'revoke',
      '--issuer',
      'https://nobody.test',
      '--jti',
      'j',
    )
    assert.equal(unknown.code, 1)
    assert.match(unknown.stderr, /no issuer https:\/\/nobody.test/)
    const later = await server.cli(
      'jwt',
      'revoke',
      '--issuer',
      DEV_ISSUER,
      '--tenant',
      'r34',
      '--before',
      '2999-01-01T00:00:00Z',
    )
    assert.equal(later.code, 1)
    assert.match(later.stderr, /no later than now/)
    const expired = await server.cli(
      'jwt',
      'revoke',
      '--issuer',
      DEV_ISSUER,
      '--sub',
      'a',
      '--before',
      '2d',
    )
    assert.equal(expired.code, 1)
    assert.match(expired.stderr, /every token issued before it has expired already/)
    const none = await server.cli('jwt', 'revocations', 'remove', 'jrv_nope')
    assert.equal(none.code, 1)
    assert.match(none.stderr, /no JWT revocation rule jrv_nope/)
  })
})
