/**
 * In-memory fakes of the core's ports, for tests of the auth core: lookups that count their
 * calls and can be made to fail, a JWT verifier driven by a table, a fixed clock, and a
 * one-call harness running authenticate → authorize → failureResponse.
 */
import { Buffer } from 'node:buffer'
import { type Authenticate, createAuthenticator } from '../../src/core/authenticate.ts'
import { authorize } from '../../src/core/authorize.ts'
import type { AuthFailure } from '../../src/core/failure.ts'
import { issuePat } from '../../src/core/pat.ts'
import type {
  AuthLookups,
  JwtOutcome,
  JwtVerifier,
  PatRecord,
  Tenant,
  VerifiedJwt,
} from '../../src/core/ports.ts'
import type { AuthResult } from '../../src/core/principal.ts'
import type { AuthInput } from '../../src/core/raw-headers.ts'
import { type FailureResponse, failureResponse } from '../../src/http/failure-response.ts'
import { NOW, type TestClock, testClock } from './clock.ts'

export { NOW } from './clock.ts'
export const HOUR_MS = 3_600_000

export interface FakeLookups extends AuthLookups {
  readonly pats: Map<string, PatRecord>
  readonly tenants: Map<string, Tenant>
  readonly calls: { findPatByHash: number; findTenant: number }
  /** When set, the named lookup throws (a store that is down). */
  failing: 'findPatByHash' | 'findTenant' | undefined
}

export function fakeLookups(): FakeLookups {
  const lookups: FakeLookups = {
    pats: new Map(),
    tenants: new Map(),
    calls: { findPatByHash: 0, findTenant: 0 },
    failing: undefined,
    async findPatByHash(tokenHash) {
      lookups.calls.findPatByHash++
      if (lookups.failing === 'findPatByHash') throw new Error('connection refused')
      return lookups.pats.get(tokenHash)
    },
    async findTenant(id) {
      lookups.calls.findTenant++
      if (lookups.failing === 'findTenant') throw new Error('connection refused')
      return lookups.tenants.get(id)
    },
  }
  return lookups
}

export function addTenant(lookups: FakeLookups, id: string, enabled = true): Tenant {
  const tenant: Tenant = { id, name: `Tenant ${id}`, enabled, createdAt: NOW - HOUR_MS }
  lookups.tenants.set(id, tenant)
  return tenant
}

/** Issues a PAT into the fake store; `patch` adjusts the stored record (revoked, expired). */
export function addPat(
  lookups: FakeLookups,
  options: {
    tenantId?: string
    permissions?: readonly string[]
    expiresAt?: number | null
    patch?: Partial<PatRecord>
  } = {},
): { token: string; record: PatRecord } {
  const issued = issuePat({
    tenantId: options.tenantId ?? 'acme',
    subject: 'ci-bot',
    name: 'deploy',
    permissions: options.permissions ?? ['tokens:read'],
    expiresAt: options.expiresAt === undefined ? NOW + 24 * HOUR_MS : options.expiresAt,
    now: NOW - HOUR_MS,
  })
  const record = { ...issued.record, ...options.patch }
  lookups.pats.set(record.tokenHash, record)
  return { token: issued.token, record }
}

/** A compact-JWS-looking string (unsigned): enough for the fake verifier and fingerprints. */
export function jwtLike(
  header: Record<string, unknown> = { alg: 'ES256', kid: 'key-1' },
  payload: Record<string, unknown> = { iss: 'https://idp.example', sub: 'user-1' },
  signature = 'c2lnbmF0dXJlLW5vdC1jaGVja2Vk',
): string {
  const part = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url')
  return `${part(header)}.${part(payload)}.${signature}`
}

export function verifiedJwt(overrides: Partial<VerifiedJwt> = {}): VerifiedJwt {
  return {
    issuer: 'https://idp.example',
    subject: 'user-1',
    tenantId: 'acme',
    permissions: ['tokens:read'],
    tokenId: 'jti-1',
    expiresAt: NOW + HOUR_MS,
    keyId: 'key-1',
    ...overrides,
  }
}

export interface FakeJwtVerifier extends JwtVerifier {
  readonly outcomes: Map<string, JwtOutcome>
  readonly verified: string[]
}

/** Verifies exactly the tokens in `outcomes`; any other token is `invalid_token/bad_signature`. */
export function fakeJwtVerifier(): FakeJwtVerifier {
  const verifier: FakeJwtVerifier = {
    outcomes: new Map(),
    verified: [],
    async verify(token) {
      verifier.verified.push(token)
      return (
        verifier.outcomes.get(token) ?? {
          ok: false,
          failure: {
            code: 'invalid_token',
            reason: 'bad_signature',
            detail: 'The access token is not valid.',
          },
        }
      )
    },
    close() {},
  }
  return verifier
}

export function acceptJwt(verifier: FakeJwtVerifier, jwt: Partial<VerifiedJwt> = {}): string {
  const verified = verifiedJwt(jwt)
  const token = jwtLike(
    { alg: 'ES256', kid: verified.keyId },
    { iss: verified.issuer, sub: verified.subject },
  )
  verifier.outcomes.set(token, { ok: true, jwt: verified })
  return token
}

export function rejectJwt(verifier: FakeJwtVerifier, failure: AuthFailure): string {
  const token = jwtLike(
    { alg: 'ES256', kid: 'key-1' },
    { sub: `rejected-${verifier.outcomes.size}` },
  )
  verifier.outcomes.set(token, { ok: false, failure })
  return token
}

export interface Harness {
  readonly lookups: FakeLookups
  readonly jwt: FakeJwtVerifier
  readonly clock: TestClock
  readonly authenticate: Authenticate
  /** authenticate → authorize(required) → the wire response, or undefined when allowed. */
  request(
    headers: Partial<AuthInput>,
    required?: readonly string[],
  ): Promise<{
    result: AuthResult
    failure: AuthFailure | undefined
    response: FailureResponse | undefined
  }>
}

export function harness(): Harness {
  const lookups = fakeLookups()
  const jwt = fakeJwtVerifier()
  const clock = testClock()
  const authenticate = createAuthenticator({ lookups, jwt, clock })
  addTenant(lookups, 'acme')
  return {
    lookups,
    jwt,
    clock,
    authenticate,
    async request(headers, required = []) {
      const result = await authenticate({
        authorization: headers.authorization ?? [],
        tenantIds: headers.tenantIds ?? [],
      })
      const failure = result.ok ? authorize(result.principal, required) : result.failure
      const response = failure === undefined ? undefined : failureResponse(failure, 'req-1')
      return { result, failure, response }
    },
  }
}

/** `Authorization` values for a token. */
export function bearer(token: string): string[] {
  return [`Bearer ${token}`]
}
