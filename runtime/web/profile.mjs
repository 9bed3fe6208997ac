// profile.mjs — `ssmc bench --profile`'s report (cli/profile.c) of the
// WebGPU host's Runtime.profile, for ssmc-web.mjs bench --profile.

// `ssmc bench --profile`'s report of one program (cli/profile.c), from
// Runtime.profile's steps: totals per kernel family and per op group (the
// op's fused ops, without its knobs) and each dispatch, with the GB/s over
// its bindings; as an object for --json.
export function profileReport(name, steps, runs, json) {
  const gbs = (bytes, us) => (us > 0 ? bytes / us * 1e-3 : 0);
  const totals = (key) => {
    const m = new Map();
    for (const s of steps) {
      const t = m.get(key(s)) ?? { name: key(s), n: 0, us: 0, bytes: 0 };
      t.n++;
      t.us += s.us;
      t.bytes += s.bytes;
      m.set(t.name, t);
    }
    return [...m.values()];
  };
  const fam = totals((s) => s.family), grp = totals((s) => s.op.split(' ')[0]);
  const sum = steps.reduce((a, s) => a + s.us, 0), bytes = steps.reduce((a, s) => a + s.bytes, 0);
  const r3 = (x) => +x.toFixed(3), r2 = (x) => +x.toFixed(2);
  if (json) {
    const list = (v) => v.map((t) => ({ name: t.name, dispatches: t.n, us: r3(t.us), share: +(sum > 0 ? t.us / sum : 0).toFixed(4),
                                        gb_per_s: r2(gbs(t.bytes, t.us)) }));
    return { runs, dispatches: steps.length, us: r3(sum), gb_per_s: r2(gbs(bytes, sum)), families: list(fam),
             op_groups: list(grp), steps: steps.map((s) => ({ kernel: s.kernel, op: s.op, us: r3(s.us), bytes: s.bytes,
                                                             gb_per_s: r2(gbs(s.bytes, s.us)) })) };
  }
  const pad = (x, n) => String(x).padStart(n), padr = (x, n) => String(x).padEnd(n);
  const lines = [`${name}: ${steps.length} dispatches, ${sum.toFixed(1)} us of GPU time per run (mean of ${runs}), ` +
                 `${gbs(bytes, sum).toFixed(1)} GB/s over their bindings`];
  for (const [title, v] of [['by kernel family', fam], ['by op group', grp]]) {
    lines.push(`  ${title}:`);
    for (const t of v)
      lines.push(`    ${padr(t.name, 28)} ${pad(t.n, 4)} dispatches ${pad(t.us.toFixed(1), 10)} us ` +
                 `${pad((sum > 0 ? 100 * t.us / sum : 0).toFixed(1), 5)}% ${pad(gbs(t.bytes, t.us).toFixed(1), 8)} GB/s`);
  }
  lines.push('  dispatches:');
  steps.forEach((s, i) => lines.push(`    ${pad(i, 4)} ${padr(s.kernel, 16)} ${pad(s.us.toFixed(2), 9)} us ` +
                                     `${pad(gbs(s.bytes, s.us).toFixed(1), 8)} GB/s  ${s.op}`));
  return lines.join('\n');
}
