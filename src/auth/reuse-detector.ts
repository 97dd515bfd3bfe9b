import type { AuthFailure } from '../core/failure.ts'
import type { Clock } from '../core/ports.ts'
import type { Store } from '../stores/store.ts'
import type { AuditWriter } from '../stores/write-behind.ts'
import { auditRecord } from './audit-events.ts'

/** Where a reuse was seen, for the audit event. */
export interface ReuseContext {
  /** Fingerprint of the presented token (`pat_…abcd`), never the token. */
  readonly actor: string | null
  readonly clientAddress: string | null
  readonly requestId: string | null
}

export interface ReuseDetector {
  /**
   * Reacts to one authentication failure: a PAT refused as `rotated` (used after its grace)
   * starts the revocation of its whole rotation family. Returns at once; never throws.
   */
  onFailure(failure: AuthFailure, context: ReuseContext): void
  /** Resolves when every revocation started so far has finished (for shutdown and tests). */
  settled(): Promise<void>
}

export interface ReuseDetectorDeps {
  readonly store: Pick<Store, 'revokePatFamily'>
  readonly audit: Pick<AuditWriter, 'write'>
  readonly clock: Clock
  readonly log: { warn(obj: object, msg: string): void }
}

/**
 * Rotation reuse detection, as GitLab does it: a token that was rotated out and is presented
 * after its grace period is most likely in the hands of someone who copied it before the
 * rotation, and the legitimate holder has moved on to its replacement. Since we cannot tell
 * which holder is which, every token of the family (ancestors and descendants by
 * `rotatedFrom`) is revoked and `pat.reuse_detected` is audited; the owner must issue a new
 * token. The core only reports the fact (reason `rotated` with the token id); this effect
 * lives outside it, so the core stays free of writes.
 *
 * The request that showed the reuse is answered 401 at once; the revocation runs after it.
 * Store change events (`pat_changed` per revoked token) drop the cached records, here and
 * on other instances. Concurrent reuses of one token share one revocation; the store
 * returns only the tokens each call revoked, so the event is written once even when two
 * instances race. A store failure is logged and the next reuse tries again.
 */
export function createReuseDetector(deps: ReuseDetectorDeps): ReuseDetector {
  const inFlight = new Map<string, Promise<void>>()

  async function revokeFamily(tokenId: string, context: ReuseContext): Promise<void> {
    const at = deps.clock.now()
    try {
      const revoked = await deps.store.revokePatFamily(tokenId, at)
      if (revoked.length === 0) return
      deps.audit.write(
        auditRecord(
          {
            type: 'pat.reuse_detected',
            tenantId: revoked[0]?.tenantId ?? null,
            outcome: 'family_revoked',
            details: { tokenId, revokedTokenIds: revoked.map((r) => r.id).sort() },
          },
          context,
          at,
        ),
      )
      deps.log.warn(
        { tokenId, revoked: revoked.length },
        'rotated-out PAT reused after its grace: rotation family revoked',
      )
    } catch (error) {
      deps.log.warn({ err: error, tokenId }, 'revoking a reused rotation family failed')
    }
  }

  return {
    onFailure(failure, context) {
      if (failure.code !== 'invalid_token' || failure.reason !== 'rotated') return
      const tokenId = failure.tokenId
      if (tokenId === undefined || inFlight.has(tokenId)) return
      const run = revokeFamily(tokenId, context).finally(() => inFlight.delete(tokenId))
      inFlight.set(tokenId, run)
    },
    async settled() {
      await Promise.all([...inFlight.values()])
    },
  }
}
