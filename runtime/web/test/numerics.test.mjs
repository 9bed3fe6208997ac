// numerics.test.mjs — templates/common.wgsl.in's helpers run on Dawn
// (SwiftShader without a GPU) against double-precision references.
// ssm_cossin is rope's cos and sin: WGSL's builtins need only be within
// 2^-11 on [-pi, pi], and SwiftShader's miss by ~1.9e-4, which put bamba,
// lfm2 and granitemoe_hybrid's logits 1.6e-4 to 4.3e-4 away from
// transformers'.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ROOT } from './helpers.mjs';
import { nodeGpu } from '../node.mjs';

const COMMON = readFileSync(join(ROOT, 'templates/common.wgsl.in'), 'utf8');

// `expr` (WGSL over x: f32, giving vec2<f32>) at every x of xs, on the device.
async function run(expr, xs) {
  const gpu = await nodeGpu();
  const device = await (await gpu.requestAdapter()).requestDevice();
  const code = `${COMMON}
@group(0) @binding(0) var<storage, read> xs: array<f32>;
@group(0) @binding(1) var<storage, read_write> ys: array<vec2<f32>>;
@compute @workgroup_size(64) fn main(@builtin(global_invocation_id) g: vec3<u32>) {
  if (g.x < arrayLength(&xs)) { let x = xs[g.x]; ys[g.x] = ${expr}; }
}`;
  const module = device.createShaderModule({ code });
  const info = await module.getCompilationInfo();
  assert.deepEqual(info.messages.filter((m) => m.type === 'error').map((m) => m.message), []);
  const pipeline = device.createComputePipeline({ layout: 'auto', compute: { module, entryPoint: 'main' } });
  const U = GPUBufferUsage;
  const a = device.createBuffer({ size: xs.byteLength, usage: U.STORAGE | U.COPY_DST });
  const b = device.createBuffer({ size: xs.byteLength * 2, usage: U.STORAGE | U.COPY_SRC });
  const r = device.createBuffer({ size: xs.byteLength * 2, usage: U.MAP_READ | U.COPY_DST });
  device.queue.writeBuffer(a, 0, xs);
  const enc = device.createCommandEncoder();
  const pass = enc.beginComputePass();
  pass.setPipeline(pipeline);
  pass.setBindGroup(0, device.createBindGroup({ layout: pipeline.getBindGroupLayout(0),
    entries: [{ binding: 0, resource: { buffer: a } }, { binding: 1, resource: { buffer: b } }] }));
  pass.dispatchWorkgroups(Math.ceil(xs.length / 64));
  pass.end();
  enc.copyBufferToBuffer(b, 0, r, 0, xs.byteLength * 2);
  device.queue.submit([enc.finish()]);
  await r.mapAsync(GPUMapMode.READ);
  const out = new Float32Array(r.getMappedRange().slice(0));
  device.destroy();
  return out;
}

// max |device - reference| over (cos, sin) of xs
function worst(ys, xs) {
  let w = 0;
  xs.forEach((x, i) => (w = Math.max(w, Math.abs(ys[2 * i] - Math.cos(x)), Math.abs(ys[2 * i + 1] - Math.sin(x)))));
  return w;
}

test("ssm_cossin is within 2e-7 of cos and sin (rope's angles: positions times inverse frequencies)", async () => {
  const xs = new Float32Array(20000);
  for (let i = 0; i < xs.length; i++) xs[i] = i < 10000 ? (i - 5000) * 0.00137 : (i - 10000) * 0.8123 + 0.1;
  const ours = worst(await run('ssm_cossin(x)', xs), xs);
  assert.ok(ours < 2e-7, `ssm_cossin misses by ${ours}`);
  // the builtins, for the record (SwiftShader's miss by ~1.9e-4; a GPU's may not)
  const builtin = worst(await run('vec2<f32>(cos(x), sin(x))', xs), xs);
  console.log(`builtin cos/sin miss by ${builtin.toExponential(2)}, ssm_cossin by ${ours.toExponential(2)}`);
});
