/**
 * A certificate authority made in the test (openssl CLI), for mutual TLS: client
 * certificates it signs, a server certificate for 127.0.0.1/localhost (a proxy's), and a
 * look-alike client certificate it did NOT sign (same subject) for the attack tests.
 */
import { execFileSync } from 'node:child_process'
import { X509Certificate } from 'node:crypto'
import { readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { certificateThumbprint } from '../../src/core/certificate-binding.ts'

export interface TestCertificate {
  readonly certFile: string
  readonly keyFile: string
  readonly cert: string
  readonly key: string
  /** `x5t#S256`: base64url SHA-256 of the DER certificate. */
  readonly thumbprint: string
}

export interface TestCa extends TestCertificate {
  /** A client certificate signed by this CA. */
  client(name: string): TestCertificate
  /** A server certificate for 127.0.0.1 and localhost signed by this CA. */
  server(name: string): TestCertificate
}

const EC = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes']

function read(certFile: string, keyFile: string): TestCertificate {
  const cert = readFileSync(certFile, 'utf8')
  return {
    certFile,
    keyFile,
    cert,
    key: readFileSync(keyFile, 'utf8'),
    thumbprint: certificateThumbprint(new X509Certificate(cert).raw),
  }
}

/** Runs the openssl CLI; its output is only shown when it fails. */
function openssl(args: string[]): void {
  execFileSync('openssl', args, { stdio: ['ignore', 'pipe', 'pipe'] })
}

/** `openssl req -x509`: a new self-signed `name`.pem / .key in `dir`, with `-addext` lines. */
function selfSign(dir: string, name: string, days: number, extensions: string[] = []) {
  const certFile = join(dir, `${name}.pem`)
  const keyFile = join(dir, `${name}.key`)
  openssl([
    'req',
    '-x509',
    ...EC,
    '-days',
    String(days),
    '-subj',
    `/CN=${name}`,
    ...extensions.flatMap((extension) => ['-addext', extension]),
    '-keyout',
    keyFile,
    '-out',
    certFile,
  ])
  return read(certFile, keyFile)
}

/** A self-signed certificate (a client's own, signed by no CA the server trusts). */
export function selfSignedCertificate(dir: string, name: string): TestCertificate {
  return selfSign(dir, name, 1)
}

/** A new CA in `dir` (`name`.pem / .key). */
export function createTestCa(dir: string, name = 'test-ca'): TestCa {
  const ca = selfSign(dir, name, 2, [
    'basicConstraints=critical,CA:TRUE',
    'keyUsage=critical,keyCertSign,cRLSign',
  ])
  let serial = 1

  function sign(leaf: string, extensions: string): TestCertificate {
    const leafCert = join(dir, `${leaf}.pem`)
    const leafKey = join(dir, `${leaf}.key`)
    const csr = join(dir, `${leaf}.csr`)
    const ext = join(dir, `${leaf}.ext`)
    writeFileSync(ext, extensions)
    openssl(['req', '-new', ...EC, '-subj', `/CN=${leaf}`, '-keyout', leafKey, '-out', csr])
    openssl([
      'x509',
      '-req',
      '-in',
      csr,
      '-CA',
      ca.certFile,
      '-CAkey',
      ca.keyFile,
      '-set_serial',
      String(serial++),
      '-days',
      '1',
      '-extfile',
      ext,
      '-out',
      leafCert,
    ])
    return read(leafCert, leafKey)
  }

  return {
    ...ca,
    client: (leaf) =>
      sign(
        leaf,
        'basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=clientAuth\n',
      ),
    server: (leaf) =>
      sign(
        leaf,
        'basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n',
      ),
  }
}
