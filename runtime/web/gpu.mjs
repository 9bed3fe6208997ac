// gpu.mjs — a compiled bundle running on WebGPU: the JavaScript twin of
// runtime/vulkan/exec.c, running the same decode and prefill programs from
// the same manifest, with the bundle's WGSL instead of its SPIR-V.
//
// Open: read every limit the bundle needs from the adapter and ask for
// exactly those (a bundle that cannot run names the limit); one GPUBuffer
// per manifest buffer (an 'output' one, the prefill's logits of every row,
// made when a run first asks for those logits, and so are the bind groups
// that hold it); the weights uploaded from safetensors (converted to
// f32 and transformed at load, as the CPU interpreter does); one pipeline
// per kernel; and, per dispatch, a bind group (made once, shared by
// dispatches that bind the same memory) and 256 bytes of one uniform buffer
// holding its tensors' element offsets and the run's token count, chosen by
// a dynamic offset.
// Memory is bound by WGSL slot (codegen/codegen.h): each slot's tensors lie
// in one buffer, bound as windows of the manifest's wgsl_window bytes from
// their lowest offset.
// Run: write the ids (and the position), encode the program (without
// logits, only its steps up to the last that writes state), read the
// logits back when asked. When the prefill program says any_count, a run
// may take 2 to chunk - 1 tokens too: its kernels read the count from the
// uniform and do only those tokens' work. Generate: the decode program, then copies of the
// id its sampler drew into a ring and from there into its own input; up to
// GEN_BATCH steps are queued in one submission before the ring, the only
// thing mapped back, is read. A program that reads its position gets each
// step's from a second ring, written once for the batch and copied in
// before the step.
// Slots (a bundle compiled with --slots B): the batched decode program
// advances B sequences by a token each; a slot's state is a row of the
// slots buffers, copied from and to the one-sequence state on the device,
// and its ids and positions go through rings as generate's do.

import { SAMPLER_STATE_LEN } from './bundle.mjs';
import { applyTransform, toHalf, toQuant } from './transform.mjs';

export const GEN_BATCH = 16;
const UNIFORM_STRIDE = 256; // a dynamic uniform offset's alignment on every adapter
const OFFSETS_BYTES = 144; // SsmOffsets in the WGSL: 32 u32 offsets, then the run's count (a vec4)
const COUNT_WORD = 32; // the count's u32 index in it
const STORAGE = 0x80, COPY_SRC = 0x04, COPY_DST = 0x08, UNIFORM = 0x40, MAP_READ = 0x01;
const QUERY_RESOLVE = 0x200;
const MAP_MODE_READ = 0x1;

export class GpuError extends Error {}

// What the bundle asks of a device, and the dispatch plans: for each step,
// its bindings' windows and offsets.
function plan(m) {
  const win = m.wgsl_window;
  const writable = m.kernels.map(() => null);
  const steps = [];
  let maxBinding = 4;
  // the batched program's steps last: its kernels' layouts need them
  for (const prog of [m.decode, m.prefill, ...(m.batch ? [m.batch] : [])]) {
    for (const st of prog.steps) {
      const k = m.kernels[st.kernel];
      const offsets = new Uint32Array(OFFSETS_BYTES / 4);
      const slots = k.windows.map((nw, s) => {
        const idx = st.bindings.map((_, j) => j).filter((j) => k.slots[j] === s);
        const buffer = st.bindings[idx[0]].buffer;
        const lo = Math.min(...idx.map((j) => st.bindings[j].offset));
        // whole u32 words: a 16-bit tensor of odd length ends in half a word
        const hi = Math.max(...idx.map((j) => st.bindings[j].offset + Math.ceil(st.bindings[j].bytes / 4) * 4));
        for (const j of idx) offsets[j] = (st.bindings[j].offset - lo) / 4;
        const rw = m.buffers[buffer].usage !== 'weights';
        const w = writable[st.kernel];
        if (w && w[s] !== undefined && w[s] !== rw)
          throw new GpuError(`${k.name}: WGSL slot ${s} is writable in one dispatch and not in another`);
        (writable[st.kernel] ??= [])[s] = rw;
        const windows = [];
        for (let i = 0; i < Math.ceil((hi - lo) / win); i++) {
          const offset = lo + i * win;
          windows.push({ buffer, offset, size: Math.min(win, hi - offset) });
          maxBinding = Math.max(maxBinding, windows[i].size);
        }
        return { rw, windows, count: nw };
      });
      steps.push({ st, offsets, slots });
    }
  }
  return { steps, writable, maxBinding };
}

function workgroupSize(wgsl) {
  const m = /@workgroup_size\((\d+)\)/.exec(wgsl);
  return m ? Number(m[1]) : 1;
}

