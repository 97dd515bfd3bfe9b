import assert from 'node:assert/strict'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, test } from 'node:test'
import { createPolicyMatcher, splitRequestPath } from '../../src/auth/policy/matcher.ts'
import {
  DEFAULT_POLICY,
  loadPolicy,
  PolicyError,
  parsePolicy,
} from '../../src/auth/policy/policy.ts'
import type { Principal } from '../../src/core/principal.ts'

const principal = (permissions: string[] = [], tenantId = 'acme'): Principal => ({
  tokenType: 'pat',
  tenantId,
  subject: 's',
  permissions,
  tokenId: 'tok_1',
  expiresAt: null,
  fingerprint: 'pat_…abcd',
})

function problemsOf(text: string) {
  try {
    parsePolicy(text, 'policy.yaml')
  } catch (error) {
    assert.ok(error instanceof PolicyError)
    return error
  }
  assert.fail('expected a PolicyError')
}

describe('policy file validation', () => {
  test('a complete valid policy parses, in order', () => {
    const policy = parsePolicy(`
default: deny
caseSensitive: true
rules:
  - methods: [GET, HEAD]
    path: /api/v1/projects/:id/*
    permissions: [projects:read]
  - methods: '*'
    path: /api/v1/tenants/:tenant/files
    tenantParam: tenant
  - methods: [DELETE]
    path: /api/v1/admin/*
    deny: true
`)
    assert.equal(policy.default, 'deny')
    assert.equal(policy.caseSensitive, true)
    assert.equal(policy.rules.length, 3)
    assert.deepEqual(policy.rules[0]?.methods, ['GET', 'HEAD'])
    assert.equal(policy.rules[0]?.line, 5)
    assert.equal(policy.rules[1]?.tenantParam, 'tenant')
    assert.equal(policy.rules[2]?.deny, true)
  })

  test('JSON is accepted too, with line numbers', () => {
    const policy = parsePolicy(
      JSON.stringify({ rules: [{ methods: '*', path: '/api/v1/x', permissions: ['a'] }] }),
    )
    assert.equal(policy.default, 'authenticated')
    assert.equal(policy.rules[0]?.path, '/api/v1/x')
    const error = problemsOf('{\n  "default": "allow",\n  "rules": []\n}')
    assert.equal(error.problems[0]?.line, 2)
  })

  test('an empty document defaults to authenticated with no rules', () => {
    assert.deepEqual(parsePolicy('default: authenticated\n'), {
      default: 'authenticated',
      caseSensitive: false,
      rules: [],
    })
    assert.equal(DEFAULT_POLICY.default, 'authenticated')
  })

  test('every problem is reported with its line and column', () => {
    const error = problemsOf(`default: allow
rules:
  - methods: [get]
    path: /api/v1/projects/:id/*
  - methods: [GET]
    path: /projects/*
    permissions: [a b]
  - methods: '*'
    path: /api/v1/*/x
    tenantParam: tenant
  - path: /api/v1/y
    deny: true
    permissions: [x]
    colour: red
`)
    const lines = error.problems.map((p) => `${p.line} ${p.at}: ${p.message}`)
    assert.deepEqual(
      error.problems.map((p) => p.line),
      [1, 3, 6, 7, 9, 10, 11, 12, 14],
      lines.join('\n'),
    )
    assert.match(error.message, /policy\.yaml:1:10: default: must be "authenticated" or "deny"/)
    assert.match(error.message, /policy\.yaml:3:15: rules\[0\]\.methods: .*"get" \(write GET\)/)
    assert.match(error.message, /policy\.yaml:6:11: rules\[1\]\.path: must start with \/api\/v1\//)
    assert.match(error.message, /:7:19: rules\[1\]\.permissions: not a permission/)
    assert.match(error.message, /:9:11: rules\[2\]\.path: `\*` may only be the last segment/)
    assert.match(error.message, /:10:18: rules\[2\]\.tenantParam: the path has no :tenant segment/)
    assert.match(error.message, /:11:5: rules\[3\]\.methods: required/)
    assert.match(error.message, /:12:11: rules\[3\]\.deny: a deny rule refuses every request/)
    assert.match(error.message, /:14:5: rules\[3\]\.colour: unknown key/)
  })

  test('YAML syntax errors and duplicate keys name the line', () => {
    assert.equal(problemsOf('rules:\n  - path: [unclosed\n').problems[0]?.line, 3)
    assert.equal(problemsOf('default: deny\ndefault: deny\n').problems[0]?.line, 2)
    assert.match(problemsOf('- just\n- a list\n').message, /:1:1: the policy must be a mapping/)
  })

  test('literal segments a request could never carry are refused: ;, non-ASCII, trailing .', () => {
    const error = problemsOf(
      'rules:\n  - { methods: "*", path: "/api/v1/a;b/\u0131nternal/x./y" }\n',
    )
    assert.deepEqual(
      error.problems.map((p) => p.message),
      [
        'literal segment "a;b" contains *, ?, #, %, ;, \\ or spaces',
        'literal segment "\u0131nternal" is not ASCII or ends with .',
        'literal segment "x." is not ASCII or ends with .',
      ],
    )
  })

  test('parameters: bad names and duplicates are refused', () => {
    const error = problemsOf('rules:\n  - { methods: "*", path: "/api/v1/:a/:a/:1x" }\n')
    assert.deepEqual(
      error.problems.map((p) => p.message),
      ['parameter :a appears twice', 'bad parameter name ":1x"'],
    )
  })

  test('loadPolicy reads a file and names it in errors', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tokengate-policy-'))
    try {
      const file = join(dir, 'gateway.yaml')
      writeFileSync(file, 'rules:\n  - { methods: [GET], path: /api/v1/a }\n')
      assert.equal((await loadPolicy(file)).rules.length, 1)
      writeFileSync(file, 'rules:\n  - { methods: [GET], path: /a }\n')
      await assert.rejects(loadPolicy(file), (error: Error) => {
        assert.ok(error.message.includes(`${file}:2:`))
        return true
      })
      await assert.rejects(loadPolicy(join(dir, 'missing.yaml')), /cannot read \(ENOENT\)/)
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })
})

describe('policy matcher', () => {
  const matcher = createPolicyMatcher(
    parsePolicy(`
rules:
  - { methods: [GET], path: /api/v1/projects/:id/*, permissions: [projects:read] }
  - { methods: [POST], path: /api/v1/projects, permissions: [projects:write] }
  - { methods: '*', path: /api/v1/tenants/:tenant/*, tenantParam: tenant }
  - { methods: '*', path: /api/v1/admin/*, deny: true }
`),
  )

  test('first matching rule decides; `*` also matches nothing', () => {
    const reader = principal(['projects:read'])
    assert.equal(matcher.decide('GET', '/api/v1/projects/1', reader).outcome, 'allow')
    assert.equal(matcher.decide('GET', '/api/v1/projects/1/a/b', reader).outcome, 'allow')
    assert.equal(matcher.decide('HEAD', '/api/v1/projects/1', reader).outcome, 'allow')
    assert.equal(matcher.decide('POST', '/api/v1/projects', reader).outcome, 'forbidden')
    assert.equal(matcher.decide('GET', '/api/v1/projects/1', principal()).outcome, 'forbidden')
  })

  test('a literal path matches exactly, a trailing slash aside', () => {
    const writer = principal(['projects:write'])
    assert.equal(matcher.decide('POST', '/api/v1/projects/', writer).outcome, 'allow')
    const other = matcher.decide('POST', '/api/v1/projects/x', principal())
    assert.equal(other.outcome, 'allow')
    assert.equal('rule' in other ? other.rule : 'none', undefined)
  })

  test('percent-encoded literal segments match their decoded form', () => {
    const decision = matcher.decide('GET', '/api/v1/%70rojects/1', principal())
    assert.equal(decision.outcome, 'forbidden')
  })

  test('tenantParam compares exactly, without case folding', () => {
    assert.equal(matcher.decide('GET', '/api/v1/tenants/acme/x', principal()).outcome, 'allow')
    assert.equal(
      matcher.decide('GET', '/api/v1/tenants/ACME/x', principal()).outcome,
      'tenant_mismatch',
    )
    assert.equal(
      matcher.decide('GET', '/api/v1/tenants/other', principal()).outcome,
      'tenant_mismatch',
    )
    assert.equal(matcher.decide('GET', '/api/v1/tenants/%61cme', principal()).outcome, 'allow')
  })

  test('deny rules and the deny default', () => {
    assert.equal(matcher.decide('GET', '/api/v1/Admin/x', principal()).outcome, 'deny')
    const strict = createPolicyMatcher(parsePolicy('default: deny\ncaseSensitive: true\n'))
    assert.equal(strict.decide('GET', '/api/v1/x', principal()).outcome, 'deny')
  })

  test('case-sensitive policies compare literals exactly', () => {
    const strict = createPolicyMatcher(
      parsePolicy('caseSensitive: true\nrules:\n  - { methods: "*", path: /api/v1/a, deny: true }'),
    )
    assert.equal(strict.decide('GET', '/api/v1/a', principal()).outcome, 'deny')
    assert.equal(strict.decide('GET', '/api/v1/A', principal()).outcome, 'allow')
  })

  test('ambiguous request paths are refused', () => {
    for (const path of [
      '/api/v1/a/../b',
      '/api/v1/a/%2e%2E/b',
      '/api/v1/a/./b',
      '/api/v1/a%2Fb',
      '/api/v1/a%5cb',
      '/api/v1/a\\b',
      '/api/v1//a',
      '/api/v1/a%zz',
      '/api/v1/a%00',
    ]) {
      assert.equal(splitRequestPath(path).ok, false, path)
      assert.equal(matcher.decide('GET', path, principal()).outcome, 'bad_path', path)
    }
    assert.deepEqual(splitRequestPath('/api/v1/a%20b/'), {
      ok: true,
      segments: ['api', 'v1', 'a b'],
    })
  })
})
