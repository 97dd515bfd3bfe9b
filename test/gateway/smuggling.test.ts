/**
 * Attacks on what the upstream believes: identity and forwarding headers smuggled by
 * spelling (#11 item 1), and paths whose meaning differs between the gateway's policy and
 * the upstream's router (#11 item 2). Every request is raw, against the running gateway, and
 * the real upstream records what reached it.
 */
import assert from 'node:assert/strict'
import { before, describe, test } from 'node:test'
import { TEST_TENANT } from '../helpers/jwt.ts'
import { OTHER_TENANT, startGateway, startUpstream, useProxiedGateway } from './harness.ts'
import { rawRequest } from './raw-request.ts'

const POLICY = `
default: authenticated
rules:
  - methods: [GET]
    path: /api/v1/projects/*
    permissions: [projects:read]
  - methods: '*'
    path: /api/v1/tenants/:tenant/*
    tenantParam: tenant
  - methods: '*'
    path: /api/v1/internal/*
    deny: true
`

/** The identity headers tokengate itself sends, exactly as it spells them. */
const OWN_IDENTITY = new Set([
  'x-auth-tenant',
  'x-auth-subject',
  'x-auth-token-type',
  'x-auth-token-id',
  'x-auth-permissions',
])

const SMUGGLED: ReadonlyArray<readonly [string, string]> = [
  ['X_Auth_Tenant', OTHER_TENANT],
  ['X_Auth_Subject', 'root'],
  ['X-Auth_Permissions', 'admin'],
  ['x_AUTH_token-type', 'jwt'],
  ['X-AUTH-TOKEN-ID', 'forged'],
  ['x-auth-extra', 'forged'],
  ['X-Auth-Token', 'forged'],
  ['X_Forwarded_For', '10.0.0.1'],
  ['X-Forwarded-For', '10.0.0.2'],
  ['X-Forwarded_Host', 'evil.example'],
  ['X-Forwarded-Proto', 'gopher'],
  ['X_Forwarded_Prefix', '/admin'],
  ['Forwarded', 'for=10.0.0.3;host=evil.example'],
  ['X_Real_IP', '10.0.0.4'],
  ['X-Real-Ip', '10.0.0.4'],
  ['True-Client-IP', '10.0.0.5'],
  ['X_Client_IP', '10.0.0.6'],
  ['CF-Connecting-IP', '10.0.0.7'],
  ['X-Original-URL', '/api/v1/internal/secret'],
  ['X_Rewrite_URL', '/api/v1/internal/secret'],
  ['X-HTTP-Method-Override', 'DELETE'],
  ['X_HTTP_Method', 'DELETE'],
  ['X-Method-Override', 'DELETE'],
]

/** A header name as CGI/WSGI-style servers read it. */
const cgiName = (name: string) => name.toLowerCase().replaceAll('_', '-')

describe('gateway: identity and forwarding headers cannot be smuggled by spelling', () => {
  const proxied = useProxiedGateway({ policy: POLICY })

  test('the upstream sees only tokengate identity headers, whatever the caller spelled', async () => {
    const token = await proxied.gateway.pat(['projects:read'])
    const response = await rawRequest(proxied.gateway.url, '/api/v1/projects/1', [
      ['Authorization', `Bearer ${token}`],
      ...SMUGGLED,
    ])
    assert.equal(response.status, 200)
    const seen = proxied.upstream.seen.at(-1)
    assert.ok(seen)
    const names = seen.rawHeaders.filter((_, i) => i % 2 === 0)
    for (const name of names) {
      const cgi = cgiName(name)
      if (cgi.startsWith('x-auth-')) {
        assert.ok(OWN_IDENTITY.has(name), `caller identity header reached the upstream: ${name}`)
      }
    }
    // Each identity header once, with tokengate's value.
    for (const own of OWN_IDENTITY) {
      assert.equal(names.filter((n) => cgiName(n) === own).length, 1, own)
    }
    assert.equal(seen.headers['x-auth-tenant'], TEST_TENANT)
    assert.equal(seen.headers['x-auth-subject'], 'ci-bot')
    assert.equal(seen.headers['x-auth-permissions'], 'projects:read')
    assert.equal(seen.headers['x-auth-token-type'], 'pat')
    assert.match(String(seen.headers['x-auth-token-id']), /^tok_/)

    // Forwarding and override headers: only tokengate's own X-Forwarded-For/-Proto remain.
    const forwarding = names.map(cgiName).filter((n) => !OWN_IDENTITY.has(n) && isForwarding(n))
    assert.deepEqual(forwarding.sort(), ['x-forwarded-for', 'x-forwarded-proto'])
    assert.equal(seen.headers['x-forwarded-for'], '127.0.0.1')
    assert.equal(seen.headers['x-forwarded-proto'], 'http')
    assert.equal(seen.headers['x-forwarded-host'], undefined)
  })
})

