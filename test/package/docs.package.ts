/**
 * Every documented command runs: the shell blocks of README.md and docs/*.md, in document
 * order, against the packed tarball, as a user pastes them into a terminal in an empty
 * directory (test/docs/markdown-blocks.ts reads the files and their directives).
 *
 * - Each doc gets its own empty directory; each command runs in bash there, with the
 *   variables, exports and working directory the commands before it left (one terminal).
 *   `tokengate` alone is the installed bin (node_modules/.bin is on PATH, as after a global
 *   install); Node is the Node 24 running this.
 * - `npm install ... tokengate ...` installs the tarball, not whatever the registry holds.
 * - A command that keeps running once it listens on a port (a server, `node server.mjs`, or
 *   one started with `&`) is a service: the next commands run while it serves; it is stopped
 *   (SIGTERM) when its section (`## ` heading) ends, as a user would press Ctrl+C.
 * - A `curl` whose comment names a status (`# 401`, `# B: 200`) must get that status.
 * - The ports the docs name (8443, 9443, 3000, ...) are mapped to free ports, the same way
 *   in every block and file of a doc, and tokengate's default ports follow them through
 *   TOKENGATE_PORT / TOKENGATE_ADMIN_PORT / TOKENGATE_METRICS_PORT: a busy port on a shared
 *   machine must not fail the run. Nothing else in a command is changed.
 * - `file=NAME` blocks are written to NAME before the commands after them run.
 * - A `ts` or `js` block with `file=` is type-checked as it is written, with `tsc --noEmit`
 *   in the Node 24 consumer project (the installed tarball's declarations, the frameworks and
 *   their types, the pinned TypeScript), together with the doc's earlier files it imports,
 *   under the doc's own `tsconfig.json` block when it has one (else Node's type-stripping
 *   settings); `js` with `checkJs`. Then the doc's commands run it as a user would.
 * Blocks marked `no-run=REASON` are only syntax-checked (test/docs/blocks.test.ts).
 */
import assert from 'node:assert/strict'
import { type ChildProcess, spawn } from 'node:child_process'
import {
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  rmSync,
  writeFileSync,
} from 'node:fs'
import { dirname, join } from 'node:path'
import { after, before, describe, test } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import {
  type Block,
  blocksOf,
  docFiles,
  TYPE_STRIPPING_OPTIONS,
  where,
} from '../docs/markdown-blocks.ts'
import { freePort } from '../helpers/services.ts'
import { type Consumers, consumers } from './consumers.ts'

/** Ports the docs name; those tokengate listens on by default, with their variable. */
const DOC_PORTS: Readonly<Record<number, string | undefined>> = {
  8443: 'TOKENGATE_PORT',
  9443: 'TOKENGATE_ADMIN_PORT',
  9464: 'TOKENGATE_METRICS_PORT',
  3000: 'PORT',
  8444: undefined,
  8080: undefined,
  8081: undefined,
  55432: undefined,
}
const PORT_PATTERN = new RegExp(`(?<=[:=( ])(${Object.keys(DOC_PORTS).join('|')})\\b`, 'g')

const COMMAND_TIMEOUT_MS = 240_000

let installed: Consumers

before(
  async () => {
    installed = await consumers()
  },
  { timeout: 600_000 },
)

/** The block's commands: continuation lines joined, blank and comment-only lines left out. */
export function commandsOf(text: string): string[] {
  const commands: string[] = []
  let current = ''
  for (const line of text.split('\n')) {
    current += current ? `\n${line}` : line
    if (line.endsWith('\\')) continue
    if (current.trim() !== '' && !current.trim().startsWith('#')) commands.push(current)
    current = ''
  }
  return commands
}

interface Service {
  readonly command: string
  readonly pgid: number
  readonly section: string
  output(): string
}

/**
 * `tsc --noEmit` of one of a doc's files, in a directory of the Node 24 consumer project
 * (so `tokengate` resolves to the installed tarball and its `.d.ts`), beside the doc's other
 * files and its `package.json` (whose `type` makes a `.ts` file an ES module or not, as in the
 * user's directory); the doc's `tsconfig.json` (when it wrote one) gives the options.
 */
