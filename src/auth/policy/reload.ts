/**
 * A policy that can be replaced while the server runs: the proxy decides through a matcher
 * that always delegates to the last policy that loaded cleanly. A bad edit never takes the
 * gateway down or opens it up: it is logged with every problem's file:line:col, and the
 * last good policy stays in force (as nginx keeps its old workers on a failed `reload`).
 */

import { createPolicyMatcher, type PolicyMatcher } from './matcher.ts'
import { DEFAULT_POLICY, loadPolicy, type Policy, parsePolicy } from './policy.ts'

export interface PolicyReloadLog {
  info(fields: object, message: string): void
  error(fields: object, message: string): void
}

export type ReloadResult = { readonly ok: true } | { readonly ok: false; readonly error: Error }

export interface ReloadablePolicy {
  /** Decides with the current policy. */
  readonly matcher: PolicyMatcher
  /** Reads the file again; on any problem keeps the current policy and logs why. */
  reload(): Promise<ReloadResult>
}

export function createReloadablePolicy(
  file: string,
  initial: Policy,
  log: PolicyReloadLog,
  load: () => Promise<Policy> = () => loadPolicy(file),
): ReloadablePolicy {
  let current = createPolicyMatcher(initial)
  return {
    matcher: {
      decide: (method, path, principal, segments) =>
        current.decide(method, path, principal, segments),
    },
    async reload() {
      try {
        const policy = await load()
        current = createPolicyMatcher(policy)
        log.info({ policyFile: file, rules: policy.rules.length }, 'gateway policy reloaded')
        return { ok: true }
      } catch (error) {
        // PolicyError's message lists each problem as file:line:col.
        const err = error instanceof Error ? error : new Error(String(error))
        log.error(
          { policyFile: file, problems: err.message },
          'gateway policy reload failed; keeping the last good policy',
        )
        return { ok: false, error: err }
      }
    },
  }
}

/**
 * Where a stored policy comes from: the store's policy role and its change feed (by shape:
 * only the store's types, never the store).
 */
export interface StoredPolicySource {
  getPolicy(name: string): Promise<{ readonly text: string } | undefined>
  watch(listener: (change: { readonly kind: string; readonly name?: string }) => void): () => void
}

/** The name the gateway's (and the decision API's) policy is stored under. */
export const GATEWAY_POLICY = 'gateway'

/**
 * The policy stored under `gateway` (none stored: the default policy). Read once here,
 * then again whenever the change log says it changed, on every instance; an invalid text
 * (written around `tokengate policy set`, which validates) keeps the last good policy.
 */
async function loadStoredPolicy(store: StoredPolicySource): Promise<Policy> {
  const stored = await store.getPolicy(GATEWAY_POLICY)
  return stored ? parsePolicy(stored.text, `store:${GATEWAY_POLICY}`) : DEFAULT_POLICY
}

/** A policy in force for as long as a listener runs. */
export interface PolicyInForce {
  readonly matcher: PolicyMatcher
  /**
   * Whether a change the change log delivered is still being read (a stored policy): until
   * it is, decisions are made with the policy before it (the decision cache keeps none).
   */
  reloading(): boolean
  /** Stops following SIGHUP or the change log. */
  close(): void
}

/**
 * The policy a listener decides with: the store's when `store` is given
 * (`gateway.policyStore`), followed through the change log; else the file's, re-read on
 * SIGHUP (`tokengate apply` writes the file); else the default policy. Throws when the
 * policy is invalid at start.
 */
export async function policyInForce(
  file: string | undefined,
  log: PolicyReloadLog,
  store?: StoredPolicySource | undefined,
): Promise<PolicyInForce> {
  if (store) {
    const source = `store:${GATEWAY_POLICY}`
    const reloadable = createReloadablePolicy(source, await loadStoredPolicy(store), log, () =>
      loadStoredPolicy(store),
    )
    let pending = 0
    const unwatch = store.watch((change) => {
      if (
        (change.kind === 'policy_changed' && change.name === GATEWAY_POLICY) ||
        change.kind === 'resync'
      ) {
        pending++
        void reloadable.reload().finally(() => pending--)
      }
    })
    return { matcher: reloadable.matcher, reloading: () => pending > 0, close: unwatch }
  }
  if (!file) {
    return { matcher: createPolicyMatcher(DEFAULT_POLICY), reloading: () => false, close() {} }
  }
  const reloadable = createReloadablePolicy(file, await loadPolicy(file), log)
  const onHangup = () => void reloadable.reload()
  process.on('SIGHUP', onHangup)
  return {
    matcher: reloadable.matcher,
    reloading: () => false,
    close() {
      process.off('SIGHUP', onHangup)
    },
  }
}
