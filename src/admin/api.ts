import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import {
  ADMIN_ROLES,
  ADMIN_TOKEN_NAME,
  adminTokenMetadata,
  issueAdminToken,
  MAX_ADMIN_TOKEN_LIFETIME_DAYS,
  revokeAdminToken,
} from '../auth/admin-tokens.ts'
import { addIssuer, checkIssuerShape, removeIssuer } from '../auth/issuer-operations.ts'
import {
  jwtRevocationJson,
  listJwtRevocations,
  removeJwtRevocation,
  revokeJwts,
} from '../auth/jwt-revocation-operations.ts'
import { quotaView } from '../auth/key-fields.ts'
import type { OperationDeps } from '../auth/operations.ts'
import {
  checkRotationGrace,
  editTenantPat,
  issueTenantPat,
  type PatEdit,
  type PatLifetime,
  type PatOperationDeps,
  patMetadata,
  type QuotaEdit,
  revokeLeakedPats,
  revokeTenantPat,
  rotateTenantPat,
  setPatDisabled,
} from '../auth/pat-lifecycle.ts'
import {
  createTenant,
  editTenant,
  setTenantEnabled,
  tenantMetadata,
} from '../auth/tenant-operations.ts'
import {
  readUsageSeries,
  USAGE_RESOLUTIONS,
  type UsageRange,
  usageCsv,
  usageRange,
  usageView,
} from '../auth/usage.ts'
import { JWT_REVOCATION_KINDS, type JwtRevocationKind } from '../core/jwt-revocations.ts'
import { MAX_TENANT_NAME_LENGTH } from '../core/operator-text.ts'
import { type PatStatus, patStatus } from '../core/pat.ts'
import type { RateLimitOverride } from '../core/ports.ts'
import { sendProblemResponse } from '../http/problem-response.ts'
import type { AdminRole, AdminStore, AuditSearch, PatSearch } from '../stores/admin-store.ts'
import type { StoredAuditEvent, UsageScope } from '../stores/store.ts'
import { adminGateRequest, adminRefusal } from './admin-gate.ts'
import { type AdminContext, operationDeps, sendProblem } from './context.ts'
import { checkPermissions, checkTenantId, checkText, invalid, withinLimit } from './input.ts'
import {
  certificateThumbprintOf,
  externalIdOf,
  metadataOf,
  onlyFields,
  quotaOf,
  rateLimitOf,
} from './key-input.ts'
import { adminOpenApiDocument } from './openapi.ts'
import type { Operator } from './operators.ts'
import { readStatus } from './status.ts'
import { auditCsv, auditView, issuerView } from './views.ts'

export const API_PREFIX = '/admin/api/v1'
const CHALLENGE = 'Bearer realm="tokengate-admin"'
const DAY_MS = 86_400_000
const EXPORT_MAX = 10_000

type Query = Record<string, string | undefined>

/**
 * The admin API: bearer operator credentials only (no cookies, so no CSRF surface), JSON
 * in and out, problem+json failures with the API's codes. Writes need the operator role.
 */
