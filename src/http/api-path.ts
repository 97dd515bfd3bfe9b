/** The version prefix every endpoint path begins with (SPEC §4, §9). */
export const API_PREFIX = '/api/v1'

/** The path of a request target: everything before the first `?`. */
export function pathOf(url: string): string {
  const q = url.indexOf('?')
  return q === -1 ? url : url.slice(0, q)
}
