/**
 * The gateway's route policy: which permissions each upstream route needs.
 *
 * A policy file (YAML, or JSON, which is YAML too) holds an ordered list of rules and a
 * default for requests no rule matches:
 *
 * ```yaml
 * default: authenticated        # or: deny
 * rules:
 *   - methods: [GET]
 *     path: /api/v1/tenants/:tenant/projects/*
 *     permissions: [projects:read]
 *     tenantParam: tenant
 *   - methods: '*'
 *     path: /api/v1/admin/*
 *     deny: true
 * ```
 *
 * The file is validated once, at start; every problem is reported with its line and column.
 * The valid policy is then compiled into a matcher (`compilePolicy`). See docs/gateway.md.
 */
import { readFile } from 'node:fs/promises'
import { isMap, isScalar, isSeq, LineCounter, type Node, parseDocument } from 'yaml'

/** What happens to a request no rule matches. */
export type PolicyDefault = 'authenticated' | 'deny'

/** One validated rule, in file order. */
export interface PolicyRule {
  /** Upper-case method names, or `'*'` for every method. A rule naming GET also covers HEAD. */
  readonly methods: '*' | readonly string[]
  /** Path pattern: literal segments, `:name` (exactly one segment), a final `*` (the rest). */
  readonly path: string
  /** Permissions the caller must all hold (exact match). Empty: any authenticated caller. */
  readonly permissions: readonly string[]
  /** Name of a `:param` of `path` that must equal the caller's tenant exactly. */
  readonly tenantParam?: string | undefined
  /** Refuse every matching request (answered like an unknown path: 404). */
  readonly deny: boolean
  /** 1-based line of the rule in the policy file, for logs. */
  readonly line: number
}

export interface Policy {
  readonly default: PolicyDefault
  /**
   * Whether literal path segments are compared case-sensitively. Default false: an upstream
   * with case-insensitive routing (Express' default) must not be reachable through a
   * spelling (`/ADMIN`) that a case-sensitive rule for `/admin` would not catch.
   */
  readonly caseSensitive: boolean
  readonly rules: readonly PolicyRule[]
}

/** The secure default when no policy file is configured: authenticated, no permission. */
export const DEFAULT_POLICY: Policy = Object.freeze({
  default: 'authenticated',
  caseSensitive: false,
  rules: Object.freeze([]),
})

/** Every path the gateway proxies begins with this; a rule outside it could never match. */
export const PROXIED_PREFIX = '/api/v1/'

/** One problem in a policy file. */
export interface PolicyProblem {
  /** 1-based; 0 when the position is unknown. */
  readonly line: number
  readonly column: number
  /** Where in the document, e.g. `rules[2].path`. */
  readonly at: string
  readonly message: string
}

/** A policy file that cannot be used; `message` lists every problem as `file:line:col`. */
export class PolicyError extends Error {
  override readonly name = 'PolicyError'
  readonly problems: readonly PolicyProblem[]
  constructor(source: string, problems: readonly PolicyProblem[]) {
    super(
      `invalid gateway policy ${source}:\n${problems
        .map((p) => `  ${source}:${p.line}:${p.column}: ${p.at ? `${p.at}: ` : ''}${p.message}`)
        .join('\n')}`,
    )
    this.problems = problems
  }
}

/** Reads and validates a policy file (YAML or JSON). Throws `PolicyError` listing every problem. */
export async function loadPolicy(file: string): Promise<Policy> {
  let text: string
  try {
    text = await readFile(file, 'utf8')
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code ?? 'unreadable'
    throw new PolicyError(file, [{ line: 0, column: 0, at: '', message: `cannot read (${code})` }])
  }
  return parsePolicy(text, file)
}

const TOP_KEYS = new Set(['default', 'caseSensitive', 'rules'])
const RULE_KEYS = new Set(['methods', 'path', 'permissions', 'tenantParam', 'deny'])
const METHOD = /^[A-Z][A-Z-]*$/
const PARAM = /^:[A-Za-z_][A-Za-z0-9_]*$/
/** Permission strings: visible ASCII without commas (the upstream header is comma-separated). */
const PERMISSION = /^[\x21-\x2b\x2d-\x7e]+$/

/**
 * Parses and validates policy text. `source` names the file in error messages.
 * Throws `PolicyError` with every problem found, each with its line and column.
 */