export function registerAdminApi(app: FastifyInstance, ctx: AdminContext): void {
  const { store, clock } = ctx

  // The admin credentials are kinds of the admin gate: the strict Bearer parse, the
  // failed-authentication limit and the failure answers are the gate's (admin-gate.ts).
  const { gate } = ctx
  const authenticate = async (request: FastifyRequest, reply: FastifyReply) => {
    const outcome = await gate.check(adminGateRequest(request))
    if (!outcome.allowed) return sendProblemResponse(reply, adminRefusal(outcome))
    request.operator = gate.operatorOf(outcome)
  }

  const operatorOf = (request: FastifyRequest) => request.operator as Operator
  const write = async (request: FastifyRequest, reply: FastifyReply) => {
    if (operatorOf(request).role !== 'operator') {
      return sendProblem(
        reply,
        403,
        'insufficient_permission',
        'This action needs the operator role; this credential is read-only.',
        request,
        { 'www-authenticate': `${CHALLENGE}, error="insufficient_scope"` },
      )
    }
  }
  const deps = (request: FastifyRequest) => operationDeps(request, operatorOf(request), ctx)
  /** For reads that need no actor. */
  const deps0 = { store, clock }
  const body = (request: FastifyRequest) => {
    const value = request.body
    if (value === null || typeof value !== 'object' || Array.isArray(value)) {
      throw invalid('body', 'expected a JSON object')
    }
    return value as Record<string, unknown>
  }

  app.register(
    async (api) => {
      api.addHook('onRequest', authenticate)
      // The API takes JSON only; the console's form encoding is not an API body.
      api.addHook('preValidation', async (request, reply) => {
        if (request.body === undefined || isJson(request.headers['content-type'])) return
        return sendProblem(
          reply,
          415,
          'unsupported_media_type',
          'The admin API takes application/json bodies.',
          request,
        )
      })
      api.get('/me', async (request) => {
        const o = operatorOf(request)
        return { actor: o.actor, role: o.role, expiresAt: new Date(o.expiresAt).toISOString() }
      })
      api.get('/openapi.json', async () => adminOpenApiDocument())

      api.get('/tenants', async () => ({
        tenants: (await store.listTenants()).map(tenantMetadata),
      }))
      api.get<{ Params: { id: string } }>('/tenants/:id', async (request, reply) => {
        const tenant = await store.findTenant(request.params.id)
        if (!tenant) return sendProblem(reply, 404, 'not_found', 'No such tenant.', request)
        return tenantMetadata(tenant)
      })
      api.patch<{ Params: { id: string } }>(
        '/tenants/:id',
        { preHandler: write },
        async (request) => {
          const b = body(request)
          onlyFields(b, ['name', 'rateLimit'])
          const { tenant, changed } = await editTenant(deps(request), request.params.id, {
            name: b.name === undefined ? undefined : text(b.name, 'name'),
            rateLimit: rateLimitOf(b.rateLimit),
          })
          return { ...tenantMetadata(tenant), changed }
        },
      )
      api.get<{ Params: { id: string }; Querystring: Query }>(
        '/tenants/:id/top-keys',
        async (request) => {
          const { resolution, since, until } = usageRange(rangeOf(request.query), clock.now())
          const limit = request.query.limit === undefined ? 10 : Number(request.query.limit)
          if (!(Number.isInteger(limit) && limit >= 1 && limit <= 100)) {
            throw invalid('limit', 'an integer from 1 to 100')
          }
          const keys = await store.topKeys(request.params.id, resolution, since, until, limit)
          return {
            tenantId: request.params.id,
            resolution,
            since: new Date(since).toISOString(),
            until: new Date(until).toISOString(),
            keys,
          }
        },
      )
      api.post('/tenants', { preHandler: write }, async (request, reply) => {
        const b = body(request)
        const tenant = await createNamedTenant(
          deps(request),
          text(b.id, 'id'),
          optionalText(b.name, 'name'),
        )
        return reply
          .code(201)
          .send({ ...tenant, createdAt: new Date(tenant.createdAt).toISOString() })
      })
      for (const [verb, enabled] of [
        ['enable', true],
        ['disable', false],
      ] as const) {
        api.post<{ Params: { id: string } }>(
          `/tenants/:id/${verb}`,
          { preHandler: write },
          async (request) => {
            const { tenant, changed } = await setTenantEnabled(
              deps(request),
              request.params.id,
              enabled,
            )
            return { ...tenant, createdAt: new Date(tenant.createdAt).toISOString(), changed }
          },
        )
      }

      api.get<{ Querystring: Query }>('/pats', async (request) => {
        const now = clock.now()
        const { search, status, page } = patQuery(request.query, now)
        const result = await store.admin.searchPats(search, page)
        const items = result.items.filter(
          (p) => status === undefined || patStatus(p, now) === status,
        )
        return { tokens: items.map((p) => patMetadata(p, now)), nextCursor: result.nextCursor }
      })
      api.post('/pats', { preHandler: write }, async (request, reply) => {
        const b = body(request)
        onlyFields(b, [
          'tenantId',
          'subject',
          'name',
          'permissions',
          'expiresInDays',
          'rateLimit',
          'quota',
          'metadata',
          'externalId',
          'certificateThumbprint',
        ])
        const now = clock.now()
        const { token, record } = await issuePat(deps(request), {
          tenantId: text(b.tenantId, 'tenantId'),
          subject: text(b.subject, 'subject'),
          name: optionalText(b.name, 'name'),
          permissions: stringList(b.permissions, 'permissions'),
          lifetime: lifetimeFrom(b.expiresInDays),
          rateLimit: rateLimitOf(b.rateLimit) ?? undefined,
          quota: quotaOf(b.quota) ?? undefined,
          metadata: metadataOf(b.metadata) ?? undefined,
          externalId: externalIdOf(b.externalId) ?? undefined,
          certificateThumbprint: certificateThumbprintOf(b.certificateThumbprint) ?? undefined,
        })
        return reply.code(201).send({ token, ...patMetadata(record, now) })
      })
      api.get<{ Params: { id: string } }>('/pats/:id', async (request, reply) => {
        const record = await store.getPat(request.params.id)
        if (!record) return sendProblem(reply, 404, 'not_found', 'No such token.', request)
        const now = clock.now()
        return {
          ...patMetadata(record, now),
          quotaUsage: record.quota ? await quotaView(store, record.quota, now) : null,
        }
      })
      api.patch<{ Params: { id: string } }>('/pats/:id', { preHandler: write }, async (request) => {
        const { record, changed, notes } = await editTenantPat(
          deps(request),
          request.params.id,
          patEditOf(body(request)),
        )
        return { ...patMetadata(record, clock.now()), changed, notes }
      })
      for (const [verb, disabled] of [
        ['disable', true],
        ['enable', false],
      ] as const) {
        api.post<{ Params: { id: string } }>(
          `/pats/:id/${verb}`,
          { preHandler: write },
          async (request) => {
            const { record, changed, notes } = await setPatDisabled(
              deps(request),
              request.params.id,
              disabled,
            )
            return { ...patMetadata(record, clock.now()), changed, notes }
          },
        )
      }
      api.get<{ Querystring: Query }>('/usage', async (request, reply) => {
        const q = request.query
        const scope = (q.scope ?? 'all') as UsageScope
        if (!['key', 'tenant', 'all'].includes(scope)) throw invalid('scope', 'key, tenant or all')
        const subject = scope === 'all' ? '' : text(q.id, 'id')
        const series = await readUsageSeries(store, scope, subject, rangeOf(q), clock.now())
        if (q.format === 'csv') {
          reply.header('content-disposition', 'attachment; filename="tokengate-usage.csv"')
          return reply.type('text/csv; charset=utf-8').send(usageCsv(series))
        }
        if (q.format !== undefined && q.format !== 'json') throw invalid('format', 'csv or json')
        return usageView(series)
      })

      api.get('/admin-tokens', async () => {
        const now = clock.now()
        return {
          tokens: (await store.admin.listAdminTokens()).map((t) => adminTokenMetadata(t, now)),
        }
      })
      api.post('/admin-tokens', { preHandler: write }, async (request, reply) => {
        const b = body(request)
        onlyFields(b, ['name', 'role', 'expiresInDays'])
        const { token, record } = await issueAdminTokenFrom(deps(request), {
          name: text(b.name, 'name'),
          role: text(b.role, 'role'),
          expiresInDays: b.expiresInDays === undefined ? 30 : b.expiresInDays,
        })
        return reply.code(201).send({ token, ...adminTokenMetadata(record, clock.now()) })
      })
      api.post<{ Params: { id: string } }>(
        '/admin-tokens/:id/revoke',
        { preHandler: write },
        async (request) => {
          const { record, changed } = await revokeAdminToken(deps(request), request.params.id)
          return { ...adminTokenMetadata(record, clock.now()), changed }
        },
      )
      api.post<{ Params: { id: string } }>(
        '/pats/:id/revoke',
        { preHandler: write },
        async (request) => {
          const { record, changed } = await revokeTenantPat(deps(request), request.params.id)
          return { ...patMetadata(record, clock.now()), changed }
        },
      )
      api.post<{ Params: { id: string } }>(
        '/pats/:id/rotate',
        { preHandler: write },
        async (request, reply) => {
          const b = request.body == null ? {} : body(request)
          const now = clock.now()
          const graceMs = graceMsOf(b.graceSeconds ?? 0)
          const rotated = await rotateTenantPat(deps(request), {
            id: request.params.id,
            graceMs,
            lifetime: lifetimeFrom(b.expiresInDays),
          })
          return reply.code(201).send({
            token: rotated.token,
            ...patMetadata(rotated.record, now),
            oldTokenGraceUntil: new Date(rotated.graceUntil).toISOString(),
          })
        },
      )
      api.post('/pats/revoke-leaked', { preHandler: write }, async (request) => {
        const [result] = await revokeLeakedPats(deps(request), [text(body(request).token, 'token')])
        if (!result) throw invalid('token', 'required')
        return {
          fingerprint: result.fingerprint,
          outcome: result.outcome,
          tokenId: result.record?.id ?? null,
          tenantId: result.record?.tenantId ?? null,
        }
      })

      api.get('/issuers', async () => {
        const health = new Map(ctx.issuers.keyStatus().map((s) => [s.issuer, s]))
        return {
          issuers: (await store.listIssuers()).map((i) => issuerView(i, health.get(i.issuer))),
        }
      })
      api.post('/issuers', { preHandler: write }, async (request, reply) => {
        const issuer: unknown = body(request)
        checkIssuerShape(issuer)
        const { replaced } = await addIssuer(deps(request), issuer)
        return reply.code(replaced ? 200 : 201).send({ issuer: issuer.issuer, replaced })
      })
      api.delete<{ Params: { issuer: string } }>(
        '/issuers/:issuer',
        { preHandler: write },
        async (request, reply) => {
          await removeIssuer(deps(request), request.params.issuer)
          return reply.code(204).send()
        },
      )

      // JWT revocation rules (issue #34): refused by every instance within a second.
      api.get('/jwt-revocations', async () => ({
        revocations: (await listJwtRevocations(deps0)).map(jwtRevocationJson),
      }))
      api.post('/jwt-revocations', { preHandler: write }, async (request, reply) => {
        const b = body(request)
        onlyFields(b, ['issuer', 'kind', 'value', 'issuedBefore', 'reason'])
        const kind = text(b.kind, 'kind')
        if (!JWT_REVOCATION_KINDS.includes(kind as JwtRevocationKind)) {
          throw invalid('kind', JWT_REVOCATION_KINDS.join(', '))
        }
        const before = optionalText(b.issuedBefore, 'issuedBefore')
        const issuedBefore = before === undefined ? undefined : Date.parse(before)
        if (issuedBefore !== undefined && Number.isNaN(issuedBefore)) {
          throw invalid('issuedBefore', 'an ISO 8601 time')
        }
        const rule = await revokeJwts(
          deps(request),
          {
            issuer: text(b.issuer, 'issuer'),
            kind: kind as JwtRevocationKind,
            value: text(b.value, 'value'),
            issuedBefore,
            reason: optionalText(b.reason, 'reason'),
          },
          {
            maxLifetimeSec: ctx.config.auth.maxJwtLifetimeSec,
            clockToleranceSec: ctx.config.auth.clockToleranceSec,
            operatorIssuer: ctx.config.admin.oidc?.issuer,
          },
        )
        return reply.code(201).send(jwtRevocationJson(rule))
      })
      api.delete<{ Params: { id: string } }>(
        '/jwt-revocations/:id',
        { preHandler: write },
        async (request, reply) => {
          await removeJwtRevocation(deps(request), request.params.id)
          return reply.code(204).send()
        },
      )

      api.get<{ Querystring: Query }>('/audit-events', async (request, reply) => {
        const { search, page } = auditQuery(request.query)
        const format = request.query.format
        if (format === 'csv' || format === 'json') {
          const events = await exportAudit(ctx, search)
          const name = `tokengate-audit.${format}`
          reply.header('content-disposition', `attachment; filename="${name}"`)
          if (format === 'csv') return reply.type('text/csv; charset=utf-8').send(auditCsv(events))
          return { events: events.map(auditView) }
        }
        if (format !== undefined) throw invalid('format', 'csv or json')
        const result = await store.admin.searchAudit(search, page)
        return { events: result.items.map(auditView), nextCursor: result.nextCursor }
      })
      api.get('/status', async () => {
        const { series, ...status } = await readStatus(ctx)
        return { ...status, requests: series ? usageView(series) : null }
      })
      // Authenticated before routing, as /api/v1: without a credential, unknown paths are 401.
      api.setNotFoundHandler((request, reply) =>
        sendProblem(reply, 404, 'not_found', 'No such admin endpoint.', request),
      )
    },
    { prefix: API_PREFIX },
  )
}

