// session.mjs — generation over a WebGPU runtime (gpu.mjs), as
// runtime/session.c does it over a backend: the prompt is fed in chunks of
// the prefill program's size, and the rest in one run when the bundle's
// prefill runs take any count (else token by token); then either the
// device sampler draws every token (its last prompt token is the first
// input, ids stay on the GPU) or, with hostGreedy, the logits come back and
// the argmax is taken here. Also bench(), the measurements of
// runtime/bench.c.

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
}
