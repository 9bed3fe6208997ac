// slots.test.mjs — the batched decode program (ssmc compile --slots) through
// the WebGPU host: sequences stepped together in the slots draw the greedy
// ids each draws alone through the decode program, with logits within 1e-4
// of the largest logit, also across a slot that is left and one joined
// later, and a slot taken back goes on alone; a Mamba-1 model and a hybrid
// with attention (each slot its own position and KV cache). Bad slots,
// bad inputs and a bundle without slots are refused with clear errors.

import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { compile, ROOT, scratch } from './helpers.mjs';
import { readBundle } from '../bundle.mjs';
import { openCheckpoint } from '../safetensors.mjs';
import { Runtime } from '../gpu.mjs';
import { Session } from '../session.mjs';
import { nodeGpu, dirFiles } from '../node.mjs';

const dir = scratch();
const SLOTS = 3;
const M1 = join(ROOT, 'tests/data/mamba1_tiny');

async function open(bundlePath, weights) {
  const bundle = readBundle(readFileSync(bundlePath), bundlePath);
  const checkpoint = await openCheckpoint(dirFiles(weights), weights);
  try {
    return await Runtime.open({ gpu: await nodeGpu(), bundle, checkpoint });
  } finally {
    await checkpoint.close();
  }
}

// The runtimes that tests share, by fixture, opened on first use.
const shared = new Map();
function runtime(name, extra) {
  const fix = join(ROOT, 'tests/data', name);
  if (!shared.has(name))
    shared.set(name, open(compile(fix, dir, `${name}-s${SLOTS}`, ['--chunk', '4', '--slots', String(SLOTS), ...extra]), fix));
  return shared.get(name);
}
after(async () => {
  for (const rt of shared.values()) (await rt).destroy();
});

// Each prompt alone from a reset state through the decode program: its
// greedy ids and the logits that drew each.
async function alone(rt, prompt, n) {
  await rt.reset();
  const rows = new Map();
  const ids = await new Session(rt).generate(prompt, n, { onLogits: (r, p) => void rows.set(p, Float32Array.from(r)) });
  return { ids, rows: ids.map((_, t) => rows.get(prompt.length - 1 + t)).filter(Boolean) };
}

// max |a - b| over every row, and max |b|
function diff(got, want) {
  let d = 0, scale = 0;
  got.forEach((r, i) => {
    for (let v = 0; v < r.length; v++) {
      d = Math.max(d, Math.abs(r[v] - want[i][v]));
      scale = Math.max(scale, Math.abs(want[i][v]));
    }
  });
  return { d, scale };
}

