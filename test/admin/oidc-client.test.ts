/**
 * The console's relying-party side of OpenID Connect (src/admin/oidc-client.ts) against a
 * provider the test scripts on 127.0.0.1: what the discovery document must say before anything
 * is sent to it, the authorization URL, and the code exchange as a confidential and as a public
 * client. The real provider (oidc-provider) drives the whole flow in console-oidc.browser.test.ts.
 */
import assert from 'node:assert/strict'
import { Buffer } from 'node:buffer'
import { createHash } from 'node:crypto'
import { createServer, type IncomingMessage, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { after, before, describe, test } from 'node:test'
import {
  createOidcClient,
  decodePendingSignIn,
  encodePendingSignIn,
  newPendingSignIn,
} from '../../src/admin/oidc-client.ts'

describe('the console as an OpenID Connect relying party', () => {
  let server: Server
  let issuer: string
  /** What the scripted provider's discovery document says (merged over a valid one). */
  let discovery: Record<string, unknown> = {}
  let tokenAnswer: { status: number; body: Record<string, unknown> } = { status: 200, body: {} }
  const tokenRequests: { headers: IncomingMessage['headers']; body: URLSearchParams }[] = []

  before(async () => {
    server = createServer((req, res) => {
      let text = ''
      req.on('data', (chunk) => {
        text += chunk
      })
      req.on('end', () => {
        if (req.url === '/.well-known/openid-configuration') {
          res.writeHead(200, { 'content-type': 'application/json' })
          return res.end(
            JSON.stringify({
              issuer,
              authorization_endpoint: `${issuer}/authorize`,
              token_endpoint: `${issuer}/token`,
              code_challenge_methods_supported: ['S256'],
              ...discovery,
            }),
          )
        }
        if (req.url === '/token') {
          tokenRequests.push({ headers: req.headers, body: new URLSearchParams(text) })
          res.writeHead(tokenAnswer.status, { 'content-type': 'application/json' })
          return res.end(JSON.stringify(tokenAnswer.body))
        }
        res.writeHead(404).end()
      })
    })
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    issuer = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  })
  after(() => new Promise((resolve) => server.close(resolve)))

  /** A fresh client (no cached discovery) with the given settings. */
  const client = (extra: { clientSecret?: string; scopes?: string[] } = {}) =>
    createOidcClient(
      {
        issuer,
        audience: 'tokengate-admin',
        roleClaim: 'tokengate_admin_roles',
        clientId: 'console id',
        scopes: extra.scopes ?? ['openid'],
        ...(extra.clientSecret ? { clientSecret: extra.clientSecret } : {}),
      },
      { timeoutMs: 2000, now: () => Date.now() },
    )

  test('the authorization URL carries the state, nonce and S256 challenge of the pending sign-in', async () => {
    discovery = {}
    const pending = newPendingSignIn(Date.now())
    const url = new URL(
      await client({ scopes: ['openid', 'profile'] }).authorizationUrl(
        'https://console.example/admin/sso/callback',
        pending,
      ),
    )
    assert.equal(`${url.origin}${url.pathname}`, `${issuer}/authorize`)
    assert.deepEqual(Object.fromEntries(url.searchParams), {
      response_type: 'code',
      client_id: 'console id',
      redirect_uri: 'https://console.example/admin/sso/callback',
      scope: 'openid profile',
      state: pending.state,
      nonce: pending.nonce,
      code_challenge: createHash('sha256').update(pending.verifier).digest('base64url'),
      code_challenge_method: 'S256',
    })
    assert.ok(!url.href.includes(pending.verifier), 'the verifier never leaves the browser cookie')
  })

  test('a discovery document is refused before anything is sent when it names another issuer, offers no S256 or plain-http endpoints', async () => {
    const pending = newPendingSignIn(Date.now())
    for (const [bad, message] of [
      [{ issuer: `${issuer}/other` }, /names another issuer/],
      [{ code_challenge_methods_supported: ['plain'] }, /PKCE with S256/],
      [{ token_endpoint: 'http://idp.example.com/token' }, /https/],
      [{ authorization_endpoint: undefined }, /no authorization_endpoint/],
    ] as const) {
      discovery = bad
      await assert.rejects(client().authorizationUrl('https://c.example/cb', pending), message)
    }
    discovery = {}
  })

  test('a confidential client sends the verifier and HTTP Basic with form-encoded parts', async () => {
    discovery = {}
    tokenAnswer = { status: 200, body: { id_token: 'h.p.s', access_token: 'x' } }
    tokenRequests.length = 0
    const exchanged = await client({ clientSecret: 'se:cret&=' }).exchangeCode(
      'the-code',
      'https://c.example/cb',
      'the-verifier',
    )
    assert.deepEqual(exchanged, { ok: true, idToken: 'h.p.s' })
    const [sent] = tokenRequests
    assert.ok(sent)
    assert.equal(
      sent.headers.authorization,
      `Basic ${Buffer.from('console%20id:se%3Acret%26%3D').toString('base64')}`,
    )
    assert.deepEqual(Object.fromEntries(sent.body), {
      grant_type: 'authorization_code',
      code: 'the-code',
      redirect_uri: 'https://c.example/cb',
      code_verifier: 'the-verifier',
    })
  })

  test('a public client names itself in the body and sends no secret; a refusal is a value', async () => {
    tokenAnswer = {
      status: 400,
      body: { error: 'invalid_grant', error_description: 'grant request is invalid' },
    }
    tokenRequests.length = 0
    const exchanged = await client().exchangeCode('used-code', 'https://c.example/cb', 'v')
    assert.deepEqual(exchanged, { ok: false, status: 400, error: 'invalid_grant' })
    const [sent] = tokenRequests
    assert.equal(sent?.headers.authorization, undefined)
    assert.equal(sent?.body.get('client_id'), 'console id')
  })

  test('the end-session URL exists only when the provider offers one', async () => {
    discovery = {}
    assert.equal(await client().endSessionUrl('https://c.example/admin/sign-in'), undefined)
    discovery = { end_session_endpoint: `${issuer}/logout` }
    const url = new URL((await client().endSessionUrl('https://c.example/admin/sign-in')) as string)
    assert.equal(url.searchParams.get('client_id'), 'console id')
    assert.equal(
      url.searchParams.get('post_logout_redirect_uri'),
      'https://c.example/admin/sign-in',
    )
    discovery = {}
  })

  test('the pending sign-in survives its cookie, and a tampered cookie is no sign-in', () => {
    const pending = newPendingSignIn(1_000)
    assert.deepEqual(decodePendingSignIn(encodePendingSignIn(pending)), pending)
    assert.equal(pending.expiresAt, 601_000)
    for (const bad of ['', 'a.b.c', 'a.b.c.d.e', 'a.b.c.soon', '..x.1']) {
      assert.equal(decodePendingSignIn(bad), undefined, bad)
    }
  })
})