export function parsePolicy(text: string, source = 'policy'): Policy {
  const lineCounter = new LineCounter()
  const doc = parseDocument(text, { lineCounter, prettyErrors: false, uniqueKeys: true })
  const problems: PolicyProblem[] = []
  const report = (node: Node | null | undefined, at: string, message: string) => {
    const offset = node?.range?.[0]
    const pos = offset === undefined ? { line: 0, col: 0 } : lineCounter.linePos(offset)
    problems.push({ line: pos.line, column: pos.col, at, message })
  }
  for (const error of doc.errors) {
    const pos = lineCounter.linePos(error.pos[0])
    problems.push({ line: pos.line, column: pos.col, at: '', message: firstLine(error.message) })
  }
  if (problems.length > 0) throw new PolicyError(source, problems)

  const root = doc.contents
  if (!isMap(root)) {
    report(root, '', 'the policy must be a mapping with `default` and `rules`')
    throw new PolicyError(source, problems)
  }

  let policyDefault: PolicyDefault = 'authenticated'
  let caseSensitive = false
  const rules: PolicyRule[] = []
  for (const pair of root.items) {
    const key = isScalar(pair.key) ? String(pair.key.value) : ''
    const value = pair.value as Node | null
    if (!TOP_KEYS.has(key)) {
      report(pair.key as Node, key, `unknown key (expected one of: ${[...TOP_KEYS].join(', ')})`)
      continue
    }
    if (key === 'default') {
      const v = isScalar(value) ? value.value : undefined
      if (v === 'authenticated' || v === 'deny') policyDefault = v
      else report(value ?? (pair.key as Node), 'default', 'must be "authenticated" or "deny"')
    } else if (key === 'caseSensitive') {
      const v = isScalar(value) ? value.value : undefined
      if (typeof v === 'boolean') caseSensitive = v
      else report(value ?? (pair.key as Node), 'caseSensitive', 'must be true or false')
    } else if (!isSeq(value)) {
      report(value ?? (pair.key as Node), 'rules', 'must be a list of rules')
    } else {
      value.items.forEach((item, index) => {
        const rule = readRule(item as Node, `rules[${index}]`, report, lineCounter)
        if (rule) rules.push(rule)
      })
    }
  }
  if (problems.length > 0) {
    problems.sort((a, b) => a.line - b.line || a.column - b.column)
    throw new PolicyError(source, problems)
  }
  return Object.freeze({ default: policyDefault, caseSensitive, rules: Object.freeze(rules) })
}

type Report = (node: Node | null | undefined, at: string, message: string) => void

function readRule(
  node: Node,
  at: string,
  report: Report,
  lineCounter: LineCounter,
): PolicyRule | undefined {
  if (!isMap(node)) {
    report(node, at, 'a rule must be a mapping with at least `path`')
    return undefined
  }
  const before = countingReport(report)
  const fields = new Map<string, Node | null>()
  for (const pair of node.items) {
    const key = isScalar(pair.key) ? String(pair.key.value) : ''
    if (!RULE_KEYS.has(key)) {
      before.report(
        pair.key as Node,
        `${at}.${key}`,
        `unknown key (expected one of: ${[...RULE_KEYS].join(', ')})`,
      )
    } else fields.set(key, pair.value as Node | null)
  }

  const methods = readMethods(fields.get('methods'), `${at}.methods`, node, before.report)
  const pathNode = fields.get('path')
  const path = isScalar(pathNode) && typeof pathNode.value === 'string' ? pathNode.value : undefined
  const params = new Set<string>()
  if (path === undefined) {
    before.report(pathNode ?? node, `${at}.path`, 'required: a path pattern such as /api/v1/x/*')
  } else {
    for (const message of checkPattern(path, params)) {
      before.report(pathNode, `${at}.path`, message)
    }
  }
  const permissions = readPermissions(fields.get('permissions'), `${at}.permissions`, before.report)

  const tenantNode = fields.get('tenantParam')
  let tenantParam: string | undefined
  if (tenantNode !== undefined) {
    const v = isScalar(tenantNode) ? tenantNode.value : undefined
    if (typeof v !== 'string' || v.length === 0) {
      before.report(tenantNode ?? node, `${at}.tenantParam`, 'must be the name of a :param')
    } else if (path !== undefined && !params.has(v)) {
      before.report(tenantNode, `${at}.tenantParam`, `the path has no :${v} segment`)
    } else tenantParam = v
  }

  const denyNode = fields.get('deny')
  let deny = false
  if (denyNode !== undefined) {
    const v = isScalar(denyNode) ? denyNode.value : undefined
    if (typeof v !== 'boolean')
      before.report(denyNode ?? node, `${at}.deny`, 'must be true or false')
    else deny = v
  }
  if (deny && (permissions.length > 0 || tenantParam !== undefined)) {
    before.report(
      denyNode,
      `${at}.deny`,
      'a deny rule refuses every request: remove permissions and tenantParam',
    )
  }

  if (before.count > 0 || path === undefined) return undefined
  const line = node.range ? lineCounter.linePos(node.range[0]).line : 0
  return Object.freeze({
    methods,
    path,
    permissions: Object.freeze(permissions),
    tenantParam,
    deny,
    line,
  })
}

