import assert from 'node:assert/strict'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { after, before, describe, it } from 'node:test'
import { createTestIssuer } from '../helpers/jwt.ts'
import { tempDir } from '../helpers/temp-dir.ts'
import { bearer, eventually, type Gate, startGate, tenantHeader } from './harness.ts'

/**
 * A permissions claim is read in exactly one type per issuer: an array issuer's token with a
 * string claim, or a space-delimited issuer's token with an array, is a 401 — never read
 * leniently (a string `"tokens:read"` must not grant `tokens:read` on an array issuer).
 */
describe('permissions claim types are strict per issuer (#11 item 12)', () => {
  let gate: Gate
  const dir = tempDir('tg-perm-format-')
  const issuers = {
    array: createTestIssuer({ issuer: 'https://array.test', tenantClaim: 'tenant_id' }),
    scope: createTestIssuer({
      issuer: 'https://scope.test',
      tenantClaim: 'tenant_id',
      permissionsClaim: 'scope',
    }),
    forcedArray: createTestIssuer({
      issuer: 'https://scp-array.test',
      tenantClaim: 'tenant_id',
      permissionsClaim: 'scp',
    }),
  }

  before(async () => {
    gate = await startGate()
    const add = async (name: keyof typeof issuers, ...extra: string[]) => {
      const issuer = issuers[name]
      const pem = join(dir, `${name}.pem`)
      writeFileSync(pem, issuer.publicPem ?? '')
      const added = await gate.cli(
        'issuer',
        'add',
        '--issuer',
        issuer.config.issuer,
        '--audience',
        'tokengate',
        '--pem-file',
        pem,
        '--algorithm',
        issuer.alg,
        ...extra,
      )
      assert.equal(added.code, 0, added.stderr)
    }
    await add('array')
    await add('scope', '--permissions-claim', 'scope')
    await add('forcedArray', '--permissions-claim', 'scp', '--permissions-format', 'array')
  })
  after(() => gate.close())

  async function list(name: keyof typeof issuers, claims: Record<string, unknown>) {
    const token = await issuers[name].sign({ tenant_id: 'demo', ...claims })
    let response = await gate.request('/api/v1/tokens', [...bearer(token), ...tenantHeader('demo')])
    await eventually(async () => {
      response = await gate.request('/api/v1/tokens', [...bearer(token), ...tenantHeader('demo')])
      return response.json.detail !== 'the token issuer is not trusted'
    }, 10_000)
    return response
  }

  it('an array issuer refuses a string claim with 401 invalid_token', async () => {
    const response = await list('array', { permissions: 'tokens:read' })
    assert.equal(response.status, 401, response.text)
    assert.equal(response.json.code, 'invalid_token')
  })

  it('an array issuer accepts an array claim', async () => {
    const response = await list('array', { permissions: ['tokens:read'] })
    assert.equal(response.status, 200, response.text)
  })

  it('a scope issuer (space-delimited by default) refuses an array claim', async () => {
    const response = await list('scope', { scope: ['tokens:read'] })
    assert.equal(response.status, 401, response.text)
    assert.equal(response.json.code, 'invalid_token')
  })

  it('a scope issuer accepts a space-delimited string', async () => {
    const response = await list('scope', { scope: 'openid tokens:read' })
    assert.equal(response.status, 200, response.text)
  })

  it('--permissions-format array makes an scp issuer take arrays and refuse strings', async () => {
    assert.equal((await list('forcedArray', { scp: ['tokens:read'] })).status, 200)
    const refused = await list('forcedArray', { scp: 'tokens:read' })
    assert.equal(refused.status, 401, refused.text)
  })
})
