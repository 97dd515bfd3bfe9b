import assert from 'node:assert/strict'
import { request } from 'node:https'
import { after, describe, it } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { run } from '../../src/cli/main.ts'
import { PACKAGE_PROJECT, spawnTokengate } from '../helpers/launch.ts'
import { cli, sink, tempDataDir } from './helpers.ts'

interface Served {
  stdout: ReturnType<typeof sink>
  stderr: ReturnType<typeof sink>
  /** The log lines (stdout unless --json; in-process they are captured apart). */
  log: ReturnType<typeof sink>
  stop(): Promise<number>
}

/**
 * Starts `serve` (in-process from the sources, the installed bin when a package is under
 * test) and waits until `ready` matches its human text (stderr) or, with --json, stdout.
 */
async function serve(args: string[], ready: RegExp, on: 'stdout' | 'stderr'): Promise<Served> {
  const stdout = sink()
  const stderr = sink()
  const log = sink()
  let exited: number | undefined
  let stop: () => Promise<number>
  if (PACKAGE_PROJECT) {
    const child = spawnTokengate(args)
    child.stdin?.end()
    const json = args.includes('--json')
    child.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
      ;(json ? stdout : log).write(chunk)
    })
    child.stderr?.setEncoding('utf8').on('data', (chunk: string) => {
      stderr.write(chunk)
      if (json) log.write(chunk)
    })
    const done = new Promise<number>((resolve) => child.once('exit', (code) => resolve(code ?? 1)))
    void done.then((code) => {
      exited = code
    })
    stop = () => {
      if (exited === undefined) child.kill('SIGTERM')
      return done
    }
  } else {
    const controller = new AbortController()
    const running = run(args, {
      stdout,
      stderr,
      env: {},
      signal: controller.signal,
      log,
      server: () => import('../../src/main.ts'),
    })
    void running.then((code) => {
      exited = code
    })
    stop = () => {
      controller.abort()
      return running
    }
  }
  started.push(stop)
  const text = on === 'stdout' ? stdout : stderr
  for (let i = 0; i < 400 && !ready.test(text.text()) && exited === undefined; i++) await sleep(25)
  assert.match(text.text(), ready, `serve did not start: ${stderr.text()}`)
  return { stdout, stderr, log, stop }
}

/** Every serve started, stopped after the suite even when a test failed half-way. */
const started: (() => Promise<number>)[] = []
after(() => Promise.all(started.map((stop) => stop())))

/** Runs one of the banner's curl lines with node:https and returns the status. */
function runCurl(line: string): Promise<number> {
  const url = /\s(https:\/\/\S+)\s/.exec(` ${line} `)?.[1]
  assert.ok(url, line)
  const headers: Record<string, string> = {}
  for (const [, name, value] of line.matchAll(/-H '([^:]+): ([^']*)'/g)) {
    headers[name as string] = value as string
  }
  return new Promise((resolve, reject) => {
    const req = request(url, { headers, rejectUnauthorized: false }, (res) => {
      res.resume()
      res.on('end', () => resolve(res.statusCode ?? 0))
    })
    req.on('error', reject)
    req.end()
  })
}

describe('tokengate serve', () => {
  const data = tempDataDir()
  after(() => data.cleanup())
  const args = ['serve', '--dev', '--listen', '127.0.0.1:0', '--data-dir', data.dir]

  it('in dev mode prints curl commands that answer 200, 200, 401 and 403, and stops on request', async () => {
    const served = await serve(args, /Press Ctrl\+C to stop/, 'stderr')
    // Text for a person on stderr; stdout is for the log lines only.
    assert.equal(served.stdout.text(), '')
    const text = served.stderr.text()
    assert.match(text, /tokengate is listening on https:\/\/127\.0\.0\.1:\d+/)
    const lines = text.split('\n')
    const expectations: [string, number][] = []
    lines.forEach((line, i) => {
      const expected = /^# .* -> (\d{3})$/.exec(line)?.[1]
      if (expected) expectations.push([lines[i + 1] as string, Number(expected)])
    })
    assert.deepEqual(
      expectations.map(([, status]) => status),
      [200, 200, 401, 403],
    )
    assert.match(
      expectations[0]?.[0] ?? '',
      /^curl -k -i https:\/\/.*\/api\/v1\/me -H 'Authorization: Bearer pat_/,
    )
    assert.match(expectations[1]?.[0] ?? '', /\/api\/v1\/tokens .*-H 'X-Tenant-Id: demo'$/)
    assert.doesNotMatch(expectations[2]?.[0] ?? '', /X-Tenant-Id/)
    assert.match(expectations[3]?.[0] ?? '', /\/api\/v1\/audit-events/)
    for (const [line, status] of expectations) assert.equal(await runCurl(line), status, line)

    assert.equal(await served.stop(), 0)
    const tokens = [...text.matchAll(/Bearer ([^']+)'/g)].map((m) => m[1] as string)
    assert.ok(tokens.length >= 4)
    for (const token of tokens) {
      assert.equal(served.log.text().includes(token), false, 'a token reached the log')
    }
  })

  it('a second start reuses the data directory and does not print the demo PAT again', async () => {
    const served = await serve([...args, '--json'], /\}\n$/, 'stdout')
    const document = JSON.parse(served.stdout.text()) as {
      url: string
      devSeed: { demoPat: string | null; commands: { command: string; expect: number | null }[] }
    }
    assert.match(document.url, /^https:\/\/127\.0\.0\.1:\d+$/)
    assert.equal(document.devSeed.demoPat, null)
    assert.doesNotMatch(served.stdout.text(), /pat_[0-9A-Za-z]{38}/)
    // The hint names the clone's npm script, or the installed bin.
    const cliName = PACKAGE_PROJECT ? 'npx tokengate' : 'npm run tokengate --'
    assert.ok(
      (document.devSeed.commands[0]?.command ?? '').startsWith(
        `${cliName} --data-dir ${data.dir} pat issue --tenant demo`,
      ),
      document.devSeed.commands[0]?.command,
    )
    const statuses = []
    for (const { command, expect } of document.devSeed.commands) {
      if (expect !== null && !command.includes('pat_...')) statuses.push(await runCurl(command))
    }
    assert.deepEqual(statuses, [200, 401, 403])
    assert.equal(await served.stop(), 0)
  })

  it('outside dev mode without certificates, serve exits 1 explaining the TLS settings', async () => {
    const result = await cli(['serve', '--listen', '127.0.0.1:0'], { dataDir: data.dir })
    assert.equal(result.code, 1)
    assert.match(result.stderr, /HTTPS needs tlsCertFile and tlsKeyFile/)
  })

  it('a malformed --listen exits 2 with the expected form', async () => {
    for (const bad of ['8443', 'localhost:99999', 'a b:1', '::1:8443']) {
      const result = await cli(['serve', '--dev', '--listen', bad], { dataDir: data.dir })
      assert.equal(result.code, 2, bad)
      assert.match(
        result.stderr,
        /--listen: .* is not HOST:PORT \(expected e\.g\. 127\.0\.0\.1:8443/,
      )
    }
  })
})
