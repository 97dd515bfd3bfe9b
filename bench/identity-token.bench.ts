/**
 * What the identity token (`X-Auth-Token`, src/gateway/identity-token.ts) costs a proxied
 * request: µs per `sign` for ES256 and EdDSA, for a caller whose principal object is the
 * same every time (a JWT: memoised per verified token) and for one whose principal is built
 * per request (a PAT). Both are answered from the signer's cache once signed.
 *
 * Run: `node bench/identity-token.bench.ts` (~5 s)
 */
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createIdentityTokenSigner } from '../src/auth/identity-token.ts'
import type { Principal } from '../src/core/principal.ts'

const dir = mkdtempSync(join(tmpdir(), 'tg-idt-bench-'))
const principal = (): Principal => ({
  tokenType: 'pat',
  tenantId: 'acme',
  subject: 'ci-bot',
  permissions: ['projects:read'],
  tokenId: 'tok_1',
  expiresAt: Date.now() + 86_400_000,
  fingerprint: 'pat_…abcd',
})
try {
  for (const algorithm of ['ES256', 'EdDSA'] as const) {
    const signer = await createIdentityTokenSigner(
      {
        issuer: 'tokengate',
        ttlSec: 300,
        algorithm,
        rotateAfterSec: 86_400,
        publishAheadSec: 3600,
      },
      join(dir, `${algorithm}.json`),
      { now: () => Date.now() },
    )
    const same = principal()
    for (const [label, next] of [
      ['same principal object', () => same],
      ['new principal object per request (PAT)', principal],
    ] as const) {
      for (let i = 0; i < 2_000; i++) await signer.sign(next())
      const n = 20_000
      const started = process.hrtime.bigint()
      for (let i = 0; i < n; i++) await signer.sign(next())
      const us = Number(process.hrtime.bigint() - started) / n / 1000
      console.log(`${algorithm} ${label}: ${us.toFixed(2)} µs/sign`)
    }
  }
} finally {
  rmSync(dir, { recursive: true, force: true })
}
