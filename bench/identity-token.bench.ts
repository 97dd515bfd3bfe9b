/**
 * What the identity token (`X-Auth-Token`, src/auth/identity-token.ts) costs a request that
 * carries one: µs per `sign` for ES256 and EdDSA. Every token is signed for its request
 * (a fresh `jti`, the upstream's `aud`), so this is the cost per request when
 * `identityToken.enabled`; the signature itself is most of it (the second column times
 * `node:crypto`'s bare sign of a payload of the same size, for comparison).
 *
 * Run: `node bench/identity-token.bench.ts` (~5 s)
 */
import { createPrivateKey, sign } from 'node:crypto'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createIdentityTokenSigner } from '../src/auth/identity-token.ts'
import type { Principal } from '../src/core/principal.ts'

const dir = mkdtempSync(join(tmpdir(), 'tg-idt-bench-'))
const principal: Principal = {
  tokenType: 'pat',
  tenantId: 'acme',
  subject: 'ci-bot',
  permissions: ['projects:read'],
  tokenId: 'tok_1',
  expiresAt: Date.now() + 86_400_000,
  fingerprint: 'pat_…abcd',
}

function microsPer(n: number, run: () => unknown): number {
  const started = process.hrtime.bigint()
  for (let i = 0; i < n; i++) run()
  return Number(process.hrtime.bigint() - started) / n / 1000
}

try {
  for (const algorithm of ['ES256', 'EdDSA'] as const) {
    const file = join(dir, `${algorithm}.json`)
    const signer = await createIdentityTokenSigner(
      { issuer: 'tokengate', ttlSec: 60, algorithm, rotateAfterSec: 86_400, publishAheadSec: 3600 },
      file,
      { now: () => Date.now() },
    )
    const audience = 'https://orders.internal'
    for (let i = 0; i < 2_000; i++) await signer.sign(principal, audience)
    const n = 20_000
    const started = process.hrtime.bigint()
    for (let i = 0; i < n; i++) await signer.sign(principal, audience)
    const perSign = Number(process.hrtime.bigint() - started) / n / 1000

    const { keys } = JSON.parse(readFileSync(file, 'utf8')) as { keys: { privateJwk: object }[] }
    const key = createPrivateKey({ key: keys[0]?.privateJwk as never, format: 'jwk' })
    const payload = Buffer.from((await signer.sign(principal, audience)).split('.', 2).join('.'))
    const bare = microsPer(n, () =>
      algorithm === 'ES256'
        ? sign('sha256', payload, { key, dsaEncoding: 'ieee-p1363' })
        : sign(null, payload, key),
    )
    console.log(
      `${algorithm}: ${perSign.toFixed(1)} µs per token (node:crypto sign alone: ${bare.toFixed(1)} µs)`,
    )
  }
} finally {
  rmSync(dir, { recursive: true, force: true })
}
