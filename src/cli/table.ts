/** Renders rows as an aligned text table (numbers right-aligned), for humans at a terminal. */
export function renderTable(
  header: readonly string[],
  rows: readonly (readonly (string | number)[])[],
): string {
  const cells = [header, ...rows].map((row) => row.map((cell) => String(cell)));
  const widths = header.map((_, i) => Math.max(...cells.map((row) => (row[i] ?? '').length)));
  const line = (row: readonly string[], source: readonly (string | number)[]) =>
    row
      .map((cell, i) =>
        typeof source[i] === 'number' ? cell.padStart(widths[i] ?? 0) : cell.padEnd(widths[i] ?? 0),
      )
      .join('  ')
      .trimEnd();
  return [
    line(cells[0] ?? [], header),
    widths.map((w) => '-'.repeat(w)).join('  '),
    ...rows.map((row, i) => line(cells[i + 1] ?? [], row)),
  ].join('\n');
}
