/**
 * The package as a user gets it: `npm pack`, the tarball installed into a fresh project in a
 * temporary directory (dependencies from the registry or npm's cache, nothing from this
 * repository's node_modules), then
 * - one small app per framework (test/package/apps/*.mjs, written against the installed
 *   package only) through the shared SPEC table, on Node 24 and on Node 22 (`node@22` is
 *   the consumer project's dev dependency);
 * - the typed principal of every framework type-checked (typed.ts), and a misspelt property
 *   refused by the checker;
 * - the installed bin: `npx tokengate --version`, and `tokengate serve --dev` answering
 *   `/healthz` and a PAT call over HTTPS.
 * It takes a few minutes (npm install), so it is its own CI step (`npm run test:package`,
 * called by .ci/run) rather than part of `npm test`.
 */
import assert from 'node:assert/strict'
import { type ChildProcess, execFile, execFileSync, spawn } from 'node:child_process'
import { cpSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { request as httpsRequest } from 'node:https'
import { tmpdir } from 'node:os'
import { delimiter, dirname, join } from 'node:path'
import { after, before, describe, test } from 'node:test'
import { promisify } from 'node:util'
import { type AppUnderTest, runSpecTable, type SpecFixture } from '../adapters/spec-table.ts'
import { TEST_TENANT } from '../helpers/jwt.ts'

const run = promisify(execFile)
const repo = join(import.meta.dirname, '..', '..')
const repoPackage = JSON.parse(readFileSync(join(repo, 'package.json'), 'utf8'))
const NODE_22 = '22.23.3'

// Node 24 (the one running this test) first on PATH, for npm's lifecycle scripts (prepack).
const env = {
  ...process.env,
  PATH: `${dirname(process.execPath)}${delimiter}${process.env.PATH}`,
  npm_config_audit: 'false',
  npm_config_fund: 'false',
  npm_config_update_notifier: 'false',
}
const root = mkdtempSync(join(tmpdir(), 'tokengate-consumer-'))
const project = join(root, 'app')
let tarball = ''
const node = { '24': process.execPath, '22': join(project, 'node_modules', '.bin', 'node') }

/** A pinned version from this repository's package.json, so the consumer matches CI's. */
function pinned(name: string): string {
  const version =
    repoPackage.devDependencies?.[name] ??
    repoPackage.optionalDependencies?.[name] ??
    repoPackage.dependencies?.[name]
  assert.ok(version, `${name} is pinned in package.json`)
  return version
}

before(
  async () => {
    const packed = await run('npm', ['pack', '--json', '--pack-destination', root], {
      cwd: repo,
      env,
      maxBuffer: 64 * 1024 * 1024,
    })
    const [info] = JSON.parse(packed.stdout.slice(packed.stdout.indexOf('['))) as {
      filename: string
      size: number
      unpackedSize: number
      entryCount: number
    }[]
    assert.ok(info)
    tarball = join(root, info.filename)
    process.stdout.write(
      `# tarball ${info.filename}: ${info.size} bytes, ${info.entryCount} files, ${info.unpackedSize} bytes unpacked\n`,
    )
    cpSync(join(import.meta.dirname, 'apps'), project, { recursive: true })
    writeFileSync(
      join(project, 'package.json'),
      JSON.stringify({
        name: 'tokengate-consumer',
        private: true,
        type: 'module',
        dependencies: {
          tokengate: `file:${tarball}`,
          express: pinned('express'),
          fastify: pinned('fastify'),
          hono: pinned('hono'),
          '@hono/node-server': pinned('@hono/node-server'),
        },
        devDependencies: {
          node: NODE_22,
          typescript: pinned('typescript'),
          '@types/node': pinned('@types/node'),
          '@types/express': pinned('@types/express'),
        },
        allowScripts: { node: true },
      }),
    )
    writeFileSync(
      join(project, 'tsconfig.json'),
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
    await run('npm', ['install', '--prefer-offline', '--no-package-lock'], {
      cwd: project,
      env,
      maxBuffer: 64 * 1024 * 1024,
    })
  },
  { timeout: 600_000 },
)

after(() => rmSync(root, { recursive: true, force: true }))

describe('the packed tarball', () => {
  test('installs without this repository: dist only, no TypeScript sources', () => {
    const installed = join(project, 'node_modules', 'tokengate')
    const manifest = JSON.parse(readFileSync(join(installed, 'package.json'), 'utf8'))
    assert.equal(manifest.private, undefined)
    assert.throws(() => readFileSync(join(installed, 'src', 'index.ts')), { code: 'ENOENT' })
    assert.ok(
      readFileSync(join(installed, 'dist', 'index.d.ts'), 'utf8').includes('createTokengate'),
    )
    assert.ok(readFileSync(join(installed, 'LICENSE'), 'utf8').includes('Apache License'))
  })

  test(`node@22 is Node ${NODE_22}`, async () => {
    const { stdout } = await run(node['22'], ['--version'])
    assert.equal(stdout.trim(), `v${NODE_22}`)
  })
})

for (const version of ['24', '22'] as const) {
  for (const framework of ['express', 'fastify', 'hono', 'node-http']) {
    runSpecTable(`installed tokengate/${framework} on Node ${version}`, (_, fixture) =>
      startApp(node[version], framework, fixture),
    )
  }
}

/** Starts one consumer app on a fresh data directory seeded with the fixture. */
async function startApp(
  nodeBinary: string,
  framework: string,
  fixture: SpecFixture,
): Promise<AppUnderTest> {
  const dataDir = mkdtempSync(join(root, `data-${framework}-`))
  const fixtureFile = join(dataDir, 'fixture.json')
  writeFileSync(
    fixtureFile,
    JSON.stringify({ tenantId: TEST_TENANT, issuer: fixture.issuer, pats: fixture.pats }),
  )
  const child = spawn(nodeBinary, [join(project, `${framework}.mjs`)], {
    cwd: project,
    env: { ...env, DATA_DIR: join(dataDir, 'store'), FIXTURE_FILE: fixtureFile },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  const url = await firstMatch(child, /listening (http:\/\/\S+)/)
  return {
    url,
    close: () => stop(child),
  }
}

describe('type-checking a consumer against the installed declarations', () => {
  const tsc = () => join(project, 'node_modules', '.bin', 'tsc')

  test('the typed principal of every framework checks', async () => {
    await run(tsc(), ['-p', project], { cwd: project })
  })

  test('a misspelt principal property fails the check in every framework', async () => {
    const source = readFileSync(join(project, 'typed.ts'), 'utf8')
    const wrong = source.replaceAll(/principal(\?\.|'\)\.|\.)tenantId/g, 'principal$1tenantID')
    writeFileSync(join(project, 'wrong.ts'), wrong)
    writeFileSync(
      join(project, 'tsconfig.wrong.json'),
      JSON.stringify({
        extends: './tsconfig.json',
        compilerOptions: { skipLibCheck: true },
        files: ['wrong.ts'],
      }),
    )
    const failed = await run(tsc(), ['-p', join(project, 'tsconfig.wrong.json')], {
      cwd: project,
    }).then(
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
      cwd: project,
      env,
    })
    assert.equal(stdout.trim(), repoPackage.version)
  })

  // The machine's own Node, when it is older than the package supports (Node 20 here and in
  // CI): the bin must say so in one line, not crash on a missing API.
  const nodeMajor = (file: string) =>
    Number(execFileSync(file, ['-p', 'process.versions.node']).toString().split('.')[0])
  const systemNode = (process.env.PATH ?? '')
    .split(delimiter)
    .map((dir) => join(dir, 'node'))
    .find((file) => existsSync(file) && nodeMajor(file) < 22)
  test('refuses an old Node with one line', {
    skip: systemNode === undefined ? 'no Node older than 22 on PATH' : false,
  }, async () => {
    const bin = join(project, 'node_modules', 'tokengate', 'bin', 'tokengate.js')
    const old = await run(systemNode as string, [bin, '--version']).then(
      () => assert.fail('an old Node must be refused'),
      (error: { code: number; stderr: string }) => error,
    )
    assert.equal(old.code, 1)
    assert.match(
      old.stderr,
      /^tokengate: Node 22\.13 or newer is required \(this is [\d.]+\)[^\n]*\n$/,
    )
  })

  test('serve --dev answers /healthz and a PAT call over HTTPS', async () => {
    const started = performance.now()
    const child = spawn(join(project, 'node_modules', '.bin', 'tokengate'), ['serve', '--dev'], {
      cwd: project,
      env: {
        ...env,
        TOKENGATE_PORT: '0',
        TOKENGATE_HOST: '127.0.0.1',
        TOKENGATE_DATA_DIR: join(root, 'serve-data'),
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    try {
      const url = await firstMatch(child, /tokengate is listening on (https:\/\/\S+)/)
      const health = await httpsGet(`${url}/healthz`, {})
      const firstOk = performance.now() - started
      assert.equal(health.status, 200)
      process.stdout.write(
        `# installed bin: serve --dev to first 200 in ${Math.round(firstOk)} ms\n`,
      )
      const pat = await firstMatch(child, /Bearer (pat_[A-Za-z0-9]+)/)
      const me = await httpsGet(`${url}/api/v1/me`, { authorization: `Bearer ${pat}` })
      assert.equal(me.status, 200, me.body)
      assert.equal(JSON.parse(me.body).tenantId, 'demo')
      // The banner's CLI hints name the installed bin, not the clone's npm script.
      const mint = await firstMatch(child, /^ +(\S+ \S+)[^\n]* jwt mint --dev /m)
      assert.equal(mint, 'npx tokengate')
    } finally {
      await stop(child)
    }
  })
})

/**
 * Resolves with the first capture of `pattern` in the child's stdout (all output so far).
 * The output is collected from the first call on, also between calls: a flowing stream drops
 * what arrives while nobody listens (the dev banner, printed while /healthz was awaited).
 */
function firstMatch(child: ChildProcess, pattern: RegExp): Promise<string> {
  const state = child as ChildProcess & { seen?: string; errors?: string }
  if (state.seen === undefined) {
    state.seen = ''
    state.errors = ''
    child.stdout?.on('data', (chunk: Buffer) => {
      state.seen += chunk.toString()
    })
    child.stderr?.on('data', (chunk: Buffer) => {
      state.errors += chunk.toString()
    })
  }
  return new Promise((resolve, reject) => {
    const check = () => {
      const match = pattern.exec(state.seen ?? '')
      if (match?.[1]) {
        cleanup()
        resolve(match[1])
      }
    }
    const onExit = (code: number | null) => {
      cleanup()
      reject(new Error(`exited with ${code} before ${pattern}: ${state.seen}${state.errors}`))
    }
    const timer = setTimeout(() => {
      cleanup()
      reject(new Error(`no ${pattern} within 60 s: ${state.seen}${state.errors}`))
    }, 60_000)
    const cleanup = () => {
      clearTimeout(timer)
      child.stdout?.off('data', check)
      child.off('exit', onExit)
    }
    child.stdout?.on('data', check)
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
