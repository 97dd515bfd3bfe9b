import { UsageError } from './errors.ts'

/**
 * Tenant ids are the exact `X-Tenant-Id` value (compared byte for byte), so they are limited
 * to characters that survive every HTTP stack unchanged: 1–64 of `A-Z a-z 0-9 . _ -`.
 */
export const TENANT_ID_PATTERN = /^[A-Za-z0-9._-]{1,64}$/

/**
 * Permission strings: a lowercase resource, then `:`-separated segments, e.g. `tokens:read`,
 * `billing.invoices:write`, `reports:*`. Lowercase so that two spellings never name one
 * permission; `*` is allowed in segments after the first for route policies that use it.
 */
export const PERMISSION_PATTERN = /^[a-z][a-z0-9_.-]*(:[a-z0-9_.*-]+)*$/
export const MAX_PERMISSION_LENGTH = 128

// biome-ignore lint/suspicious/noControlCharactersInRegex: refusing control characters is the point
const CONTROL = /[\u0000-\u001f\u007f]/

/** Validates a tenant id given as `--<flag>` or as the positional `ID`. */
export function checkTenantId(value: string, where: string): string {
  if (!TENANT_ID_PATTERN.test(value)) {
    throw new UsageError(
      `${where}: '${printable(value)}' is not a valid tenant id (expected 1-64 characters of A-Z a-z 0-9 . _ -)`,
    )
  }
  return value
}

/** Validates and de-duplicates permission strings, keeping their order. */
export function checkPermissions(values: readonly string[], flagName = 'permission'): string[] {
  for (const value of values) {
    if (value.length > MAX_PERMISSION_LENGTH || !PERMISSION_PATTERN.test(value)) {
      throw new UsageError(
        `--${flagName}: '${printable(value)}' is not a valid permission (expected e.g. tokens:read: a lowercase name, then :-separated segments of a-z 0-9 _ . - *)`,
      )
    }
  }
  return [...new Set(values)]
}

/** Free text such as a subject or a name: bounded, no control characters. */
export function checkText(value: string, flagName: string, maxLength: number): string {
  if (value.length > maxLength || CONTROL.test(value)) {
    throw new UsageError(
      `--${flagName}: expected at most ${maxLength} characters without control characters`,
    )
  }
  return value
}

/** A value safe to echo in an error message: control characters escaped, length bounded. */
export function printable(value: string): string {
  const shown = JSON.stringify(value).slice(1, -1)
  return shown.length > 80 ? `${shown.slice(0, 77)}...` : shown
}
