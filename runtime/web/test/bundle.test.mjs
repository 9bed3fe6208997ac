// bundle.test.mjs — the JavaScript .ssmb reader refuses what bundle/'s C
// reader refuses, with the same message: bad magic, truncation, a flipped
// byte (checksum), another format version, non-zero reserved bytes, and
// manifests that lie (each also given to `ssmc inspect`, whose message must
// be the same), including the WGSL slots and windows.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { execFileSync } from 'node:child_process';
import { compile, scratch, SSMC, ROOT } from './helpers.mjs';
import { readBundle, fnv1a64, BUNDLE_VERSION } from '../bundle.mjs';

const dir = scratch();
const path = compile(join(ROOT, 'tests/data/mamba1_tiny'), dir, 'good', ['--chunk', '4']);
const good = new Uint8Array(readFileSync(path));

// ssmc inspect's error message for `bytes` (or null when it accepts them).
function cMessage(bytes) {
  const p = join(dir, 'probe.ssmb');
  writeFileSync(p, bytes);
  try {
    execFileSync(SSMC, ['inspect', p], { stdio: ['ignore', 'pipe', 'pipe'] });
    return null;
  } catch (e) {
    return e.stderr.toString().trim().replace(/^ssmc: /, '').replaceAll(p, 'NAME');
  }
}

function jsMessage(bytes) {
  try {
    readBundle(bytes, 'NAME');
    return null;
  } catch (e) {
    return e.message;
  }
}

// `good` with `from` replaced by `to` in its manifest, re-laid-out and with
// the checksum recomputed (tests/test_compile.c's open_tampered).
function tampered(from, to) {
  const v = new DataView(good.buffer, good.byteOffset);
  const mlen = Number(v.getBigUint64(16, true)), boff = Number(v.getBigUint64(24, true));
  const text = new TextDecoder().decode(good.subarray(64, 64 + mlen));
  assert.ok(text.includes(from), `'${from}' is not in the manifest`);
  const man = new TextEncoder().encode(text.replace(from, to));
  const nboff = (64 + man.length + 15) & ~15, total = nboff + (good.length - boff);
  const f = new Uint8Array(total);
  f.set(good.subarray(0, 64));
  f.set(man, 64);
  f.set(good.subarray(boff), nboff);
  const w = new DataView(f.buffer);
  w.setBigUint64(16, BigInt(man.length), true);
  w.setBigUint64(24, BigInt(nboff), true);
  w.setBigUint64(32, BigInt(good.length - boff), true);
  w.setBigUint64(40, fnv1a64(f.subarray(64)), true);
  return f;
}

test('the C checksum and the JavaScript one agree, and a good bundle reads', () => {
  const v = new DataView(good.buffer, good.byteOffset);
  assert.equal(fnv1a64(good.subarray(64)), v.getBigUint64(40, true));
  const b = readBundle(good, 'good.ssmb');
  assert.equal(b.manifest.vocab, 1000);
  assert.ok(b.text(b.manifest.kernels[0].wgsl).startsWith('// ssmc kernel: template embed.wgsl.in'));
  assert.equal(jsMessage(good), null);
  assert.equal(cMessage(good), null);
});

test('bad container bytes: the same refusal as the C reader', () => {
  const cases = [
    ['not a bundle', new TextEncoder().encode('#!/bin/sh\necho this is not a bundle at all, not even close\n'), 'not an ssmc bundle'],
    ['truncated', good.subarray(0, good.length - 3), 'truncated or corrupt bundle'],
    ['empty', new Uint8Array(0), 'not an ssmc bundle'],
  ];
  const flip = good.slice();
  flip[flip.length - 2] ^= 0x40;
  cases.push(['a flipped byte', flip, 'checksum mismatch']);
  const ver = good.slice();
  ver[4] = 7;
  cases.push(['version 7', ver, `format version 7, but this ssmc reads version ${BUNDLE_VERSION}`]);
  const res = good.slice();
  res[50] = 1;
  cases.push(['reserved bytes', res, 'reserved header bytes are not zero']);
  const gv = new DataView(good.buffer, good.byteOffset);
  const mlen = Number(gv.getBigUint64(16, true));
  if ((64 + mlen) % 16) { // the manifest's length grown by one, into the padding
    const pad = good.slice();
    new DataView(pad.buffer).setBigUint64(16, BigInt(mlen + 1), true);
    cases.push(['manifest length into the padding', pad, 'does not end at its text']);
  }
  for (const [what, bytes, msg] of cases) {
    const js = jsMessage(bytes);
    assert.ok(js && js.includes(msg), `${what}: ${js}`);
    assert.equal(js, cMessage(bytes), what);
  }
});

