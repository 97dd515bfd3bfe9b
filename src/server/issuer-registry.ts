import type { IssuerConfig } from '../core/issuer.ts'
import { createJwtVerifier, type JwtVerifierOptions } from '../core/jwt.ts'
import type { JwtOutcome, JwtVerifier } from '../core/ports.ts'
import type { Store } from '../stores/store.ts'

export interface IssuerRegistry extends JwtVerifier {
  /** Re-reads the trusted issuers from the store and swaps in a fresh verifier. */
  reload(): Promise<void>
  issuers(): readonly IssuerConfig[]
}

/**
 * The JWT verifier for the issuers registered in the store. Issuers change rarely (an
 * operator's `issuer add/remove`), so the whole verifier is rebuilt on change rather than
 * patched: its caches then never hold a key or a token of a removed issuer.
 */
export async function createIssuerRegistry(
  store: Pick<Store, 'listIssuers'>,
  options: JwtVerifierOptions,
  onReloadError: (error: unknown) => void = () => {},
): Promise<IssuerRegistry> {
  let issuers: readonly IssuerConfig[] = await store.listIssuers()
  let current = createJwtVerifier(issuers, options)
  let reloading: Promise<void> | undefined
  let reloadAgain = false

  async function reloadOnce(): Promise<void> {
    try {
      const next = await store.listIssuers()
      const previous = current
      issuers = next
      current = createJwtVerifier(next, options)
      previous.close()
    } catch (error) {
      // Keep verifying with the last known issuers: removing trust because the store blinked
      // would turn a store outage into 401s for every JWT caller.
      onReloadError(error)
    }
  }

  return {
    verify: (token: string): Promise<JwtOutcome> => current.verify(token),
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
    close: () => current.close(),
  }
}
