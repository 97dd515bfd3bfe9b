import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import { cli, tempDataDir, withDataStore } from './helpers.ts'

/**
 * Operator input is printed back to operators' terminals, so it must not carry what a
 * terminal obeys or hides: C0/C1 controls (U+009B is a one-byte CSI), bidi overrides and
 * isolates (Trojan Source), zero-width characters. Tenant ids made only of dots or dashes
 * look like paths and options.
 */
const UNSAFE: readonly [string, string][] = [
  ['C1 CSI U+009B', 'alice\u009b31mred'],
  ['C0 ESC', 'alice\u001b[2J'],
  ['DEL', 'alice\u007f'],
  ['RLO U+202E', 'alice\u202etxt.exe'],
  ['LRE U+202A', '\u202aalice'],
  ['RLI U+2067', 'alice\u2067x'],
  ['PDI U+2069', 'alice\u2069'],
  ['ZWSP U+200B', 'ali\u200bce'],
  ['ZWJ U+200D', 'ali\u200dce'],
  ['BOM U+FEFF', '\ufeffalice'],
  ['WJ U+2060', 'ali\u2060ce'],
]

/** Anything but tab and newline that a terminal would obey or hide. */
const TERMINAL_UNSAFE =
  // biome-ignore lint/suspicious/noControlCharactersInRegex: looking for them is the point
  /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u200b-\u200d\u2028-\u202e\u2060\u2066-\u2069\ufeff]/u

describe('terminal-safe operator input (#11 item 8)', () => {
  const data = tempDataDir()
  before(async () => {
    assert.equal((await cli(['tenant', 'create', 'acme'], { dataDir: data.dir })).code, 0)
  })
  after(() => data.cleanup())

  for (const [label, value] of UNSAFE) {
    it(`pat issue refuses a subject with ${label}`, async () => {
      const result = await cli(
        ['pat', 'issue', '--tenant', 'acme', '--subject', value, '--permission', 'tokens:read'],
        { dataDir: data.dir },
      )
      assert.equal(result.code, 2, result.stderr)
      assert.equal(result.stdout, '')
    })

    it(`pat issue and tenant create refuse a name with ${label}`, async () => {
      const pat = await cli(
        ['pat', 'issue', '--tenant', 'acme', '--subject', 'bob', '--name', value],
        { dataDir: data.dir },
      )
      assert.equal(pat.code, 2, pat.stderr)
      const tenant = await cli(['tenant', 'create', 'other', '--name', value], {
        dataDir: data.dir,
      })
      assert.equal(tenant.code, 2, tenant.stderr)
    })
  }

  for (const id of ['.', '..', '...', '-', '--', '-.-', '.-']) {
    it(`tenant create refuses the id '${id}'`, async () => {
      const result = await cli(['tenant', 'create', id], { dataDir: data.dir })
      assert.equal(result.code, 2, `${id}: ${result.stderr}`)
    })
  }

  it('tenant ids with dots or dashes beside other characters are still fine', async () => {
    for (const id of ['a.b', 'team-1', '.env', 'x-']) {
      const result = await cli(['tenant', 'create', id], { dataDir: data.dir })
      assert.equal(result.code, 0, `${id}: ${result.stderr}`)
    }
  })

  it('rows stored before the rule are escaped on output: pat list, tenant list, --json', async () => {
    const hostile = 'evil\u009b2J\u202etxt\u200b\u001b]0;owned\u0007'
    await withDataStore(data.dir, async (store) => {
      await store.createTenant({ id: 'legacy', name: hostile }, Date.now())
    })
    const issued = await cli(
      ['pat', 'issue', '--tenant', 'legacy', '--subject', 'ok', '--name', 'ok'],
      { dataDir: data.dir },
    )
    assert.equal(issued.code, 0, issued.stderr)
    await withDataStore(data.dir, async (store) => {
      const page = await store.listPats('legacy', { limit: 10 })
      const record = page.items[0]
      assert.ok(record)
      await store.insertPat({
        ...record,
        id: `${record.id}x`,
        tokenHash: 'f'.repeat(64),
        subject: hostile,
        name: hostile,
      })
    })
    const outputs = [
      await cli(['tenant', 'list'], { dataDir: data.dir }),
      await cli(['tenant', 'list', '--json'], { dataDir: data.dir }),
      await cli(['pat', 'list', '--tenant', 'legacy'], { dataDir: data.dir }),
      await cli(['pat', 'list', '--tenant', 'legacy', '--json'], { dataDir: data.dir }),
    ]
    for (const output of outputs) {
      assert.equal(output.code, 0, output.stderr)
      assert.doesNotMatch(output.stdout, TERMINAL_UNSAFE, JSON.stringify(output.stdout))
      assert.match(output.stdout, /evil/)
    }
    // JSON output still carries the stored value exactly, only escaped.
    const json = JSON.parse(outputs[1]?.stdout ?? '{}') as { tenants: { name: string }[] }
    assert.ok(json.tenants.some((t) => t.name === hostile))
  })
})
