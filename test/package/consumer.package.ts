/**
 * The package as a user gets it (consumers.ts: the packed tarball installed into fresh
 * projects, nothing from this repository's node_modules):
 * - one small app per framework (test/package/apps/*.mjs, written against the installed
 *   package only) through the shared SPEC table, on Node 24 and on Node 22;
 * - the typed principal of every framework type-checked (typed.ts), and a misspelt property
 *   refused by the checker;
 * - the installed bin: `npx tokengate --version`, `tokengate serve --dev` answering
 *   `/healthz` and a PAT call over HTTPS, and an old Node refused in one line, by the bin and
 *   by `import 'tokengate'`.
 * `npm run test:package` (run.ts) runs it with the end-to-end suites against the same install.
 */
import assert from 'node:assert/strict'
import { type ChildProcess, execFile, execFileSync, spawn } from 'node:child_process'
import { cpSync, existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs'
import { request as httpsRequest } from 'node:https'
import { delimiter, join } from 'node:path'
import { before, describe, test } from 'node:test'
import { promisify } from 'node:util'
import { type AppUnderTest, runSpecTable, type SpecFixture } from '../adapters/spec-table.ts'
import { TEST_TENANT } from '../helpers/jwt.ts'
import { type Consumers, consumers, npmEnv as env, NODE_22, REPO_VERSION } from './consumers.ts'

const run = promisify(execFile)
let installed: Consumers
const project = { '24': '', '22': '' }
const node = { '24': process.execPath, '22': '' }

before(
  async () => {
    installed = await consumers()
    const { packed } = installed
    process.stdout.write(
      `# tarball: ${packed.size} bytes, ${packed.entryCount} files, ${packed.unpackedSize} bytes unpacked\n`,
    )
    project['24'] = installed.node24
    project['22'] = installed.node22
    node['22'] = join(installed.node22, 'node_modules', '.bin', 'node')
    for (const dir of [installed.node24, installed.node22]) {
      cpSync(join(import.meta.dirname, 'apps'), dir, { recursive: true })
      writeFileSync(
        join(dir, 'tsconfig.json'),
        JSON.stringify({
          compilerOptions: {
            target: 'esnext',
            module: 'nodenext',
            strict: true,
            noEmit: true,
            types: ['node'],
            skipLibCheck: false,
          },
          files: ['typed.ts'],
        }),
      )
    }
  },
  { timeout: 600_000 },
)

describe('the packed tarball', () => {
  test('installs without this repository: dist only, no TypeScript sources', () => {
    const dir = join(project['24'], 'node_modules', 'tokengate')
    const manifest = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8'))
    assert.equal(manifest.private, undefined)
    assert.throws(() => readFileSync(join(dir, 'src', 'index.ts')), { code: 'ENOENT' })
    assert.ok(readFileSync(join(dir, 'dist', 'index.d.ts'), 'utf8').includes('createTokengate'))
    assert.ok(readFileSync(join(dir, 'LICENSE'), 'utf8').includes('Apache License'))
    // No source maps: the JavaScript is tsc's readable output, module for module (README).
    const maps = installed.packed.files.filter((file) => file.path.endsWith('.map'))
    assert.deepEqual(maps, [])
  })

  test(`node@22 is Node ${NODE_22}`, async () => {
    const { stdout } = await run(node['22'], ['--version'])
    assert.equal(stdout.trim(), `v${NODE_22}`)
  })
})

for (const version of ['24', '22'] as const) {
  for (const framework of ['express', 'fastify', 'hono', 'node-http']) {
    runSpecTable(`installed tokengate/${framework} on Node ${version}`, (_, fixture) =>
      startApp(version, framework, fixture),
    )
  }
}

/** Starts one consumer app on a fresh data directory seeded with the fixture. */
async function startApp(
  version: '24' | '22',
  framework: string,
  fixture: SpecFixture,
): Promise<AppUnderTest> {
  const dataDir = mkdtempSync(join(installed.root, `data-${framework}-`))
  const fixtureFile = join(dataDir, 'fixture.json')
  writeFileSync(
    fixtureFile,
    JSON.stringify({ tenantId: TEST_TENANT, issuer: fixture.issuer, pats: fixture.pats }),
  )
  const child = spawn(node[version], [join(project[version], `${framework}.mjs`)], {
    cwd: project[version],
    env: { ...env, DATA_DIR: join(dataDir, 'store'), FIXTURE_FILE: fixtureFile },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  const url = await firstMatch(child, 'stdout', /listening (http:\/\/\S+)/)
  return { url, close: () => stop(child) }
}

describe('type-checking a consumer against the installed declarations', () => {
  const tsc = () => join(project['24'], 'node_modules', '.bin', 'tsc')

  test('the typed principal of every framework checks', async () => {
    await run(tsc(), ['-p', project['24']], { cwd: project['24'] })
  })

  test('a misspelt principal property fails the check in every framework', async () => {
    const dir = project['24']
    const source = readFileSync(join(dir, 'typed.ts'), 'utf8')
    const wrong = source.replaceAll(/principal(\?\.|'\)\.|\.)tenantId/g, 'principal$1tenantID')
    writeFileSync(join(dir, 'wrong.ts'), wrong)
    writeFileSync(
      join(dir, 'tsconfig.wrong.json'),
      JSON.stringify({
        extends: './tsconfig.json',
        compilerOptions: { skipLibCheck: true },
        files: ['wrong.ts'],
      }),
    )
    const failed = await run(tsc(), ['-p', join(dir, 'tsconfig.wrong.json')], { cwd: dir }).then(
      () => undefined,
      (error: { stdout: string }) => error.stdout,
    )
    assert.ok(failed, 'the misspelt property must not type-check')
    const errors = failed.split('\n').filter((line) => /wrong\.ts.*'tenantID'/.test(line))
    assert.equal(errors.length, 4, failed)
  })
})

describe('the installed bin', () => {
  test('npx tokengate --version prints the package version', async () => {
    const { stdout } = await run('npx', ['--no-install', 'tokengate', '--version'], {
      cwd: project['24'],
      env,
    })
    assert.equal(stdout.trim(), REPO_VERSION)
  })

  // The machine's own Node, when it is older than the package supports (Node 20 here and in
  // CI): the bin and the library must say so in one line, not crash on a missing API.
  const nodeMajor = (file: string) =>
    Number(execFileSync(file, ['-p', 'process.versions.node']).toString().split('.')[0])
  const systemNode = (process.env.PATH ?? '')
    .split(delimiter)
    .map((dir) => join(dir, 'node'))
    .find((file) => existsSync(file) && nodeMajor(file) < 22)
  const oldNode = { skip: systemNode === undefined ? 'no Node older than 22 on PATH' : false }
  const ONE_LINE = /^tokengate: Node 22\.13 or newer is required \(this is [\d.]+\)[^\n]*\n$/

  test('refuses an old Node with one line', oldNode, async () => {
    const bin = join(project['24'], 'node_modules', 'tokengate', 'bin', 'tokengate.js')
    const old = await run(systemNode as string, [bin, '--version']).then(
      () => assert.fail('an old Node must be refused'),
      (error: { code: number; stderr: string }) => error,
    )
    assert.equal(old.code, 1)
    assert.match(old.stderr, ONE_LINE)
  })

  test(
    "import 'tokengate' on an old Node fails with the same one line, no stack",
    oldNode,
    async () => {
      const app = join(project['24'], 'old-node.mjs')
      writeFileSync(
        app,
        "import { createTokengate } from 'tokengate'\nawait createTokengate({ dataDir: 'old' })\n",
      )
      const old = await run(systemNode as string, [app], { cwd: project['24'] }).then(
        () => assert.fail('an old Node must be refused'),
        (error: { code: number; stderr: string }) => error,
      )
      assert.equal(old.code, 1)
      assert.match(old.stderr, ONE_LINE)
    },
  )

  test('serve --dev answers /healthz and a PAT call over HTTPS; JSON log lines on stdout, the banner on stderr', async () => {
    const started = performance.now()
    const child = spawn(
      join(project['24'], 'node_modules', '.bin', 'tokengate'),
      ['serve', '--dev'],
      {
        cwd: project['24'],
        env: {
          ...env,
          TOKENGATE_PORT: '0',
          TOKENGATE_HOST: '127.0.0.1',
          TOKENGATE_DATA_DIR: join(installed.root, 'serve-data'),
        },
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    )
    try {
      const url = await firstMatch(child, 'stderr', /tokengate is listening on (https:\/\/\S+)/)
      const health = await httpsGet(`${url}/healthz`, {})
      const firstOk = performance.now() - started
      assert.equal(health.status, 200)
      process.stdout.write(
        `# installed bin: serve --dev to first 200 in ${Math.round(firstOk)} ms\n`,
      )
      const pat = await firstMatch(child, 'stderr', /Bearer (pat_[A-Za-z0-9]+)/)
      const me = await httpsGet(`${url}/api/v1/me`, { authorization: `Bearer ${pat}` })
      assert.equal(me.status, 200, me.body)
      assert.equal(JSON.parse(me.body).tenantId, 'demo')
      // The banner's CLI hints name the installed bin, not the clone's npm script.
      const mint = await firstMatch(child, 'stderr', /^ +(\S+ \S+)[^\n]* jwt mint --dev /m)
      assert.equal(mint, 'npx tokengate')
      const seen = child as ChildProcess & { seen: { stdout: string } }
      const stdoutLines = seen.seen.stdout.split('\n').filter(Boolean)
      assert.ok(stdoutLines.length > 0)
      for (const line of stdoutLines) assert.doesNotThrow(() => JSON.parse(line), line)
    } finally {
      await stop(child)
    }
  })
})

/**
 * Resolves with the first capture of `pattern` in the child's `stream` (all output so far).
 * The output is collected from the first call on, also between calls: a flowing stream drops
 * what arrives while nobody listens (the dev banner, printed while /healthz was awaited).
 */
function firstMatch(
  child: ChildProcess,
  stream: 'stdout' | 'stderr',
  pattern: RegExp,
): Promise<string> {
  const state = child as ChildProcess & { seen?: { stdout: string; stderr: string } }
  if (state.seen === undefined) {
    const seen = { stdout: '', stderr: '' }
    state.seen = seen
    child.stdout?.on('data', (chunk: Buffer) => {
      seen.stdout += chunk.toString()
    })
    child.stderr?.on('data', (chunk: Buffer) => {
      seen.stderr += chunk.toString()
    })
  }
  const seen = state.seen
  return new Promise((resolve, reject) => {
    const check = () => {
      const match = pattern.exec(seen[stream])
      if (match?.[1]) {
        cleanup()
        resolve(match[1])
      }
    }
    const onExit = (code: number | null) => {
      cleanup()
      reject(new Error(`exited with ${code} before ${pattern}: ${seen.stdout}${seen.stderr}`))
    }
    const timer = setTimeout(() => {
      cleanup()
      reject(new Error(`no ${pattern} within 60 s: ${seen.stdout}${seen.stderr}`))
    }, 60_000)
    const cleanup = () => {
      clearTimeout(timer)
      child[stream]?.off('data', check)
      child.off('exit', onExit)
    }
    child[stream]?.on('data', check)
    child.on('exit', onExit)
    check()
  })
}

function stop(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve()
  return new Promise((resolve) => {
    const force = setTimeout(() => child.kill('SIGKILL'), 10_000)
    child.once('exit', () => {
      clearTimeout(force)
      resolve()
    })
    child.kill('SIGTERM')
  })
}

function httpsGet(
  url: string,
  headers: Record<string, string>,
): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    // The dev certificate is self-signed (curl -k in the banner).
    const req = httpsRequest(url, { headers, rejectUnauthorized: false }, (res) => {
      let body = ''
      res.setEncoding('utf8')
      res.on('data', (chunk: string) => {
        body += chunk
      })
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }))
    })
    req.on('error', reject)
    req.end()
  })
}
