import type { IssuerConfig } from '../core/issuer.ts'
import { createJwksPool, type JwksStatus } from '../core/jwks.ts'
import { createJwtVerifier, type JwtVerifierOptions } from '../core/jwt.ts'
import type { JwtOutcome, JwtVerifier } from '../core/ports.ts'
import { unreadableReason } from '../stores/secret-box.ts'
import type { Store } from '../stores/store.ts'

export interface IssuerRegistry extends JwtVerifier {
  /** Re-reads the trusted issuers from the store and swaps in a fresh verifier. */
  reload(): Promise<void>
  issuers(): readonly IssuerConfig[]
  /**
   * The state of every remote key source (JWKS URL or discovery), one per such issuer, and
   * a background refresh of those that are due. Issuers with static keys are always ready
   * and not listed. For `/readyz`.
   */
  keyStatus(): readonly JwksStatus[]
  /**
   * Issuers whose stored configuration the core refused (e.g. a key it cannot bind): their
   * tokens get 503 until the configuration is fixed. For `/readyz`.
   */
  unusable(): readonly string[]
  /**
   * Issuers in the store whose key this instance cannot read (a sealed secret without the key
   * that opens it): refused with 503 until `secretKeyFile` names that key. For `/readyz`.
   */
  unreadable(): readonly string[]
  /**
   * Whether the last reading of the issuer set failed (the store did not answer): the set in
   * force is the one read before, and a reload is retried every `RELOAD_RETRY_MS`. For `/readyz`.
   */
  reloadFailing(): boolean
}

/** While re-reading the issuers fails, it is retried this often (ms). */
const RELOAD_RETRY_MS = 1000

/**
 * The JWT verifier for the issuers registered in the store. Issuers change rarely (an
 * operator's `issuer add/remove`), so the whole verifier is rebuilt on change rather than
 * patched: its token cache then never holds a token of a removed issuer. Remote key sources
 * are pooled across rebuilds (see `createJwksPool`): a change to one issuer neither drops
 * another issuer's cached keys nor refetches every JWKS.
 */
/**
 * The issuers' part of `/readyz` and of the admin status view (one rule for both):
 * - `notLoaded`: no usable keys: their tokens get 503 `unavailable` for now;
 * - `stale`: past their maximum age because refreshing fails (still verifying);
 * - `skippedKeys`: keys an issuer's JWKS publishes that cannot be used (bad material, type,
 *   or no algorithm on the issuer's allow-list): tokens signed with them get 401. By `kid`
 *   and reason only, never material;
 * - `invalid`: configurations the core refused (their tokens get 503);
 * - `unreadable`: issuers whose sealed secret this instance cannot open (503);
 * - `reloadFailing`: the last re-read of the issuer set failed; the previous set is in force.
 * `degraded` when any of these is not empty (or true).
 */
export function issuerReadiness(
  registry: Pick<IssuerRegistry, 'keyStatus'> &
    Partial<Pick<IssuerRegistry, 'unusable' | 'unreadable' | 'reloadFailing'>>,
) {
  const statuses = registry.keyStatus()
  const issuersWhere = (test: (s: JwksStatus) => boolean) =>
    statuses.filter(test).map((s) => s.issuer)
  const view = {
    remote: statuses.length,
    notLoaded: issuersWhere((s) => s.state === 'unavailable'),
    // Past max age only because refreshing fails (not merely due on a quiet instance).
    stale: issuersWhere((s) => s.state === 'stale' && s.failingSince !== null),
    skippedKeys: statuses.flatMap((s) =>
      s.skippedKeys.map(({ kid, reason }) => ({ issuer: s.issuer, kid, reason })),
    ),
    invalid: registry.unusable?.() ?? [],
    unreadable: registry.unreadable?.() ?? [],
    reloadFailing: registry.reloadFailing?.() ?? false,
  }
  const degraded =
    view.notLoaded.length + view.stale.length + view.skippedKeys.length > 0 ||
    view.invalid.length + view.unreadable.length > 0 ||
    view.reloadFailing
  return { view, degraded }
}