function readMethods(
  node: Node | null | undefined,
  at: string,
  ruleNode: Node,
  report: Report,
): '*' | readonly string[] {
  if (node === undefined) {
    report(ruleNode, at, "required: a list of methods, or '*' for every method")
    return '*'
  }
  if (isScalar(node) && node.value === '*') return '*'
  const items = isSeq(node) ? node.items : isScalar(node) ? [node] : undefined
  if (items === undefined || items.length === 0) {
    report(node, at, "must be a list of methods such as [GET, POST], or '*'")
    return '*'
  }
  const methods: string[] = []
  for (const item of items) {
    const v = isScalar(item) ? item.value : undefined
    if (typeof v !== 'string' || !METHOD.test(v)) {
      const hint =
        typeof v === 'string' && METHOD.test(v.toUpperCase()) ? ` (write ${v.toUpperCase()})` : ''
      report(item as Node, at, `not an upper-case HTTP method: ${JSON.stringify(v)}${hint}`)
    } else methods.push(v)
  }
  return Object.freeze(methods)
}

function readPermissions(node: Node | null | undefined, at: string, report: Report): string[] {
  if (node === undefined) return []
  if (!isSeq(node)) {
    report(node, at, 'must be a list of permission strings, e.g. [projects:read]')
    return []
  }
  const permissions: string[] = []
  for (const item of node.items) {
    const v = isScalar(item) ? item.value : undefined
    if (typeof v !== 'string' || !PERMISSION.test(v)) {
      report(item as Node, at, `not a permission (visible ASCII, no commas): ${JSON.stringify(v)}`)
    } else permissions.push(v)
  }
  return permissions
}

/** Problems with a path pattern; fills `params` with its parameter names. */
function checkPattern(path: string, params: Set<string>): string[] {
  if (!path.startsWith(PROXIED_PREFIX)) {
    return [`must start with ${PROXIED_PREFIX}: the gateway proxies only paths under it`]
  }
  const problems: string[] = []
  const segments = path.slice(1).split('/')
  segments.forEach((segment, index) => {
    const last = index === segments.length - 1
    if (segment === '*') {
      if (!last) problems.push('`*` may only be the last segment')
    } else if (segment.startsWith(':')) {
      if (!PARAM.test(segment)) problems.push(`bad parameter name ${JSON.stringify(segment)}`)
      else if (params.has(segment.slice(1))) problems.push(`parameter ${segment} appears twice`)
      else params.add(segment.slice(1))
    } else if (segment === '') {
      if (!last) problems.push('empty segment (`//`)')
    } else if (segment === '.' || segment === '..') {
      problems.push('dot segments are not allowed')
    } else if (/[*?#%;\\\s]/.test(segment)) {
      problems.push(
        `literal segment ${JSON.stringify(segment)} contains *, ?, #, %, ;, \\ or spaces`,
      )
    } else if (/[^\x21-\x7e]/.test(segment) || segment.endsWith('.')) {
      // Requests with such segments are refused (request-target.ts): the rule could never match.
      problems.push(`literal segment ${JSON.stringify(segment)} is not ASCII or ends with .`)
    }
  })
  return problems
}

function countingReport(report: Report): { report: Report; readonly count: number } {
  let count = 0
  return {
    report(node, at, message) {
      count++
      report(node, at, message)
    },
    get count() {
      return count
    },
  }
}

function firstLine(message: string): string {
  return message.split('\n', 1)[0] ?? message
}