describe('gateway: the operator allowlist lets named forwarding headers through', () => {
  const proxied = useProxiedGateway({
    gateway: { forwardHeaders: ['cf-connecting-ip'], forwardedHost: true },
  })

  test('an allowed name passes as spelled; its underscore twin and the rest do not', async () => {
    const token = await proxied.gateway.pat([])
    const response = await rawRequest(proxied.gateway.url, '/api/v1/things', [
      ['Authorization', `Bearer ${token}`],
      ['CF-Connecting-IP', '192.0.2.1'],
      ['CF_Connecting_IP', '192.0.2.66'],
      ['X-Real-IP', '192.0.2.2'],
      ['X_Auth_Tenant', OTHER_TENANT],
    ])
    assert.equal(response.status, 200)
    const seen = proxied.upstream.seen.at(-1)
    assert.ok(seen)
    const names = seen.rawHeaders.filter((_, i) => i % 2 === 0).map(cgiName)
    assert.equal(names.filter((n) => n === 'cf-connecting-ip').length, 1)
    assert.equal(seen.headers['cf-connecting-ip'], '192.0.2.1')
    assert.equal(seen.headers['x-real-ip'], undefined)
    assert.equal(seen.headers['x-auth-tenant'], TEST_TENANT)
    // forwardedHost: true states the Host the caller addressed.
    assert.equal(seen.headers['x-forwarded-host'], new URL(proxied.gateway.url).host)
  })
})

test('an identity header on the allowlist stops the start', async () => {
  const upstream = await startUpstream()
  try {
    await assert.rejects(
      startGateway({
        upstream: upstream.url,
        gateway: { forwardHeaders: ['x-real-ip', 'x-auth-tenant'] },
      }),
      /\/gateway\/forwardHeaders\/1: x-auth-tenant is an identity header/,
    )
  } finally {
    await upstream.close()
  }
})

function isForwarding(name: string): boolean {
  return (
    name.startsWith('x-forwarded-') ||
    [
      'forwarded',
      'x-real-ip',
      'true-client-ip',
      'x-client-ip',
      'cf-connecting-ip',
      'x-original-url',
      'x-rewrite-url',
      'x-http-method-override',
      'x-http-method',
      'x-method-override',
    ].includes(name)
  )
}

describe('gateway: no policy bypass through path parameters or lookalikes', () => {
  const proxied = useProxiedGateway({ policy: POLICY })
  let token: string
  before(async () => {
    token = await proxied.gateway.pat(['projects:read'])
  })

  const refused = [
    // Tomcat/Jetty/Spring strip `;...` and then resolve `..`: these name /internal/secret.
    '/api/v1/projects/..;/internal/secret',
    `/api/v1/tenants/${TEST_TENANT}/..;/${OTHER_TENANT}/files`,
    '/api/v1/internal;x=1/secret',
    '/api/v1/internal%3bx=1/secret',
    '/api/v1/internal%3Bx=1/secret',
    '/api/v1/projects/%2e%2e;/internal/secret',
    '/api/v1/projects/%2e%2e/internal/secret',
    '/api/v1/projects/.%2e/internal/secret',
    // Trailing dots and spaces are stripped by Windows/IIS-style file and route lookups.
    '/api/v1/internal./secret',
    '/api/v1/internal%2e/secret',
    '/api/v1/internal%20/secret',
    '/api/v1/projects/...',
    // Dotless ı upper-cases to I: a case-insensitive Java/.NET router reads /internal.
    '/api/v1/%C4%B1nternal/secret',
    '/api/v1/%C3%AFnternal/secret',
    '/api/v1/internal%2fsecret',
    '/api/v1/internal%5csecret',
    // Built-in route lookalikes.
    '/api/v1/tokens;x/y',
    '/api/v1/me;x',
    '/api/v1/ME;x',
    '/api/v1/me%3b',
  ]
  for (const path of refused) {
    test(`400, never proxied: ${path}`, async () => {
      const before = proxied.upstream.seen.length
      const response = await rawRequest(proxied.gateway.url, path, [
        ['Authorization', `Bearer ${token}`],
      ])
      assert.equal(response.status, 400, response.text)
      assert.match(String(response.headers['content-type']), /^application\/problem\+json/)
      assert.equal(JSON.parse(response.text).code, 'validation_failed')
      assert.equal(proxied.upstream.seen.length, before, 'the upstream received the request')
    })
  }

  for (const path of ['/api/v%31/tokens/x/y', '/api/v1/%74okens/x/y', '/api/v1/%6De/x']) {
    test(`a built-in name spelled with percent-encoding is tokengate's 404: ${path}`, async () => {
      const before = proxied.upstream.seen.length
      const response = await rawRequest(proxied.gateway.url, path, [
        ['Authorization', `Bearer ${token}`],
      ])
      assert.equal(response.status, 404, response.text)
      assert.equal(JSON.parse(response.text).code, 'not_found')
      assert.equal(proxied.upstream.seen.length, before, 'the upstream received the request')
    })
  }

  test('ordinary paths, encoded or not, are still proxied as sent', async () => {
    for (const path of ['/api/v1/projects/a-b_c~d', '/api/v1/%70rojects/x', '/api/v1/things/']) {
      const response = await rawRequest(proxied.gateway.url, path, [
        ['Authorization', `Bearer ${token}`],
      ])
      assert.equal(response.status, 200, `${path}: ${response.text}`)
      assert.equal(proxied.upstream.seen.at(-1)?.url, path)
    }
  })
})
