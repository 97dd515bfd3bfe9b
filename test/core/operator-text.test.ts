import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { escapeUnsafeText, isSafeText, isTenantId } from '../../src/core/operator-text.ts'

describe('operator text rule', () => {
  it('refuses tenant ids made only of dots and dashes, keeps the rest', () => {
    for (const id of ['.', '..', '...', '-', '--', '-.-', '.-.'])
      assert.equal(isTenantId(id), false, id)
    for (const id of ['a', 'a.b', '.env', 'x-', 'A_1']) assert.equal(isTenantId(id), true, id)
    assert.equal(isTenantId(''), false)
    assert.equal(isTenantId('x'.repeat(65)), false)
  })

  it('refuses C0, C1, bidi, zero-width, separators and lone surrogates', () => {
    for (const c of [
      '\u0000',
      '\t',
      '\n',
      '\u001b',
      '\u007f',
      '\u0085',
      '\u009b',
      '\u061c',
      '\u200b',
      '\u200c',
      '\u200d',
      '\u200e',
      '\u200f',
      '\u2028',
      '\u2029',
      '\u202a',
      '\u202e',
      '\u2060',
      '\u2066',
      '\u2069',
      '\ufeff',
      '\ud800',
    ]) {
      assert.equal(isSafeText(`a${c}b`), false, c.codePointAt(0)?.toString(16))
    }
    for (const text of ['alice', 'Zoë Ünal', '名前', 'ci-deploy@example.com', '🙂']) {
      assert.equal(isSafeText(text), true, text)
    }
  })

  it('escapes unsafe characters visibly and leaves safe text alone', () => {
    assert.equal(escapeUnsafeText('a\u009b2Jb\u202e'), 'a\\u{9b}2Jb\\u{202e}')
    assert.equal(escapeUnsafeText('Zoë 🙂'), 'Zoë 🙂')
  })
})
