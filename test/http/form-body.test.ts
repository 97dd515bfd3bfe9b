import assert from 'node:assert/strict'
import { Readable } from 'node:stream'
import { describe, test } from 'node:test'
import { isFormContentType, peekBody, readBounded } from '../../src/http/form-body.ts'

/** A stream that delivers `parts` one per tick, as a socket does. */
function trickle(parts: readonly string[]): Readable {
  const queue = [...parts]
  return new Readable({
    read() {
      setImmediate(() => this.push(queue.length > 0 ? Buffer.from(queue.shift() as string) : null))
    },
  })
}

async function text(stream: Readable): Promise<string> {
  let all = ''
  for await (const chunk of stream) all += String(chunk)
  return all
}

describe('form bodies (RFC 6750 §2 check)', () => {
  test('isFormContentType: the form media type in any case, with parameters; nothing else', () => {
    assert.equal(isFormContentType('application/x-www-form-urlencoded'), true)
    assert.equal(isFormContentType(' Application/X-WWW-Form-Urlencoded; charset=utf-8'), true)
    assert.equal(isFormContentType('application/json'), false)
    assert.equal(isFormContentType('multipart/form-data; boundary=x'), false)
    assert.equal(isFormContentType(undefined), false)
  })

  test('peekBody reads a chunked body to its end and puts every byte back', async () => {
    const stream = trickle(['a=1', '&b=', '2'])
    const body = await peekBody(stream, 1024, undefined)
    assert.equal(body?.toString(), 'a=1&b=2')
    assert.equal(await text(stream), 'a=1&b=2', 'the next reader gets the same body')
  })

  test('peekBody stops at Content-Length without waiting for the end', async () => {
    const stream = trickle(['x=12', '345'])
    assert.equal((await peekBody(stream, 1024, 7))?.toString(), 'x=12345')
    assert.equal(await text(stream), 'x=12345')
  })

  test('peekBody over the limit: undefined, and what was read is put back', async () => {
    const stream = trickle(['aaaa', 'bbbb', 'cccc'])
    assert.equal(await peekBody(stream, 6, undefined), undefined)
    assert.equal(await text(stream), 'aaaabbbbcccc')
  })

  test('readBounded: the whole body, or undefined past the limit', async () => {
    assert.equal((await readBounded(trickle(['ab', 'cd']), 4))?.toString(), 'abcd')
    assert.equal(await readBounded(trickle(['ab', 'cde']), 4), undefined)
  })
})