async function typeCheck(doc: string, docDir: string, file: string): Promise<void> {
  const dir = join(installed.node24, 'doc-types', doc.replaceAll('/', '-'))
  mkdirSync(dir, { recursive: true })
  for (const name of readdirSync(docDir)) {
    if (/\.(m?[jt]s|json)$/.test(name) && name !== 'package-lock.json') {
      writeFileSync(join(dir, name), readFileSync(join(docDir, name)))
    }
  }
  // The doc's own package.json (its "type" decides whether a .ts file is an ES module), or
  // none, as in the user's directory: packages still resolve from the consumer project.
  if (!existsSync(join(docDir, 'package.json'))) writeFileSync(join(dir, 'package.json'), '{}')
  let options: Record<string, unknown> = TYPE_STRIPPING_OPTIONS
  try {
    options = JSON.parse(readFileSync(join(docDir, 'tsconfig.json'), 'utf8')).compilerOptions
  } catch {}
  writeFileSync(
    join(dir, 'tsconfig.check.json'),
    JSON.stringify({
      compilerOptions: { ...options, noEmit: true, allowJs: true, checkJs: true },
      files: [file],
    }),
  )
  const tsc = join(installed.node24, 'node_modules', '.bin', 'tsc')
  const result = await new Promise<{ code: number | null; output: string }>((resolve) => {
    const child = spawn(tsc, ['-p', join(dir, 'tsconfig.check.json')], {
      cwd: dir,
      env: { ...process.env, PATH: `${dirname(process.execPath)}:${process.env.PATH}` },
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    let output = ''
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
      output += chunk
    })
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => {
      output += chunk
    })
    child.once('exit', (code) => resolve({ code, output }))
  })
  assert.equal(result.code, 0, `tsc --noEmit ${file} (${doc}):\n${result.output}`)
}

/** One doc's terminal: its directory, shell state, port map and running services. */
class Session {
  #root = ''
  #section = ''
  #env: Record<string, string> = {}
  #portMap = new Map<string, string>()
  #services: Service[] = []

