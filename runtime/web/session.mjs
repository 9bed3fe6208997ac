// session.mjs — generation over a WebGPU runtime (gpu.mjs), as
// runtime/session.c does it over a backend: the prompt is fed in chunks of
// the prefill program's size, and the rest in one run when the bundle's
// prefill runs take any count (else token by token); then either the
// device sampler draws every token (its last prompt token is the first
// input, ids stay on the GPU) or, with hostGreedy, the logits come back and
// the argmax is taken here. Also the slots of a bundle compiled with
// --slots B, as runtime/slots.c has them (joinSlot, stepSlots, takeSlot,
// leaveSlot, and generateBatch over them), and bench() and benchBatch(),
// the measurements of runtime/bench.c.

import { samplerState, seenAdd, seenHas, GEN_BATCH, SEEN_BITS } from './gpu.mjs';

function checkFinite(rows, count, vocab, firstPos) {
  for (let k = 0; k < count * vocab; k++)
    if (!Number.isFinite(rows[k]))
      throw new Error(`non-finite logit ${rows[k]} at position ${firstPos + Math.floor(k / vocab)} ` +
                      `(vocab index ${k % vocab}): the model or its weights produce inf/NaN`);
}

// transformers' RepetitionPenaltyLogitsProcessor on a copy of `row`
function penalized(row, seen, penalty) {
  const out = Float32Array.from(row);
  for (let i = 0; i < out.length; i++)
    if (seenHas(seen, i)) out[i] = out[i] > 0 ? Math.fround(out[i] / penalty) : Math.fround(out[i] * penalty);
  return out;
}

function argmax(v) {
  let best = 0;
  for (let i = 1; i < v.length; i++) if (v[i] > v[best]) best = i;
  return best;
}

export class Session {
  constructor(runtime) {
    this.rt = runtime;
    this.last = null; // the last row fed with rows wanted
    // the totals of generate(), as runtime/session.c counts them (ssmc_stats):
    // prompt tokens fed before the first draw and their seconds; tokens drawn,
    // and the seconds from the end of each prompt to the last draw
    this.stats = { promptTokens: 0, promptS: 0, generatedTokens: 0, generateS: 0 };
    // every token fed or drawn since the runtime's position was 0, for the
    // repetition penalty (runtime/session.c's seen-token set)
    this.seen = new Float32Array(Math.ceil(runtime.vocab / SEEN_BITS));
  }

