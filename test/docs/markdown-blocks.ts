/**
 * The fenced code blocks of README.md and docs/*.md, as the doc runner reads them (the files
 * are read, never a list of their blocks: a block added later is checked and run too).
 *
 * The info string is the language, then optional directives:
 * - ```sh                        run, in document order, by the doc runner (docs.package.ts)
 * - ```js file=server.mjs         written to that file in the doc's directory (ts, yaml, json
 *                                  too); a later `sh` block uses it; ts and js files are
 *                                  type-checked against the installed package first
 * - ```sh no-run=REASON           not run here, for one of the REASONS below; syntax-checked
 * - ```text, ```http              output, synopses and diagrams: neither run nor checked
 * A block without a language is text as well (the architecture trees); one that looks like a
 * shell command must say which it is (`MISSING_LANGUAGE`).
 * A ts or js block without `file=` must carry `no-run=` (blocks.test.ts); json, yaml and
 * python blocks without `file=`, and ts/js fragments, are syntax-checked (`node --check`,
 * the `yaml` parser, `python3 -m py_compile`); a `yaml` block with `file=` is what a later
 * command reads.
 */
import { readdirSync, readFileSync } from 'node:fs'
import { join, relative } from 'node:path'
import { fileURLToPath } from 'node:url'

export const ROOT = fileURLToPath(new URL('../..', import.meta.url))

/** Why a block is not run here; every `no-run=` must name one. */
export const REASONS: Readonly<Record<string, string>> = {
  clone: 'runs in a clone of this repository, as CI itself does (npm ci, npm test, npm run ...)',
  external: 'needs a service outside this machine (your Postgres, an identity provider, GitHub)',
  kubernetes: 'needs a Kubernetes cluster',
  systemd: 'needs systemd',
  fragment: 'a fragment of a larger program, not a whole one',
  placeholders: 'holds placeholders (…, PASSWORD, IDs) for values of your own',
}

/**
 * The compiler options a doc's TypeScript and JavaScript files are type-checked with when the
 * doc has no `tsconfig.json` block of its own: what Node's type stripping needs.
 */
export const TYPE_STRIPPING_OPTIONS: Readonly<Record<string, unknown>> = {
  target: 'esnext',
  module: 'nodenext',
  strict: true,
  allowImportingTsExtensions: true,
  erasableSyntaxOnly: true,
  verbatimModuleSyntax: true,
  types: ['node'],
}

export const LANGUAGES = ['sh', 'js', 'ts', 'json', 'yaml', 'python', 'http', 'text'] as const
export type Language = (typeof LANGUAGES)[number] | ''

export interface Block {
  /** Path relative to the repository, e.g. `docs/gateway.md`. */
  readonly doc: string
  /** 1-based line of the opening fence. */
  readonly line: number
  readonly language: Language
  /** `file=` */
  readonly file: string | undefined
  /** `no-run=` */
  readonly noRun: string | undefined
  /** The section (the last `## ` heading before the block). */
  readonly section: string
  readonly text: string
  /** Problems with the info string, for the checker. */
  readonly problems: readonly string[]
}

/** README.md and every docs/*.md, in that order. */
export function docFiles(): string[] {
  const docs = readdirSync(join(ROOT, 'docs'))
    .filter((name) => name.endsWith('.md'))
    .sort()
    .map((name) => join('docs', name))
  return ['README.md', ...docs]
}

/** Lines that say "this is a shell command": a block holding one must carry a language. */
const MISSING_LANGUAGE = /^(\$ |npx |npm |curl |tokengate |node |export |sudo )/m

export function blocksOf(doc: string): Block[] {
  const lines = readFileSync(join(ROOT, doc), 'utf8').split('\n')
  const blocks: Block[] = []
  let section = ''
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i] as string
    if (/^## /.test(line)) section = line.slice(3).trim()
    const open = /^(`{3,})(.*)$/.exec(line)
    if (!open) continue
    const fence = open[1] as string
    const [language = '', ...words] = (open[2] as string).trim().split(/\s+/).filter(Boolean)
    const body: string[] = []
    let j = i + 1
    while (j < lines.length && !(lines[j] as string).startsWith(fence))
      body.push(lines[j++] as string)
    const text = `${body.join('\n')}\n`
    const problems: string[] = []
    const directives = new Map<string, string>()
    for (const word of words) {
      const [key = '', value = ''] = word.split('=', 2)
      if (!['file', 'no-run'].includes(key) || value === '') {
        problems.push(`unknown directive '${word}' (file=NAME or no-run=REASON)`)
      }
      directives.set(key, value)
    }
    if (language !== '' && !(LANGUAGES as readonly string[]).includes(language)) {
      problems.push(`unknown language '${language}' (${LANGUAGES.join(', ')})`)
    }
    const noRun = directives.get('no-run')
    if (noRun !== undefined && !Object.hasOwn(REASONS, noRun)) {
      problems.push(`unknown no-run reason '${noRun}' (${Object.keys(REASONS).join(', ')})`)
    }
    if (language === '' && MISSING_LANGUAGE.test(text)) {
      problems.push('a command without a language: write ```sh (or ```text for output)')
    }
    blocks.push({
      doc: relative(ROOT, join(ROOT, doc)),
      line: i + 1,
      language: language as Language,
      file: directives.get('file'),
      noRun,
      section,
      text,
      problems,
    })
    i = j
  }
  return blocks
}

/** `README.md:217` */
export function where(block: Block): string {
  return `${block.doc}:${block.line}`
}