/** Every event matching `search`, newest first, up to 10,000 (the export bound). */
export async function exportAudit(
  ctx: AdminContext,
  search: AuditSearch,
): Promise<StoredAuditEvent[]> {
  const events: StoredAuditEvent[] = []
  let cursor: string | undefined
  do {
    const page = await ctx.store.admin.searchAudit(search, { limit: 500, cursor })
    events.push(...page.items)
    cursor = page.nextCursor ?? undefined
  } while (cursor !== undefined && events.length < EXPORT_MAX)
  return events.slice(0, EXPORT_MAX)
}

const PAT_STATUSES: readonly PatStatus[] = [
  'active',
  'grace',
  'rotated',
  'expired',
  'disabled',
  'revoked',
]

/** PAT search from query parameters (shared by the API and the console). */
export function patQuery(query: Query, now: number) {
  const within = query.expiringWithinDays
  const days = within ? Number(within) : undefined
  if (days !== undefined && !(Number.isInteger(days) && days > 0 && days <= 3650)) {
    throw invalid('expiringWithinDays', 'a whole number of days, 1-3650')
  }
  const status = query.status || undefined
  if (status !== undefined && !PAT_STATUSES.includes(status as PatStatus)) {
    throw invalid('status', `one of ${PAT_STATUSES.join(', ')}`)
  }
  const search: PatSearch = {
    tenantId: query.tenant || undefined,
    subject: query.subject || undefined,
    name: query.name || undefined,
    last4: query.last4 || undefined,
    externalId: query.externalId || undefined,
    expiringBefore: days === undefined ? undefined : now + days * DAY_MS,
  }
  return { search, status: status as PatStatus | undefined, page: pageOf(query) }
}

