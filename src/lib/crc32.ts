/**
 * CRC-32 (IEEE 802.3, zlib's `crc32`) of a string's characters taken as bytes, in JavaScript:
 * for the PAT checksum (core/pat.ts), whose 32 characters are ASCII. Why not `zlib.crc32`:
 * for 32 bytes the call into C and the string's conversion cost more than the sum itself
 * (issue #36: the format check of every PAT request cost as much as its SHA-256).
 * Characters above 0xff are not bytes: callers check the alphabet first.
 */
const TABLE = (() => {
  const table = new Int32Array(256)
  for (let n = 0; n < 256; n++) {
    let c = n
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1
    table[n] = c
  }
  return table
})()

/** zlib's `crc32` of `text.slice(start, end)` as latin1 bytes, an unsigned 32-bit integer. */
export function crc32Latin1(text: string, start = 0, end = text.length): number {
  let crc = CRC32_START
  for (let i = start; i < end; i++) crc = crc32Step(crc, text.charCodeAt(i))
  return crc32End(crc)
}

/**
 * The sum one byte at a time, for a caller that reads each character anyway (core/pat.ts
 * checks the alphabet in the same pass): `crc32End(steps from CRC32_START)` is `crc32Latin1`.
 */
export const CRC32_START = -1

export function crc32Step(crc: number, byte: number): number {
  return (TABLE[(crc ^ byte) & 0xff] as number) ^ (crc >>> 8)
}

export function crc32End(crc: number): number {
  return (crc ^ -1) >>> 0
}
