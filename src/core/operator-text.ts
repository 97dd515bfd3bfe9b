/**
 * What operator-entered identifiers and free text may contain. Subjects, names and tenant
 * ids are printed back to operators (CLI tables, the admin console, logs), so they must not
 * carry what a terminal obeys or a reader cannot see. One rule for every entry point: the
 * CLI, the admin API and declarative `apply` all call these.
 */

/**
 * Characters refused in operator text and escaped on output:
 * - C0 controls and DEL (ESC starts terminal sequences; CR/LF forge lines),
 * - C1 controls U+0080–U+009F (U+009B is a one-byte CSI on many terminals),
 * - bidi embeddings/overrides U+202A–U+202E and isolates U+2066–U+2069 (Trojan Source,
 *   CVE-2021-42574), the implicit marks U+200E/U+200F and U+061C,
 * - zero-width and invisible joiners U+200B–U+200D, U+2060, U+FEFF, and the line and
 *   paragraph separators U+2028/U+2029,
 * - lone surrogates (not text; they become U+FFFD or worse downstream).
 */
const UNSAFE =
  // biome-ignore lint/suspicious/noControlCharactersInRegex: refusing control characters is the point
  /[\u0000-\u001f\u007f-\u009f\u061c\u200b-\u200f\u2028-\u202e\u2060\u2066-\u2069\ufeff]|\p{Cs}/u
const UNSAFE_GLOBAL = new RegExp(UNSAFE.source, 'gu')

/**
 * Tenant ids are the exact `X-Tenant-Id` value (compared byte for byte), so they are limited
 * to characters that survive every HTTP stack unchanged: 1–64 of `A-Z a-z 0-9 . _ -`.
 */
export const TENANT_ID_PATTERN = /^[A-Za-z0-9._-]{1,64}$/
/** Ids made only of dots and dashes (`.`, `..`, `-`) read as paths and options. */
const ONLY_DOTS_AND_DASHES = /^[.-]+$/

/** Whether `value` is an acceptable tenant id. */
export function isTenantId(value: string): boolean {
  return TENANT_ID_PATTERN.test(value) && !ONLY_DOTS_AND_DASHES.test(value)
}

/**
 * Permission strings: a lowercase resource, then `:`-separated segments, e.g. `tokens:read`,
 * `billing.invoices:write`, `reports:*`. Lowercase so that two spellings never name one
 * permission; `*` is allowed in segments after the first for route policies that use it.
 */
export const PERMISSION_PATTERN = /^[a-z][a-z0-9_.-]*(:[a-z0-9_.*-]+)*$/
export const MAX_PERMISSION_LENGTH = 128

/** Whether `value` is an acceptable permission string. */
export function isPermission(value: string): boolean {
  return value.length <= MAX_PERMISSION_LENGTH && PERMISSION_PATTERN.test(value)
}

/** The longest tenant display name, everywhere one is entered. */
export const MAX_TENANT_NAME_LENGTH = 200

/** Whether `value` is free of characters a terminal would obey or hide. */
export function isSafeText(value: string): boolean {
  return !UNSAFE.test(value)
}

/**
 * `value` with every unsafe character written as a visible `\u{…}` escape, for printing
 * stored values that predate the input rule (or came from elsewhere). Safe text is returned
 * unchanged.
 */
export function escapeUnsafeText(value: string): string {
  return UNSAFE.test(value)
    ? value.replace(UNSAFE_GLOBAL, (c) => `\\u{${(c.codePointAt(0) ?? 0).toString(16)}}`)
    : value
}

/** `1 issuer`, `2 issuers`, `1 admin token`: a count with its noun (plural: `plural` or +s). */
export function counted(count: number, noun: string, plural = `${noun}s`): string {
  return `${count} ${count === 1 ? noun : plural}`
}