/** Audit search from query parameters; `since`/`until` are ISO 8601 times. */
export function auditQuery(query: Query) {
  const timeOf = (name: 'since' | 'until') => {
    const value = query[name]
    if (!value) return undefined
    const ms = Date.parse(value)
    if (Number.isNaN(ms)) throw invalid(name, 'expected an ISO 8601 time')
    return ms
  }
  const search: AuditSearch = {
    tenantId: query.tenant || undefined,
    type: query.type || undefined,
    actor: query.actor || undefined,
    since: timeOf('since'),
    until: timeOf('until'),
  }
  return { search, page: pageOf(query) }
}

function pageOf(query: Query) {
  const limit = query.limit === undefined ? 50 : Number(query.limit)
  if (!(Number.isInteger(limit) && limit >= 1 && limit <= 200)) {
    throw invalid('limit', 'an integer from 1 to 200')
  }
  return { limit, cursor: query.cursor || undefined }
}

/** `graceSeconds` in ms, within the lifecycle's bound (refused in seconds and days). */
function graceMsOf(seconds: unknown): number {
  const integer = typeof seconds === 'number' && Number.isInteger(seconds)
  return withinLimit(
    'graceSeconds',
    () => checkRotationGrace(integer ? seconds * 1000 : Number.NaN),
    (maxMs) => `an integer from 0 to ${maxMs / 1000} (${maxMs / DAY_MS} days)`,
  )
}