// Bytes of workgroup memory a WGSL module declares (its var<workgroup>s):
// the generated kernels use 32-bit scalars and atomics, vectors, arrays of
// them (a literal length or a module const) and structs of them.
export function workgroupBytes(wgsl) {
  const consts = new Map([...wgsl.matchAll(/\bconst\s+(\w+)\s*(?::\s*\w+\s*)?=\s*(\d+)u?\s*;/g)]
    .map((m) => [m[1], Number(m[2])]));
  const structs = new Map([...wgsl.matchAll(/\bstruct\s+(\w+)\s*\{([^}]*)\}/g)].map((m) => [m[1], m[2]]));
  const size = (type) => {
    const t = type.trim();
    const a = /^array<(.*),\s*(\w+)\s*>$/.exec(t);
    if (a) {
      const n = /^\d+u?$/.test(a[2]) ? parseInt(a[2], 10) : consts.get(a[2]);
      if (n === undefined) throw new GpuError(`workgroup array length '${a[2]}' is not a constant of the kernel`);
      return n * size(a[1]);
    }
    if (/^(f32|u32|i32|atomic<[ui]32>)$/.test(t)) return 4;
    const v = /^vec([234])<[fiu]32>$/.exec(t);
    if (v) return v[1] === '2' ? 8 : 16;
    if (structs.has(t))
      return structs.get(t).split(',').filter((f) => f.trim()).reduce((n, f) => n + size(f.split(':')[1] ?? ''), 0);
    throw new GpuError(`a workgroup variable of type '${t}': unknown size`);
  };
  let total = 0;
  for (const m of wgsl.matchAll(/var<workgroup>\s+\w+\s*:\s*([^;]+);/g)) total += size(m[1]);
  return total;
}

// The limits `m` needs beyond WebGPU's defaults, checked against the
// adapter's; a shortfall is an error that names the limit and the need.
function requiredLimits(adapter, m, texts, p) {
  // an output buffer is made only when asked for: as large as the adapter
  // allows, and a run that asks for more is refused then (Runtime.run)
  const need = {
    maxBufferSize: Math.max(...m.buffers.map((b) => b.usage === 'output' ? Math.min(b.bytes, adapter.limits.maxBufferSize) : b.bytes)),
    maxStorageBufferBindingSize: p.maxBinding,
    maxStorageBuffersPerShaderStage: Math.max(...m.kernels.map((k) => k.windows.reduce((a, b) => a + b, 0))),
    maxComputeInvocationsPerWorkgroup: Math.max(...texts.map(workgroupSize)),
    maxComputeWorkgroupSizeX: Math.max(...texts.map(workgroupSize)),
    maxComputeWorkgroupStorageSize: Math.max(...texts.map(workgroupBytes)),
  };
  const why = {
    maxBufferSize: 'its largest buffer',
    maxStorageBufferBindingSize: 'its largest storage window',
    maxStorageBuffersPerShaderStage: 'its kernel with the most storage windows',
    maxComputeInvocationsPerWorkgroup: 'its largest workgroup',
    maxComputeWorkgroupSizeX: 'its largest workgroup',
    maxComputeWorkgroupStorageSize: 'its kernel with the most workgroup memory',
  };
  const req = {};
  for (const [k, v] of Object.entries(need)) {
    const have = adapter.limits[k];
    if (v > have)
      throw new GpuError(`this WebGPU adapter's ${k} is ${have}, but the bundle needs ${v} (${why[k]})`);
    req[k] = v;
  }
  if (adapter.limits.minStorageBufferOffsetAlignment > m.align)
    throw new GpuError(`this WebGPU adapter's minStorageBufferOffsetAlignment is ` +
                       `${adapter.limits.minStorageBufferOffsetAlignment}, but the bundle aligns to ${m.align}`);
  return req;
}

// Each kernel's bind group layout (the offsets at binding 0, then its slots'
// windows, writable or not) and its pipeline, from its WGSL. A kernel whose
// WGSL does not compile, or whose pipeline fails, gives a message naming it.
async function buildPipelines(device, m, texts, writable) {
  const errors = [];
  const layouts = m.kernels.map((k, i) => {
    const entries = [{ binding: 0, visibility: 4, buffer: { type: 'uniform', hasDynamicOffset: true, minBindingSize: OFFSETS_BYTES } }];
    k.windows.forEach((n, s) => {
      for (let w = 0; w < n; w++)
        entries.push({ binding: entries.length, visibility: 4,
                       buffer: { type: writable[i]?.[s] !== false ? 'storage' : 'read-only-storage' } });
    });
    return device.createBindGroupLayout({ entries });
  });
  const pipelines = await Promise.all(m.kernels.map(async (k, i) => {
    const module = device.createShaderModule({ code: texts[i], label: k.name });
    const info = await module.getCompilationInfo();
    const errs = info.messages.filter((x) => x.type === 'error');
    if (errs.length) {
      errors.push(`kernel ${k.name}: WGSL does not compile: ` +
                  errs.map((x) => `${x.lineNum}:${x.linePos}: ${x.message}`).join('; '));
      return null;
    }
    try {
      return await device.createComputePipelineAsync({
        label: k.name, layout: device.createPipelineLayout({ bindGroupLayouts: [layouts[i]] }),
        compute: { module, entryPoint: 'main' } });
    } catch (e) {
      errors.push(`kernel ${k.name}: ${e.message}`);
      return null;
    }
  }));
  return { layouts, pipelines, errors };
}

