/**
 * The operator's set-up of a test server through its CLI (`server.cli`, the server's data
 * directory): a PAT, a trusted issuer. Each fails the test on a non-zero exit.
 *
 * @example
 * await addIssuerWithCli(server, idp)
 * const { token } = await issuePatWithCli(server, 'acme', '--permission', 'tokens:read')
 */
import assert from 'node:assert/strict'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import type { TestIssuer } from './jwt.ts'
import type { TestServer } from './server.ts'

type Cli = Pick<TestServer, 'cli' | 'dataDir'>

export interface IssuedPat {
  readonly token: string
  readonly id: string
  readonly certificateThumbprint: string | null
}

/** `tokengate pat issue --tenant <tenantId> --subject svc <flags> --json`. */
export async function issuePatWithCli(
  server: Cli,
  tenantId: string,
  ...flags: string[]
): Promise<IssuedPat> {
  const out = await server.cli(
    'pat',
    'issue',
    '--tenant',
    tenantId,
    '--subject',
    'svc',
    ...flags,
    '--json',
  )
  assert.equal(out.code, 0, out.stderr)
  return JSON.parse(out.stdout) as IssuedPat
}

/**
 * `tokengate issuer add` for `idp` (audience tokengate) with its public key (and `jwk`'s
 * extra fields) in a key file of its own (named by kid) in the server's data directory.
 */
export async function addIssuerWithCli(
  server: Cli,
  idp: TestIssuer,
  jwk: Record<string, unknown> = {},
): Promise<void> {
  const jwksFile = join(server.dataDir, `${idp.kid ?? 'idp'}.jwks.json`)
  writeFileSync(jwksFile, JSON.stringify({ keys: [{ ...idp.publicJwk, kid: idp.kid, ...jwk }] }))
  const added = await server.cli(
    'issuer',
    'add',
    '--issuer',
    idp.config.issuer,
    '--audience',
    'tokengate',
    '--jwks-file',
    jwksFile,
  )
  assert.equal(added.code, 0, added.stderr)
}
