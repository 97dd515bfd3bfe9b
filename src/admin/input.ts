import { OperationRefused } from '../auth/operations.ts'

/**
 * Input checks of the admin API and console, before an operation runs: the same rules the
 * CLI applies to its flags (docs/cli.md "Values"), refused as `invalid_input` (400).
 */
const TENANT_ID = /^[A-Za-z0-9._-]{1,64}$/
const PERMISSION = /^[a-z][a-z0-9_.-]*(:[a-z0-9_.*-]+)*$/
// biome-ignore lint/suspicious/noControlCharactersInRegex: refusing control characters is the point
const CONTROL = /[\u0000-\u001f\u007f]/

export function invalid(field: string, message: string): OperationRefused {
  return new OperationRefused('invalid_input', field, `${field}: ${message}`)
}

export function checkTenantId(value: string): string {
  if (!TENANT_ID.test(value))
    throw invalid('tenant id', 'expected 1-64 characters of A-Z a-z 0-9 . _ -')
  return value
}

export function checkText(
  value: string,
  field: string,
  maxLength: number,
  required = false,
): string {
  if (value.length > maxLength || CONTROL.test(value) || (required && value.length === 0)) {
    throw invalid(
      field,
      `expected ${required ? '1' : '0'}-${maxLength} characters without control characters`,
    )
  }
  return value
}

export function checkPermissions(values: readonly string[]): string[] {
  for (const value of values) {
    if (value.length > 128 || !PERMISSION.test(value)) {
      throw invalid('permission', 'expected e.g. tokens:read')
    }
  }
  return [...new Set(values)]
}
