// json.mjs — JSON.parse with base/json.c's rule: an object that gives a key
// twice is refused (JSON.parse keeps the last one silently, cJSON the first:
// either way a reader could see another model than the author meant). Every
// JSON file the WebGPU host reads (bundle manifest, safetensors headers and
// index, tokenizer.json) goes through parseJson.

export class JsonError extends Error {}

// The first key given twice in an object of `text` (valid JSON) and where
// that object is ("model.vocab", "kernels[2]", '' for the top one), or null.
// A scan with an explicit stack, so that deep nesting cannot overflow.
function duplicateKey(text) {
  const frames = [];
  const n = text.length;
  for (let i = 0; i < n;) {
    const c = text[i];
    if (c === '"') {
      const start = i++;
      while (text[i] !== '"') i += text[i] === '\\' ? 2 : 1;
      i++;
      const f = frames[frames.length - 1];
      if (f && f.obj && f.wantKey) {
        const key = JSON.parse(text.slice(start, i));
        if (f.seen.has(key)) return { key, path: f.path };
        f.seen.add(key);
        f.key = key;
        f.wantKey = false;
      }
      continue;
    }
    if (c === '{' || c === '[') {
      const f = frames[frames.length - 1];
      const path = !f ? '' : f.obj ? (f.path ? `${f.path}.${f.key}` : f.key) : `${f.path}[${f.index}]`;
      frames.push({ obj: c === '{', seen: new Set(), path, index: 0, key: '', wantKey: c === '{' });
    } else if (c === '}' || c === ']') {
      frames.pop();
    } else if (c === ',') {
      const f = frames[frames.length - 1];
      if (f.obj) f.wantKey = true;
      else f.index++;
    }
    i++;
  }
  return null;
}

// JSON.parse(text), refusing an object that gives a key twice. Throws
// JsonError: "not valid JSON (...)" or "the key 'k' is given twice in the
// object at a.b" (base/json.c's words).
export function parseJson(text) {
  let value;
  try {
    value = JSON.parse(text);
  } catch (e) {
    throw new JsonError(`not valid JSON (${e.message})`);
  }
  const dup = duplicateKey(text);
  if (dup)
    throw new JsonError(`the key '${dup.key}' is given twice in ${dup.path ? `the object at ${dup.path}` : 'the top object'}`);
  return value;
}