// Compiles every kernel of `bundle` on the default adapter of `gpu` with the
// limits the bundle needs; resolves to the errors (none: []).
export async function checkKernels(gpu, bundle) {
  const m = bundle.manifest;
  const adapter = await gpu.requestAdapter({ powerPreference: 'high-performance' });
  if (!adapter) return ['no WebGPU adapter'];
  const texts = m.kernels.map((k) => bundle.text(k.wgsl));
  const p = plan(m);
  let device;
  try {
    device = await adapter.requestDevice({ requiredLimits: requiredLimits(adapter, m, texts, p) });
  } catch (e) {
    return [e.message];
  }
  device.pushErrorScope('validation');
  const { errors } = await buildPipelines(device, m, texts, p.writable);
  const err = await device.popErrorScope();
  if (err) errors.push(err.message);
  device.destroy();
  return errors;
}

export class Runtime {
  // Opens `bundle` (readBundle) on `gpu` (navigator.gpu, or Dawn's in Node)
  // with the weights of `checkpoint` (openCheckpoint). onProgress(done,
  // total) follows the weight upload in bytes; onKernels() is called when
  // the kernels' pipelines start to build, after the weights. With
  // `profile` the device gets timestamp queries (profile()), which the
  // adapter must offer.
  static async open({ gpu, bundle, checkpoint, onProgress = () => {}, onKernels = () => {}, adapterOptions = {},
                      profile = false }) {
    const rt = new Runtime();
    const m = bundle.manifest;
    rt.m = m;
    rt.name = bundle.name;
    rt.vocab = m.vocab;
    rt.chunk = m.prefill.tokens;
    rt.anyCount = m.prefill.anyCount;
    rt.position = 0;
    rt.sampler = samplerState(0, 0, 1, 0);
    if (!gpu) throw new GpuError('WebGPU is not available here (no navigator.gpu)');
    const adapter = await gpu.requestAdapter({ powerPreference: 'high-performance', ...adapterOptions });
    if (!adapter) throw new GpuError('no WebGPU adapter');
    const texts = m.kernels.map((k) => bundle.text(k.wgsl));
    const p = plan(m);
    const requiredLimits_ = requiredLimits(adapter, m, texts, p);
    if (profile && !adapter.features?.has('timestamp-query'))
      throw new GpuError(`${bundle.name}: the adapter offers no timestamp queries ('timestamp-query'): ` +
                         'it cannot time the dispatches');
    const device = await adapter.requestDevice({ requiredLimits: requiredLimits_,
                                                 requiredFeatures: profile ? ['timestamp-query'] : [] });
    rt.device = device;
    rt.adapterInfo = adapter.info ?? {};
    rt.errors = [];
    device.addEventListener?.('uncapturederror', (e) => rt.errors.push(e.error?.message ?? String(e)));
    device.lost?.then((info) => { if (info.reason !== 'destroyed') rt.errors.push(`device lost: ${info.message}`); });
    try {
      await rt.#build(bundle, texts, p, checkpoint, onProgress, onKernels);
    } catch (e) {
      device.destroy();
      throw e;
    }
    return rt;
  }

  get deviceName() {
    const i = this.adapterInfo;
    return [i.vendor, i.architecture, i.device, i.description].filter(Boolean).join(' ') || 'WebGPU adapter';
  }

