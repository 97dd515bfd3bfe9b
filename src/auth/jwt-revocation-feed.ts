/**
 * Each process's copy of the JWT revocation rules (core/jwt-revocations.ts): read whole at
 * start and on `resync`, then one rule at a time as the change log names it (a write, a
 * removal, retention's delete), so a rule made anywhere refuses its tokens here within the
 * change log's delivery time, without a store round trip per request.
 *
 * Reads run one after another: a rule's change read after a whole read always wins, so a
 * rule written while the whole set is being read is never lost. While the store cannot be
 * read the rules held stay in force (a revoked token is not let back in by an outage), and a
 * whole read is retried every second until it succeeds.
 */
import { JwtRevocationSet } from '../core/jwt-revocations.ts'
import type { Clock } from '../core/ports.ts'
import type { JwtRevocationStore } from '../stores/store.ts'

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
  close(): void
}

export function createJwtRevocationFeed(
  store: Pick<JwtRevocationStore, 'getJwtRevocation' | 'listJwtRevocations'>,
  clock: Clock,
  onError: (error: unknown) => void = () => {},
): JwtRevocationFeed {
  const rules = new JwtRevocationSet()
  let queue: Promise<void> = Promise.resolve()
  let failing = false
  let retry: ReturnType<typeof setTimeout> | undefined
  let closed = false

  const run = (read: () => Promise<void>): Promise<void> => {
    queue = queue.then(async () => {
      if (closed) return
      try {
        await read()
        failing = false
      } catch (error) {
        if (!failing) onError(error)
        failing = true
        retry ??= setTimeout(() => {
          retry = undefined
          if (!closed) void feed.reload()
        }, RETRY_MS)
        retry.unref?.()
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
        rules.replaceAll(await store.listJwtRevocations(clock.now()))
      }),
    failing: () => failing,
    close() {
      closed = true
      if (retry !== undefined) clearTimeout(retry)
    },
  }
  return feed
}