  #mark(ids) {
    for (const id of ids) if (id >= 0 && id < this.rt.vocab) seenAdd(this.seen, id);
  }

  // Feeds tokens in chunks; with onLogits (or `wantRows`), each row is
  // checked and handed to onLogits(row, position); returns true if it asked
  // to stop.
  async feed(tokens, wantRows, onLogits) {
    const rt = this.rt, V = rt.vocab, chunk = rt.chunk > 0 ? rt.chunk : 1;
    for (let at = 0; at < tokens.length;) {
      const rest = tokens.length - at;
      const len = rest >= chunk ? chunk : rt.anyCount ? rest : 1;
      const pos = rt.position;
      if (pos === 0) this.seen.fill(0);
      const rows = await rt.run(tokens.slice(at, at + len), wantRows);
      this.#mark(tokens.slice(at, at + len));
      at += len;
      if (!wantRows) continue;
      checkFinite(rows, len, V, pos);
      for (let r = 0; r < len && onLogits; r++)
        if (onLogits(rows.subarray(r * V, (r + 1) * V), pos + r)) return true;
      this.last = rows.slice((len - 1) * V, len * V);
    }
    return false;
  }

  // Generates up to maxTokens after `prompt` (ids). Options: temperature,
  // topK, topP, minP, seed (the device sampler; greedy by default),
  // repeatPenalty (1: off; greedy or sampled, on the device or the host), hostGreedy,
  // eos (an id or a list of ids: stop at any of them; not included), onToken(id) (true stops), onLogits(row,
  // position) (every position processed: each prompt token, then each
  // generated one but the last). Resolves to the generated ids.
  async generate(prompt, maxTokens, o = {}) {
    let t1 = 0, out = [];
    try {
      out = await this.#generate(prompt, maxTokens, o, (fed, t0) => {
        t1 = performance.now();
        this.stats.promptTokens += fed;
        this.stats.promptS += (t1 - t0) / 1e3;
      }, out);
      return out;
    } finally {
      if (t1) {
        this.stats.generatedTokens += out.length;
        this.stats.generateS += (performance.now() - t1) / 1e3;
      }
    }
  }

  async #generate(prompt, maxTokens, o, onPrompt, out) {
    const rt = this.rt;
    if (!prompt.length) throw new Error('generate: the prompt has no tokens');
    const eos = new Set([o.eos ?? []].flat());
    const sampled = !o.hostGreedy && maxTokens > 0;
    const penalty = o.repeatPenalty ?? 1;
    const state = samplerState(o.temperature ?? 0, o.topK ?? 0, o.topP ?? 1, o.seed ?? 0, o.minP ?? 0, penalty);
    if (sampled) rt.setSampler(state);
    const feedCount = sampled ? prompt.length - 1 : prompt.length;
    const t0 = performance.now();
    const stop = await this.feed(prompt.slice(0, feedCount), !!o.onLogits || !sampled, o.onLogits);
    onPrompt(feedCount, t0);
    if (stop) return out;
    if (!maxTokens) return out;
    if (sampled) {
      if (rt.position === 0) this.seen.fill(0);
      this.#mark([prompt[prompt.length - 1]]); // the first step's input
      if (penalty !== 1) rt.setSeen(this.seen);
      let pos = rt.position, stopped = false;
      await rt.generate(prompt[prompt.length - 1], maxTokens, {
        wantLogits: !!o.onLogits,
        batch: o.batch,
        onStep: (id, logits) => {
          const p = pos++;
          this.#mark([id]);
          if (logits) {
            checkFinite(logits, 1, rt.vocab, p);
            if (o.onLogits(logits, p)) return (stopped = true);
          }
          if (eos.has(id)) return (stopped = true);
          out.push(id);
          return (stopped = !!(o.onToken && o.onToken(id)));
        },
      });
      return out;
    }
    for (let k = 0; k < maxTokens; k++) {
      const id = argmax(penalty !== 1 ? penalized(this.last, this.seen, penalty) : this.last);
      if (eos.has(id)) break;
      out.push(id);
      this.#mark([id]);
      if ((o.onToken && o.onToken(id)) || k + 1 === maxTokens) break;
      if (await this.feed([id], true, o.onLogits)) break;
    }
    return out;
  }

  // ---- many sequences in one step (ssmc.h; runtime/slots.c) ----
  // The slots live with the runtime, so every Session on one runtime steps
  // them together: a session joins a slot (its state is copied there, on
  // the device), the slots step, and a session takes a slot's state back
  // to go on alone. A slot keeps its state until another session joins it.

  // The slots of the bundle (0: none).
  slots() {
    return this.rt.slots;
  }

  #slotCheck(slot) {
    const rt = this.rt;
    if (!rt.slots) throw new Error(`${rt.name}: the bundle has no slots: compile it with --slots B`);
    if (!(Number.isInteger(slot) && slot >= 0 && slot < rt.slots))
      throw new Error(`slot ${slot} is not one of the bundle's ${rt.slots} slots`);
  }

  // Copies the state (the sequence so far) into slot `slot`, with the
  // sampler settings of `o`: temperature, topK, topP, minP, seed (as
  // generate(); greedy by default) and step (the sampler's counter for the
  // first draw, below 2^24). The batched sampler has no repetition penalty.
  async joinSlot(slot, o = {}) {
    this.#slotCheck(slot);
    const rt = this.rt;
    const st = samplerState(o.temperature ?? 0, o.topK ?? 0, o.topP ?? 1, o.seed ?? 0, o.minP ?? 0,
                            o.repeatPenalty ?? 1);
    if (st[6] > 0)
      throw new Error(`slot ${slot}: the batched program's sampler has no repetition penalty ` +
                      '(decode the request in its session)');
    const step = o.step ?? 0;
    if (!(Number.isInteger(step) && step >= 0 && step < 1 << 24))
      throw new Error(`sampler step ${step} is not an integer in [0, 2^24)`);
    st[4] = step;
    rt.slotCopy(slot, true);
    rt.slotSampler(slot, st);
    rt.slotPos[slot] = rt.position;
  }

  // Copies slot `slot`'s state back: the state then covers what it covered
  // when it joined and every id fed to that slot since. A slot that no
  // session joined, or that was left since, is refused.
  async takeSlot(slot) {
    this.#slotCheck(slot);
    const rt = this.rt;
    if (rt.slotPos[slot] < 0)
      throw new Error(`slot ${slot} holds no sequence (no session joined it, or it was left since)`);
    rt.slotCopy(slot, false);
    rt.position = rt.slotPos[slot];
    this.last = null;
  }

  // Marks slot `slot` as holding no sequence until a session joins it: it
  // steps on (its ids to be ignored) at position 0, so that in a model with
  // attention it never reaches max_seq.
  async leaveSlot(slot) {
    this.#slotCheck(slot);
    this.rt.slotPos[slot] = -1;
  }

  // Runs `steps` steps of every slot: slot i is fed first[i] and then each
  // id it draws; the id slot i draws at step j is ids[j * slots + i]
  // (Int32Array). Slots that no session joined step too: ignore their ids.
  // onLogits(rows, step) gets each step's slots x vocab logits (one step a
  // submission; else up to `batch` steps, GEN_BATCH by default). A
  // non-finite logit fails the call naming the slot; the steps that ran
  // still count for every slot, and the error's `ids` has them: -1 for that
  // slot at that step (its state is lost: join it again), -2 where no step
  // ran.
  async stepSlots(first, steps, { onLogits = null, batch } = {}) {
    this.#slotCheck(0);
    const rt = this.rt, B = rt.slots, pos = rt.slotPos;
    if (!(Number.isInteger(steps) && steps >= 0)) throw new Error(`steps ${steps} is not a count >= 0`);
    if (first?.length !== B) throw new Error(`stepSlots: first has ${first?.length} ids, not one per slot (${B})`);
    for (let i = 0; i < B; i++)
      if (!(Number.isInteger(first[i]) && first[i] >= 0 && first[i] < rt.vocab))
        throw new Error(`slot ${i}: token id ${first[i]} is out of range (vocab ${rt.vocab})`);
    const max = rt.m.max_seq;
    for (let i = 0; i < B; i++)
      if (max && pos[i] >= 0 && pos[i] + steps > max)
        throw new Error(`slot ${i}: position ${pos[i] + steps} is past --max-seq ${max}`);
    if (!steps) return new Int32Array(0);
    const r = await rt.batchGenerate(first, pos, steps, { onLogits, batch });
    for (let i = 0; i < B; i++) if (pos[i] >= 0) pos[i] += r.ran;
    if (r.bad >= 0) {
      const j = Math.floor(r.ids.indexOf(-1) / B);
      const at = pos[r.bad] < 0 ? j : pos[r.bad] - r.ran + j;
      const e = new Error(`slot ${r.bad}: non-finite logit at position ${at}: the model or its weights produce inf/NaN`);
      e.ids = r.ids;
      throw e;
    }
    return r.ids;
  }

  // Each prompt (ids) prefilled from a reset state and joined into a slot
  // of its own (slots 0, 1, ...), then up to n ids drawn for every one in
  // steps of all the slots together; resolves to each sequence's ids. `o`:
  // joinSlot's sampler settings, for every prompt or (an array) one each,
  // and eos (an id or a list: a sequence ends at it, not included; the
  // steps end when every sequence has). The slots are left after, and the
  // state is reset.
  async generateBatch(prompts, n, o = {}) {
    const rt = this.rt, B = this.slots();
    this.#slotCheck(0);
    if (prompts.length > B)
      throw new Error(`generateBatch: ${prompts.length} prompts, but the bundle has ${B} slots`);
    const opts = Array.isArray(o) ? o : prompts.map(() => o);
    const eos = opts.map((x) => new Set([x.eos ?? []].flat()));
    const out = prompts.map(() => []), open = prompts.map(() => true);
    let first = new Array(B).fill(0), joined = 0;
    try {
      for (const [i, prompt] of prompts.entries()) {
        if (!prompt.length) throw new Error(`generateBatch: prompt ${i} has no tokens`);
        await rt.reset();
        await this.feed(prompt.slice(0, -1), false);
        await this.joinSlot(i, opts[i]);
        joined++;
        first[i] = prompt[prompt.length - 1];
      }
      for (let done = 0; done < n && open.some(Boolean);) {
        const k = Math.min(GEN_BATCH, n - done);
        const ids = await this.stepSlots(first, k);
        for (const [i, seq] of out.entries())
          for (let j = 0; j < k && open[i]; j++) {
            const id = ids[j * B + i];
            if (eos[i].has(id)) open[i] = false;
            else seq.push(id);
          }
        first = Array.from(ids.subarray((k - 1) * B));
        done += k;
      }
      return out;
    } finally {
      for (let i = 0; i < joined; i++) rt.slotPos[i] = -1;
      await rt.reset();
    }
  }

  // runtime/bench.c's measurements: decode with the logits read back and
  // the argmax taken here; decode with the sampler feeding each token back
  // on the device (`batch` steps per submission, GEN_BATCH by default);
  // prefill in chunks. Wall clock around whole runs, after a warm-up.
  async bench(n, batch = GEN_BATCH) {
    const rt = this.rt, V = rt.vocab, C = rt.chunk;
    n = Math.max(1, n);
    const toks = Array.from({ length: C }, (_, i) => (i * 7919) % V);
    let tok = 1 % V;
    await rt.reset();
    for (let i = 0; i < 8; i++) await rt.run([tok], true);
    await rt.run(toks, true);
    await rt.reset();
    const t0 = performance.now();
    for (let i = 0; i < n; i++) tok = argmax(await rt.run([tok], true));
    const t1 = performance.now();
    rt.setSampler(samplerState(0, 0, 1, 0));
    await rt.reset();
    await rt.generate(1 % V, Math.min(n, 8), { batch });
    await rt.reset();
    const t2 = performance.now();
    await rt.generate(1 % V, n, { batch });
    const t3 = performance.now();
    const runs = Math.max(4, Math.floor(n / C));
    await rt.reset();
    const t4 = performance.now();
    for (let i = 0; i < runs; i++) await rt.run(toks, true);
    const t5 = performance.now();
    await rt.reset();
    return {
      decode_tokens_per_s: n / ((t1 - t0) / 1e3),
      decode_feedback_tokens_per_s: n / ((t3 - t2) / 1e3),
      prefill_tokens_per_s: (runs * C) / ((t5 - t4) / 1e3),
      decode_tokens: n,
      prefill_tokens: runs * C,
      weight_bytes: rt.m.weights.reduce((a, w) => a + w.region.bytes, 0),
      batch,
    };
  }

  // runtime/bench.c's ssmc_session_bench_batch: `steps` steps of the batched
  // program, every slot from the reset state (each fed an id of its own)
  // and drawing greedily, after a warm-up; resolves to the aggregate tokens
  // a second of all the slots. The state is reset after, and every slot is
  // overwritten (left).
  async benchBatch(steps, batch = GEN_BATCH) {
    const rt = this.rt, B = rt.slots, n = Math.max(1, steps), warm = Math.min(n, 8);
    this.#slotCheck(0);
    if (rt.m.max_seq && warm + n > rt.m.max_seq)
      throw new Error(`${n} steps (and ${warm} to warm up) are past --max-seq ${rt.m.max_seq}`);
    await rt.reset();
    const greedy = samplerState(0, 0, 1, 0);
    const first = Array.from({ length: B }, (_, i) => (1 + i * 7919) % rt.vocab);
    for (let i = 0; i < B; i++) {
      rt.slotCopy(i, true);
      rt.slotSampler(i, greedy);
    }
    rt.slotPos.fill(-1);
    const pos = new Array(B).fill(0);
    await rt.batchGenerate(first, pos, warm, { batch });
    pos.fill(warm);
    const t0 = performance.now();
    await rt.batchGenerate(first, pos, n, { batch });
    const t1 = performance.now();
    await rt.reset();
    return B * n / ((t1 - t0) / 1e3);
  }
}
