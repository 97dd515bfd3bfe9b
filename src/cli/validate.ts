import { escapeUnsafeText, isPermission, isSafeText, isTenantId } from '../core/operator-text.ts'
import { UsageError } from './errors.ts'

/** Validates a tenant id given as `--<flag>` or as the positional `ID`. */
export function checkTenantId(value: string, where: string): string {
  if (!isTenantId(value)) {
    throw new UsageError(
      `${where}: '${printable(value)}' is not a valid tenant id (expected 1-64 characters of A-Z a-z 0-9 . _ -, not only dots and dashes)`,
    )
  }
  return value
}

/** Validates (core/operator-text.ts) and de-duplicates permission strings, keeping their order. */
export function checkPermissions(values: readonly string[], flagName = 'permission'): string[] {
  for (const value of values) {
    if (!isPermission(value)) {
      throw new UsageError(
        `--${flagName}: '${printable(value)}' is not a valid permission (expected e.g. tokens:read: a lowercase name, then :-separated segments of a-z 0-9 _ . - *)`,
      )
    }
  }
  return [...new Set(values)]
}

/**
 * Free text such as a subject or a name: bounded, and free of control, bidi and zero-width
 * characters (core/operator-text.ts).
 */
export function checkText(value: string, flagName: string, maxLength: number): string {
  if (value.length > maxLength || !isSafeText(value)) {
    throw new UsageError(
      `--${flagName}: expected at most ${maxLength} characters without control, bidi or zero-width characters`,
    )
  }
  return value
}

/** A value safe to echo in an error message: control characters escaped, length bounded. */
export function printable(value: string): string {
  const shown = escapeUnsafeText(JSON.stringify(value).slice(1, -1))
  return shown.length > 80 ? `${shown.slice(0, 77)}...` : shown
}
