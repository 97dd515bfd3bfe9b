/**
 * Shared secrets at rest. An HS256 issuer's secret lets whoever reads it mint any token, so
 * no store keeps it in plaintext: it is sealed with AES-256-GCM under a key the operator
 * supplies (`secretKeyFile`), with a fresh 96-bit nonce per write and the issuer's identity
 * as additional authenticated data, so a sealed value copied onto another issuer's row does
 * not open. The stored form names the key by id, so a wrong key is reported as such.
 *
 * The embedded store without a configured key gets one generated beside the database
 * (`<dataDir>/secret.key`, 0600): a dev convenience that keeps secrets out of the database
 * file and its backups, not protection from someone who can read the data directory.
 */
import { Buffer } from 'node:buffer'
import { createCipheriv, createDecipheriv, createHash, randomBytes } from 'node:crypto'
import { chmodSync, readFileSync } from 'node:fs'
import type { IssuerConfig, KeySource } from '../core/issuer.ts'
import { createFileOnce } from '../lib/create-once.ts'
import type { IssuerStore, Store, StoredIssuer } from './store.ts'
import { withOverrides } from './store-overrides.ts'

/** Seals and opens short secrets bound to a context string. */
export interface SecretBox {
  /** First 16 hex digits of SHA-256 of the key: names the key without revealing it. */
  readonly keyId: string
  seal(plaintext: string, context: string): string
  /** Throws when the value was sealed under another key or context, or was altered. */
  open(sealed: string, context: string): string
}

const VERSION = 'v1'
const KEY_BYTES = 32

/** A SecretBox over 32 raw key bytes. */
export function createSecretBox(key: Uint8Array): SecretBox {
  if (key.length !== KEY_BYTES) throw new Error('the secret key must be 32 bytes')
  const keyId = createHash('sha256').update(key).digest('hex').slice(0, 16)
  return {
    keyId,
    seal(plaintext, context) {
      const nonce = randomBytes(12)
      const cipher = createCipheriv('aes-256-gcm', key, nonce)
      cipher.setAAD(Buffer.from(context))
      const body = Buffer.concat([cipher.update(plaintext, 'utf8'), cipher.final()])
      const parts = [nonce, body, cipher.getAuthTag()].map((b) => b.toString('base64url'))
      return [VERSION, keyId, ...parts].join('.')
    },
    open(sealed, context) {
      const [version, id, nonce, body, tag] = sealed.split('.')
      if (version !== VERSION || nonce === undefined || body === undefined || !tag) {
        throw new Error('not a sealed secret')
      }
      if (id !== keyId) {
        throw new Error(`sealed with key ${id}, but the configured secret key is ${keyId}`)
      }
      const decipher = createDecipheriv('aes-256-gcm', key, Buffer.from(nonce, 'base64url'))
      decipher.setAAD(Buffer.from(context))
      decipher.setAuthTag(Buffer.from(tag, 'base64url'))
      return Buffer.concat([
        decipher.update(Buffer.from(body, 'base64url')),
        decipher.final(),
      ]).toString('utf8')
    },
  }
}

/**
 * Reads a key file: 32 bytes as base64 or hex text (e.g. `openssl rand -base64 32`). With
 * `create`, a missing file is generated (mode 0600).
 */
export function readSecretKeyFile(path: string, create = false): SecretBox {
  let text: string
  try {
    text = readFileSync(path, 'utf8').trim()
  } catch (error) {
    if (!create || (error as NodeJS.ErrnoException).code !== 'ENOENT') {
      throw new Error(`cannot read the secret key file ${path}: ${(error as Error).message}`)
    }
    // Another process starting on the same fresh directory may win: then its key is used.
    text = createFileOnce(path, `${randomBytes(KEY_BYTES).toString('base64')}\n`, 0o600).trim()
  }
  if (create) chmodSync(path, 0o600)
  const key = /^[0-9a-f]{64}$/i.test(text) ? Buffer.from(text, 'hex') : Buffer.from(text, 'base64')
  if (key.length !== KEY_BYTES) {
    throw new Error(`the secret key file ${path} must hold 32 bytes (base64 or hex)`)
  }
  return createSecretBox(key)
}