/** `expiresInDays`: a positive number of days, `null` or `never`, absent for the default. */
export function lifetimeFrom(value: unknown): PatLifetime {
  if (value === undefined || value === '') return 'default'
  if (value === null || value === 'never') return 'never'
  const days = typeof value === 'number' ? value : Number(value)
  if (!(Number.isInteger(days) && days > 0)) {
    throw invalid('expiresInDays', 'a whole number of days within policy')
  }
  return days * DAY_MS
}

function text(value: unknown, name: string): string {
  if (typeof value !== 'string' || value.length === 0) {
    throw invalid(name, 'required string')
  }
  return value
}

function optionalText(value: unknown, name: string): string | undefined {
  return value === undefined || value === null ? undefined : text(value, name)
}

function stringList(value: unknown, name: string): string[] {
  if (value === undefined || value === null) return []
  if (!Array.isArray(value) || !value.every((v) => typeof v === 'string')) {
    throw invalid(name, 'expected an array of strings')
  }
  return value
}

/** Creates a tenant from operator input (checked like the CLI's flags). */
export function createNamedTenant(deps: OperationDeps, id: string, name: string | undefined) {
  const tenantId = checkTenantId(id)
  return createTenant(deps, {
    id: tenantId,
    name: checkText(name || tenantId, 'name', MAX_TENANT_NAME_LENGTH),
  })
}

