/**
 * Demo wiring shared by the examples, the way a user runs tokengate: `createTokengate` over
 * the embedded store (SQLite in a data directory: `TOKENGATE_DATA_DIR`, else a fresh
 * temporary one), with a demo tenant, a local JWT issuer (an ES256 key pair registered as an
 * inline JWKS) and PATs written to that store. The same directory works with the CLI:
 * `npm run tokengate -- --data-dir DIR pat issue --tenant acme ...`. A real application registers
 * its identity provider with `tokengate issuer add` instead. Applications that bring their
 * own lookups use the bare core: bare-core-auth.ts.
 */
import { randomUUID } from 'node:crypto'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { exportJWK, generateKeyPair, SignJWT } from 'jose'
import {
  createTokengate,
  type GateSource,
  type IssuerConfig,
  issuePat,
  type Tokengate,
} from 'tokengate'

export const DEMO_TENANT = 'acme'
export const DEMO_ISSUER = 'https://idp.example.test'
export const DEMO_AUDIENCE = 'tokengate-demo'

export interface DemoAuth {
  /** What every binding takes: `createTokengate`'s gate, or a bare authenticator. */
  readonly gate: GateSource
  /** A PAT of tenant `acme` holding `permissions`. */
  issuePat(permissions: readonly string[]): Promise<string>
  /** A 15-minute JWT of tenant `acme` holding `permissions`; send it with `X-Tenant-Id: acme`. */
  signJwt(permissions: readonly string[], subject?: string): Promise<string>
  close(): Promise<void>
}

export async function createDemoAuth(
  dataDir: string | undefined = process.env.TOKENGATE_DATA_DIR,
): Promise<DemoAuth & { readonly gate: Tokengate; readonly dataDir: string }> {
  const temporary = dataDir === undefined
  const dir = dataDir ?? mkdtempSync(join(tmpdir(), 'tokengate-example-'))
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
  // Seed the store before the gate loads its trusted issuers.
  const seeding = await createTokengate({ dataDir: dir })
  try {
    const now = Date.now()
    if (!(await seeding.store.findTenant(DEMO_TENANT))) {
      await seeding.store.createTenant({ id: DEMO_TENANT, name: 'Acme' }, now)
    }
    await seeding.store.putIssuer(issuer, now)
  } finally {
    await seeding.close()
  }
  const gate = await createTokengate({ dataDir: dir })
  return {
    gate,
    dataDir: dir,
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
      await gate.store.insertPat(record)
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
    async close() {
      await gate.close()
      if (temporary) rmSync(dir, { recursive: true, force: true })
    },
  }
}

/** Prints ready-to-paste curl and CLI commands for a running example. */
export async function printDemoCommands(
  url: string,
  auth: DemoAuth & { readonly dataDir: string },
): Promise<void> {
  const pat = await auth.issuePat(['projects:read'])
  const jwt = await auth.signJwt(['projects:read', 'projects:write'])
  console.log(`listening on ${url}
  curl -s ${url}/api/v1/projects -H 'Authorization: Bearer ${pat}'
  curl -s ${url}/api/v1/projects -H 'Authorization: Bearer ${jwt}' -H 'X-Tenant-Id: ${DEMO_TENANT}'
  curl -s -X POST ${url}/api/v1/projects -H 'Authorization: Bearer ${pat}'   # 403: read-only PAT
  curl -s ${url}/api/v1/projects                                             # 401
The store is ${auth.dataDir}; the CLI works on it while the example runs:
  npm run tokengate -- --data-dir ${auth.dataDir} pat list --tenant ${DEMO_TENANT}
  npm run tokengate -- --data-dir ${auth.dataDir} tenant list`)
}
