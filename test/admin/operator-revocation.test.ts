/**
 * Operator JWTs follow the JWT revocation rules (#34) on the admin listener: a bearer operator
 * JWT and a console session opened with one are refused within a second of
 * `tokengate jwt revoke --issuer <operator issuer> --sub|--sid ...`, over the real admin
 * HTTPS listener, with the refusal audited naming the rule. A token of the same subject
 * issued after a `sub` rule still passes. The operator issuer is a test issuer whose JWKS a
 * local key server publishes (as `admin.oidc.jwksUrl` names it).
 */
import assert from 'node:assert/strict'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { DatabaseSync } from 'node:sqlite'
import { after, before, describe, test } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { createTestIssuer, type KeyServer, startKeyServer } from '../helpers/jwt.ts'
import { startTestServer, type TestServer } from '../helpers/server.ts'
import { tempDir } from '../helpers/temp-dir.ts'
import { adminRequest, bearer, postSignIn } from './admin-client.ts'

const ISSUER = 'https://sso.example'
const AUDIENCE = 'tokengate-admin'
/** The promise: a revoked operator is refused on the admin listener within this. */
const WITHIN_MS = 1000

interface AuditRow {
  type: string
  actor: string | null
  request_id: string | null
  details: string
}

function auditRows(server: TestServer): AuditRow[] {
  const db = new DatabaseSync(join(server.dataDir, 'tokengate.db'), { readOnly: true })
  try {
    return (
      db
        .prepare('SELECT type, actor, request_id, details FROM audit_events')
        .all() as unknown as AuditRow[]
    ).map((r) => ({ ...r }))
  } finally {
    db.close()
  }
}

/** Polls `refused` until it holds; the milliseconds it took, or undefined after `limitMs`. */
async function refusedWithin(refused: () => Promise<boolean>, limitMs: number) {
  const started = performance.now()
  while (performance.now() - started < limitMs * 3) {
    if (await refused()) return Math.round(performance.now() - started)
    await sleep(25)
  }
  return undefined
}

