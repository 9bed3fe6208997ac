// node.mjs — what the WebGPU host needs from Node: Dawn's WebGPU (the npm
// package `webgpu`) and files read from disk as byte sources for
// safetensors.mjs. The browser page never imports this module.

import { open, stat, readFile } from 'node:fs/promises';
import { join } from 'node:path';

let dawn = null; // kept for the life of the process: Dawn crashes if it is collected

// navigator.gpu's equivalent in Node. Flags are Dawn's (e.g. backend=vulkan);
// SSMC_WEBGPU_FLAGS (comma-separated) adds more.
export async function nodeGpu(flags = ['backend=vulkan']) {
  if (dawn) return dawn;
  let mod;
  try {
    mod = await import('webgpu');
  } catch (e) {
    throw new Error(`the npm package 'webgpu' is missing (run npm ci in runtime/web): ${e.message}`);
  }
  Object.assign(globalThis, mod.globals);
  const extra = (process.env.SSMC_WEBGPU_FLAGS || '').split(',').filter(Boolean);
  dawn = mod.create([...flags, ...extra]);
  return dawn;
}

// A file as a byte source: name, size, read(offset, length).
export async function fileSource(path) {
  const fh = await open(path, 'r');
  const { size } = await fh.stat();
  return {
    name: path,
    size,
    async read(offset, length) {
      const buf = new Uint8Array(Math.min(length, Math.max(0, size - offset)));
      let got = 0;
      while (got < buf.length) {
        const { bytesRead } = await fh.read(buf, got, buf.length - got, offset + got);
        if (!bytesRead) break;
        got += bytesRead;
      }
      return buf.subarray(0, got);
    },
    close: () => fh.close(),
  };
}

// The files of directory `dir`, for openCheckpoint.
export function dirFiles(dir) {
  return {
    exists: async (n) => (await stat(join(dir, n)).catch(() => null))?.isFile() ?? false,
    open: (n) => fileSource(join(dir, n)),
  };
}

export { readFile };