  async #build(bundle, texts, p, checkpoint, onProgress, onKernels) {
    const m = this.m, device = this.device;
    device.pushErrorScope('validation');
    device.pushErrorScope('out-of-memory');
    this.buffers = m.buffers.map((b) => b.usage === 'output' ? null : device.createBuffer({ size: b.bytes, usage: STORAGE | COPY_SRC | COPY_DST }));
    const oom = await device.popErrorScope();
    if (oom) throw new GpuError(`${this.name}: cannot allocate its buffers: ${oom.message}`);
    // weights
    const odd = m.weights.find((w) => !['f32', 'f16', 'bf16', 'q8_0', 'q4_0'].includes(w.dtype));
    if (odd) throw new GpuError(`${this.name}: weight '${odd.name}' is ${odd.dtype}; weights are f32, f16, bf16, q8_0 or q4_0`);
    const total = m.weights.reduce((a, w) => a + w.region.bytes, 0);
    let done = 0;
    onProgress(0, total);
    for (const w of m.weights) {
      // stored quantized (ssmc compile's weights file): its bytes as they are
      const stored = w.dtype.startsWith('q') ? await checkpoint.readQuant(w.name, w.shape, w.dtype) : null;
      if (stored) {
        device.queue.writeBuffer(this.buffers[w.region.buffer], w.region.offset, stored);
        done += w.region.bytes;
        onProgress(done, total);
        continue;
      }
      const data = await checkpoint.readF32(w.name, w.shape);
      try {
        applyTransform(w.transform, data);
      } catch (e) {
        throw new GpuError(`${this.name}: weight '${w.name}': ${e.message}`);
      }
      // 16-bit weights: two to a u32 word (regions start on 256-byte
      // boundaries); quantized: its bytes (transform.mjs: toQuant)
      let words;
      try {
        words = w.dtype === 'f32' ? data : w.dtype.startsWith('q') ? toQuant(data, w.shape, w.dtype) : toHalf(w.dtype, data);
      } catch (e) {
        throw new GpuError(`${this.name}: weight '${w.name}': ${e.message}`);
      }
      device.queue.writeBuffer(this.buffers[w.region.buffer], w.region.offset, words);
      done += w.region.bytes;
      onProgress(done, total);
    }
    // kernels
    onKernels();
    const { layouts, pipelines, errors } = await buildPipelines(device, m, texts, p.writable);
    if (errors.length) throw new GpuError(`${this.name}: ${errors[0]}`);
    this.pipelines = pipelines;
    // offsets and bind groups, per dispatch
    this.uniform = device.createBuffer({ size: Math.max(1, p.steps.length) * UNIFORM_STRIDE, usage: UNIFORM | COPY_DST });
    const all = new Uint8Array(Math.max(1, p.steps.length) * UNIFORM_STRIDE);
    const groups = new Map();
    const decodeCount = m.decode.steps.length;
    // a dispatch's bind group, made once (shared by dispatches that bind the
    // same memory); null while it binds an output buffer not made yet
    this.bindGroup = (d) => {
      if (d.slots.some((s) => s.windows.some((w) => !this.buffers[w.buffer]))) return null;
      const key = `${d.st.kernel}:${JSON.stringify(d.slots.map((s) => s.windows))}`;
      let bg = groups.get(key);
      if (!bg) {
        const entries = [{ binding: 0, resource: { buffer: this.uniform, offset: 0, size: OFFSETS_BYTES } }];
        for (const s of d.slots)
          for (let w = 0; w < s.count; w++) {
            // windows past those this dispatch needs are never read: the
            // first again (read-only), or a buffer of their own (writable,
            // which may not alias)
            const win = s.windows[w] ?? (s.rw ? null : s.windows[0]);
            const resource = win ? { buffer: this.buffers[win.buffer], offset: win.offset, size: win.size }
                                 : { buffer: device.createBuffer({ size: 4, usage: STORAGE }) };
            entries.push({ binding: entries.length, resource });
          }
        bg = device.createBindGroup({ layout: layouts[d.st.kernel], entries });
        groups.set(key, bg);
      }
      return bg;
    };
    const dispatches = p.steps.map((d, i) => {
      d.offsets[COUNT_WORD] = i < decodeCount ? 1 : i < decodeCount + m.prefill.steps.length
        ? m.prefill.tokens : m.batch.tokens;
      all.set(new Uint8Array(d.offsets.buffer), i * UNIFORM_STRIDE);
      return { pipeline: this.pipelines[d.st.kernel], group: this.bindGroup(d), plan: d,
               offset: i * UNIFORM_STRIDE, g: d.st.groups };
    });
    device.queue.writeBuffer(this.uniform, 0, all);
    this.uniformWords = new Uint32Array(all.buffer);
    this.runCount = m.prefill.tokens; // the count the prefill dispatches' uniforms hold
    this.decodeSteps = dispatches.slice(0, m.decode.steps.length);
    // a run feeds tokens and does not draw: the sampler's step counts
    // generated tokens only, however the prompt was fed (as the Vulkan
    // runtime, whose prompts end in a run of any length); without logits it
    // stops after the last step that writes state (ssm_manifest_state_steps)
    const stateSteps = (prog) => 1 + prog.steps.findLastIndex((st) => st.bindings.some((b) => m.buffers[b.buffer].usage === 'state'));
    const noSample = (d, i) => m.kernels[m.decode.steps[i].kernel].family !== 'sample';
    this.runDecodeSteps = this.decodeSteps.filter(noSample);
    this.runDecodeStateSteps = this.decodeSteps.slice(0, stateSteps(m.decode)).filter(noSample);
    this.prefillSteps = dispatches.slice(m.decode.steps.length, m.decode.steps.length + m.prefill.steps.length);
    this.prefillStateSteps = this.prefillSteps.slice(0, stateSteps(m.prefill));
    // the batched program's dispatches, and each slot's state row by the
    // name of the one-sequence state it holds (bundle/manifest.c:
    // ssm_manifest_slots_state); slotPos is each slot's position, -1 while
    // no sequence holds it (runtime/slots.c keeps it with the loaded model)
    this.slots = m.batch ? m.batch.tokens : 0;
    this.batchSteps = dispatches.slice(m.decode.steps.length + m.prefill.steps.length);
    this.slotRows = new Map(m.slotStates.map((t) => [t.name.slice('slots.'.length), t]));
    this.slotPos = new Array(this.slots).fill(-1);
    // host-visible readback: logits of one run (a prefill's: made larger
    // when first asked for, #makeOutputs), and the ring of drawn ids
    this.logitsRead = device.createBuffer({ size: this.#oneRunLogitsBytes(), usage: MAP_READ | COPY_DST });
    this.ring = device.createBuffer({ size: GEN_BATCH * 4, usage: STORAGE | COPY_SRC | COPY_DST });
    this.ringRead = device.createBuffer({ size: GEN_BATCH * 4, usage: MAP_READ | COPY_DST });
    this.posRing = device.createBuffer({ size: GEN_BATCH * 4, usage: COPY_SRC | COPY_DST });
    if (this.slots) {
      const bytes = GEN_BATCH * this.slots * 4;
      this.slotRing = device.createBuffer({ size: bytes, usage: STORAGE | COPY_SRC | COPY_DST });
      this.slotRingRead = device.createBuffer({ size: bytes, usage: MAP_READ | COPY_DST });
      this.slotPosRing = device.createBuffer({ size: bytes, usage: COPY_SRC | COPY_DST });
      // the slots start zeroed (as every new buffer), each with a greedy sampler
      for (let i = 0; i < this.slots; i++) this.slotSampler(i, this.sampler);
    }
    const err = await device.popErrorScope();
    if (err) throw new GpuError(`${this.name}: ${err.message}`);
    await this.reset();
    this.#check();
  }

  // The logits of a decode run, or of a step of the batched program.
  #oneRunLogitsBytes() {
    return Math.max(this.m.decode.output.bytes, this.m.batch?.output.bytes ?? 0);
  }

