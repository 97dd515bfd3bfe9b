/**
 * A policy that can be replaced while the server runs: the proxy decides through a matcher
 * that always delegates to the last policy that loaded cleanly. A bad edit never takes the
 * gateway down or opens it up: it is logged with every problem's file:line:col, and the
 * last good policy stays in force (as nginx keeps its old workers on a failed `reload`).
 */

import { createPolicyMatcher, type PolicyMatcher } from './matcher.ts'
import { DEFAULT_POLICY, loadPolicy, type Policy } from './policy.ts'

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
): ReloadablePolicy {
  let current = createPolicyMatcher(initial)
  return {
    matcher: {
      decide: (method, path, principal, segments) =>
        current.decide(method, path, principal, segments),
    },
    async reload() {
      try {
        const policy = await loadPolicy(file)
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

/** A policy in force for as long as a listener runs. */
export interface PolicyInForce {
  readonly matcher: PolicyMatcher
  /** Stops following SIGHUP. */
  close(): void
}

/**
 * The policy a listener decides with: the file's, re-read on SIGHUP (`tokengate apply`
 * writes the file), or the default policy without a file. Throws when the file is invalid
 * at start.
 */
export async function policyInForce(
  file: string | undefined,
  log: PolicyReloadLog,
): Promise<PolicyInForce> {
  if (!file) return { matcher: createPolicyMatcher(DEFAULT_POLICY), close() {} }
  const reloadable = createReloadablePolicy(file, await loadPolicy(file), log)
  const onHangup = () => void reloadable.reload()
  process.on('SIGHUP', onHangup)
  return {
    matcher: reloadable.matcher,
    close() {
      process.off('SIGHUP', onHangup)
    },
  }
}
