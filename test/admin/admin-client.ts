/**
 * Raw HTTPS requests to the admin listener of a test server (its dev certificate is trusted
 * through `ca`, never by switching verification off).
 */
import assert from 'node:assert/strict'
import { Buffer } from 'node:buffer'
import https from 'node:https'
import type { TestServer } from '../helpers/server.ts'

export interface AdminResponse {
  readonly status: number
  readonly headers: Record<string, string | string[] | undefined>
  readonly text: string
  readonly json: Record<string, unknown>
}

export function adminRequest(
  server: TestServer,
  path: string,
  options: { method?: string; headers?: Record<string, string>; body?: unknown } = {},
): Promise<AdminResponse> {
  const base = server.running.adminUrl
  if (!base) throw new Error('the admin listener is not enabled')
  const body =
    options.body === undefined
      ? undefined
      : typeof options.body === 'string'
        ? options.body
        : JSON.stringify(options.body)
  const headers: Record<string, string> = { ...options.headers }
  if (body !== undefined && !Object.keys(headers).some((h) => h.toLowerCase() === 'content-type')) {
    headers['content-type'] = 'application/json'
  }
  return new Promise((resolve, reject) => {
    const req = https.request(
      `${base}${path}`,
      { method: options.method ?? 'GET', ca: server.ca, headers },
      (res) => {
        const chunks: Buffer[] = []
        res.on('data', (c: Buffer) => chunks.push(c))
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8')
          let json: Record<string, unknown> = {}
          try {
            json = JSON.parse(text)
          } catch {}
          resolve({ status: res.statusCode ?? 0, headers: res.headers, text, json })
        })
      },
    )
    req.setTimeout(15_000, () => req.destroy(new Error('request timed out')))
    req.on('error', reject)
    req.end(body)
  })
}

/**
 * The console's sign-in form posted with `credential` (and `headers`), as a browser on the
 * admin listener's origin sends it.
 */
export function postSignIn(
  server: TestServer,
  credential: string,
  headers: Record<string, string> = {},
): Promise<AdminResponse> {
  const origin = new URL(server.running.adminUrl as string).origin
  return adminRequest(server, '/admin/sign-in', {
    method: 'POST',
    headers: { origin, 'content-type': 'application/x-www-form-urlencoded', ...headers },
    body: new URLSearchParams({ credential }).toString(),
  })
}

/** A signed-in console: its session cookie, page loads, and form posts with its CSRF token. */
export interface ConsoleSession {
  readonly cookie: string
  get(path: string): Promise<AdminResponse>
  post(path: string, form: Record<string, string>): Promise<AdminResponse>
}

/** Signs in through the form (303 asserted); the CSRF token is read from `csrfPage`. */
export async function signInToConsole(
  server: TestServer,
  credential: string,
  csrfPage = '/admin/tenants',
): Promise<ConsoleSession> {
  const signedIn = await postSignIn(server, credential)
  assert.equal(signedIn.status, 303)
  const cookie = String(signedIn.headers['set-cookie']).split(';')[0] as string
  const origin = new URL(server.running.adminUrl as string).origin
  const get = (path: string) => adminRequest(server, path, { headers: { cookie } })
  const csrf = /name="_csrf" value="([\w-]+)"/.exec((await get(csrfPage)).text)?.[1] as string
  const post = (path: string, form: Record<string, string>) =>
    adminRequest(server, path, {
      method: 'POST',
      headers: { cookie, origin, 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({ _csrf: csrf, ...form }).toString(),
    })
  return { cookie, get, post }
}

/** `tokengate admin token issue` through the CLI; returns the plaintext token. */
export async function issueAdminTokenCli(
  server: TestServer,
  name: string,
  role: 'operator' | 'read-only',
  expiresIn = '1d',
): Promise<{ token: string; id: string }> {
  const result = await server.cli(
    'admin',
    'token',
    'issue',
    '--name',
    name,
    '--role',
    role,
    '--expires-in',
    expiresIn,
    '--json',
  )
  if (result.code !== 0) throw new Error(`admin token issue failed: ${result.stderr}`)
  const parsed = JSON.parse(result.stdout) as { token: string; id: string }
  return { token: parsed.token, id: parsed.id }
}

export const bearer = (token: string) => ({ authorization: `Bearer ${token}` })