describe('operator JWTs and the JWT revocation rules on the admin listener', () => {
  const idp = createTestIssuer({ issuer: ISSUER, audience: AUDIENCE })
  let keys: KeyServer
  let server: TestServer
  let origin: string
  /** A config file naming the operator issuer, for the CLI (as the server's own would). */
  let configFile: string

  before(async () => {
    keys = await startKeyServer({ keys: [idp.publicJwk] })
    const oidc = { issuer: ISSUER, audience: AUDIENCE, jwksUrl: keys.url }
    server = await startTestServer({ admin: { enabled: true, port: 0, oidc } }).catch(
      async (error: unknown) => {
        await keys.close()
        throw error
      },
    )
    origin = new URL(server.running.adminUrl as string).origin
    configFile = join(tempDir('tg-operator-revocation-'), 'tokengate.json')
    writeFileSync(configFile, JSON.stringify({ admin: { oidc } }))
  })
  after(async () => {
    await server?.close()
    await keys?.close()
  })

  const operatorJwt = (claims: Record<string, unknown>) =>
    idp.sign({ tokengate_admin_roles: ['operator'], ...claims })
  const me = (jwt: string, requestId?: string) =>
    adminRequest(server, '/admin/api/v1/me', {
      headers: { ...bearer(jwt), ...(requestId ? { 'x-request-id': requestId } : {}) },
    })

  /** Signs in to the console by pasting `jwt`; the session cookie. */
  async function consoleSession(jwt: string): Promise<string> {
    const response = await postSignIn(server, jwt)
    assert.equal(response.status, 303)
    assert.equal(response.headers.location, '/admin/tenants')
    return String(response.headers['set-cookie']).split(';')[0] as string
  }
  const page = (cookie: string) =>
    adminRequest(server, '/admin/tenants', { headers: { cookie, accept: 'text/html' } })

  const revoke = async (...args: string[]) => {
    const result = await server.cli('jwt', 'revoke', '--config', configFile, ...args, '--json')
    assert.equal(result.code, 0, result.stderr)
    return JSON.parse(result.stdout) as { id: string }
  }

  test('jwt revoke --sub: the bearer JWT and the console session it opened are refused within 1 s; a later token passes', async () => {
    const jwt = await operatorJwt({ sub: 'dana@example.com' })
    assert.equal((await me(jwt)).status, 200)
    const cookie = await consoleSession(jwt)
    assert.equal((await page(cookie)).status, 200)

    const rule = await revoke('--issuer', ISSUER, '--sub', 'dana@example.com')
    const bearerMs = await refusedWithin(async () => (await me(jwt)).status === 401, WITHIN_MS)
    const sessionMs = await refusedWithin(
      async () => (await page(cookie)).status === 303,
      WITHIN_MS,
    )
    console.log(
      `operator sub revoked: bearer refused after ${bearerMs} ms, session after ${sessionMs} ms`,
    )
    assert.ok(bearerMs !== undefined && bearerMs < WITHIN_MS, `bearer: ${bearerMs} ms`)
    assert.ok(sessionMs !== undefined && sessionMs < WITHIN_MS, `session: ${sessionMs} ms`)

    // The refusal: the API's 401 under the admin realm, the generic words; the session ended.
    const refused = await me(jwt, 'revoked-operator-1')
    assert.equal(refused.status, 401)
    assert.equal(refused.json.code, 'invalid_token')
    assert.equal(refused.json.requestId, 'revoked-operator-1')
    assert.match(String(refused.headers['www-authenticate']), /realm="tokengate-admin"/)
    const ended = await page(cookie)
    assert.equal(ended.headers.location, '/admin/sign-in?ended=1')
    // Pasting the revoked JWT again opens no session.
    const again = await adminRequest(server, '/admin/sign-in', {
      method: 'POST',
      headers: { origin, 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({ credential: jwt }).toString(),
    })
    assert.equal(again.headers.location, '/admin/sign-in?failed=1')

    // Audited by the recorder with the request id and the rule (never the token).
    let row: AuditRow | undefined
    for (let i = 0; i < 100 && !row; i++) {
      row = auditRows(server).find((r) => r.request_id === 'revoked-operator-1')
      if (!row) await sleep(50)
    }
    assert.equal(row?.type, 'auth.failed')
    const details = JSON.parse(String(row?.details)) as Record<string, unknown>
    assert.equal(details.reason, 'revoked_by_rule')
    assert.equal(details.rule, rule.id)
    assert.match(String(row?.actor), /^jwt:iss=https:\/\/sso\.example;/)
    assert.ok(!JSON.stringify(row).includes(jwt))

    // The rule refuses tokens issued before it: one issued after it passes.
    await sleep(1100)
    const later = await operatorJwt({ sub: 'dana@example.com' })
    assert.equal((await me(later)).status, 200)
  })

  test('jwt revoke --sid: that session only, bearer and console; another sid of the subject passes', async () => {
    const stolen = await operatorJwt({ sub: 'erin@example.com', sid: 'sid-stolen' })
    const other = await operatorJwt({ sub: 'erin@example.com', sid: 'sid-other' })
    const cookie = await consoleSession(stolen)
    assert.equal((await page(cookie)).status, 200)
    assert.equal((await me(stolen)).status, 200)

    await revoke('--issuer', ISSUER, '--sid', 'sid-stolen')
    const sessionMs = await refusedWithin(
      async () => (await page(cookie)).status === 303,
      WITHIN_MS,
    )
    console.log(`operator sid revoked: session refused after ${sessionMs} ms`)
    assert.ok(sessionMs !== undefined && sessionMs < WITHIN_MS, `session: ${sessionMs} ms`)
    assert.equal((await me(stolen)).status, 401)
    assert.equal((await me(other)).status, 200)
  })

  test('a revocation for an issuer neither trusted nor the operator issuer is refused', async () => {
    const result = await server.cli(
      'jwt',
      'revoke',
      '--config',
      configFile,
      '--issuer',
      'https://unknown.example',
      '--sub',
      'x',
    )
    assert.equal(result.code, 1)
    assert.match(result.stderr, /no issuer/)
  })
})
