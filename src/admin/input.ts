import { badValue } from '../auth/key-fields.ts'
import { OperationRefused } from '../auth/operations.ts'
import { isPermission, isSafeText, isTenantId } from '../core/operator-text.ts'

/**
 * Input checks of the admin API and console, before an operation runs: the CLI's rules
 * (core/operator-text.ts, docs/cli.md "Values"), refused as `invalid_input` (400).
 */

export function invalid(field: string, message: string): OperationRefused {
  return new OperationRefused('invalid_input', field, `${field}: ${message}`)
}

/**
 * `check`'s value; its refusal over a bound of the lifecycle (`OperationRefused.limit`) as
 * `field`'s, the range worded by `range` in the field's own unit (the number is the lifecycle's).
 */
export function withinLimit<T>(field: string, check: () => T, range: (maxMs: number) => string): T {
  try {
    return check()
  } catch (error) {
    const maxMs = error instanceof OperationRefused ? error.limit?.maxMs : undefined
    if (maxMs === undefined) throw error
    throw invalid(field, range(maxMs))
  }
}

export function checkTenantId(value: string): string {
  if (!isTenantId(value))
    throw badValue(
      'tenant id',
      value,
      '1-64 characters of A-Z a-z 0-9 . _ -, not only dots and dashes',
    )
  return value
}

export function checkText(
  value: string,
  field: string,
  maxLength: number,
  required = false,
): string {
  if (value.length > maxLength || !isSafeText(value) || (required && value.length === 0)) {
    throw badValue(
      field,
      value,
      `${required ? '1' : '0'}-${maxLength} characters without control, bidi or zero-width characters`,
    )
  }
  return value
}

export function checkPermissions(values: readonly string[]): string[] {
  for (const value of values) {
    if (!isPermission(value)) throw badValue('permission', value, 'e.g. tokens:read')
  }
  return [...new Set(values)]
}
