/**
 * Operator sign-in by redirect, for real: `oidc-provider` (OpenID Certified, nobody here wrote
 * it) on 127.0.0.1 with its development login and consent pages, tokengate configured with the
 * issuer URL, a client id and secret, and Chromium clicking through. A successful sign-in lands
 * on the console with the role from the ID token's role claim; a wrong state, a replayed code,
 * an ID token for another client (wrong audience) or of another sign-in (nonce), an account
 * without a role and an expired session are each refused with a page that says so; sign-out ends the session at the provider
 * too; pasting an admin token still works beside it.
 */
import assert from 'node:assert/strict'
import { Buffer } from 'node:buffer'
import { createHash, generateKeyPairSync, randomBytes } from 'node:crypto'
import { mkdirSync, writeFileSync } from 'node:fs'
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { join } from 'node:path'
import { after, before, describe, test } from 'node:test'
import { fileURLToPath } from 'node:url'
import Provider from 'oidc-provider'
import type { Browser, BrowserContext, Page } from 'playwright-core'
import { launchChromium } from '../helpers/browser.ts'
import { startTestServer, type TestServer } from '../helpers/server.ts'
import { skipReason } from '../helpers/services.ts'
import { tempDir } from '../helpers/temp-dir.ts'
import { adminRequest, issueAdminTokenCli } from './admin-client.ts'

const SHOTS =
  process.env.TOKENGATE_SCREENSHOTS === 'docs'
    ? fileURLToPath(new URL('../../docs/console/', import.meta.url))
    : tempDir('tg-console-oidc-')

const CLIENT_ID = 'tokengate-console'
const CLIENT_SECRET = 'console-secret-0123456789abcdef0123456789'
const OTHER_CLIENT = 'other-app'
/** A second console registered as a public client: PKCE alone, no secret. */
const PUBLIC_CLIENT = 'tokengate-console-public'
/** Accounts at the provider and the roles its `tokengate_admin_roles` claim carries. */
const ACCOUNTS: Record<string, string[]> = {
  alice: ['operator'],
  rory: ['read-only'],
  mallory: [],
  /** Revoked by `jwt revoke --sub` in one test (its own account: the rule refuses earlier ID tokens). */
  carol: ['operator'],
}

