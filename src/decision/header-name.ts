/**
 * Whether a raw header name is `name` (lower-case ASCII) in any ASCII case: core's
 * `equalsAsciiLowercase` rule, on the native lower-casing (faster than a character loop).
 * Of every UTF-16 unit only the Kelvin sign lower-cases onto ASCII (`k`) without changing
 * the length: it is excluded, so a look-alike is another name. A module of its own because
 * forwarded-request.ts and proxy-kinds.ts both read names and one already imports the other.
 */
export function isHeaderName(raw: string, name: string): boolean {
  return raw.length === name.length && raw.toLowerCase() === name && !raw.includes('\u212a')
}
