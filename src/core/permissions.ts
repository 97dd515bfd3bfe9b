/**
 * Permission strings (`tokens:read`, `audit:read`, ...) and how they match.
 *
 * Matching is exact, case-sensitive string equality: no wildcards, no prefixes, no
 * hierarchy (`tokens:*` does not imply `tokens:read`, and `tokens` does not imply
 * `tokens:read`). Why: every grant is then visible by reading the list, and no string
 * an issuer happens to put in a claim can widen access by pattern.
 */

/** The required permissions that `held` lacks, in the order they were required. */
export function missingPermissions(
  held: readonly string[],
  required: readonly string[],
): readonly string[] {
  if (required.length === 0) return []
  const heldSet = new Set(held)
  return required.filter((permission) => !heldSet.has(permission))
}

/** Whether `held` includes every permission in `required` (exact match; see module doc). */
export function holdsAll(held: readonly string[], required: readonly string[]): boolean {
  return missingPermissions(held, required).length === 0
}