describe('operator sign-in by redirect against oidc-provider, in chromium', {
  skip: skipReason('chromium'),
}, () => {
  let idp: Server
  let issuer: string
  let server: TestServer
  let admin: string
  let publicServer: TestServer
  let publicAdmin: string
  let browser: Browser
  let handler: ((req: IncomingMessage, res: ServerResponse) => void) | undefined
  /** When set, the next token response's `id_token` is replaced by this one. */
  let swapIdToken: string | undefined
  /** When set, the next redirect to the console's callback is held (sent to /capture). */
  let holdCallback = false
  let heldCallback = ''

  before(async () => {
    // Requests wait for the provider, which needs the console's callback URL (known once
    // tokengate listens); tokengate reads discovery and keys only when first needed.
    idp = createServer((req, res) => {
      if (!handler) return void res.writeHead(503).end()
      if (req.url?.startsWith('/capture')) return void res.writeHead(200).end('captured')
      if (holdCallback) {
        const setHeader = res.setHeader.bind(res)
        res.setHeader = ((name: string, value: number | string | readonly string[]) => {
          if (
            name.toLowerCase() === 'location' &&
            String(value).startsWith(`${admin}/admin/sso/callback?`)
          ) {
            heldCallback = String(value)
            holdCallback = false
            return setHeader(name, `${issuer}/capture?held=1`)
          }
          return setHeader(name, value)
        }) as typeof res.setHeader
      }
      if (swapIdToken && req.method === 'POST' && req.url?.startsWith('/token')) {
        const replacement = swapIdToken
        swapIdToken = undefined
        const end = res.end.bind(res)
        res.end = ((chunk: unknown, ...rest: unknown[]) => {
          const body = JSON.parse(String(chunk)) as Record<string, unknown>
          if (typeof body.id_token === 'string') body.id_token = replacement
          const text = JSON.stringify(body)
          res.setHeader('content-length', Buffer.byteLength(text))
          return end(text, ...(rest as []))
        }) as typeof res.end
      }
      handler(req, res)
    })
    await new Promise<void>((resolve) => idp.listen(0, '127.0.0.1', resolve))
    issuer = `http://127.0.0.1:${(idp.address() as AddressInfo).port}`

    server = await startTestServer({
      admin: {
        enabled: true,
        port: 0,
        oidc: {
          issuer,
          audience: 'tokengate-admin',
          clientId: CLIENT_ID,
          clientSecret: CLIENT_SECRET,
        },
      },
    })
    admin = server.running.adminUrl as string
    // The same data directory: the same dev certificate, which the browser trusts.
    publicServer = await startTestServer({
      dataDir: server.dataDir,
      admin: {
        enabled: true,
        port: 0,
        oidc: { issuer, audience: 'tokengate-admin', clientId: PUBLIC_CLIENT },
      },
    })
    publicAdmin = publicServer.running.adminUrl as string

    const { privateKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' })
    const provider = new Provider(issuer, {
      jwks: { keys: [{ ...privateKey.export({ format: 'jwk' }), kid: 'idp-1', use: 'sig' }] },
      cookies: { keys: [randomBytes(32).toString('hex')] },
      clients: [
        {
          client_id: CLIENT_ID,
          client_secret: CLIENT_SECRET,
          redirect_uris: [`${admin}/admin/sso/callback`],
          post_logout_redirect_uris: [`${admin}/admin/sign-in`],
          grant_types: ['authorization_code'],
          response_types: ['code'],
          token_endpoint_auth_method: 'client_secret_basic',
        },
        {
          client_id: PUBLIC_CLIENT,
          redirect_uris: [`${publicAdmin}/admin/sso/callback`],
          grant_types: ['authorization_code'],
          response_types: ['code'],
          token_endpoint_auth_method: 'none',
        },
        {
          client_id: OTHER_CLIENT,
          redirect_uris: [`${issuer}/capture`],
          grant_types: ['authorization_code'],
          response_types: ['code'],
          token_endpoint_auth_method: 'none',
        },
      ],
      clientDefaults: { id_token_signed_response_alg: 'ES256' },
      claims: { openid: ['sub', 'tokengate_admin_roles'] },
      conformIdTokenClaims: false,
      findAccount: (_ctx: unknown, id: string) =>
        id in ACCOUNTS
          ? {
              accountId: id,
              claims: () => ({ sub: id, tokengate_admin_roles: ACCOUNTS[id] }),
            }
          : undefined,
      features: {
        devInteractions: { enabled: true },
        rpInitiatedLogout: { enabled: true },
      },
      pkce: { required: () => true },
    })
    handler = provider.callback()
    browser = await launchChromium(server.ca)
    mkdirSync(SHOTS, { recursive: true })
  })

  after(async () => {
    await browser?.close()
    await server?.close()
    await publicServer?.close()
    idp?.closeAllConnections()
    await new Promise((resolve) => idp?.close(resolve))
  })

  /** Logs in at the provider's development pages (and consents) when they are shown. */
  async function atProvider(page: Page, login: string): Promise<void> {
    for (let step = 0; step < 3; step++) {
      // Past the authorization endpoint: on an interaction page, or sent on elsewhere.
      await page.waitForURL((url) => !(url.href.startsWith(issuer) && url.pathname === '/auth'), {
        waitUntil: 'commit',
      })
      if (!new URL(page.url()).pathname.startsWith('/interaction/')) return
      await page.waitForLoadState('domcontentloaded')
      const url = page.url()
      if (await page.locator('input[name="login"]').count()) {
        await page.locator('input[name="login"]').fill(login)
        await page.locator('input[name="password"]').fill('any password')
        await page.getByRole('button', { name: 'Sign-in' }).click()
      } else {
        await page.getByRole('button', { name: 'Continue' }).click()
      }
      await page.waitForURL((next) => next.href !== url, { waitUntil: 'commit' })
    }
  }

  async function signInByRedirect(
    context: BrowserContext,
    login: string,
    console = admin,
  ): Promise<Page> {
    const page = await context.newPage()
    await page.goto(`${console}/admin/sign-in`)
    await page.getByRole('link', { name: /^Sign in with 127\.0\.0\.1/ }).click()
    await atProvider(page, login)
    return page
  }

  /**
   * Runs a sign-in up to the provider's redirect back and stops it there: the callback URL
   * and the browser's pending sign-in cookie, for a test to replay or alter.
   */
  async function stopAtCallback(
    context: BrowserContext,
    login: string,
  ): Promise<{ page: Page; callback: string; pending: string }> {
    const page = await context.newPage()
    heldCallback = ''
    holdCallback = true
    await page.goto(`${admin}/admin/sign-in`)
    await page.getByRole('link', { name: /^Sign in with / }).click()
    await atProvider(page, login)
    await page.waitForURL(`${issuer}/capture?held=1`)
    const callback = heldCallback
    assert.ok(callback, 'the provider redirected back')
    const pending = (await context.cookies(admin)).find((c) => c.name === '__Host-tokengate-sso')
    assert.ok(pending, 'the pending sign-in cookie is set')
    return { page, callback, pending: pending.value }
  }

  const refusal = (page: Page) => page.getByTestId('sso-refused').textContent()

  test('an operator signs in through the provider and lands on the console with the operator role', async () => {
    const context = await browser.newContext({ viewport: { width: 1280, height: 800 } })
    try {
      const signIn = await context.newPage()
      await signIn.goto(`${admin}/admin/sign-in`)
      await signIn.screenshot({ path: join(SHOTS, 'sign-in-sso-1280px.png'), fullPage: true })
      await signIn.close()
      const page = await signInByRedirect(context, 'alice')
      await page.waitForURL(`${admin}/admin/tenants`)
      assert.equal(await page.getByTestId('operator').textContent(), 'oidc:alice')
      assert.equal(await page.locator('.role').textContent(), 'operator')
      assert.equal(await page.getByRole('button', { name: 'Create tenant' }).count(), 1)
      const cookies = await context.cookies(admin)
      const session = cookies.find((c) => c.name === '__Host-tokengate-admin')
      assert.ok(session)
      assert.deepEqual([session.httpOnly, session.secure, session.sameSite], [true, true, 'Strict'])
      assert.equal(
        cookies.find((c) => c.name === '__Host-tokengate-sso'),
        undefined,
        'the pending sign-in is cleared',
      )
      // The server log names the operator, never a code or a token.
      assert.ok(!server.logs.some((line) => /"code"|id_token|eyJ/.test(line)))
    } finally {
      await context.close()
    }
  })

  test('a console registered as a public client (no secret) signs in with PKCE alone', async () => {
    const context = await browser.newContext()
    try {
      const page = await signInByRedirect(context, 'alice', publicAdmin)
      await page.waitForURL(`${publicAdmin}/admin/tenants`)
      assert.equal(await page.getByTestId('operator').textContent(), 'oidc:alice')
    } finally {
      await context.close()
    }
  })

  test('a read-only account gets the read-only role; an account without a role is refused with a page', async () => {
    const context = await browser.newContext()
    try {
      const page = await signInByRedirect(context, 'rory')
      await page.waitForURL(`${admin}/admin/tenants`)
      assert.equal(await page.locator('.role').textContent(), 'read-only')
      assert.equal(await page.getByRole('button', { name: 'Create tenant' }).count(), 0)
    } finally {
      await context.close()
    }
    const other = await browser.newContext()
    try {
      const page = await signInByRedirect(other, 'mallory')
      await page.getByTestId('sso-refused').waitFor()
      assert.match(String(await refusal(page)), /grants you no console role/)
      assert.equal(
        (await other.cookies(admin)).find((c) => c.name === '__Host-tokengate-admin'),
        undefined,
      )
    } finally {
      await other.close()
    }
  })

  test('a callback with another state is refused with a page, and nobody is signed in', async () => {
    const context = await browser.newContext()
    try {
      const { page, callback } = await stopAtCallback(context, 'alice')
      const url = new URL(callback)
      url.searchParams.set('state', randomBytes(32).toString('base64url'))
      const response = await page.goto(url.href)
      assert.equal(response?.status(), 400)
      assert.match(String(await refusal(page)), /state mismatch/)
      await page.goto(`${admin}/admin/tenants`)
      await page.waitForURL(/\/admin\/sign-in/)
      // The pending sign-in is gone: even the right state cannot be used after a refusal.
      const again = await page.goto(callback)
      assert.equal(again?.status(), 400)
      assert.match(String(await refusal(page)), /expired or was started in another browser/)
    } finally {
      await context.close()
    }
  })

  test('a replayed code is refused by the provider, and the page says so', async () => {
    const context = await browser.newContext()
    try {
      const { page, callback, pending } = await stopAtCallback(context, 'alice')
      await page.goto(callback)
      await page.waitForURL(`${admin}/admin/tenants`)
      // The same answer again, with the pending sign-in put back as it was: only the code's
      // single use stands in the way.
      await context.clearCookies()
      const { hostname } = new URL(admin)
      await context.addCookies([
        {
          name: '__Host-tokengate-sso',
          value: pending,
          domain: hostname,
          path: '/',
          secure: true,
          httpOnly: true,
          sameSite: 'Lax',
        },
      ])
      const response = await page.goto(callback)
      assert.equal(response?.status(), 400)
      assert.match(String(await refusal(page)), /refused the sign-in code/)
      assert.equal(
        (await context.cookies(admin)).find((c) => c.name === '__Host-tokengate-admin'),
        undefined,
      )
    } finally {
      await context.close()
    }
  })

  test('an ID token issued to another client (wrong audience) is refused', async () => {
    const context = await browser.newContext()
    try {
      // A real ID token of the same provider, signed with its key, for another client.
      const page = await context.newPage()
      const verifier = randomBytes(32).toString('base64url')
      const authorize = new URL(`${issuer}/auth`)
      for (const [k, v] of Object.entries({
        client_id: OTHER_CLIENT,
        response_type: 'code',
        redirect_uri: `${issuer}/capture`,
        scope: 'openid',
        nonce: 'n-other',
        state: 's-other',
        code_challenge: createHash('sha256').update(verifier).digest('base64url'),
        code_challenge_method: 'S256',
      })) {
        authorize.searchParams.set(k, v)
      }
      await page.goto(authorize.href)
      await atProvider(page, 'alice').catch(() => {})
      await page.waitForURL(/\/capture\?/)
      const code = new URL(page.url()).searchParams.get('code') as string
      const tokens = await fetch(`${issuer}/token`, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        body: new URLSearchParams({
          grant_type: 'authorization_code',
          code,
          client_id: OTHER_CLIENT,
          redirect_uri: `${issuer}/capture`,
          code_verifier: verifier,
        }),
      })
      const body = (await tokens.json()) as { id_token: string }
      assert.equal(tokens.status, 200, JSON.stringify(body))
      const payload = JSON.parse(
        Buffer.from(body.id_token.split('.')[1] as string, 'base64url').toString('utf8'),
      )
      assert.equal(payload.aud, OTHER_CLIENT)

      swapIdToken = body.id_token
      const signIn = await signInByRedirect(context, 'alice')
      await signIn.getByTestId('sso-refused').waitFor()
      assert.equal(swapIdToken, undefined, 'the token response was the one replaced')
      assert.match(String(await refusal(signIn)), /ID token was refused: the "aud" claim/)
      assert.equal(
        (await context.cookies(admin)).find((c) => c.name === '__Host-tokengate-admin'),
        undefined,
      )
    } finally {
      swapIdToken = undefined
      await context.close()
    }
  })

  test("an ID token of another sign-in (the console's own, but another nonce) is refused", async () => {
    const context = await browser.newContext()
    try {
      // A sign-in held at the callback, its code swapped by hand with its own verifier: a
      // genuine ID token for this console, bound to that sign-in's nonce.
      const { callback, pending } = await stopAtCallback(context, 'alice')
      const [, nonce, verifier] = pending.split('.') as [string, string, string]
      const basic = Buffer.from(`${CLIENT_ID}:${CLIENT_SECRET}`).toString('base64')
      const tokens = await fetch(`${issuer}/token`, {
        method: 'POST',
        headers: {
          authorization: `Basic ${basic}`,
          'content-type': 'application/x-www-form-urlencoded',
        },
        body: new URLSearchParams({
          grant_type: 'authorization_code',
          code: new URL(callback).searchParams.get('code') as string,
          redirect_uri: `${admin}/admin/sso/callback`,
          code_verifier: verifier,
        }),
      })
      const body = (await tokens.json()) as { id_token: string }
      assert.equal(tokens.status, 200, JSON.stringify(body))
      const claims = JSON.parse(
        Buffer.from(body.id_token.split('.')[1] as string, 'base64url').toString('utf8'),
      )
      assert.deepEqual([claims.aud, claims.nonce], [CLIENT_ID, nonce])
      swapIdToken = body.id_token
      const page = await signInByRedirect(context, 'alice')
      await page.getByTestId('sso-refused').waitFor()
      assert.equal(swapIdToken, undefined, 'the token response was the one replaced')
      assert.match(String(await refusal(page)), /belongs to another sign-in \(nonce mismatch\)/)
    } finally {
      swapIdToken = undefined
      await context.close()
    }
  })

  test('an expired session sends the operator to sign in again, saying the session ended', async () => {
    const context = await browser.newContext()
    try {
      const page = await signInByRedirect(context, 'alice')
      await page.waitForURL(`${admin}/admin/tenants`)
      server.clock.advance(28_800_000 + 1000)
      try {
        await page.goto(`${admin}/admin/pats`)
        await page.waitForURL(`${admin}/admin/sign-in?ended=1`)
        assert.match(
          String(await page.getByTestId('session-ended').textContent()),
          /^Your session has ended/,
        )
      } finally {
        server.clock.advance(-(28_800_000 + 1000))
      }
      await page.goto(`${admin}/admin/pats`)
      await page.waitForURL(`${admin}/admin/sign-in`)
    } finally {
      await context.close()
    }
  })

  test("sign-out ends the console session and the provider's session (end-session endpoint)", async () => {
    const context = await browser.newContext()
    try {
      const page = await signInByRedirect(context, 'alice')
      await page.waitForURL(`${admin}/admin/tenants`)
      await page.getByRole('button', { name: 'Sign out' }).click()
      await page.waitForURL((url) => url.href.startsWith(issuer))
      await page.getByRole('button', { name: 'Yes, sign me out' }).click()
      await page.waitForURL(`${admin}/admin/sign-in`)
      await page.goto(`${admin}/admin/pats`)
      await page.waitForURL(/\/admin\/sign-in/)
      // The provider asks for a login again: its session ended too.
      await page.getByRole('link', { name: /^Sign in with / }).click()
      await page.locator('input[name="login"]').waitFor()
    } finally {
      await context.close()
    }
  })

  test('jwt revoke --sub of an operator ends the console session signed in through the provider within a second', async () => {
    const context = await browser.newContext()
    try {
      const page = await signInByRedirect(context, 'carol')
      await page.waitForURL(`${admin}/admin/tenants`)
      // The CLI reads the operator issuer from the configuration, as the server's own file names it.
      const configFile = join(tempDir('tg-console-oidc-revoke-'), 'tokengate.json')
      writeFileSync(
        configFile,
        JSON.stringify({ admin: { oidc: { issuer, audience: 'tokengate-admin' } } }),
      )
      const revoked = await server.cli(
        'jwt',
        'revoke',
        '--config',
        configFile,
        '--issuer',
        issuer,
        '--sub',
        'carol',
      )
      assert.equal(revoked.code, 0, revoked.stderr)
      const session = (await context.cookies(admin)).find(
        (c) => c.name === '__Host-tokengate-admin',
      )
      assert.ok(session)
      const cookie = `${session.name}=${session.value}`
      const started = performance.now()
      let ms: number | undefined
      while (performance.now() - started < 3000) {
        const answer = await adminRequest(server, '/admin/pats', { headers: { cookie } })
        if (answer.status === 303) {
          ms = Math.round(performance.now() - started)
          break
        }
        await new Promise((resolve) => setTimeout(resolve, 25))
      }
      console.log(
        `operator sub revoked: console session (signed in by redirect) ended after ${ms} ms`,
      )
      assert.ok(ms !== undefined && ms < 1000, `${ms} ms`)
      await page.goto(`${admin}/admin/pats`)
      await page.waitForURL(`${admin}/admin/sign-in?ended=1`)
      assert.match(String(await page.getByTestId('session-ended').textContent()), /^Your session/)
    } finally {
      await context.close()
    }
  })

  test('pasting an admin token still signs in beside the redirect (automation)', async () => {
    const { token } = await issueAdminTokenCli(server, 'robot', 'operator')
    const context = await browser.newContext({ viewport: { width: 800, height: 800 } })
    try {
      const page = await context.newPage()
      await page.goto(`${admin}/admin/sign-in`)
      await page.screenshot({ path: join(SHOTS, 'sign-in-sso-800px.png'), fullPage: true })
      await page.getByLabel('Admin token or operator JWT').fill(token)
      await page.getByRole('button', { name: 'Sign in', exact: true }).click()
      await page.waitForURL(`${admin}/admin/tenants`)
      assert.equal(await page.getByTestId('operator').textContent(), 'admin:robot')
    } finally {
      await context.close()
    }
  })
})