/** Issues a PAT from operator input (checked like the CLI's flags). */
export function issuePat(
  deps: PatOperationDeps,
  input: {
    tenantId: string
    subject: string
    name: string | undefined
    permissions: readonly string[]
    lifetime: PatLifetime
    rateLimit?: RateLimitOverride | undefined
    quota?: QuotaEdit | undefined
    metadata?: Record<string, unknown> | undefined
    externalId?: string | undefined
    certificateThumbprint?: string | undefined
  },
) {
  return issueTenantPat(deps, {
    tenantId: checkTenantId(input.tenantId),
    subject: checkText(input.subject, 'subject', 255, true),
    name: checkText(input.name ?? '', 'name', 100),
    permissions: checkPermissions(input.permissions),
    lifetime: input.lifetime,
    rateLimit: input.rateLimit,
    quota: input.quota,
    metadata: input.metadata,
    externalId: input.externalId,
    certificateThumbprint: input.certificateThumbprint,
  })
}

/** A PATCH body of a key: only the fields given change, null clears one. */
function patEditOf(b: Record<string, unknown>): PatEdit {
  onlyFields(b, [
    'name',
    'permissions',
    'expiresAt',
    'rateLimit',
    'quota',
    'resetQuotaUsage',
    'metadata',
    'externalId',
    'certificateThumbprint',
  ])
  if (b.resetQuotaUsage !== undefined && typeof b.resetQuotaUsage !== 'boolean') {
    throw invalid('resetQuotaUsage', 'true or false')
  }
  return {
    name: b.name === undefined ? undefined : checkText(stringOf(b.name, 'name'), 'name', 100),
    permissions:
      b.permissions === undefined
        ? undefined
        : checkPermissions(stringList(b.permissions, 'permissions')),
    expiresAt: expiresAtOf(b.expiresAt),
    rateLimit: rateLimitOf(b.rateLimit),
    quota: quotaOf(b.quota),
    resetQuotaUsage: b.resetQuotaUsage as boolean | undefined,
    metadata: metadataOf(b.metadata),
    externalId: externalIdOf(b.externalId),
    certificateThumbprint: certificateThumbprintOf(b.certificateThumbprint),
  }
}

/** `expiresAt`: an ISO 8601 time, `never` (or null), or absent. */
export function expiresAtOf(value: unknown): number | 'never' | undefined {
  if (value === undefined) return undefined
  if (value === null || value === 'never') return 'never'
  const ms = typeof value === 'string' ? Date.parse(value) : Number.NaN
  if (Number.isNaN(ms)) throw invalid('expiresAt', 'an ISO 8601 time, or "never"')
  return ms
}

function stringOf(value: unknown, name: string): string {
  if (typeof value !== 'string') throw invalid(name, 'a string')
  return value
}

/** `resolution`, `since` and `until` (ISO 8601) of a usage query. */
export function rangeOf(query: Query): UsageRange {
  const timeOf = (name: 'since' | 'until') => {
    const value = query[name]
    if (!value) return undefined
    const ms = Date.parse(value)
    if (Number.isNaN(ms)) throw invalid(name, 'an ISO 8601 time')
    return ms
  }
  const resolution = query.resolution || undefined
  if (resolution !== undefined && !USAGE_RESOLUTIONS.includes(resolution as never)) {
    throw invalid('resolution', 'minute, hour or day')
  }
  return {
    resolution: resolution as UsageRange['resolution'],
    since: timeOf('since'),
    until: timeOf('until'),
  }
}

/** Issues an admin token from operator input (the CLI's rules: name, role, lifetime). */
export function issueAdminTokenFrom(
  deps: OperationDeps & { readonly store: { readonly admin: AdminStore } },
  input: { name: string; role: string; expiresInDays: unknown },
) {
  if (!ADMIN_TOKEN_NAME.test(input.name)) {
    throw invalid('name', 'expected 1-100 characters of A-Z a-z 0-9 . _ @ -')
  }
  if (!ADMIN_ROLES.includes(input.role as AdminRole)) throw invalid('role', 'read-only or operator')
  const days =
    typeof input.expiresInDays === 'number' ? input.expiresInDays : Number(input.expiresInDays)
  const maxDays = MAX_ADMIN_TOKEN_LIFETIME_DAYS
  if (!(Number.isInteger(days) && days >= 1 && days <= maxDays)) {
    throw invalid('expiresInDays', `a whole number of days from 1 to ${maxDays}`)
  }
  return issueAdminToken(deps, {
    name: input.name,
    role: input.role as AdminRole,
    lifetimeMs: days * DAY_MS,
  })
}

function isJson(contentType: string | undefined): boolean {
  return /^application\/([a-z0-9.+-]*\+)?json\s*(;|$)/i.test(contentType ?? '')
}