  #check() {
    if (this.errors.length) throw new GpuError(`WebGPU: ${this.errors[0]}`);
  }

  // The output buffers (the prefill's logits of every row), the bind groups
  // that hold them, and room to read those logits back: made when a run
  // first encodes a dispatch that binds one.
  async #makeOutputs() {
    const m = this.m, device = this.device;
    if (this.buffers.every((b, i) => b || m.buffers[i].usage !== 'output')) return;
    const max = device.limits.maxBufferSize;
    for (const [i, b] of m.buffers.entries()) {
      if (b.usage !== 'output' || this.buffers[i]) continue;
      if (b.bytes > max)
        throw new GpuError(`${this.name}: the prefill program's logits of every row (${b.bytes} bytes) exceed ` +
                           `this adapter's maxBufferSize (${max}); compile the bundle with a smaller --chunk`);
      device.pushErrorScope('out-of-memory');
      this.buffers[i] = device.createBuffer({ size: b.bytes, usage: STORAGE | COPY_SRC | COPY_DST });
      const oom = await device.popErrorScope();
      if (oom) {
        this.buffers[i].destroy();
        this.buffers[i] = null;
        throw new GpuError(`${this.name}: cannot allocate the prefill program's logits of every row ` +
                           `(${b.bytes} bytes): ${oom.message}`);
      }
    }
    for (const d of this.prefillSteps) d.group ??= this.bindGroup(d.plan);
    for (const d of this.decodeSteps) d.group ??= this.bindGroup(d.plan);
    for (const d of this.batchSteps) d.group ??= this.bindGroup(d.plan);
    this.logitsRead.destroy();
    this.logitsRead = device.createBuffer({ size: Math.max(this.#oneRunLogitsBytes(), m.prefill.output.bytes),
                                           usage: MAP_READ | COPY_DST });
  }

  #encode(encoder, dispatches) {
    const pass = encoder.beginComputePass();
    let last = null;
    for (const d of dispatches) {
      if (d.pipeline !== last) pass.setPipeline((last = d.pipeline));
      pass.setBindGroup(0, d.group, [d.offset]);
      pass.dispatchWorkgroups(d.g[0], d.g[1], d.g[2]);
    }
    pass.end();
  }

  #write(region, data) {
    this.device.queue.writeBuffer(this.buffers[region.buffer], region.offset, data);
  }

  async #read(mapBuffer, bytes) {
    await mapBuffer.mapAsync(MAP_MODE_READ, 0, bytes);
    const out = mapBuffer.getMappedRange(0, bytes).slice(0);
    mapBuffer.unmap();
    this.#check();
    return out;
  }

  #checkRoom(count) {
    const max = this.m.max_seq;
    if (max && this.position + count > max)
      throw new GpuError(`position ${Math.max(this.position, max)} is past --max-seq ${max}`);
  }

  // Zeroes the state and the position; the sampler keeps its settings and
  // restarts at step 0.
  async reset() {
    const enc = this.device.createCommandEncoder();
    for (const s of this.m.states) enc.clearBuffer(this.buffers[s.region.buffer], s.region.offset, s.region.bytes);
    this.device.queue.submit([enc.finish()]);
    this.position = 0;
    if (this.m.decode.hasSampler) this.#write(this.m.decode.sampler, this.sampler);
  }

  // The sampler's settings (samplerState).
  setSampler(state) {
    if (!this.m.decode.hasSampler) throw new GpuError(`${this.name}: the bundle's decode program has no sampler`);
    this.sampler = state;
    this.#write(this.m.decode.sampler, state);
  }

  // The sampler's seen-token set (SSM_SEEN_WORDS(vocab) floats), which a
  // repetition penalty reads and each draw adds its id to.
  setSeen(words) {
    if (!this.m.decode.hasSeen)
      throw new GpuError(`${this.name}: the bundle's sampler has no seen-token set for the repetition ` +
                         'penalty: compile it again with this ssmc');
    this.#write(this.m.decode.seen, words);
  }

  // Sets the token count that the prefill dispatches' uniforms hold.
  #setRunCount(count) {
    if (count === this.runCount) return;
    const first = this.m.decode.steps.length, n = this.m.prefill.steps.length, words = UNIFORM_STRIDE / 4;
    for (let i = first; i < first + n; i++) this.uniformWords[i * words + COUNT_WORD] = count;
    this.device.queue.writeBuffer(this.uniform, first * UNIFORM_STRIDE, this.uniformWords, first * words, n * words);
    this.runCount = count;
  }

  // Feeds `tokens` at the position: 1 or chunk of them, or (when the
  // bundle's prefill runs take any count) any number up to the chunk;
  // resolves to their logits (Float32Array, tokens x vocab) when
  // `wantLogits`.
  async run(tokens, wantLogits) {
    const count = tokens.length;
    const prefill = count > 1 && (count === this.chunk || (this.anyCount && count < this.chunk));
    const p = count === 1 ? this.m.decode : prefill ? this.m.prefill : null;
    if (!p)
      throw new GpuError(this.anyCount ? `${this.name}: runs take 1 to ${this.chunk} tokens, not ${count}`
                                       : `${this.name}: runs take 1 or ${this.chunk} tokens, not ${count}`);
    for (const t of tokens)
      if (!(Number.isInteger(t) && t >= 0 && t < this.vocab))
        throw new GpuError(`token id ${t} out of range [0, ${this.vocab})`);
    if (p.hasPos) this.#checkRoom(count);
    this.#write(p.tokensIn, Int32Array.from(tokens));
    if (p.hasPos) this.#write(p.pos, Int32Array.of(this.position));
    if (prefill) this.#setRunCount(count);
    const steps = count === 1 ? (wantLogits ? this.runDecodeSteps : this.runDecodeStateSteps)
                              : wantLogits ? this.prefillSteps : this.prefillStateSteps;
    if (steps.some((d) => !d.group)) await this.#makeOutputs();
    const enc = this.device.createCommandEncoder();
    this.#encode(enc, steps);
    // the first `count` rows: the rows past them are no token's
    const bytes = count * this.vocab * 4;
    if (wantLogits) enc.copyBufferToBuffer(this.buffers[p.output.buffer], p.output.offset, this.logitsRead, 0, bytes);
    this.device.queue.submit([enc.finish()]);
    this.position += count;
    if (!wantLogits) {
      await this.device.queue.onSubmittedWorkDone();
      this.#check();
      return null;
    }
    return new Float32Array(await this.#read(this.logitsRead, bytes));
  }

  // Up to n decode steps from `first`: each feeds its input and draws the
  // next id on the device. onStep(id, logits|null) after each (a true
  // return stops); with wantLogits every step's logits come back (one step
  // per submission), else up to GEN_BATCH steps are queued at a time (so a
  // stop may come after steps that were already run). Resolves to the ids.
  async generate(first, n, { wantLogits = false, onStep = null, batch = GEN_BATCH } = {}) {
    const d = this.m.decode;
    if (!d.hasSampler) throw new GpuError(`${this.name}: the bundle's decode program has no sampler`);
    if (!(Number.isInteger(first) && first >= 0 && first < this.vocab))
      throw new GpuError(`token id ${first} out of range [0, ${this.vocab})`);
    if (this.decodeSteps.some((s) => !s.group)) await this.#makeOutputs();
    this.#write(d.tokensIn, Int32Array.of(first));
    const ids = [];
    const next = this.buffers[d.next.buffer], tokensIn = this.buffers[d.tokensIn.buffer];
    while (ids.length < n) {
      const k = wantLogits ? 1 : Math.min(batch, GEN_BATCH, n - ids.length);
      if (d.hasPos) {
        this.#checkRoom(k);
        // the batch's positions, each copied in before its step (queue
        // writes land before the commands submitted after them)
        this.device.queue.writeBuffer(this.posRing, 0, Int32Array.from({ length: k }, (_, j) => this.position + j));
      }
      const enc = this.device.createCommandEncoder();
      for (let j = 0; j < k; j++) {
        if (d.hasPos) enc.copyBufferToBuffer(this.posRing, 4 * j, this.buffers[d.pos.buffer], d.pos.offset, 4);
        this.#encode(enc, this.decodeSteps);
        // through the ring: WebGPU copies never stay within one buffer
        enc.copyBufferToBuffer(next, d.next.offset, this.ring, 4 * j, 4);
        enc.copyBufferToBuffer(this.ring, 4 * j, tokensIn, d.tokensIn.offset, 4);
      }
      enc.copyBufferToBuffer(this.ring, 0, this.ringRead, 0, 4 * k);
      if (wantLogits) enc.copyBufferToBuffer(this.buffers[d.output.buffer], d.output.offset, this.logitsRead, 0, d.output.bytes);
      this.device.queue.submit([enc.finish()]);
      this.position += k;
      const got = new Int32Array(await this.#read(this.ringRead, 4 * k));
      const logits = wantLogits ? new Float32Array(await this.#read(this.logitsRead, d.output.bytes)) : null;
      for (let j = 0; j < k; j++) {
        const id = got[j];
        if (id === -1)
          throw new GpuError(`non-finite logit at position ${this.position - k + j}: the model or its weights produce inf/NaN`);
        if (id < 0 || id >= this.vocab) throw new GpuError(`the sampler drew token id ${id}, outside [0, ${this.vocab})`);
        ids.push(id);
        if (onStep && onStep(id, logits)) return ids;
      }
    }
    return ids;
  }

  // Copies every state into row `slot` of its slots state (toSlot), or
  // back (runtime/vulkan/exec.c: vk_slot_copy).
  slotCopy(slot, toSlot) {
    const enc = this.device.createCommandEncoder();
    for (const t of this.m.states) {
      const row = this.slotRows.get(t.name);
      if (!row) continue;
      const state = this.buffers[t.region.buffer], slots = this.buffers[row.region.buffer];
      const at = row.region.offset + slot * t.region.bytes;
      if (toSlot) enc.copyBufferToBuffer(state, t.region.offset, slots, at, t.region.bytes);
      else enc.copyBufferToBuffer(slots, at, state, t.region.offset, t.region.bytes);
    }
    this.device.queue.submit([enc.finish()]);
  }

  // Slot `slot`'s sampler settings (samplerState, its step included).
  slotSampler(slot, state) {
    const r = this.m.batch.sampler, bytes = SAMPLER_STATE_LEN * 4;
    this.#write({ buffer: r.buffer, offset: r.offset + slot * bytes }, state);
  }

  // Up to n steps of the batched decode program (runtime/vulkan/exec.c:
  // vk_batch_generate): slot i is fed first[i] and then each id it draws,
  // at position pos[i] + j in step j (0 for a slot at -1). Up to `batch`
  // steps are queued in a submission (one with onLogits(rows, step), which
  // gets every step's slots x vocab logits). Every step of a submission runs
  // for every slot; a slot that draws -1 (a non-finite logit) ends the
  // call after its submission. Resolves to {ids (Int32Array, n x slots;
  // -2 for the steps that did not run), ran (the steps that did), bad (the
  // first slot that drew -1, else -1)}.
  async batchGenerate(first, pos, n, { onLogits = null, batch = GEN_BATCH } = {}) {
    const b = this.m.batch, B = this.slots;
    if (this.batchSteps.some((d) => !d.group)) await this.#makeOutputs();
    const ids = new Int32Array(n * B).fill(-2);
    const next = this.buffers[b.next.buffer], tokensIn = this.buffers[b.tokensIn.buffer];
    const row = B * 4, logitsBytes = b.output.bytes;
    this.#write(b.tokensIn, Int32Array.from(first));
    for (let done = 0; done < n;) {
      const k = onLogits ? 1 : Math.min(batch, GEN_BATCH, n - done);
      if (b.hasPos)
        this.device.queue.writeBuffer(this.slotPosRing, 0, Int32Array.from({ length: k * B }, (_, x) => {
          const p = pos[x % B];
          return p < 0 ? 0 : p + done + Math.floor(x / B);
        }));
      const enc = this.device.createCommandEncoder();
      for (let j = 0; j < k; j++) {
        if (b.hasPos) enc.copyBufferToBuffer(this.slotPosRing, row * j, this.buffers[b.pos.buffer], b.pos.offset, row);
        this.#encode(enc, this.batchSteps);
        // through the ring: WebGPU copies never stay within one buffer
        enc.copyBufferToBuffer(next, b.next.offset, this.slotRing, row * j, row);
        enc.copyBufferToBuffer(this.slotRing, row * j, tokensIn, b.tokensIn.offset, row);
      }
      enc.copyBufferToBuffer(this.slotRing, 0, this.slotRingRead, 0, row * k);
      if (onLogits) enc.copyBufferToBuffer(this.buffers[b.output.buffer], b.output.offset, this.logitsRead, 0, logitsBytes);
      this.device.queue.submit([enc.finish()]);
      const got = new Int32Array(await this.#read(this.slotRingRead, row * k));
      ids.set(got, done * B);
      done += k;
      if (onLogits) onLogits(new Float32Array(await this.#read(this.logitsRead, logitsBytes)), done - 1);
      const bad = got.findIndex((id) => id < 0);
      if (bad >= 0) return { ids, ran: done, bad: bad % B };
    }
    return { ids, ran: n, bad: -1 };
  }

  // GPU time of each dispatch of the decode program (or, with `prefill`
  // true, the prefill's, a whole chunk; with 2, the batched program's, every
  // slot), the mean over `runs` runs from a fresh state, as
  // `ssmc bench --profile` (runtime/vulkan/exec.c): [{kernel, family, op,
  // us, bytes}] with the bytes of its bindings. Each dispatch gets a
  // compute pass of its own for its timestamps, so the sum is a little
  // above an unprofiled run's. Needs a runtime opened with `profile`.
  async profile(prefill, runs) {
    if (!this.device.features.has('timestamp-query'))
      throw new GpuError(`${this.name}: opened without timestamp queries (Runtime.open's profile)`);
    if (prefill === 2 && !this.slots)
      throw new GpuError(`${this.name}: the bundle has no batched decode program: compile it with --slots B`);
    const p = prefill === 2 ? this.m.batch : prefill ? this.m.prefill : this.m.decode;
    const steps = prefill === 2 ? this.batchSteps : prefill ? this.prefillSteps : this.decodeSteps;
    if (steps.some((d) => !d.group)) await this.#makeOutputs();
    // a run of the batched program advances each of its rows by one
    const n = steps.length, count = p.tokens, advance = prefill === 2 ? 1 : count;
    const qs = this.device.createQuerySet({ type: 'timestamp', count: 2 * n });
    const resolved = this.device.createBuffer({ size: 16 * n, usage: QUERY_RESOLVE | COPY_SRC });
    const read = this.device.createBuffer({ size: 16 * n, usage: MAP_READ | COPY_DST });
    const us = new Float64Array(n);
    const tokens = Int32Array.from({ length: count }, (_, i) => (i * 7919 + 1) % this.vocab);
    try {
      await this.reset();
      for (let r = 0; r < runs; r++) {
        if (p.hasPos && this.m.max_seq && this.position + advance > this.m.max_seq) await this.reset();
        this.#write(p.tokensIn, tokens);
        if (p.hasPos) this.#write(p.pos, new Int32Array(p.pos.bytes / 4).fill(this.position));
        if (p === this.m.prefill) this.#setRunCount(count);
        const enc = this.device.createCommandEncoder();
        steps.forEach((d, i) => {
          const pass = enc.beginComputePass({ timestampWrites: { querySet: qs, beginningOfPassWriteIndex: 2 * i,
                                                                 endOfPassWriteIndex: 2 * i + 1 } });
          pass.setPipeline(d.pipeline);
          pass.setBindGroup(0, d.group, [d.offset]);
          pass.dispatchWorkgroups(d.g[0], d.g[1], d.g[2]);
          pass.end();
        });
        enc.resolveQuerySet(qs, 0, 2 * n, resolved, 0);
        enc.copyBufferToBuffer(resolved, 0, read, 0, 16 * n);
        this.device.queue.submit([enc.finish()]);
        this.position += advance;
        const t = new BigInt64Array(await this.#read(read, 16 * n));
        for (let i = 0; i < n; i++) us[i] += Number(t[2 * i + 1] - t[2 * i]) / 1e3 / runs;
      }
      await this.reset();
      // the batched runs overwrote every slot: none holds a sequence now
      if (prefill === 2) this.slotPos.fill(-1);
    } finally {
      qs.destroy();
      resolved.destroy();
      read.destroy();
    }
    return steps.map((d, i) => {
      const k = this.m.kernels[d.plan.st.kernel];
      return { kernel: k.name, family: k.family, op: d.plan.st.op, us: us[i],
               bytes: d.plan.st.bindings.reduce((a, b) => a + b.bytes, 0) };
    });
  }

  destroy() {
    this.device?.destroy();
  }
}

// The sampler state (runtime/backend/backend.c's ssm_sampler_state and
// ssm_sampler_penalty): temperature >= 0 (0: greedy), top_k >= 0 (0: off),
// top_p in (0, 1] (1: off), seed in [0, 2^24), min_p in [0, 1] (0: off),
// the repetition penalty above 0 and finite (1: off), at step 0.
export function samplerState(temperature, topK, topP, seed, minP = 0, repeatPenalty = 1) {
  if (!(temperature >= 0) || temperature === Infinity || !(topK >= 0) || !(topP > 0 && topP <= 1) ||
      !(seed >= 0 && seed < 1 << 24) || !(minP >= 0 && minP <= 1) ||
      !(repeatPenalty > 0 && repeatPenalty < Infinity))
    throw new GpuError(`sampler settings out of range: temperature ${temperature} (>= 0), top_k ${topK} ` +
                       `(>= 0), top_p ${topP} (in (0, 1]), min_p ${minP} (in [0, 1]), seed ${seed} ` +
                       `(in [0, 2^24)), repeat_penalty ${repeatPenalty} (above 0 and finite)`);
  const s = new Float32Array(SAMPLER_STATE_LEN);
  s.set([temperature, topK, topP, seed, 0, minP, repeatPenalty === 1 ? 0 : repeatPenalty]);
  return s;
}

// The seen-token set (ir.h's SSM_SEEN_BITS): bit b of float w, an integer
// below 2^24, is token 24 * w + b.
export const SEEN_BITS = 24;
export function seenAdd(seen, id) {
  const w = Math.floor(id / SEEN_BITS);
  seen[w] = ((seen[w] | (1 << (id % SEEN_BITS))) >>> 0);
}
export function seenHas(seen, id) {
  return ((seen[Math.floor(id / SEEN_BITS)] >>> (id % SEEN_BITS)) & 1) === 1;
}
