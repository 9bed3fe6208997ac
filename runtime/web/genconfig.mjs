// genconfig.mjs — a model directory's generation_config.json (transformers'
// GenerationConfig) as generation defaults, read as runtime/genconfig.c
// reads it for the C library: its end-of-text ids, and the sampler settings
// of ssmc_session_generate_defaults. Fields this host has no use for are
// ignored; a field it uses with a value it cannot take is an error naming
// the file and the field, in the C library's words.

const MAX_EOS = 16; // SSM_GENCONFIG_MAX_EOS
const HF_TOP_K = 50; // transformers' default top_k when sampling

// C's printf("%g", v)
function g(v) {
  const [mant, exp] = v.toPrecision(6).split('e');
  const m = mant.includes('.') ? mant.replace(/0+$/, '').replace(/\.$/, '') : mant;
  if (exp === undefined) return m;
  const e = Math.abs(Number(exp));
  return `${m}e${exp[0] === '-' ? '-' : '+'}${e < 10 ? '0' : ''}${e}`;
}

// name: [lo, hi, open (lo excluded), integer], in runtime/internal.h's SSM_GC_* order
const NUMBERS = {
  temperature: [0, 1e38, false, false],
  top_k: [0, 2147483647, false, true],
  top_p: [0, 1, true, false],
  min_p: [0, 1, false, false],
  repetition_penalty: [0, 3.4e38, true, false],
};

// The defaults of `text`, the contents of generation_config.json at `path`
// (null: there is none), for a model of `vocab` ids: { eos: [ids] (empty:
// none), sampling: { temperature, topK, topP, minP, repeatPenalty } with
// only the settings the file gives a default for, from: [the fields taken] }.
export function readGenerationConfig(text, path, vocab) {
  const none = { eos: [], sampling: {}, from: [] };
  if (text === null) return none;
  const bad = (field, what) => new Error(`${path}: ${field}: expected ${what}`);
  let j;
  try {
    j = JSON.parse(text);
  } catch {
    j = null;
  }
  if (j === null || typeof j !== 'object' || Array.isArray(j)) throw new Error(`${path}: not a JSON object`);
  const eos = [];
  const e = j.eos_token_id;
  if (e !== undefined && e !== null) {
    const list = Array.isArray(e) ? e : [e];
    if (!list.length || list.length > MAX_EOS || (!Array.isArray(e) && typeof e !== 'number'))
      throw bad('eos_token_id', `a token id or a list of 1 to ${MAX_EOS} token ids`);
    list.forEach((id, i) => {
      if (typeof id !== 'number' || !Number.isInteger(id) || id < 0 || id >= vocab)
        throw bad('eos_token_id', `token ids from 0 to ${vocab - 1} (entry ${i} is not one)`);
      eos.push(id);
    });
  }
  const has = {};
  if (j.do_sample !== undefined && j.do_sample !== null) {
    if (typeof j.do_sample !== 'boolean') throw bad('do_sample', 'true or false');
    has.do_sample = j.do_sample;
  }
  for (const [name, [lo, hi, open, integer]] of Object.entries(NUMBERS)) {
    const v = j[name];
    if (v === undefined || v === null) continue;
    if (typeof v !== 'number' || !Number.isFinite(v) || v < lo || v > hi || (open && v === lo) ||
        (integer && !Number.isInteger(v)))
      throw bad(name, `${integer ? 'an integer' : 'a number'} ${open ? 'above' : 'from'} ${g(lo)}` +
                      (hi < 1e30 ? ` to ${g(hi)}` : ''));
    has[name] = v;
  }
  const sampled = has.do_sample === true;
  const sampling = {};
  if (sampled) {
    sampling.temperature = has.temperature ?? 1;
    sampling.topK = has.top_k ?? HF_TOP_K;
    if ('top_p' in has) sampling.topP = has.top_p;
    if ('min_p' in has) sampling.minP = has.min_p;
  }
  if ('repetition_penalty' in has) sampling.repeatPenalty = has.repetition_penalty;
  const from = eos.length ? ['eos_token_id'] : [];
  for (const name of ['do_sample', ...Object.keys(NUMBERS)])
    if (name in has && (name === 'do_sample' || name === 'repetition_penalty' || sampled)) from.push(name);
  return { eos, sampling, from };
}
