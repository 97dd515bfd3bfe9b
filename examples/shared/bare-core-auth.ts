/**
 * The bare core, for applications that bring their own tenant and PAT lookups: a local JWT
 * issuer (an ES256 key pair registered as an inline JWKS), an in-memory tenant and PAT map,
 * and `createAuthenticator` built from them. No store, cache, change feed or audit: those
 * come with `createTokengate` (demo-auth.ts). Any example runs on it, e.g.
 * `startExample(await createBareCoreAuth())`.
 */
import { randomUUID } from 'node:crypto'
import { exportJWK, generateKeyPair, SignJWT } from 'jose'
import {
  type AuthLookups,
  createAuthenticator,
  createJwtVerifier,
  type IssuerConfig,
  issuePat,
  type PatRecord,
  systemClock,
  type Tenant,
} from 'tokengate'

import { DEMO_AUDIENCE, DEMO_ISSUER, DEMO_TENANT, type DemoAuth } from './demo-auth.ts'

/** An `AuthLookups` over two maps: enough for a demo, and for tests. */
function memoryLookups(): AuthLookups & { pats: Map<string, PatRecord> } {
  const tenants = new Map<string, Tenant>([
    [DEMO_TENANT, { id: DEMO_TENANT, name: 'Acme', enabled: true, createdAt: Date.now() }],
  ])
  const pats = new Map<string, PatRecord>()
  return {
    pats,
    findPatByHash: async (hash) => pats.get(hash),
    findTenant: async (id) => tenants.get(id),
  }
}

export async function createBareCoreAuth(): Promise<DemoAuth> {
  const { privateKey, publicKey } = await generateKeyPair('ES256')
  const kid = `demo-${randomUUID()}`
  const publicJwk = { ...(await exportJWK(publicKey)), kid, alg: 'ES256', use: 'sig' }
  const issuer: IssuerConfig = {
    issuer: DEMO_ISSUER,
    audiences: [DEMO_AUDIENCE],
    keySource: { kind: 'jwks', jwks: { keys: [publicJwk] } },
    algorithms: ['ES256'],
    tenant: { claim: 'tenant_id' },
  }
  const lookups = memoryLookups()
  const authenticate = createAuthenticator({
    lookups,
    jwt: createJwtVerifier([issuer]),
    clock: systemClock,
  })
  return {
    gate: { authenticate },
    async issuePat(permissions) {
      const now = Date.now()
      const { token, record } = issuePat({
        tenantId: DEMO_TENANT,
        subject: 'demo-ci',
        name: 'demo',
        permissions,
        expiresAt: now + 86_400_000,
        now,
      })
      lookups.pats.set(record.tokenHash, record)
      return token
    },
    signJwt(permissions, subject = 'alice') {
      return new SignJWT({ tenant_id: DEMO_TENANT, permissions: [...permissions] })
        .setProtectedHeader({ alg: 'ES256', kid })
        .setIssuer(DEMO_ISSUER)
        .setAudience(DEMO_AUDIENCE)
        .setSubject(subject)
        .setIssuedAt()
        .setExpirationTime('15m')
        .sign(privateKey)
    },
    close: async () => {},
  }
}
