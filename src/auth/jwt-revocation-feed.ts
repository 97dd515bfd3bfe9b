/**
 * Each process's copy of the JWT revocation rules (core/jwt-revocations.ts): read whole at
 * start and on `resync`, then one rule at a time as the change log names it (a write, a
 * removal, retention's delete), so a rule made anywhere refuses its tokens here within the
 * change log's delivery time, without a store round trip per request.
 *
 * A whole read takes the rules and the change log's head in one snapshot, then has the store
 * deliver every change logged after that head (again, if its follower had read past it): a
 * rule written between the whole read and the follower's start is therefore never missed,
 * whenever the follower started. Reads run one after another, so a rule's change read after a
 * whole read wins. While the store cannot be read the rules held stay in force (a revoked
 * token is not let back in by an outage), and a whole read is retried every second until it
 * succeeds; `failingSince` says from when (/readyz: `jwtRevocations: "stale"`).
 */
import { JwtRevocationSet } from '../core/jwt-revocations.ts'
import type { Clock } from '../core/ports.ts'
import type { ChangeSource, JwtRevocationStore } from '../stores/store.ts'

const RETRY_MS = 1000

export interface JwtRevocationFeed {
  /** The rules in force here; the JWT verifier reads it on every token. */
  readonly rules: JwtRevocationSet
  /** The change log named rule `id`: read it again. */
  changed(id: string): void
  /** Reads every rule again (start, `resync`). Resolves when read, or when the read failed. */
  reload(): Promise<void>
  /** Whether the last read failed (a whole read is being retried). */
  failing(): boolean
  /** Epoch ms of the first failed read of the current failing episode; null while reads succeed. */
  failingSince(): number | null
  /**
   * No read queued or running and the last one succeeded: every rule the change log has
   * named here is in force (what lets a JWT's allow be kept by a proxy: cache-expiry.ts).
   */
  settled(): boolean
  close(): void
}

export function createJwtRevocationFeed(
  store: Pick<JwtRevocationStore, 'getJwtRevocation' | 'snapshotJwtRevocations'> &
    Pick<ChangeSource, 'followChangesFrom'>,
  clock: Clock,
  onError: (error: unknown) => void = () => {},
): JwtRevocationFeed {
  const rules = new JwtRevocationSet()
  let queue: Promise<void> = Promise.resolve()
  let failingSince: number | null = null
  let retry: ReturnType<typeof setTimeout> | undefined
  let closed = false
  let pending = 0

  const run = (read: () => Promise<void>): Promise<void> => {
    pending++
    queue = queue.then(async () => {
      if (closed) return
      try {
        await read()
        failingSince = null
      } catch (error) {
        if (failingSince === null) onError(error)
        failingSince ??= clock.now()
        retry ??= setTimeout(() => {
          retry = undefined
          if (!closed) void feed.reload()
        }, RETRY_MS)
        retry.unref?.()
      } finally {
        pending--
      }
    })
    return queue
  }

  const feed: JwtRevocationFeed = {
    rules,
    changed(id) {
      void run(async () => {
        const rule = await store.getJwtRevocation(id)
        if (rule === undefined || rule.expiresAt <= clock.now()) rules.remove(id)
        else rules.put(rule)
      })
    },
    reload: () =>
      run(async () => {
        const { rules: read, head } = await store.snapshotJwtRevocations(clock.now())
        rules.replaceAll(read)
        // Not awaited: what it delivers comes back through `changed`, queued after this read.
        void store.followChangesFrom?.(head)
      }),
    failing: () => failingSince !== null,
    failingSince: () => failingSince,
    settled: () => pending === 0 && failingSince === null,
    close() {
      closed = true
      if (retry !== undefined) clearTimeout(retry)
    },
  }
  return feed
}
