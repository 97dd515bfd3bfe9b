/**
 * Connection caps that fit the file-descriptor limit. Every client socket is a descriptor;
 * once the process runs out, accept() fails for everyone, so a cap above the limit protects
 * nothing: with RLIMIT_NOFILE 256 one client holding 256 idle sockets denied every other
 * client. HAProxy derives `maxconn` from the limit the same way.
 *
 * Raising the soft limit: Node itself raises the soft RLIMIT_NOFILE to the hard limit when
 * it starts (node.cc, PlatformInit), so there is nothing left to raise from JavaScript (Node
 * has no setrlimit) and no `ulimit` wrapper or native dependency is needed; the hard limit is
 * the operator's to set (`ulimit -Hn`, systemd `LimitNOFILE=`, `docker run --ulimit`). What
 * is read here is the limit in force after that raise.
 */
import { readdirSync, readFileSync } from 'node:fs'

export interface ConnectionCaps {
  readonly maxConnections: number
  readonly maxConnectionsPerAddress: number
}

export interface DescriptorBudget {
  /** The soft RLIMIT_NOFILE in force; undefined where it cannot be read (not Linux). */
  readonly limit: number | undefined
  /** Descriptors open now (store files, listeners, logs...). */
  readonly inUse: number
}

/** Descriptors tokengate needs besides client sockets: pools, upstream, JWKS, slack. */
export interface Reserve {
  /** Postgres pool + LISTEN, Redis connections, upstream pool: known up front. */
  readonly connections: number
}

/** Kept free beyond what is counted: JWKS and webhook fetches, admin clients, files, DNS. */
const SLACK = 64

/** The limit and the descriptors in use, from /proc (Linux); elsewhere the limit is unknown. */
export function readDescriptorBudget(): DescriptorBudget {
  try {
    const line = readFileSync('/proc/self/limits', 'utf8')
      .split('\n')
      .find((l) => l.startsWith('Max open files'))
    const soft = line?.split(/\s{2,}/)[1]
    const limit = soft === 'unlimited' ? Number.POSITIVE_INFINITY : Number(soft)
    return {
      limit: Number.isFinite(limit) || limit === Number.POSITIVE_INFINITY ? limit : undefined,
      inUse: readdirSync('/proc/self/fd').length,
    }
  } catch {
    return { limit: undefined, inUse: 0 }
  }
}

/**
 * The caps to apply, and why they differ from the configured ones (undefined when they do
 * not). Both caps shrink by the same factor, so one address keeps the share of the whole it
 * was configured to have; a configured 0 (no cap) becomes the budget, since the descriptors
 * cap the connections anyway.
 */
export function fitConnectionCaps(
  configured: ConnectionCaps,
  budget: DescriptorBudget,
  reserve: Reserve,
): { readonly caps: ConnectionCaps; readonly warning: string | undefined } {
  const { limit } = budget
  if (limit === undefined || limit === Number.POSITIVE_INFINITY) {
    return { caps: configured, warning: undefined }
  }
  const needed = budget.inUse + reserve.connections + SLACK
  const available = Math.max(1, limit - needed)
  const max = configured.maxConnections === 0 ? available : configured.maxConnections
  if (configured.maxConnections !== 0 && max <= available) {
    return { caps: configured, warning: undefined }
  }
  const perAddress =
    configured.maxConnectionsPerAddress === 0
      ? 0
      : Math.max(
          1,
          Math.min(
            configured.maxConnectionsPerAddress,
            Math.floor((configured.maxConnectionsPerAddress * available) / max),
          ),
        )
  const caps = { maxConnections: available, maxConnectionsPerAddress: perAddress }
  const shown = (value: number) => (value === 0 ? 'no cap' : String(value))
  const warning = `server.maxConnections ${shown(configured.maxConnections)} / maxConnectionsPerAddress ${shown(configured.maxConnectionsPerAddress)} do not fit the file-descriptor limit (${limit} open files, ~${needed} needed by tokengate itself): using ${caps.maxConnections} / ${shown(caps.maxConnectionsPerAddress)}; raise the hard limit (ulimit -Hn, systemd LimitNOFILE=, docker --ulimit nofile=) to serve more`
  return { caps, warning }
}

/**
 * `config` with its connection caps fitted to this process's descriptor limit (a warning
 * logged when they had to shrink); `config` itself when they fit.
 */
export function fitToDescriptorLimit<C extends DescriptorConfig>(
  config: C,
  log: { warn(obj: object, msg: string): void },
  budget: DescriptorBudget = readDescriptorBudget(),
): C {
  const reserve = {
    // The Postgres pool (10) and its LISTEN connection; a Redis client per cluster node at
    // most; the gateway's upstream pool.
    connections:
      (config.databaseUrl ? 11 : 0) +
      (config.redisUrl ? 8 : 0) +
      (config.gateway?.connections ?? 0),
  }
  const { caps, warning } = fitConnectionCaps(config.server, budget, reserve)
  if (!warning) return config
  log.warn({ descriptorLimit: budget.limit, ...caps }, warning)
  return { ...config, server: { ...config.server, ...caps } }
}

interface DescriptorConfig {
  readonly databaseUrl?: string | undefined
  readonly redisUrl?: string | undefined
  readonly gateway?: { readonly connections: number } | undefined
  readonly server: ConnectionCaps
}
