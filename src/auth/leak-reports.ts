/**
 * Leak reports from GitHub's secret scanning partner programme (issue #24): GitHub finds a
 * `pat_` token in a public repository, gist or npm package and POSTs it to us; a report whose
 * signature verifies against GitHub's published keys revokes every live PAT in it at once
 * (`revokeLeakedPats`: audited as `pat.leak_revoked`, announced by the webhook like every audit
 * event, refused on every instance within a second through the store's change feed).
 *
 * The protocol (docs.github.com, "Secret scanning partner program"): the body is a JSON array
 * of `{ token, type, url, source }`; `Github-Public-Key-Identifier` names one of GitHub's keys
 * and `Github-Public-Key-Signature` is the base64 ASN.1 DER ECDSA P-256 / SHA-256 signature of
 * the raw body bytes (verified as received, never re-serialised). We answer with a JSON array
 * of `{ token_hash, token_type, label }`, `label` `true_positive` for a token that is one of
 * ours and `false_positive` otherwise; `token_hash` (SHA-256, hex) so a token is never echoed.
 *
 * Why no key fetch at run time: GitHub's keys come from a file the operator saved (the JSON of
 * https://api.github.com/meta/public_keys/secret_scanning), so a network or DNS attacker can
 * never hand us a key, and a GitHub outage cannot stop us verifying. docs/leak-reports.md says
 * how to refresh the file when GitHub rotates its keys.
 *
 * Replays: the protocol carries no nonce or time, so a recorded genuine report can be sent
 * again. That can only revoke what GitHub reported (already revoked, so nothing new, nothing
 * audited twice); recent reports are remembered by the digest of the signed body and answered
 * from memory, so a replay flood costs no store lookups. By the body, never by the signature's
 * bytes: an ECDSA signature (r, s) has a twin (r, n - s) that verifies too (malleability), and
 * GitHub's signatures are not normalised to low S, so a twin must be accepted, and must not
 * pass for a new report.
 */
import { createHash, createPublicKey, type KeyObject, verify } from 'node:crypto'
import type { OperationDeps } from './operations.ts'
import { revokeLeakedPats } from './pat-lifecycle.ts'

/** One of GitHub's signing keys, by its identifier. */
export interface GithubKey {
  readonly id: string
  readonly key: KeyObject
}

/** An answer to a report: the HTTP status and its JSON body, or the problem to answer. */
export type LeakReportAnswer =
  | {
      readonly ok: true
      readonly body: readonly LeakLabel[]
      /** The report was answered from memory (a replay): nothing was looked up or revoked. */
      readonly replayed: boolean
    }
  | {
      readonly ok: false
      readonly status: 400 | 403
      readonly code: 'invalid_signature' | 'validation_failed'
      readonly detail: string
    }

/** GitHub's feedback format: the token by its SHA-256, never in clear. */
export interface LeakLabel {
  readonly token_hash: string
  readonly token_type: string
  readonly label: 'true_positive' | 'false_positive'
}

/**
 * GitHub's keys from the saved JSON (`{ "public_keys": [{ "key_identifier", "key" }] }`).
 * Throws, naming the file's key, for anything but an ECDSA P-256 public key: the signature
 * algorithm is fixed by the protocol, never chosen by the key (no algorithm confusion).
 */
export function parseGithubKeys(text: string, source: string): readonly GithubKey[] {
  let document: unknown
  try {
    document = JSON.parse(text)
  } catch {
    throw new Error(`${source}: not JSON (expected GitHub's public_keys document)`)
  }
  const list = (document as { public_keys?: unknown } | null)?.public_keys
  if (!Array.isArray(list) || list.length === 0) {
    throw new Error(`${source}: expected { "public_keys": [{ "key_identifier", "key" }, ...] }`)
  }
  return list.map((entry: unknown, i) => {
    const { key_identifier: id, key } = (entry ?? {}) as { key_identifier?: unknown; key?: unknown }
    if (typeof id !== 'string' || id.length === 0 || typeof key !== 'string') {
      throw new Error(`${source}: public_keys[${i}] needs a key_identifier and a PEM key`)
    }
    let object: KeyObject
    try {
      object = createPublicKey(key)
    } catch {
      throw new Error(`${source}: key ${id} is not a PEM public key`)
    }
    if (
      object.asymmetricKeyType !== 'ec' ||
      object.asymmetricKeyDetails?.namedCurve !== 'prime256v1'
    ) {
      throw new Error(`${source}: key ${id} is not an ECDSA P-256 public key`)
    }
    return { id, key: object }
  })
}

