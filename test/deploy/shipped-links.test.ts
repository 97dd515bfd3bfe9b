/**
 * Every link of README.md and docs/*.md resolves where the docs are read: a relative link
 * must name a file (or a folder of files) that `npm pack` ships, since the docs are read from
 * node_modules/tokengate and from the image as well as in a clone; a link to the repository
 * (package.json `repository`) must name a file of the repository. npm's own file list
 * (`npm pack --dry-run --json`) decides what ships, not a copy of the "files" globs.
 */
import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { existsSync, readFileSync } from 'node:fs'
import { delimiter, dirname, join, posix } from 'node:path'
import { test } from 'node:test'
import { docFiles, ROOT } from '../docs/markdown-blocks.ts'

const manifest = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8'))
/** https://github.com/owner/name, from package.json `repository`. */
const REPOSITORY = String(manifest.repository?.url ?? '')
  .replace(/^git\+/, '')
  .replace(/\.git$/, '')

/** Paths `npm pack` would put in the tarball (scripts skipped: dist/ is not linked to). */
function shippedFiles(): Set<string> {
  const out = execFileSync('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], {
    cwd: ROOT,
    encoding: 'utf8',
    env: {
      ...process.env,
      PATH: `${dirname(process.execPath)}${delimiter}${process.env.PATH}`,
      npm_config_update_notifier: 'false',
    },
    maxBuffer: 64 * 1024 * 1024,
  })
  const [packed] = JSON.parse(out.slice(out.indexOf('[')))
  return new Set(packed.files.map((f: { path: string }) => f.path))
}

/** The links of one markdown text that do not resolve, as `doc: target (why)`. */
export function linkProblems(doc: string, text: string, shipped: ReadonlySet<string>): string[] {
  const problems: string[] = []
  // Inline links and images outside code: [text](target) and ![alt](target).
  const prose = text.replace(/^(`{3,}).*\n[\s\S]*?^\1/gm, '').replace(/`[^`\n]*`/g, '')
  for (const [, target = ''] of prose.matchAll(/\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g)) {
    if (target.startsWith('#') || /^(mailto|https?):/.test(target)) {
      const prefix = `${REPOSITORY}/blob/`
      if (REPOSITORY && target.startsWith(prefix)) {
        const path = target.slice(prefix.length).split('#')[0]?.split('/').slice(1).join('/')
        if (!path || !existsSync(join(ROOT, path))) {
          problems.push(`${doc}: ${target} (no such file in the repository)`)
        }
      }
      continue
    }
    const path = posix.normalize(posix.join(posix.dirname(doc), target.split('#')[0] as string))
    const folder = `${path.replace(/\/$/, '')}/`
    if (!shipped.has(path) && ![...shipped].some((file) => file.startsWith(folder))) {
      problems.push(`${doc}: ${target} (${path} is not in the package)`)
    }
  }
  return problems
}

test('package.json names the repository the docs link to', () => {
  assert.match(REPOSITORY, /^https:\/\/github\.com\/[\w.-]+\/[\w.-]+$/)
})

test('every relative link of README.md and docs/*.md names a file the package ships', () => {
  const shipped = shippedFiles()
  assert.ok(shipped.has('examples/forward-auth/nginx.conf'), 'examples/ ships')
  assert.ok(shipped.has('deploy/kubernetes/base/kustomization.yaml'), 'deploy/ ships')
  const problems = docFiles().flatMap((doc) =>
    linkProblems(doc, readFileSync(join(ROOT, doc), 'utf8'), shipped),
  )
  assert.deepEqual(problems, [])
})

test('a link to a file that does not ship, or to no file of the repository, is reported', () => {
  const shipped = new Set(['docs/gateway.md', 'examples/forward-auth/nginx.conf'])
  const text = [
    'See [the gateway](gateway.md#route-policy), [nginx](../examples/forward-auth/nginx.conf),',
    '[the examples](../examples/forward-auth/) and [a heading](#limits).',
    'Not shipped: [bench](../bench/README.md#tables), ![shot](console/pats.png),',
    '[a test](../test/decision/attacks.test.ts).',
    `Repository: [bench](${REPOSITORY}/blob/main/bench/README.md#x), [gone](${REPOSITORY}/blob/main/nope.md).`,
    '`[in code](../nowhere.md)` is not a link.',
    '```text',
    '[in a block](../nowhere.md)',
    '```',
  ].join('\n')
  assert.deepEqual(linkProblems('docs/x.md', text, shipped), [
    'docs/x.md: ../bench/README.md#tables (bench/README.md is not in the package)',
    'docs/x.md: console/pats.png (docs/console/pats.png is not in the package)',
    'docs/x.md: ../test/decision/attacks.test.ts (test/decision/attacks.test.ts is not in the package)',
    `docs/x.md: ${REPOSITORY}/blob/main/nope.md (no such file in the repository)`,
  ])
})
