/**
 * Demo wiring shared by the examples: a local JWT issuer (an ES256 key pair registered as an
 * inline JWKS), an in-memory tenant and PAT store, and the authenticator built from them.
 * A real application passes its identity provider's issuer configuration (often a
 * `jwks_url`) and a real store (`openStore` from tokengate's stores) instead.
 */
import { randomUUID } from 'node:crypto'
import { exportJWK, generateKeyPair, SignJWT } from 'jose'
import {
  type Authenticate,
  type AuthLookups,
  createAuthenticator,
  createJwtVerifier,
  type IssuerConfig,
  issuePat,
  type PatRecord,
  systemClock,
  type Tenant,
} from 'tokengate'

export const DEMO_TENANT = 'acme'
export const DEMO_ISSUER = 'https://idp.example.test'
export const DEMO_AUDIENCE = 'tokengate-demo'

export interface DemoAuth {
  readonly authenticate: Authenticate
  /** A PAT of tenant `acme` holding `permissions`. */
  issuePat(permissions: readonly string[]): string
  /** A 15-minute JWT of tenant `acme` holding `permissions`; send it with `X-Tenant-Id: acme`. */
  signJwt(permissions: readonly string[], subject?: string): Promise<string>
}

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

export async function createDemoAuth(): Promise<DemoAuth> {
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
    authenticate,
    issuePat(permissions) {
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
  }
}

/** Prints ready-to-paste curl commands for a running example. */
export async function printDemoCommands(url: string, auth: DemoAuth): Promise<void> {
  const pat = auth.issuePat(['projects:read'])
  const jwt = await auth.signJwt(['projects:read', 'projects:write'])
  console.log(`listening on ${url}
  curl -s ${url}/api/v1/projects -H 'Authorization: Bearer ${pat}'
  curl -s ${url}/api/v1/projects -H 'Authorization: Bearer ${jwt}' -H 'X-Tenant-Id: ${DEMO_TENANT}'
  curl -s -X POST ${url}/api/v1/projects -H 'Authorization: Bearer ${pat}'   # 403: read-only PAT
  curl -s ${url}/api/v1/projects                                             # 401`)
}
