import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { after, before, describe, it } from 'node:test'
import { importJWK, jwtVerify } from 'jose'
import { DEV_AUDIENCE, DEV_ISSUER } from '../../src/dev/issuer.ts'
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
