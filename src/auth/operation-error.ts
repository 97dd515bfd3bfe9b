/**
 * An operator action that cannot be done, with why: the admin API maps `kind` to a status
 * (invalid 400, not_found 404, conflict 409) and the CLI to exit code 1 or 2.
 */
export class OperationError extends Error {
  override readonly name = 'OperationError'
  readonly kind: 'invalid' | 'not_found' | 'conflict'
  constructor(kind: OperationError['kind'], message: string) {
    super(message)
    this.kind = kind
  }
}

/** Tenant ids: the exact `X-Tenant-Id` value, 1–64 of `A-Z a-z 0-9 . _ -`. */
export const TENANT_ID = /^[A-Za-z0-9._-]{1,64}$/
/** Permission strings, e.g. `tokens:read` (docs/cli.md "Values"). */
export const PERMISSION = /^[a-z][a-z0-9_.-]*(:[a-z0-9_.*-]+)*$/
// biome-ignore lint/suspicious/noControlCharactersInRegex: refusing control characters is the point
const CONTROL = /[\u0000-\u001f\u007f]/

export function checkTenantIdValue(value: string): string {
  if (!TENANT_ID.test(value)) {
    throw new OperationError('invalid', 'tenant id: expected 1-64 characters of A-Z a-z 0-9 . _ -')
  }
  return value
}

export function checkTextValue(value: string, what: string, maxLength: number): string {
  if (value.length > maxLength || CONTROL.test(value)) {
    throw new OperationError(
      'invalid',
      `${what}: expected at most ${maxLength} characters without control characters`,
    )
  }
  return value
}

export function checkPermissionValues(values: readonly string[]): string[] {
  for (const value of values) {
    if (value.length > 128 || !PERMISSION.test(value)) {
      throw new OperationError('invalid', 'permission: expected e.g. tokens:read')
    }
  }
  return [...new Set(values)]
}
