/**
 * What every nginx example that keeps decisions promises (nginx.conf's proxy_cache lines,
 * nginx-lua.conf's shared dict), written once as tests the calling suite runs against its own
 * example: allows are answered without asking tokengate, method, path and tenant header stay
 * part of the key (keptDecisionCases), a PAT revoked and a JWT revocation rule made by the CLI
 * (its own process, on the running server's data dir) are refused by nginx within 1 s of their commit while a client
 * keeps calling (revokedWithinOneSecond), and an answer carrying an identity token is never
 * kept (identityTokensNeverKept).
 */
import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import { after, before, test } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { promisify } from 'node:util'
import { decodeJwt } from 'jose'
import { hashPat } from '../../src/core/pat.ts'
import { openStore } from '../../src/stores/open-store.ts'
import { PROTECTED_PATH } from '../adapters/spec-table.ts'
import { rawRequest } from '../gateway/raw-request.ts'
import { TEST_ISSUER, TEST_SUBJECT, TEST_TENANT } from '../helpers/jwt.ts'
import {
  type ProxyProcess,
  type Stack,
  type StackOptions,
  startNginx,
  startStack,
} from './harness.ts'
import { type Commit, nextCommit, REVOCATION_BOUND_MS, steadyCaller } from './steady-caller.ts'

const BIN = new URL('../../bin/tokengate.js', import.meta.url).pathname
type Header = [string, string]

export interface KeptDecisions {
  readonly stack: { value: Stack }
  readonly front: { value: ProxyProcess }
}

/**
 * A stack and nginx with one of the examples that keep decisions, started before the suite's
 * tests and stopped after them; read `stack.value` / `front.value` inside tests.
 */
export function nginxKeepingDecisions(
  options: StackOptions,
  nginx: Parameters<typeof startNginx>[1],
): KeptDecisions {
  const stack = { value: undefined as unknown as Stack }
  const front = { value: undefined as unknown as ProxyProcess }
  before(async () => {
    stack.value = await startStack({ proxy: 'nginx', ...options })
    const ports = { decision: stack.value.decisionPort, upstream: stack.value.upstream.port }
    front.value = await startNginx(ports, nginx)
  })
  after(async () => {
    await front.value?.stop()
    await stack.value?.close()
  })
  return { stack, front }
}

/** Decisions tokengate made so far (its metrics: the stack needs `metrics: true`). */
export async function decisions(stack: Stack): Promise<number> {
  const text = await (await fetch(stack.running.metricsUrl as string)).text()
  return text
    .split('\n')
    .filter((line) => line.startsWith('tokengate_decisions_total{'))
    .reduce((sum, line) => sum + Number(line.split(' ').at(-1)), 0)
}

/** The shared promises about the key, as tests of the calling suite; `where` names the example's store. */
export function keptDecisionCases({ stack, front }: KeptDecisions, where: string): void {
  test(`allows are answered from the ${where}: tokengate decides fewer requests than nginx serves`, async () => {
    const reader: Header = ['Authorization', `Bearer ${stack.value.readerPat}`]
    const before = await decisions(stack.value)
    let served = 0
    const until = Date.now() + 2_000
    while (Date.now() < until) {
      const response = await rawRequest(front.value.url, '/api/v1/projects/1', [reader])
      assert.equal(response.status, 200, front.value.log())
      // Every answer names a request, decided or kept.
      assert.match(String(response.headers['x-request-id']), /^\S+$/)
      served++
      await sleep(10)
    }
    const decided = (await decisions(stack.value)) - before
    console.log(`served ${served} requests through nginx, tokengate decided ${decided}`)
    assert.ok(decided < served / 4, `${decided} decisions for ${served} requests`)
  })

  test('method, path and tenant header are part of the key', async () => {
    const reader: Header = ['Authorization', `Bearer ${stack.value.readerPat}`]
    assert.equal((await rawRequest(front.value.url, '/api/v1/projects/1', [reader])).status, 200)
    const deleted = await rawRequest(front.value.url, '/api/v1/projects/1', [reader], 'DELETE')
    assert.equal(deleted.status, 403, 'the method is part of the key')
    assert.equal((await rawRequest(front.value.url, '/api/v1/projects/2', [reader])).status, 200)
    const tenant = await rawRequest(front.value.url, '/api/v1/projects/1', [
      reader,
      ['X-Tenant-Id', 'tenant-b'],
    ])
    assert.equal(tenant.status, 401, 'the tenant header is part of the key')
  })
}

