// tokengate console: progressive enhancement only (every page works without it).
// Served as a file from the admin listener: the CSP allows no inline script.

/** Times in the viewer's time zone; the ISO value stays in the tooltip and `datetime`. */
function localizeTimes(root) {
  const format = new Intl.DateTimeFormat(undefined, { dateStyle: 'medium', timeStyle: 'medium' })
  for (const el of root.querySelectorAll('time[datetime]')) {
    const date = new Date(el.getAttribute('datetime'))
    if (!Number.isNaN(date.getTime())) el.textContent = format.format(date)
  }
}

/** Copy buttons: `data-copy` names the input whose value is copied. */
function wireCopy() {
  for (const button of document.querySelectorAll('button[data-copy]')) {
    button.addEventListener('click', async () => {
      const input = document.getElementById(button.dataset.copy)
      const status = button.parentElement.querySelector('.copied')
      try {
        await navigator.clipboard.writeText(input.value)
        if (status) status.textContent = 'Copied.'
      } catch {
        input.select()
        if (status) status.textContent = 'Press Ctrl+C (or Cmd+C) to copy.'
      }
    })
  }
}

/** Forms with `data-confirm` ask first. */
function wireConfirm() {
  for (const form of document.querySelectorAll('form[data-confirm]')) {
    form.addEventListener('submit', (event) => {
      if (!window.confirm(form.dataset.confirm)) event.preventDefault()
    })
  }
}

/** An event's details as the server renders them (console-audit.ts detailsView). */
function detailsList(details) {
  const text = (value) =>
    value === null || value === undefined
      ? '—'
      : Array.isArray(value)
        ? value.length === 0
          ? '(none)'
          : value.map(text).join(', ')
        : typeof value === 'object'
          ? JSON.stringify(value)
          : String(value)
  const { before, after, ...rest } = details
  const items = Object.entries(rest).map(([key, value]) => [key, text(value)])
  if (before && after) {
    for (const key of Object.keys({ ...before, ...after })) {
      items.push([key, `${text(before[key])} → ${text(after[key])}`])
    }
  }
  if (items.length === 0) return document.createTextNode('—')
  const list = document.createElement('ul')
  list.className = 'details'
  for (const [key, value] of items) {
    const item = document.createElement('li')
    const name = document.createElement('span')
    name.className = 'k'
    name.textContent = key
    item.append(name, ` ${value}`)
    list.append(item)
  }
  return list
}

/** Live tail of the audit log: polls the feed and prepends new rows (built as text nodes). */
function wireTail() {
  const box = document.getElementById('live-tail')
  const table = document.getElementById('audit-table')
  if (!box || !table) return
  const body = table.tBodies[0]
  const state = document.getElementById('tail-state')
  let timer
  const newest = () => {
    const first = body.querySelector('time[datetime]')
    return first ? first.getAttribute('datetime') : new Date(0).toISOString()
  }
  const labels = ['Time', 'Type', 'Tenant', 'Actor', 'Outcome', 'Details']
  const cell = (row, text) => {
    const td = row.insertCell()
    td.textContent = text
    return td
  }
  const label = (row) => {
    for (const [i, td] of [...row.cells].entries()) td.dataset.label = labels[i]
  }
  async function poll() {
    try {
      const url = `${box.dataset.feed}&after=${encodeURIComponent(newest())}`
      const response = await fetch(url, {
        credentials: 'same-origin',
        headers: { accept: 'application/json' },
      })
      if (!response.ok) throw new Error(String(response.status))
      const { events } = await response.json()
      const known = new Set([...body.rows].map((r) => r.dataset.eventId))
      for (const event of events.reverse()) {
        if (known.has(event.id)) continue
        document.querySelector('.empty')?.remove()
        const row = body.insertRow(0)
        row.dataset.eventId = event.id
        const time = document.createElement('time')
        time.setAttribute('datetime', event.time)
        time.title = event.time
        time.textContent = event.time
        row.insertCell().append(time)
        const type = document.createElement('code')
        type.textContent = event.type
        row.insertCell().append(type)
        cell(row, event.tenantId ?? '—').className = 'id'
        cell(row, event.actor ?? '—').className = 'id'
        const outcome = document.createElement('code')
        outcome.textContent = event.outcome
        row.insertCell().append(outcome)
        row.insertCell().append(detailsList(event.details))
        label(row)
      }
      localizeTimes(body)
      state.textContent = `Live: updated ${new Date().toLocaleTimeString()}`
    } catch {
      state.textContent = 'Live tail paused: the server did not answer.'
    }
  }
  box.addEventListener('change', () => {
    clearInterval(timer)
    if (box.checked) {
      void poll()
      timer = setInterval(poll, 2000)
    } else state.textContent = ''
  })
}

document.addEventListener('DOMContentLoaded', () => {
  localizeTimes(document)
  wireCopy()
  wireConfirm()
  wireTail()
})
