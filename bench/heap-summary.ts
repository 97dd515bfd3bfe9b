/**
 * What a V8 heap snapshot holds, by constructor: self size and count per class (objects by
 * constructor name, strings, arrays, code, system objects by their V8 name), and the strings
 * and arrays by what holds them (the first strong retainer and the edge's name), which is
 * where a `Map` of string keys or a column of strings shows up.
 *
 * Run: `node bench/heap-summary.ts FILE.heapsnapshot [--top N]`; `bench/memory.bench.ts
 * --heap-snapshot` writes one of the served process and prints this summary.
 */
import { readFileSync } from 'node:fs'
import { readCli } from './cli.ts'

interface Snapshot {
  readonly snapshot: {
    readonly meta: {
      readonly node_fields: string[]
      readonly node_types: [string[], ...unknown[]]
      readonly edge_fields: string[]
      readonly edge_types: [string[], ...unknown[]]
    }
  }
  readonly nodes: number[]
  readonly edges: number[]
  readonly strings: string[]
}

interface Row {
  readonly label: string
  readonly bytes: number
  readonly count: number
}

/** Rows by class and by retainer, largest first, and the snapshot's total self size. */
export function summarizeHeapSnapshot(file: string): {
  total: number
  byClass: Row[]
  byRetainer: Row[]
} {
  const heap = JSON.parse(readFileSync(file, 'utf8')) as Snapshot
  const { meta } = heap.snapshot
  const nodeFields = meta.node_fields.length
  const edgeFields = meta.edge_fields.length
  const typeAt = meta.node_fields.indexOf('type')
  const nameAt = meta.node_fields.indexOf('name')
  const sizeAt = meta.node_fields.indexOf('self_size')
  const edgeCountAt = meta.node_fields.indexOf('edge_count')
  const edgeTypeAt = meta.edge_fields.indexOf('type')
  const edgeNameAt = meta.edge_fields.indexOf('name_or_index')
  const edgeToAt = meta.edge_fields.indexOf('to_node')
  const nodeTypes = meta.node_types[0]
  const edgeTypes = meta.edge_types[0]
  const { nodes, edges, strings } = heap
  const count = nodes.length / nodeFields

  const classOf = (node: number) => {
    const type = nodeTypes[nodes[node * nodeFields + typeAt] as number] as string
    const name = strings[nodes[node * nodeFields + nameAt] as number] as string
    if (type === 'object' || type === 'native' || type === 'hidden' || type === 'closure') {
      return `${type} ${name}`
    }
    return `(${type})`
  }

  // The first strong retainer of each node: parent node and edge label.
  const parent = new Int32Array(count).fill(-1)
  const parentEdge = new Array<string>(count)
  for (let node = 0, edge = 0; node < count; node++) {
    const edgeCount = nodes[node * nodeFields + edgeCountAt] as number
    for (let i = 0; i < edgeCount; i++, edge += edgeFields) {
      const edgeType = edgeTypes[edges[edge + edgeTypeAt] as number]
      if (edgeType === 'weak' || edgeType === 'shortcut') continue
      const to = (edges[edge + edgeToAt] as number) / nodeFields
      if (parent[to] !== -1) continue
      parent[to] = node
      const nameOrIndex = edges[edge + edgeNameAt] as number
      const edgeName = String(strings[nameOrIndex] ?? nameOrIndex)
      // Numbered edges (elements, a table's entries) are one row, not one per index.
      parentEdge[to] =
        edgeType === 'element' || edgeType === 'hidden' || /^\d+$/.test(edgeName) ? '[]' : edgeName
    }
  }

  const byClass = new Map<string, { bytes: number; count: number }>()
  const byRetainer = new Map<string, { bytes: number; count: number }>()
  let total = 0
  const add = (map: typeof byClass, label: string, bytes: number) => {
    const row = map.get(label) ?? { bytes: 0, count: 0 }
    row.bytes += bytes
    row.count++
    map.set(label, row)
  }
  for (let node = 0; node < count; node++) {
    const bytes = nodes[node * nodeFields + sizeAt] as number
    total += bytes
    const label = classOf(node)
    add(byClass, label, bytes)
    if (label.startsWith('(') || label.includes('system / ') || label.endsWith(' Array')) {
      // The chain of holders, up to three levels: a Map's table names the Map's holder.
      let via = ''
      for (let at = node, level = 0; level < 3; level++) {
        const holder = parent[at] as number
        if (holder === -1) break
        via += `${via === '' ? '' : ' <- '}${classOf(holder)}.${parentEdge[at]}`
        at = holder
      }
      add(byRetainer, `${label} held by ${via || '(root)'}`, bytes)
    }
  }
  const sorted = (map: typeof byClass) =>
    [...map].map(([label, row]) => ({ label, ...row })).sort((a, b) => b.bytes - a.bytes)
  return { total, byClass: sorted(byClass), byRetainer: sorted(byRetainer) }
}

/** Prints the summary's top `top` rows of each table. */
export function printHeapSummary(file: string, top = 25): void {
  const { total, byClass, byRetainer } = summarizeHeapSnapshot(file)
  const mb = (bytes: number) => (bytes / 1024 / 1024).toFixed(2).padStart(7)
  console.log(`heap snapshot ${file}: ${mb(total).trim()} MB live (self sizes)`)
  console.log('  by class (MB, count):')
  for (const row of byClass.slice(0, top))
    console.log(`  ${mb(row.bytes)} ${String(row.count).padStart(9)}  ${row.label}`)
  console.log('  strings and arrays by holder (MB, count):')
  for (const row of byRetainer.slice(0, top))
    console.log(`  ${mb(row.bytes)} ${String(row.count).padStart(9)}  ${row.label}`)
}

if (import.meta.main) {
  const { values, positionals } = readCli({
    script: 'bench/heap-summary.ts',
    positionals: ['FILE.heapsnapshot'],
    options: { top: { type: 'number', integer: true, default: 25 } },
  })
  printHeapSummary(positionals[0] as string, values.top)
}