  async open(doc: string, blocks: readonly Block[]): Promise<void> {
    this.#root = join(installed.root, 'docs', doc.replaceAll('/', '-'))
    rmSync(this.#root, { recursive: true, force: true })
    mkdirSync(join(this.#root, 'work'), { recursive: true })
    writeFileSync(join(this.#root, 'cwd'), join(this.#root, 'work'))
    writeFileSync(join(this.#root, 'state.sh'), '')
    for (const port of new Set(
      blocks.flatMap((b) => [...b.text.matchAll(PORT_PATTERN)].map((m) => m[1] as string)),
    )) {
      this.#portMap.set(port, String(await freePort()))
    }
    for (const [port, variable] of Object.entries(DOC_PORTS)) {
      if (variable && !this.#portMap.has(port)) this.#portMap.set(port, String(await freePort()))
      if (variable) this.#env[variable] = this.#portMap.get(port) as string
    }
  }

  cwd(): string {
    return readFileSync(join(this.#root, 'cwd'), 'utf8').trim()
  }

  ports(text: string): string {
    return text.replace(PORT_PATTERN, (port) => this.#portMap.get(port) ?? port)
  }

  /** Stops the services of earlier sections (the user pressed Ctrl+C and read on). */
  async stopServicesOutside(section: string): Promise<void> {
    if (section === this.#section) return
    this.#section = section
    await this.close()
  }

  async close(): Promise<void> {
    const services = this.#services.splice(0)
    await Promise.all(services.map((service) => stopGroup(service.pgid)))
  }

  /** Runs one command; resolves when it exits (0) or has become a listening service. */
  async run(command: string): Promise<void> {
    const shown = this.ports(command)
    const script = join(this.#root, 'command.sh')
    // A fresh bash per command, with the earlier commands' variables and directory.
    writeFileSync(
      script,
      `set -o pipefail
source ${join(this.#root, 'state.sh')}
cd "$(cat ${join(this.#root, 'cwd')})"
${installing(shown, installed.tarball)}
__status=$?
pwd > ${join(this.#root, 'cwd')}
for __name in $(compgen -v); do
  case " $__BASELINE " in *" $__name "*) ;; *) declare -p "$__name" ;; esac
done > ${join(this.#root, 'state.next')} 2>/dev/null
declare -f >> ${join(this.#root, 'state.next')}
mv ${join(this.#root, 'state.next')} ${join(this.#root, 'state.sh')}
exit $__status
`,
    )
    const nodeDir = dirname(process.execPath)
    const child = spawn(
      'bash',
      [
        '-c',
        `__BASELINE="$(compgen -v | tr '\\n' ' ') __name __status __BASELINE PIPESTATUS"; source ${script}`,
      ],
      {
        cwd: this.cwd(),
        detached: true,
        env: {
          PATH: `${join(this.cwd(), 'node_modules', '.bin')}:${nodeDir}:${process.env.PATH}`,
          HOME: process.env.HOME,
          // The machine's certificate authorities, as in the user's own terminal (npm reaches
          // the registry through them where a proxy signs its connections).
          ...Object.fromEntries(
            ['NODE_EXTRA_CA_CERTS', 'SSL_CERT_FILE', 'SSL_CERT_DIR'].flatMap((name) =>
              process.env[name] ? [[name, process.env[name] as string]] : [],
            ),
          ),
          npm_config_update_notifier: 'false',
          ...this.#env,
        },
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    )
    let output = ''
    child.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
      output += chunk
    })
    child.stderr?.setEncoding('utf8').on('data', (chunk: string) => {
      output += chunk
    })
    const pgid = child.pid as number
    groups.add(pgid)
    const exited = new Promise<number | null>((resolve) =>
      child.once('exit', (code) => resolve(code)),
    )
    // Aborted once the race is decided: the losers' timers must not hold the process open.
    const decided = new AbortController()
    const outcome = await Promise.race([
      exited.then((code) => ({ code })),
      listening(pgid, child, decided.signal).then((ports) => ({ ports })),
      sleep(COMMAND_TIMEOUT_MS, undefined, { signal: decided.signal }).then(() => ({
        timeout: true as const,
      })),
    ]).finally(() => decided.abort())
    const context = `${shown}\n--- output ---\n${output.slice(-4000)}`
    if ('timeout' in outcome) {
      await stopGroup(pgid)
      assert.fail(`neither exited nor listened within ${COMMAND_TIMEOUT_MS / 1000} s:\n${context}`)
    }
    if ('ports' in outcome) {
      this.#services.push({ command: shown, pgid, section: this.#section, output: () => output })
      return
    }
    assert.equal(outcome.code, 0, `exit code ${outcome.code}:\n${context}`)
    // Something started with `&` keeps the group alive: wait until it listens, as a user
    // waits for "listening" before the next command.
    if (groupMembers(pgid).length > 0) {
      const waited = new AbortController()
      const ports = await Promise.race([
        listening(pgid, undefined, waited.signal),
        sleep(60_000, [], { signal: waited.signal }),
      ]).finally(() => waited.abort())
      assert.ok(ports.length > 0, `a background process that never listened:\n${context}`)
      this.#services.push({ command: shown, pgid, section: this.#section, output: () => output })
    }
    checkStatus(shown, output)
  }
}

/** `npm install ... tokengate` installs the packed tarball (offline first, quietly). */
function installing(command: string, tarball: string): string {
  return command.replace(
    /\bnpm (install|i)\b([^\n&|;]*)/g,
    (_match, verb: string, rest: string) => {
      const args = rest.replace(/(?<=\s)tokengate(?=\s|$)/g, tarball)
      return `npm ${verb} --prefer-offline --no-audit --no-fund${args}`
    },
  )
}

/** A curl with a status in its comment (`# 401`, `# B: 200`) must have got that status. */
function checkStatus(command: string, output: string): void {
  if (!/^\s*curl\b/.test(command)) return
  const expected = /#[^#\n]*\b([1-5]\d\d)\b/.exec(command.split('\n').at(-1) ?? '')?.[1]
  if (expected === undefined) return
  // `curl -i` status lines, or a line of `-w '%{http_code}'` alone.
  const statusLines = [
    ...output.matchAll(/^(?:HTTP\/[\d.]+ )?(\d{3})\s*$|^HTTP\/[\d.]+ (\d{3}) /gm),
  ].map((m) => m[1] ?? m[2])
  if (statusLines.length > 0) {
    assert.equal(statusLines.at(-1), expected, `${command}\n${output}`)
  } else if (Number(expected) >= 400) {
    assert.match(output, new RegExp(`"status":${expected}\\b`), `${command}\n${output}`)
  } else {
    assert.doesNotMatch(output, /"status":[45]\d\d\b/, `${command}\n${output}`)
  }
}

/** Process ids whose process group is `pgid` (from /proc). */
function groupMembers(pgid: number): number[] {
  const members: number[] = []
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue
    try {
      const stat = readFileSync(`/proc/${name}/stat`, 'utf8')
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
      // fields[0] is the state, [2] the process group.
      if (Number(fields[2]) === pgid && fields[0] !== 'Z') members.push(Number(name))
    } catch {}
  }
  return members
}

/** TCP ports the group listens on (sockets in /proc/<pid>/fd matched to /proc/net/tcp*). */
function listeningPorts(pgid: number): number[] {
  const inodes = new Set<string>()
  for (const pid of groupMembers(pgid)) {
    try {
      for (const fd of readdirSync(`/proc/${pid}/fd`)) {
        const target = readlinkSync(`/proc/${pid}/fd/${fd}`)
        const inode = /^socket:\[(\d+)\]$/.exec(target)?.[1]
        if (inode) inodes.add(inode)
      }
    } catch {}
  }
  const ports = new Set<number>()
  for (const table of ['/proc/net/tcp', '/proc/net/tcp6']) {
    for (const row of readFileSync(table, 'utf8').split('\n').slice(1)) {
      const cols = row.trim().split(/\s+/)
      // cols[1] local address:port (hex), cols[3] state (0A = LISTEN), cols[9] inode.
      if (cols[3] === '0A' && inodes.has(cols[9] as string)) {
        ports.add(Number.parseInt((cols[1] as string).split(':')[1] as string, 16))
      }
    }
  }
  return [...ports]
}

/**
 * Resolves with the ports once the group listens and no new port has appeared for a second
 * (a server opens its admin and decision listeners after its API one); never while `child`
 * has exited.
 */
async function listening(
  pgid: number,
  child: ChildProcess | undefined,
  signal: AbortSignal,
): Promise<number[]> {
  let seen = ''
  let stableSince = 0
  for (;;) {
    if (signal.aborted || (child && child.exitCode !== null)) return new Promise(() => {})
    const ports = listeningPorts(pgid).sort()
    const key = ports.join(',')
    if (key !== seen) {
      seen = key
      stableSince = Date.now()
    } else if (ports.length > 0 && Date.now() - stableSince >= 1000) {
      return ports
    }
    await sleep(200, undefined, { signal }).catch(() => {})
  }
}

// A run that dies mid-doc must not leave its servers behind.
const groups = new Set<number>()
process.on('exit', () => {
  for (const pgid of groups) {
    try {
      process.kill(-pgid, 'SIGKILL')
    } catch {}
  }
})

async function stopGroup(pgid: number): Promise<void> {
  groups.delete(pgid)
  const signal = (name: NodeJS.Signals) => {
    try {
      process.kill(-pgid, name)
    } catch {}
  }
  signal('SIGTERM')
  for (let i = 0; i < 100 && groupMembers(pgid).length > 0; i++) await sleep(100)
  signal('SIGKILL')
}

// TOKENGATE_DOCS=README.md,docs/scale-out.md runs only those (while editing them).
const only = process.env.TOKENGATE_DOCS?.split(',')
for (const doc of docFiles().filter((d) => !only || only.includes(d))) {
  const blocks = blocksOf(doc).filter(
    (b) => b.noRun === undefined && (b.language === 'sh' || b.file !== undefined),
  )
  if (blocks.length === 0) continue
  describe(`documented commands of ${doc}`, () => {
    const session = new Session()
    before(() => session.open(doc, blocks))
    after(() => session.close())
    for (const block of blocks) {
      test(`${where(block)}${block.file ? ` (${block.file})` : ''}`, async () => {
        await session.stopServicesOutside(block.section)
        if (block.file !== undefined) {
          writeFileSync(join(session.cwd(), block.file), session.ports(block.text))
          if (block.language === 'ts' || block.language === 'js') {
            await typeCheck(doc, session.cwd(), block.file)
          }
          return
        }
        for (const command of commandsOf(block.text)) await session.run(command)
      })
    }
  })
}
