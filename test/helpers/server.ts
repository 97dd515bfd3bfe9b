/**
 * Runs the real server for end-to-end tests: `startTestServer()` calls `startTokengate` on a
 * fresh data directory, HTTPS on 127.0.0.1:0 with the dev certificate (trusted through `ca`,
 * never by disabling verification), and captures every log line in `logs`.
 * `cli(...args)` runs the operator CLI in-process against the same data directory.
 */
import { mkdtempSync, readFileSync } from 'node:fs'
import https from 'node:https'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Writable } from 'node:stream'
import { run } from '../../src/cli/main.ts'
import { loadConfig } from '../../src/config/load.ts'
import { type RunningTokengate, startTokengate } from '../../src/main.ts'

export interface TestResponse {
  readonly status: number
  readonly headers: Record<string, string | string[] | undefined>
  readonly text: string
  readonly json: Record<string, unknown>
}

export interface TestServer {
  readonly url: string
  readonly dataDir: string
  readonly running: RunningTokengate
  /** Every log line written so far. */
  readonly logs: string[]
  /** `headers` as a flat raw list [name, value, ...] so duplicates can be sent. */
  request(path: string, headers?: readonly string[], method?: string): Promise<TestResponse>
  cli(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }>
  close(): Promise<void>
}

export async function startTestServer(
  overrides: Record<string, unknown> = {},
): Promise<TestServer> {
  const dataDir = mkdtempSync(join(tmpdir(), 'tg-e2e-'))
  const logs: string[] = []
  const sink = new Writable({
    write(chunk, _encoding, done) {
      logs.push(...String(chunk).split('\n').filter(Boolean))
      done()
    },
  })
  const config = loadConfig({
    env: {},
    overrides: {
      dev: true,
      dataDir,
      server: { port: 0 },
      log: { level: 'info' },
      ...overrides,
    },
  })
  const running = await startTokengate(config, { logDestination: sink })
  const ca = readFileSync(join(dataDir, 'tls', 'dev-cert.pem'), 'utf8')
  const agent = new https.Agent({ ca, keepAlive: false })

  function request(path: string, headers: readonly string[] = [], method = 'GET') {
    return new Promise<TestResponse>((resolve, reject) => {
      const req = https.request(
        `${running.url}${path}`,
        {
          method,
          agent,
          // A raw header list is sent as given, so Node adds no Host header of its own.
          headers: ['Host', new URL(running.url).host, ...headers] as unknown as Record<
            string,
            string
          >,
        },
        (res) => {
          let text = ''
          res.setEncoding('utf8')
          res.on('data', (chunk: string) => {
            text += chunk
          })
          res.on('end', () => {
            let json: Record<string, unknown> = {}
            try {
              json = JSON.parse(text)
            } catch {}
            resolve({ status: res.statusCode ?? 0, headers: res.headers, text, json })
          })
        },
      )
      req.setTimeout(10_000, () => req.destroy(new Error('request timed out')))
      req.on('error', reject)
      req.end()
    })
  }

  async function cli(...args: string[]) {
    let stdout = ''
    let stderr = ''
    const code = await run([...args, '--data-dir', dataDir], {
      stdout: { write: (s: string) => (stdout += s) },
      stderr: { write: (s: string) => (stderr += s) },
      env: {},
    })
    return { code, stdout, stderr }
  }

  return {
    url: running.url,
    dataDir,
    running,
    logs,
    request,
    cli,
    close: async () => {
      await running.close()
      agent.destroy()
    },
  }
}