test('every bit of the header, flipped alone, is refused by both readers', () => {
  for (let bit = 0; bit < 64 * 8; bit++) {
    const bytes = good.slice();
    bytes[bit >> 3] ^= 1 << (bit & 7);
    const js = jsMessage(bytes);
    assert.ok(js, `header bit ${bit} accepted by the JavaScript reader`);
    // (the C reader on a sample: its numbers may print otherwise, e.g. an
    // offset JavaScript reads as Infinity)
    if (bit % 61 === 0) assert.ok(cMessage(bytes), `header bit ${bit} accepted by the C reader`);
  }
});

test('lying manifests: the same refusal, naming the field, as the C reader', () => {
  const lies = [
    ['"kernel":3', '"kernel":999', 'programs.decode.steps[3].kernel is not an integer'],
    ['"any_count":true', '"any_count":1', 'prefill has an any_count that is not true'],
    ['"vocab":1000', '"vocab":-5', 'corrupt manifest: vocab is not an integer'],
    ['"programs"', '"programz"', 'corrupt manifest: programs is missing'],
    ['"region":[2,0,256000]', '"region":[2,0,99999999]', 'weights[0].region lies outside its buffer'],
    ['"region":[2,0,256000]', '"region":[2,4,256000]', 'weights[0].region is not aligned'],
    ['"region":[2,0,256000]', '"region":[2,0,255996]', 'region whose size does not match its shape'],
    ['"shape":[1000,64]', '"shape":[1,2,3,4,5,6,7]', 'weights[0].shape is not a list of at most 6'],
    ['"groups":[1,1,1]', '"groups":[1,1]', 'groups is not three workgroup counts'],
    ['"bindings":[[', '"bindings":[[1,0,256],[', 'does not give one region per binding'],
    [`"ssmb":${BUNDLE_VERSION}`, '"ssmb":1', 'ssmb differs from the version in the header'],
    ['"tokens":1,', '"tokens":4,', 'programs.decode does not run one token'],
    ['"wgsl_window":134217728', '"wgsl_window":1000', 'wgsl_window is not a power of two'],
    ['"wgsl_window":134217728', '"wgsl_window":256', "programs.decode.steps[0] has a WGSL slot wider than its kernel's windows"],
    ['"wgsl_slots":[0,1,0]', '"wgsl_slots":[0,2,0]', 'kernels[0].wgsl_slots does not number the slots in order of first use'],
    ['"wgsl_slots":[0,1,0],"wgsl_windows":[1,1]', '"wgsl_slots":[0,1,0],"wgsl_windows":[1]', 'is not a list of one window count per slot'],
    ['[2,256000,256],[2,256256,65536],', '[2,256000,256],[0,0,256],', 'programs.decode.steps[1] puts the bindings of one WGSL slot in two buffers'],
    ['"wgsl":[', '"wgsl":[0,0],"wgsl0":[', 'kernels[0] has an empty WGSL blob'],
    ['"wgsl":[', '"wgsl":[99999999999,1],"wgsl0":[', 'kernels[0].wgsl lies outside the blob section'],
    ['"usage":"weights"', '"usage":"const"', 'buffers[2] has a usage other than state, activations, weights, output or slots'],
    // decode's drawn id in a buffer made only when asked for
    ['"usage":"activations"', '"usage":"output"', "places the decode program's sampler outside the state and activations"],
    // a key given twice (JSON.parse would keep the last one silently)
    ['"vocab":1000', '"vocab":1000,"vocab":1000', "the key 'vocab' is given twice in the top object"],
    ['"groups":[1,1,1]', '"groups":[1,1,1],"groups":[1,1,2]', "the key 'groups' is given twice in the object at programs.decode.steps[0]"],
  ];
  for (const [from, to, msg] of lies) {
    const bytes = tampered(from, to);
    const js = jsMessage(bytes);
    assert.ok(js && js.includes(msg), `${to}: ${js}`);
    assert.equal(js, cMessage(bytes), `${to}: the C reader says otherwise`);
  }
});

test("a batched program's slots are apart from one sequence's states", () => {
  const p = compile(join(ROOT, 'tests/data/mamba1_tiny'), dir, 'slots', ['--chunk', '4', '--slots', '3']);
  const m = readBundle(new Uint8Array(readFileSync(p)), 'slots.ssmb').manifest;
  assert.ok(m.states.length > 0);
  assert.ok(m.states.every((s) => !s.name.startsWith('slots.')));
  assert.equal(m.slotStates.length, m.states.length);
  for (const s of m.states) {
    const row = m.slotStates.find((t) => t.name === 'slots.' + s.name);
    assert.ok(row, s.name);
    assert.deepEqual(row.shape, [3, ...s.shape]);
  }
});
