import type { AuthFailure } from './failure.ts'
import { holdsAll } from './permissions.ts'
import type { Principal } from './principal.ts'

/**
 * The permission rule (SPEC §5.3 rule 5, DESIGN rule 7): the principal must hold every
 * permission in `required`, matched exactly (see `permissions.ts`). Run only after
 * authentication succeeded, so a 401 is always decided before a 403.
 *
 * @returns `undefined` when allowed; otherwise `insufficient_permission` carrying all of
 *   `required` (what the 403 challenge's `scope` names).
 *
 * @example
 * const failure = authorize(principal, ['tokens:read'])
 * if (failure) return send(failureResponse(failure, requestId))
 */
export function authorize(
  principal: Principal,
  required: readonly string[],
): AuthFailure | undefined {
  if (holdsAll(principal.permissions, required)) return undefined
  return { code: 'insufficient_permission', required: Object.freeze([...required]) }
}