for (const [name, extra] of [['mamba1_tiny', []], ['jamba_tiny', ['--max-seq', '64']]]) {
  test(`${name}: slots stepped together draw the ids and logits of each sequence alone, across leave, join and take`, async () => {
    const fix = join(ROOT, 'tests/data', name), rt = await runtime(name, extra);
    {
      const s = new Session(rt), V = rt.vocab;
      assert.equal(s.slots(), SLOTS);
      // prompts of different lengths: the slots are at different positions
      const base = JSON.parse(readFileSync(join(fix, 'golden.json'), 'utf8')).prompt;
      const P = [base, base.slice(3).reverse(), [...base, 11, 5].map((t) => (t * 3 + 1) % V), [7 % V, 2, 9]];
      const n1 = 2, n2 = 2, n3 = 2, n = n1 + n2 + n3, more = 1;
      const ref = [];
      for (const [i, k] of [n + more, n1, n, n3].entries()) ref.push(await alone(rt, P[i], k));
      // the batched steps' ids and logits of slot i, by step
      const ids = [[], [], []], rows = [[], [], []];
      const step = async (first, k) => {
        const out = await s.stepSlots(first, k, {
          onLogits: (r) => { for (let i = 0; i < SLOTS; i++) rows[i].push(r.slice(i * V, (i + 1) * V)); } });
        assert.equal(out.length, k * SLOTS);
        for (let j = 0; j < k; j++) for (let i = 0; i < SLOTS; i++) ids[i].push(out[j * SLOTS + i]);
        return Array.from(out.subarray((k - 1) * SLOTS));
      };
      for (let i = 0; i < SLOTS; i++) {
        await rt.reset();
        await s.feed(P[i].slice(0, -1), false);
        await s.joinSlot(i);
      }
      let last = await step(P.slice(0, SLOTS).map((p) => p.at(-1)), n1);
      // slot 1 leaves and steps unheld (its ids ignored); then P[3] joins it
      await s.leaveSlot(1);
      assert.equal(rt.slotPos[1], -1);
      last = await step(last, n2);
      await rt.reset();
      await s.feed(P[3].slice(0, -1), false);
      await s.joinSlot(1);
      last[1] = P[3].at(-1);
      await step(last, n3);
      const expect = (i, from, to, want, wantFrom) => {
        const what = `slot ${i}, steps ${from} to ${to - 1}`;
        assert.deepEqual(ids[i].slice(from, to), want.ids.slice(wantFrom, wantFrom + to - from), what);
        const { d, scale } = diff(rows[i].slice(from, to), want.rows.slice(wantFrom, wantFrom + to - from));
        assert.ok(d <= 1e-4 * scale, `${what}: logits differ by ${d} (largest ${scale})`);
      };
      expect(0, 0, n, ref[0], 0);
      expect(2, 0, n, ref[2], 0);
      expect(1, 0, n1, ref[1], 0);
      expect(1, n1 + n2, n, ref[3], 0);
      assert.deepEqual(rt.slotPos, [P[0].length - 1 + n, P[3].length - 1 + n3, P[2].length - 1 + n]);
      assert.equal(rt.slotPos[0], P[0].length - 1 + n);
      // slot 0 taken back goes on alone where it was
      await rt.reset();
      await s.takeSlot(0);
      assert.equal(rt.position, P[0].length - 1 + n);
      const on = await s.generate([ids[0][n - 1]], more);
      assert.deepEqual(on, ref[0].ids.slice(n, n + more), 'slot 0 taken back');
      // generateBatch: the same ids for the prompts given together
      const g = await s.generateBatch([P[2], P[0]], n);
      assert.deepEqual(g, [ref[2].ids, ref[0].ids.slice(0, n)]);
      assert.deepEqual(rt.slotPos, [-1, -1, rt.slotPos[2]]);
    }
  });
}

test('bad slots, bad inputs and a bundle without slots are refused, naming what is wrong', async () => {
  const rt = await runtime('mamba1_tiny', []);
  {
    const s = new Session(rt);
    for (const slot of [3, -1, 0.5])
      await assert.rejects(s.joinSlot(slot), new RegExp(`^Error: slot ${slot} is not one of the bundle's 3 slots$`));
    await assert.rejects(s.takeSlot(1), /^Error: slot 1 holds no sequence \(no session joined it, or it was left since\)$/);
    await assert.rejects(s.joinSlot(0, { repeatPenalty: 1.3 }), /slot 0: the batched program's sampler has no repetition penalty/);
    await assert.rejects(s.joinSlot(0, { step: 1 << 24 }), /sampler step 16777216 is not an integer in \[0, 2\^24\)/);
    await assert.rejects(s.joinSlot(0, { topP: 0 }), /sampler settings out of range/);
    await s.joinSlot(0);
    await s.leaveSlot(0);
    await assert.rejects(s.takeSlot(0), /slot 0 holds no sequence/);
    await assert.rejects(s.stepSlots([1], 1), /first has 1 ids, not one per slot \(3\)/);
    await assert.rejects(s.stepSlots([1, 1000, 2], 1), /slot 1: token id 1000 is out of range \(vocab 1000\)/);
    await assert.rejects(s.stepSlots([1, 2, 3], -1), /steps -1 is not a count >= 0/);
    await assert.rejects(s.generateBatch([[1], [2], [3], [4]], 2), /4 prompts, but the bundle has 3 slots/);
    await assert.rejects(s.generateBatch([[1], []], 2), /prompt 1 has no tokens/);
    assert.deepEqual(rt.slotPos.slice(0, 2), [-1, -1], 'a failed generateBatch leaves the slots it joined');
  }
  const plain = await open(compile(M1, dir, 'm1-plain', ['--chunk', '4']), M1);
  try {
    const s = new Session(plain);
    assert.equal(s.slots(), 0);
    const none = /m1-plain\.ssmb: the bundle has no slots: compile it with --slots B/;
    await assert.rejects(s.joinSlot(0), none);
    await assert.rejects(s.takeSlot(0), none);
    await assert.rejects(s.leaveSlot(0), none);
    await assert.rejects(s.stepSlots([], 1), none);
    await assert.rejects(s.generateBatch([[1]], 1), none);
    await assert.rejects(s.benchBatch(4), none);
  } finally {
    plain.destroy();
  }
});