/**
 * The revocation bound, as the calling suite's last tests: they revoke the suite's PAT and its
 * JWT's subject, which its other tests use.
 */
export function revokedWithinOneSecond({ stack, front }: KeptDecisions): void {
  test('a PAT revoked with the CLI is refused by nginx within 1 s of the commit', async () => {
    const token: Header = ['Authorization', `Bearer ${stack.value.tokens.pat}`]
    const { dataDir } = stack.value
    const store = await openStore({ dataDir })
    const id = (await store.findPatByHash(hashPat(stack.value.tokens.pat)))?.id
    await store.close()
    assert.ok(id)
    const decidedBefore = await decisions(stack.value)
    const committed = nextCommit(dataDir, 'pat')
    const { refusedAt, lastAllowedAt, served } = await steadyCaller(
      () => front.value.url,
      [token],
      async () => {
        const revoked = await promisify(execFile)(process.execPath, [
          BIN,
          'pat',
          'revoke',
          id,
          '--data-dir',
          dataDir,
        ])
        assert.match(revoked.stdout, /revoked/i)
      },
    )
    const decided = (await decisions(stack.value)) - decidedBefore
    const commit = await committed
    assert.ok(refusedAt !== undefined, 'nginx never refused the revoked PAT')
    const lastAllowed = lastAllowedAt - commit.after
    console.log(
      `revoked PAT: last allowed by nginx ${lastAllowed} ms, first refused ${refusedAt - commit.after} ms after the commit (${served} requests, ${decided} decided; ${committing(commit)})`,
    )
    // Kept decisions are what the bound is about: most of the caller's requests used them.
    assert.ok(decided < served / 2, `${decided} decisions for ${served} requests`)
    assert.ok(lastAllowed <= REVOCATION_BOUND_MS, `allowed ${lastAllowed} ms after the commit`)
  })

  test('a JWT revocation rule made with the CLI is refused by nginx within 1 s of the commit', async () => {
    const token: Header = ['Authorization', `Bearer ${stack.value.tokens.jwt}`]
    const committed = nextCommit(stack.value.dataDir, 'jwt_revocation')
    const { refusedAt, lastAllowedAt, served } = await steadyCaller(
      () => front.value.url,
      [token, ['X-Tenant-Id', TEST_TENANT]],
      async () => {
        // Exits 0 (execFile rejects otherwise).
        await promisify(execFile)(process.execPath, [
          BIN,
          'jwt',
          'revoke',
          '--issuer',
          TEST_ISSUER,
          '--sub',
          TEST_SUBJECT,
          '--data-dir',
          stack.value.dataDir,
        ])
      },
    )
    const commit = await committed
    assert.ok(refusedAt !== undefined, 'nginx never refused the revoked JWT')
    const lastAllowed = lastAllowedAt - commit.after
    console.log(
      `JWT rule: last allowed by nginx ${lastAllowed} ms, first refused ${refusedAt - commit.after} ms after the commit (${served} requests; ${committing(commit)})`,
    )
    assert.ok(lastAllowed <= REVOCATION_BOUND_MS, `allowed ${lastAllowed} ms after the commit`)
  })
}

/** How the commit was seen: its log time, and how closely the watch placed it. */
const committing = (commit: Commit) =>
  `committed ${commit.after - commit.at}-${commit.seenAt - commit.at} ms after its log time`

/**
 * An answer carrying an identity token is never kept (the stack needs `identityToken: true`):
 * each request gets its own `jti`; `nothingKept` looks into the example's store too.
 */
export function identityTokensNeverKept(
  { stack, front }: KeptDecisions,
  nothingKept?: (front: ProxyProcess) => Promise<void> | void,
): void {
  test('an answer carrying an identity token is never kept: each request gets its own jti', async () => {
    const jtis = new Set<unknown>()
    for (let i = 0; i < 3; i++) {
      const seenBefore = stack.value.upstream.seen.length
      const response = await rawRequest(front.value.url, PROTECTED_PATH, [
        ['Authorization', `Bearer ${stack.value.tokens.pat}`],
      ])
      assert.equal(response.status, 200)
      jtis.add(
        decodeJwt(String(stack.value.upstream.seen[seenBefore]?.headers['x-auth-token'])).jti,
      )
    }
    assert.equal(jtis.size, 3)
    await nothingKept?.(front.value)
  })
}
