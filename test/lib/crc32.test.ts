/**
 * lib/crc32.ts against zlib's crc32, and core/pat.ts's one-pass checkPatFormat (issue #36)
 * against the regular-expression and string-checksum version it replaced, on generated PATs
 * and every kind of single-character damage to them.
 */
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { describe, test } from 'node:test'
import { crc32 } from 'node:zlib'
import { checkPatFormat, generatePat } from '../../src/core/pat.ts'
import { CRC32_START, crc32End, crc32Latin1, crc32Step } from '../../src/lib/crc32.ts'

const BASE62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz'

/** The check as it was written before: prefix and length, alphabet, checksum string. */
function referenceCheck(token: string) {
  if (token.length !== 42 || !token.startsWith('pat_')) return { ok: false, reason: 'malformed' }
  const body = token.slice(4)
  if (!/^[0-9A-Za-z]{38}$/.test(body)) return { ok: false, reason: 'malformed' }
  let rest = crc32(body.slice(0, 32))
  let checksum = ''
  for (let i = 0; i < 6; i++) {
    checksum = BASE62[rest % 62] + checksum
    rest = Math.floor(rest / 62)
  }
  return body.slice(32) === checksum ? { ok: true } : { ok: false, reason: 'bad_checksum' }
}

describe('crc32Latin1', () => {
  test('equals zlib crc32 of the latin1 bytes, whole strings and ranges', () => {
    for (let n = 0; n < 300; n++) {
      const text = randomBytes(n % 70).toString('latin1')
      assert.equal(crc32Latin1(text), crc32(Buffer.from(text, 'latin1')))
      const start = Math.min(3, text.length)
      assert.equal(
        crc32Latin1(text, start, text.length),
        crc32(Buffer.from(text.slice(start), 'latin1')),
      )
    }
    assert.equal(crc32Latin1(''), 0)
    assert.equal(crc32Latin1('123456789'), 0xcbf43926)
  })
})

describe('crc32Step', () => {
  test('a byte at a time from CRC32_START, then crc32End, is crc32Latin1', () => {
    for (const length of [0, 1, 7, 32, 100]) {
      const text = randomBytes(length).toString('latin1')
      let crc = CRC32_START
      for (let i = 0; i < text.length; i++) crc = crc32Step(crc, text.charCodeAt(i))
      assert.equal(crc32End(crc), crc32Latin1(text))
    }
  })
})

describe('checkPatFormat (one pass) decides as the reference does', () => {
  test('generated PATs and every single-character change of them', () => {
    const replacements = ['0', 'z', 'Z', '_', '-', ' ', '\u00e9', '\u212a', '\u0000', '\uffff']
    for (let n = 0; n < 40; n++) {
      const token = generatePat()
      assert.deepEqual(checkPatFormat(token), { ok: true })
      for (let at = 0; at < token.length; at++) {
        for (const char of [...replacements, BASE62[(n * 7 + at) % 62] as string]) {
          const damaged = token.slice(0, at) + char + token.slice(at + 1)
          assert.deepEqual(checkPatFormat(damaged), referenceCheck(damaged), damaged)
        }
      }
    }
  })

  test('wrong lengths, prefixes and a checksum that overflows 32 bits', () => {
    const token = generatePat()
    const cases = [
      '',
      'pat_',
      token.slice(0, 41),
      `${token}0`,
      `PAT_${token.slice(4)}`,
      `pat-${token.slice(4)}`,
      `${token.slice(0, 36)}zzzzzz`,
      `${token.slice(0, 36)}000000`,
    ]
    for (const value of cases) assert.deepEqual(checkPatFormat(value), referenceCheck(value), value)
  })
})
