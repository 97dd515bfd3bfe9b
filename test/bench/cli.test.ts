/**
 * The bench scripts' command lines: a mistyped flag once started a full, unlocked bench, so
 * every script parses its flags once, strictly, and stops with its usage before doing anything.
 */
import assert from 'node:assert/strict'
import { spawnSync } from 'node:child_process'
import { test } from 'node:test'
import { parseCli, usageOf } from '../../bench/cli.ts'

const root = new URL('../../', import.meta.url)

test('a bench script given an unknown flag stops with its usage, exit 2, before it runs', () => {
  const run = spawnSync(process.execPath, ['bench/crypto.bench.ts', '--bogus'], {
    cwd: root,
    encoding: 'utf8',
    timeout: 30_000,
  })
  assert.equal(run.status, 2, run.stderr)
  assert.match(run.stderr, /'--bogus'/)
  assert.match(run.stderr, /Usage: node bench\/crypto\.bench\.ts \[--json\] \[--quick\]/)
  assert.equal(run.stdout, '')
})

const cli = {
  script: 'bench/example.ts',
  positionals: ['<dir>', '[case]'],
  options: {
    rounds: { type: 'number', integer: true, default: 40 },
    duration: { type: 'number', default: 4 },
    first: { type: 'number', integer: true, zero: true, default: 0 },
    json: { type: 'boolean' },
    cases: { type: 'regex' },
    baseline: { type: 'string' },
    store: { type: 'choice', choices: ['sqlite', 'postgres'], default: 'sqlite' },
    'node-flags': { type: 'flags', default: '' },
    env: { type: 'strings' },
  },
} as const

const parsed = (args: string[]) => {
  const outcome = parseCli(cli, args)
  if (outcome.kind !== 'parsed') assert.fail(JSON.stringify(outcome))
  return outcome
}
const refusal = (args: string[]) => {
  const outcome = parseCli(cli, args)
  if (outcome.kind !== 'error') assert.fail(JSON.stringify(outcome))
  return outcome.message
}

test('without flags every option takes its default', () => {
  assert.deepEqual(parsed(['d']), {
    kind: 'parsed',
    positionals: ['d'],
    values: {
      rounds: 40,
      duration: 4,
      first: 0,
      json: false,
      cases: undefined,
      baseline: undefined,
      store: 'sqlite',
      'node-flags': '',
      env: [],
    },
  })
})

test('flags are read wherever they stand, with their types', () => {
  const { values, positionals } = parsed(
    ['--rounds', '7', 'd', '--json', '--duration=0.5', '--cases', '^PAT', 'jwt'].concat([
      '--store',
      'postgres',
      '--env',
      'A=1',
      '--env',
      'B=2',
      '--baseline',
      '/tmp/b',
    ]),
  )
  assert.deepEqual(positionals, ['d', 'jwt'])
  assert.equal(values.rounds, 7)
  assert.equal(values.duration, 0.5)
  assert.equal(values.json, true)
  assert.deepEqual(values.cases, /^PAT/)
  assert.equal(values.store, 'postgres')
  assert.deepEqual(values.env, ['A=1', 'B=2'])
  assert.equal(values.baseline, '/tmp/b')
})

test('a flags value may start with a dash; any other value may not', () => {
  assert.equal(
    parsed(['d', '--node-flags', '--no-maglev --max-semi-space-size=8']).values['node-flags'],
    '--no-maglev --max-semi-space-size=8',
  )
  assert.match(refusal(['d', '--baseline', '--json']), /'--baseline' argument is ambiguous/)
})

test('an unknown or misspelled flag, or a missing value, is refused', () => {
  assert.match(refusal(['d', '--bogus']), /Unknown option '--bogus'/)
  assert.match(refusal(['d', '--round', '3']), /Unknown option '--round'/)
  assert.match(refusal(['d', '--rounds']), /'--rounds <value>' argument missing/)
  assert.match(refusal(['d', '--json=yes']), /'--json' does not take an argument/)
})

test('a bad number, pattern or choice is refused with what was expected', () => {
  assert.equal(refusal(['d', '--rounds', 'ten']), "--rounds must be a positive integer, not 'ten'")
  assert.equal(refusal(['d', '--rounds', '2.5']), "--rounds must be a positive integer, not '2.5'")
  assert.equal(refusal(['d', '--rounds', '0']), "--rounds must be a positive integer, not '0'")
  assert.equal(refusal(['d', '--duration=']), "--duration must be a positive number, not ''")
  assert.equal(
    refusal(['d', '--duration', 'Infinity']),
    "--duration must be a positive number, not 'Infinity'",
  )
  assert.equal(parsed(['d', '--first', '0']).values.first, 0)
  assert.equal(refusal(['d', '--first=-1']), "--first must be a non-negative integer, not '-1'")
  assert.match(refusal(['d', '--cases', '(']), /^--cases: Invalid regular expression/)
  assert.equal(
    refusal(['d', '--store', 'mysql']),
    "--store must be one of sqlite, postgres, not 'mysql'",
  )
})