/**
 * Why a listed issuer's sealed shared secret could not be opened by this process (no
 * `secretKeyFile`, another key, an altered value), naming key ids and the setting only; or
 * undefined when it was opened or has none. Such an issuer's `keySource` holds an empty
 * secret, which no verifier accepts (`bindSecret` refuses it): read this before using it.
 */
export function unreadableReason(issuer: IssuerConfig): string | undefined {
  return (issuer as { readonly unreadable?: string }).unreadable
}

/** How a sealed secret key source is stored: `secret` replaced by `sealedSecret`. */
interface SealedSecretSource {
  readonly kind: 'secret'
  readonly algorithm: string
  readonly sealedSecret: string
}

const contextOf = (issuer: string) => `tokengate/issuer-secret\u0000${issuer}`

function isSealed(source: KeySource | SealedSecretSource): source is SealedSecretSource {
  return source.kind === 'secret' && 'sealedSecret' in source
}

/**
 * The store with issuer secrets sealed on write and opened on read. Without a box (Postgres
 * with no `secretKeyFile`), writing a secret is refused. `migrate()` also seals every
 * plaintext secret left by earlier versions.
 *
 * Reading is per issuer: a sealed secret that cannot be opened (no box, another key, altered)
 * marks that issuer `unreadable`, with an empty secret that no verifier accepts, and the
 * others are returned as they are. Why not throw for the whole list: a server would then keep
 * its previous issuer set (a removed issuer still trusted, new ones never arriving), and every
 * CLI command, `pat revoke` of a leaked key included, would fail for want of a key it does not
 * need. The one that needs the secret (the verifier, `export`) refuses the issuer instead.
 */
export function sealIssuerSecrets<S extends IssuerStore>(store: S, box: SecretBox | undefined): S {
  const missingKey = () =>
    new Error(
      'issuer secrets are stored encrypted and no secret key is configured: set secretKeyFile (TOKENGATE_SECRET_KEY_FILE) to the key file they were sealed with',
    )
  const seal = (issuer: IssuerConfig): IssuerConfig => {
    const source = issuer.keySource
    if (source.kind !== 'secret' || isSealed(source)) return issuer
    if (!box) throw missingKey()
    const sealed: SealedSecretSource = {
      kind: 'secret',
      algorithm: source.algorithm,
      sealedSecret: box.seal(source.secret, contextOf(issuer.issuer)),
    }
    return { ...issuer, keySource: sealed as unknown as KeySource }
  }
  const open = (issuer: StoredIssuer): StoredIssuer => {
    const source = issuer.keySource as KeySource | SealedSecretSource
    if (!isSealed(source)) return issuer
    const { algorithm } = source
    try {
      if (!box) throw missingKey()
      const secret = box.open(source.sealedSecret, contextOf(issuer.issuer))
      return { ...issuer, keySource: { kind: 'secret', algorithm, secret } }
    } catch (error) {
      // The message names key ids and the setting, never secret bytes (createSecretBox).
      const unreadable = (error as Error).message
      const refused: StoredIssuer & { readonly unreadable: string } = {
        ...issuer,
        keySource: { kind: 'secret', algorithm, secret: '' },
        unreadable,
      }
      return refused
    }
  }
  const overrides: Partial<Store> = {
    putIssuer: async (issuer, at) => store.putIssuer(seal(issuer), at),
    listIssuers: async () => (await store.listIssuers()).map(open),
  }
  if ('migrate' in store) {
    const whole = store as unknown as Store
    // The work's writes go through the same sealing as the store's own.
    overrides.transaction = (work) => whole.transaction((tx) => work(sealIssuerSecrets(tx, box)))
    overrides.migrate = async () => {
      const applied = await whole.migrate()
      for (const issuer of await store.listIssuers()) {
        const source = issuer.keySource
        if (source.kind === 'secret' && !isSealed(source) && box) {
          await store.putIssuer(seal(issuer), issuer.createdAt)
        }
      }
      // Sealed secrets are not opened here: a command that needs none (pat revoke) must not
      // fail for want of the key; the server names an issuer it cannot open (issuer-registry).
      return applied
    }
  }
  return withOverrides(store, overrides)
}