export interface LeakReportOptions {
  readonly keys: readonly GithubKey[]
  /** Most matches in one report. */
  readonly maxMatches: number
}

/** What a report handler needs per request: the request's headers and raw body. */
export interface LeakReportRequest {
  /** Every value of `Github-Public-Key-Identifier`, as received. */
  readonly keyIds: readonly string[]
  /** Every value of `Github-Public-Key-Signature`, as received. */
  readonly signatures: readonly string[]
  readonly body: Buffer
}

const REMEMBERED_REPORTS = 1_000
const BASE64 = /^[A-Za-z0-9+/]+={0,2}$/

/** The handler of GitHub's reports; `deps.actor` is recorded on the revocations. */
export function createGithubLeakReports(options: LeakReportOptions) {
  const keys = new Map(options.keys.map((k) => [k.id, k.key]))
  // Answers by the digest of the signed body: bounded, oldest out.
  const answered = new Map<string, readonly LeakLabel[]>()

  function verified(request: LeakReportRequest): string | undefined {
    if (request.keyIds.length !== 1 || request.signatures.length !== 1) return undefined
    const key = keys.get(request.keyIds[0] as string)
    const signature = request.signatures[0] as string
    if (!key || !BASE64.test(signature)) return undefined
    const der = Buffer.from(signature, 'base64')
    let ok = false
    try {
      ok = verify('sha256', request.body, { key, dsaEncoding: 'der' }, der)
    } catch {
      ok = false
    }
    return ok ? createHash('sha256').update(request.body).digest('hex') : undefined
  }

  return {
    async handle(deps: OperationDeps, request: LeakReportRequest): Promise<LeakReportAnswer> {
      const digest = verified(request)
      if (digest === undefined) {
        return {
          ok: false,
          status: 403,
          code: 'invalid_signature',
          detail: "The report is not signed by one of GitHub's secret scanning keys.",
        }
      }
      const known = answered.get(digest)
      if (known) return { ok: true, body: known, replayed: true }
      const matches = parseMatches(request.body, options.maxMatches)
      if (typeof matches === 'string') {
        return { ok: false, status: 400, code: 'validation_failed', detail: matches }
      }
      const results = await revokeLeakedPats(
        deps,
        matches.map((m) => ({ token: m.token, source: 'github', url: m.url })),
      )
      const body = matches.map((match, i) => ({
        token_hash: createHash('sha256').update(match.token).digest('hex'),
        token_type: match.type,
        label: isOurs(results[i]?.outcome)
          ? ('true_positive' as const)
          : ('false_positive' as const),
      }))
      if (answered.size >= REMEMBERED_REPORTS) {
        const oldest = answered.keys().next().value
        if (oldest !== undefined) answered.delete(oldest)
      }
      answered.set(digest, body)
      return { ok: true, body, replayed: false }
    },
  }
}

const isOurs = (outcome: string | undefined) =>
  outcome === 'revoked' || outcome === 'already_revoked'

interface Match {
  readonly token: string
  readonly type: string
  readonly url: string | undefined
}

/** The report's matches, or why it is not a report (a client-safe sentence). */
function parseMatches(body: Buffer, maxMatches: number): Match[] | string {
  let document: unknown
  try {
    document = JSON.parse(body.toString('utf8'))
  } catch {
    return 'The report is not JSON.'
  }
  if (!Array.isArray(document)) return 'Expected a JSON array of matches.'
  if (document.length > maxMatches) return `At most ${maxMatches} matches per report.`
  const matches: Match[] = []
  for (const entry of document) {
    const { token, type, url } = (entry ?? {}) as Record<string, unknown>
    if (typeof token !== 'string' || token.length === 0 || token.length > 1024) {
      return 'Each match needs a token (a string of at most 1024 characters).'
    }
    matches.push({
      token,
      type: typeof type === 'string' ? type.slice(0, 200) : '',
      url: typeof url === 'string' && /^https:\/\//.test(url) ? url.slice(0, 2048) : undefined,
    })
  }
  return matches
}
