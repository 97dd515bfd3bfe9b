/**
 * The cases bench/latency.bench.ts measures: what each sends, to which server, against which
 * baseline (bench/README.md, "Tail latency", lists them).
 */
import { readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { BENCH_TENANT, type Fixtures } from './fixtures.ts'
import type { ServerId } from './latency-servers.ts'

/** The quick mode's cases, when `--cases` does not name others. */
export const QUICK_CASES =
  /^(server PAT|server JWT RS256 distinct|createTokengate PAT|gateway|nginx)/

/** What the load sends: one fixed request, a never-repeated JWT each, or a file of tokens. */
export type Traffic =
  | { readonly kind: 'fixed'; readonly headers: Readonly<Record<string, string>> }
  | { readonly kind: 'fresh-jwt' }
  | { readonly kind: 'pool'; readonly file: string }

export interface LatencyCase {
  readonly id: string
  readonly path: string
  readonly traffic: Traffic
  /** The server whose saturation sets the rate and whose added latency is the result. */
  readonly subject: ServerId
  readonly baseline: ServerId
  /** Also run at the same rate, their added latency shown beside the subject's. */
  readonly others: readonly ServerId[]
  /** wrk's tokens for the saturation, when the traffic's own would not do. */
  readonly saturationPool?: { readonly file: string; readonly tenant?: string }
  /** The server whose saturation sets the rate, when not the subject. */
  readonly saturationOf?: ServerId
  /** Run only when `--cases` names it: it overloads the shared core, and the rows after it in a round pay for that. */
  readonly onlyWhenNamed?: boolean
}

export const bearer = (token: string) => ({ authorization: `Bearer ${token}` })

export function standardCases(fixtures: Fixtures): LatencyCase[] {
  const pat = { kind: 'fixed', headers: bearer(fixtures.patSingle) } as const
  const jwt = {
    kind: 'fixed',
    headers: { ...bearer(fixtures.algs.RS256.single), 'x-tenant-id': BENCH_TENANT },
  } as const
  const me = '/api/v1/me'
  const proxied = '/api/v1/projects/p1'
  const noauth = 'fastify-noauth'
  return [
    {
      id: 'server PAT',
      path: me,
      traffic: pat,
      subject: 'tokengate',
      baseline: noauth,
      others: [],
    },
    {
      id: 'server JWT RS256 repeated',
      path: me,
      traffic: jwt,
      subject: 'tokengate',
      baseline: noauth,
      others: ['fastify-jwt'],
    },
    {
      id: 'server JWT RS256 distinct',
      path: me,
      traffic: { kind: 'fresh-jwt' },
      subject: 'tokengate',
      baseline: noauth,
      others: ['fastify-jwt'],
      saturationPool: { file: fixtures.algs.RS256.poolFile, tenant: BENCH_TENANT },
    },
    {
      id: 'library PAT (bare core)',
      path: me,
      traffic: pat,
      subject: 'library',
      baseline: noauth,
      others: ['fastify-naive'],
    },
    {
      id: 'library JWT RS256 repeated (bare core)',
      path: me,
      traffic: jwt,
      subject: 'library',
      baseline: noauth,
      others: ['fastify-jwt'],
    },
    {
      id: 'createTokengate PAT',
      path: me,
      traffic: pat,
      subject: 'createTokengate',
      baseline: noauth,
      others: ['fastify-naive'],
    },
    {
      id: 'createTokengate JWT RS256 repeated',
      path: me,
      traffic: jwt,
      subject: 'createTokengate',
      baseline: noauth,
      others: ['fastify-jwt'],
    },
    {
      id: 'gateway PAT',
      path: proxied,
      traffic: pat,
      subject: 'gateway',
      baseline: 'haproxy',
      others: [],
    },
    {
      id: 'nginx + decision PAT',
      path: proxied,
      traffic: pat,
      subject: 'nginx + decision',
      baseline: 'nginx',
      others: [],
    },
  ]
}

/**
 * The hops of issue #36 (`--hops`): one PAT through nginx + the decision listener against
 * nginx alone (beside it: with nginx's decision cache, and asking a second gateway's decision
 * listener on a Unix socket, decision.socket), and through tokengate's gateway
 * against a bare node:http + undici proxy. Proxy, tokengate and upstream share CPU 0. Without
 * keepalive to the decision listener (what a config without it costs) only with
 * `--cases 'keepalive'`: at 3,000 req/s it falls hundreds of ms behind, and the row after it
 * in a round inherited that (bench/README.md, issue #36 third session).
 */
export function hopCases(fixtures: Fixtures): LatencyCase[] {
  const pat = { kind: 'fixed', headers: bearer(fixtures.patSingle) } as const
  const path = '/api/v1/projects/p1'
  return [
    {
      id: 'hop: nginx + decision PAT',
      path,
      traffic: pat,
      subject: 'nginx + decision',
      baseline: 'nginx',
      others: ['nginx + decision (cached)', 'nginx + decision (unix)'],
    },
    {
      id: 'hop: nginx + decision PAT without keepalive',
      path,
      traffic: pat,
      subject: 'nginx + decision (no keepalive)',
      baseline: 'nginx',
      others: [],
      onlyWhenNamed: true,
    },
    {
      id: 'hop: gateway PAT',
      path,
      traffic: pat,
      subject: 'gateway',
      baseline: 'undici proxy',
      others: [],
    },
  ]
}

/**
 * PAT traffic on the server with the slow disk against the same server without it: keys
 * without a quota, then keys with one.
 */
export function slowFsyncCases(fixtures: Fixtures, dir: string): LatencyCase[] {
  // Every 100th request a garbage PAT: refused, so audited (written behind, committed).
  const pats = readFileSync(fixtures.patPoolFile, 'utf8').split('\n').filter(Boolean)
  const quotaPats = readFileSync(fixtures.patQuotaPoolFile, 'utf8').split('\n').filter(Boolean)
  const mixed = join(dir, 'pats-1pc-refused.txt')
  writeFileSync(mixed, pats.map((t, i) => (i % 100 === 99 ? fixtures.patGarbage : t)).join('\n'))
  const base = {
    path: '/api/v1/me',
    subject: 'tokengate slow-fsync',
    baseline: 'tokengate',
    others: [],
    saturationOf: 'tokengate',
  } as const
  return [
    {
      ...base,
      id: 'PAT, one token',
      traffic: { kind: 'fixed', headers: bearer(fixtures.patSingle) },
    },
    {
      ...base,
      id: `PAT, ${pats.length} tokens`,
      traffic: { kind: 'pool', file: fixtures.patPoolFile },
    },
    {
      ...base,
      id: `PAT, ${pats.length} tokens, 1 % refused`,
      traffic: { kind: 'pool', file: mixed },
    },
    // Keys with a quota (issue #32): each block of uses is a reservation the writer thread
    // commits; they are compared with the rows above, the same keys without a quota.
    {
      ...base,
      id: 'PAT with a quota, one token',
      traffic: { kind: 'fixed', headers: bearer(quotaPats[0] as string) },
    },
    {
      ...base,
      id: `PAT with a quota, ${quotaPats.length} tokens`,
      traffic: { kind: 'pool', file: fixtures.patQuotaPoolFile },
    },
  ]
}

/** The servers of a case, in the order a round runs them. */
export const members = (c: LatencyCase): ServerId[] => [c.subject, c.baseline, ...c.others]
