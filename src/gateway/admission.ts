/**
 * Admission to the upstream: how many requests each token and each tenant may have in flight
 * to the upstream, and a bounded wait for one of the pool's connections.
 *
 * Why: without it the upstream pool is first come, first served, and one tenant's slow
 * requests (uploads at one byte a second) hold every connection while everybody else queues
 * until the timeout. With per-tenant and per-token caps below the pool size, a tenant can
 * only ever hold its share, and a request that cannot get a connection soon is told so
 * (503) instead of queueing behind the hog. Framework-free: the proxy maps the outcome to HTTP.
 */

export interface AdmissionLimits {
  /** Requests in flight to the upstream at once: the pool's connection count. */
  readonly connections: number
  readonly perTenant: number
  readonly perToken: number
  /** Longest wait for a connection when all are taken. */
  readonly waitMs: number
}

export type Admission =
  | { readonly ok: true; release(): void }
  /** `token`/`tenant`: the caller is over its own cap; `busy`: no connection within waitMs. */
  | { readonly ok: false; readonly reason: 'token' | 'tenant' | 'busy' }

export interface UpstreamAdmission {
  /** Admits one request; the caller must `release()` an admission once its exchange is over. */
  admit(tenantId: string, tokenKey: string): Admission | Promise<Admission>
}

interface Waiter {
  readonly grant: () => void
  readonly timer: NodeJS.Timeout
}

/**
 * In-flight counts per key. A key whose count falls to 0 keeps its entry until the map
 * outgrows `sweepAt`, then every zero entry goes at once: deleting it on each release
 * shrank the map's table and the next request grew it again (a rehash and ~180 B per
 * proxied request, issue #36), while the entries of keys in flight are bounded anyway.
 */
class InFlight {
  readonly #counts = new Map<string, number>()
  #sweepAt = 1_024

  get(key: string): number {
    return this.#counts.get(key) ?? 0
  }

  add(key: string, delta: 1 | -1): void {
    this.#counts.set(key, (this.#counts.get(key) ?? 0) + delta)
    if (this.#counts.size <= this.#sweepAt) return
    for (const [k, count] of this.#counts) if (count === 0) this.#counts.delete(k)
    // Keys in flight at once can outnumber the bound: sweep again only after as many more.
    this.#sweepAt = Math.max(1_024, this.#counts.size * 2)
  }
}

const TOKEN_BUSY: Admission = Object.freeze({ ok: false, reason: 'token' })
const TENANT_BUSY: Admission = Object.freeze({ ok: false, reason: 'tenant' })

/**
 * Queued requests count against their token's and tenant's caps like running ones, so a
 * tenant cannot fill the wait queue either. Waiters get connections in arrival order.
 */
export function createUpstreamAdmission(limits: AdmissionLimits): UpstreamAdmission {
  const perTenant = new InFlight()
  const perToken = new InFlight()
  const waiting: Waiter[] = []
  let running = 0

  /** One admitted request's slot: a single object, no closure per request. */
  class Ticket {
    readonly ok = true
    readonly #tenantId: string
    readonly #tokenKey: string
    #released = false

    constructor(tenantId: string, tokenKey: string) {
      this.#tenantId = tenantId
      this.#tokenKey = tokenKey
    }

    release(): void {
      if (this.#released) return
      this.#released = true
      perTenant.add(this.#tenantId, -1)
      perToken.add(this.#tokenKey, -1)
      const next = waiting.shift()
      // The connection passes straight to the next waiter; `running` is unchanged.
      if (next) next.grant()
      else running--
    }
  }

  return {
    admit(tenantId, tokenKey) {
      if (perToken.get(tokenKey) >= limits.perToken) return TOKEN_BUSY
      if (perTenant.get(tenantId) >= limits.perTenant) return TENANT_BUSY
      perTenant.add(tenantId, 1)
      perToken.add(tokenKey, 1)
      if (running < limits.connections) {
        running++
        return new Ticket(tenantId, tokenKey)
      }
      return new Promise<Admission>((resolve) => {
        const waiter: Waiter = {
          grant: () => {
            clearTimeout(waiter.timer)
            resolve(new Ticket(tenantId, tokenKey))
          },
          timer: setTimeout(() => {
            waiting.splice(waiting.indexOf(waiter), 1)
            perTenant.add(tenantId, -1)
            perToken.add(tokenKey, -1)
            resolve({ ok: false, reason: 'busy' })
          }, limits.waitMs),
        }
        waiting.push(waiter)
      })
    },
  }
}