test('too few or too many arguments are refused', () => {
  assert.equal(refusal([]), 'expected <dir> [case], given none')
  assert.equal(refusal(['a', 'b', 'c']), 'expected <dir> [case], given a b c')
})

test('--help asks for the usage, which lists every flag with its default', () => {
  assert.deepEqual(parseCli(cli, ['--help']), { kind: 'help' })
  assert.deepEqual(parseCli(cli, ['d', '--rounds', 'x', '--help']), { kind: 'help' })
  assert.equal(
    usageOf(cli),
    'Usage: node bench/example.ts <dir> [case] [--rounds N (40)] [--duration N (4)] [--first N (0)] ' +
      "[--json] [--cases REGEX] [--baseline VALUE] [--store sqlite|postgres (sqlite)] [--node-flags 'FLAGS'] " +
      '[--env VALUE...] [--help]',
  )
})

test('the script prints its usage and exits 0 on --help', () => {
  const run = spawnSync(process.execPath, ['bench/crypto.bench.ts', '--help'], {
    cwd: root,
    encoding: 'utf8',
    timeout: 30_000,
  })
  assert.equal(run.status, 0, run.stderr)
  assert.equal(run.stdout, 'Usage: node bench/crypto.bench.ts [--json] [--quick] [--help]\n')
})

test('a number without a default is undefined until given', () => {
  const optional = { script: 'bench/x.ts', options: { rate: { type: 'number' } } } as const
  assert.deepEqual(parseCli(optional, []), {
    kind: 'parsed',
    positionals: [],
    values: { rate: undefined },
  })
  const given = parseCli(optional, ['--rate', '3000'])
  assert.ok(given.kind === 'parsed' && given.values.rate === 3000)
  assert.equal(usageOf(optional), 'Usage: node bench/x.ts [--rate N] [--help]')
})

test('a script run some other way names that command in its usage', () => {
  const npm = { script: 'bench/run.ts', command: 'npm run bench --', options: cli.options }
  assert.match(usageOf(npm), /^Usage: npm run bench -- \[--rounds N \(40\)\] /)
})

/** The entry points with the most to lose from a typo: each starts servers and holds both cores. */
const entryPoints = [
  {
    script: 'bench/run.ts',
    usage:
      'Usage: npm run bench -- [--quick] [--duration SEC] [--repeats N] [--connections N (32)] ' +
      '[--cases REGEX] [--servers REGEX] [--baseline DIR] [--help]',
  },
  {
    script: 'bench/hop-ceiling.ts',
    usage:
      'Usage: node bench/hop-ceiling.ts [--rate N (2000)] [--duration SEC (4)] [--rounds N (4)] ' +
      '[--kinds LIST (http,net)] [--help]',
  },
  { script: 'bench/hop-cpu.ts', usage: /^Usage: node bench\/hop-cpu\.ts \[--rate N \(2000\)\] / },
  { script: 'bench/paced-load.ts', usage: /^Usage: node bench\/paced-load\.ts \[--url URL\] / },
]
const runScript = (script: string, ...args: string[]) =>
  spawnSync(process.execPath, [script, ...args], { cwd: root, encoding: 'utf8', timeout: 30_000 })

for (const { script, usage } of entryPoints) {
  test(`${script} given an unknown flag stops with its usage, exit 2; --help exits 0`, () => {
    const bogus = runScript(script, '--bogus')
    assert.equal(bogus.status, 2, bogus.stderr)
    assert.equal(bogus.stdout, '')
    const [message, usageLine] = bogus.stderr.split('\n')
    assert.match(message ?? '', new RegExp(`^${script}: Unknown option '--bogus'`))
    if (typeof usage === 'string') assert.equal(usageLine, usage)
    else assert.match(usageLine ?? '', usage)
    const help = runScript(script, '--help')
    assert.equal(help.status, 0, help.stderr)
    assert.equal(help.stdout, `${usageLine}\n`)
  })
}

test('run.ts refuses a fractional count before it starts anything', () => {
  for (const [flag, value] of [
    ['--repeats', '2.5'],
    ['--connections', '1.5'],
    ['--duration', '0'],
  ]) {
    const run = runScript('bench/run.ts', flag as string, value as string)
    assert.equal(run.status, 2, `${flag} ${value}: ${run.stderr}`)
    assert.equal(run.stdout, '')
    assert.doesNotMatch(run.stderr, /^load:/m)
  }
})

test('paced-load.ts without --url or --rate stops with its usage, exit 2', () => {
  const run = runScript('bench/paced-load.ts', '--rate', '100')
  assert.equal(run.status, 2, run.stderr)
  assert.match(run.stderr, /^bench\/paced-load\.ts: --url and --rate are required\nUsage: /)
})