export async function createIssuerRegistry(
  store: Pick<Store, 'listIssuers'>,
  options: JwtVerifierOptions,
  onReloadError: (error: unknown) => void = () => {},
  onUnusableIssuer: (issuer: string, error: Error) => void = () => {},
  onUnreadableIssuer: (issuer: string, reason: string) => void = () => {},
): Promise<IssuerRegistry> {
  const pool = createJwksPool()
  let unusable: readonly string[] = []
  let unreadable: readonly string[] = []
  // One refused issuer must not take every tenant and PAT down with it (a start that exits,
  // or a reload that keeps the old set and so never loads the good issuers beside it).
  const build = (all: readonly IssuerConfig[]) => {
    const refused: string[] = []
    // An issuer whose secret cannot be opened here is refused by name; the others load.
    const configs = all.filter((config) => unreadableReason(config) === undefined)
    const cannotRead = all.filter((config) => unreadableReason(config) !== undefined)
    for (const config of cannotRead) {
      // One line when an issuer becomes unreadable, not one per reload.
      if (!unreadable.includes(config.issuer)) {
        onUnreadableIssuer(config.issuer, unreadableReason(config) as string)
      }
    }
    const verifier = pool.retain(() =>
      createJwtVerifier(configs, {
        ...options,
        unreadableIssuers: cannotRead.map((config) => config.issuer),
        jwksPool: pool,
        onUnusableIssuer: (issuer, error) => {
          refused.push(issuer)
          onUnusableIssuer(issuer, error)
        },
      }),
    )
    unusable = refused.sort()
    unreadable = cannotRead.map((config) => config.issuer).sort()
    // Load keys now rather than on the first token: readiness then tells the truth early,
    // and the first caller does not wait for the identity provider.
    void pool.warm()
    return verifier
  }
  let issuers: readonly IssuerConfig[] = await store.listIssuers()
  let current = build(issuers)
  let reloading: Promise<void> | undefined
  let reloadAgain = false
  let retry: ReturnType<typeof setTimeout> | undefined
  let failing = false
  let closed = false

  async function reloadOnce(): Promise<void> {
    try {
      const next = await store.listIssuers()
      const previous = current
      current = build(next)
      issuers = next
      previous.close()
      failing = false
    } catch (error) {
      // Keep verifying with the last known issuers: removing trust because the store blinked
      // would turn a store outage into 401s for every JWT caller. But not silently, and not
      // until the next change happens to arrive: /readyz says so and the read is retried.
      if (!failing) onReloadError(error)
      failing = true
      retry ??= setTimeout(() => {
        retry = undefined
        if (!closed) void registry.reload()
      }, RELOAD_RETRY_MS)
      retry.unref?.()
    }
  }

  const registry: IssuerRegistry = {
    verify: (token: string): Promise<JwtOutcome> => current.verify(token),
    verifyMaybeSync: (token: string, sha256Hex?: string): JwtOutcome | Promise<JwtOutcome> =>
      current.verifyMaybeSync(token, sha256Hex),
    reload() {
      // A change that arrives while a reload reads the store may not be in what it read:
      // run once more after it instead of joining it.
      if (reloading) {
        reloadAgain = true
        return reloading
      }
      reloading = (async () => {
        do {
          reloadAgain = false
          await reloadOnce()
        } while (reloadAgain)
      })().finally(() => {
        reloading = undefined
      })
      return reloading
    },
    issuers: () => issuers,
    unusable: () => unusable,
    unreadable: () => unreadable,
    reloadFailing: () => failing,
    keyStatus() {
      void pool.warm()
      return pool.statuses()
    },
    close: () => {
      closed = true
      if (retry !== undefined) clearTimeout(retry)
      current.close()
      pool.close()
    },
  }
  return registry
}
