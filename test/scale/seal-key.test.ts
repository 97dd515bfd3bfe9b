import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, before, describe, it } from 'node:test'
import { run } from '../../src/cli/main.ts'
import { createTestIssuer, signCompact, type TestIssuer } from '../helpers/jwt.ts'
import { PACKAGE_PROJECT, runTokengate } from '../helpers/launch.ts'
import { type PostgresServer, skipReason, startPostgres } from '../helpers/services.ts'
import { bearer, type Instance, startInstance, waitFor } from './cluster.ts'

/**
 * Issue 32 item 5: an instance that cannot open the sealed issuer secrets (no `secretKeyFile`)
 * beside one that can, on one Postgres. It used to fail every issuer reload and keep its old
 * issuer set with one warning (a removed issuer still accepted, new ones never arriving,
 * `/readyz` ready), and every CLI command without the key failed in `migrate()`, `pat revoke`
 * included. Now the issuers it can read are reloaded, the one it cannot is refused with a
 * logged reason and named in `/readyz`, and the CLI opens no secret it does not need.
 */
describe('an instance without the seal key on a store with sealed issuer secrets', {
  skip: skipReason('postgres'),
}, () => {
  let pg: PostgresServer
  let databaseUrl: string
  let dir: string
  let keyFile: string
  let withKey: Instance
  let withoutKey: Instance
  const idps = new Map<string, TestIssuer>()
  let hsSecret: Buffer

  /** The operator CLI on this database, with or without the seal key. */
  async function tokengate(seal: boolean, ...args: string[]) {
    const env: Record<string, string> = { DATABASE_URL: databaseUrl }
    if (seal) env.TOKENGATE_SECRET_KEY_FILE = keyFile
    if (PACKAGE_PROJECT) return runTokengate(args, { env })
    let stdout = ''
    let stderr = ''
    const code = await run(args, {
      stdout: { write: (s: string) => (stdout += s) },
      stderr: { write: (s: string) => (stderr += s) },
      env,
    })
    return { code, stdout, stderr }
  }

  async function addJwksIssuer(name: string) {
    const iss = `https://${name}.seal.test`
    const idp = createTestIssuer({ issuer: iss, kid: `${name}-1` })
    idps.set(name, idp)
    const file = join(dir, `${name}.jwks.json`)
    writeFileSync(file, JSON.stringify({ keys: [idp.publicJwk] }))
    const added = await tokengate(
      true,
      ...['issuer', 'add', '--issuer', iss, '--audience', 'tokengate', '--jwks-file', file],
    )
    assert.equal(added.code, 0, added.stderr)
  }

  const jwtOf = (name: string) =>
    (idps.get(name) as TestIssuer).sign({ tenant_id: 'acme' }, { expiresInSec: 3600 })
  const hsToken = () => {
    const now = Math.floor(Date.now() / 1000)
    return signCompact(
      { alg: 'HS256', typ: 'JWT' },
      {
        iss: 'https://hs.seal.test',
        aud: 'tokengate',
        sub: 'svc',
        tenant_id: 'acme',
        iat: now,
        exp: now + 600,
      },
      hsSecret,
    )
  }
  const me = (instance: Instance, token: string, tenant?: string) =>
    instance.request('/api/v1/me', bearer(token, tenant))
  const readyz = async (instance: Instance) => {
    const r = await instance.request('/readyz')
    return {
      httpStatus: r.status,
      status: r.json.status,
      issuers: (r.json.checks as { issuers: Record<string, unknown> }).issuers,
    }
  }

  before(async () => {
    pg = await startPostgres()
    databaseUrl = await pg.createDatabase()
    dir = mkdtempSync(join(tmpdir(), 'tg-seal-'))
    keyFile = join(dir, 'seal.key')
    writeFileSync(keyFile, `${randomBytes(32).toString('base64')}\n`, { mode: 0o600 })
    assert.equal((await tokengate(true, 'migrate')).code, 0)
    assert.equal((await tokengate(true, 'tenant', 'create', 'acme')).code, 0)
    await addJwksIssuer('keep')
    await addJwksIssuer('gone')
    withKey = await startInstance(databaseUrl, { secretKeyFile: keyFile })
    withoutKey = await startInstance(databaseUrl)
    // An HS256 issuer arrives while both run: only the instance with the key can open it.
    hsSecret = randomBytes(32)
    const secretFile = join(dir, 'hs.secret')
    writeFileSync(secretFile, hsSecret)
    const added = await tokengate(
      true,
      ...['issuer', 'add', '--issuer', 'https://hs.seal.test', '--audience', 'tokengate'],
      ...['--secret-file', secretFile, '--algorithm', 'HS256'],
    )
    assert.equal(added.code, 0, added.stderr)
    await waitFor(
      async () => (await me(withKey, hsToken(), 'acme')).status === 200,
      'the instance with the key trusts the HS256 issuer',
    )
  })

  after(async () => {
    await withKey?.close()
    await withoutKey?.close()
    await pg?.stop()
    if (dir) rmSync(dir, { recursive: true, force: true })
  })

  it('refuses the issuer it cannot open (503 with Retry-After, logged reason) and names it in /readyz', async () => {
    await waitFor(
      async () => ((await readyz(withoutKey)).issuers.unreadable as unknown[])?.length === 1,
      '/readyz names the unreadable issuer',
      { timeoutMs: 1000 },
    )
    const ready = await readyz(withoutKey)
    assert.equal(ready.httpStatus, 200)
    assert.equal(ready.status, 'degraded')
    assert.deepEqual(ready.issuers.unreadable, ['https://hs.seal.test'])
    const r = await me(withoutKey, hsToken(), 'acme')
    assert.equal(r.status, 503, JSON.stringify(r.json))
    assert.equal(r.json.code, 'unavailable')
    assert.ok(Number(r.headers.get('retry-after')) >= 1)
    const warned = withoutKey.logs.filter((line) => line.includes('https://hs.seal.test'))
    assert.ok(
      warned.some((line) => line.includes('secretKeyFile')),
      `a log line names the issuer and the fix:\n${warned.join('\n')}`,
    )
    assert.ok(!warned.join('\n').includes(hsSecret.toString('base64url')), 'no secret logged')
    // The other issuers still load and verify.
    assert.equal((await me(withoutKey, await jwtOf('keep'), 'acme')).status, 200)
    assert.deepEqual((await readyz(withKey)).issuers.unreadable, [])
  })

  it('an issuer removed through the other instance is refused within 1 s', async () => {
    const token = await jwtOf('gone')
    assert.equal((await me(withoutKey, token, 'acme')).status, 200)
    const removed = await tokengate(true, 'issuer', 'remove', 'https://gone.seal.test')
    assert.equal(removed.code, 0, removed.stderr)
    const since = performance.now()
    await waitFor(
      async () => (await me(withKey, token, 'acme')).status === 401,
      'the instance with the key refuses it',
      { since, timeoutMs: 1000 },
    )
    await waitFor(
      async () => (await me(withoutKey, token, 'acme')).status === 401,
      'the instance without the key refuses it',
      { since, timeoutMs: 1000 },
    )
    assert.equal((await me(withoutKey, await jwtOf('keep'), 'acme')).status, 200)
  })

  it('an issuer added later arrives on the instance without the key within 1 s', async () => {
    await addJwksIssuer('late')
    const token = await jwtOf('late')
    await waitFor(
      async () => (await me(withoutKey, token, 'acme')).status === 200,
      'the new issuer on the instance without the key',
      { timeoutMs: 1000 },
    )
  })

  it('the CLI without the seal key lists, disables and revokes keys, and lists issuers', async () => {
    const issued = await tokengate(
      false,
      ...['pat', 'issue', '--tenant', 'acme', '--subject', 'leaked', '--json'],
    )
    assert.equal(issued.code, 0, issued.stderr)
    const { token, id } = JSON.parse(issued.stdout) as { token: string; id: string }
    assert.equal((await me(withoutKey, token)).status, 200)
    const listed = await tokengate(false, 'pat', 'list', '--tenant', 'acme')
    assert.equal(listed.code, 0, listed.stderr)
    assert.ok(listed.stdout.includes(id))
    const issuers = await tokengate(false, 'issuer', 'list')
    assert.equal(issuers.code, 0, issuers.stderr)
    assert.ok(issuers.stdout.includes('https://hs.seal.test'))
    assert.ok(!issuers.stdout.includes(hsSecret.toString('base64url')))
    assert.equal((await tokengate(false, 'pat', 'disable', id)).code, 0)
    assert.equal((await tokengate(false, 'pat', 'enable', id)).code, 0)
    const revoked = await tokengate(false, 'pat', 'revoke', id)
    assert.equal(revoked.code, 0, revoked.stderr)
    for (const instance of [withKey, withoutKey]) {
      await waitFor(
        async () => (await me(instance, token)).status === 401,
        'the revoked key refused',
        { timeoutMs: 1000 },
      )
    }
  })

  it('an instance started without the seal key starts, serves the others and names the issuer', async () => {
    const late = await startInstance(databaseUrl)
    try {
      const ready = await readyz(late)
      assert.deepEqual(ready.issuers.unreadable, ['https://hs.seal.test'])
      assert.equal((await me(late, await jwtOf('keep'), 'acme')).status, 200)
      assert.equal((await me(late, hsToken(), 'acme')).status, 503)
    } finally {
      await late.close()
    }
  })
})
