// tokenizer.test.mjs — the JavaScript tokenizer against the Hugging Face
// `tokenizers` goldens of tests/data/tokenizer (the ones tests/test_tokenizer.c
// uses): for every tokenizer and case, the library's ids, its decoded text,
// and the stream decoder fed one id at a time giving the same text without
// ever splitting a character: byte-level BPE (gpt2, neox, falcon, llama3,
// splitmix, qwen2), SentencePiece BPE with byte fallback (llama2,
// metaspace) and a normalizer chain (normmix). Also the C tokenizer's ids
// (`ssmc tokenize`) on pymamba's tokenizer and on further texts, its
// decoding of odd id sequences, and the messages for tokenizer.json files
// it does not support.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ROOT, ssmc } from './helpers.mjs';
import { Tokenizer, StreamDecoder } from '../tokenizer.mjs';

const NAMES = ['gpt2', 'neox', 'falcon', 'llama3', 'splitmix', 'llama2', 'metaspace', 'normmix', 'qwen2'];

function load(name) {
  const path = join(ROOT, 'tests/data/tokenizer', name, 'tokenizer.json');
  return { path, text: readFileSync(path, 'utf8') };
}

for (const name of NAMES) {
  test(`${name}: ids, decode and streaming match the tokenizers library`, () => {
    const { path, text } = load(name);
    const tok = new Tokenizer(text, path);
    const { cases } = JSON.parse(readFileSync(join(ROOT, 'tests/data/tokenizer', name, 'cases.json'), 'utf8'));
    assert.ok(cases.length >= 90);
    for (const [i, c] of cases.entries()) {
      assert.deepEqual(tok.encode(c.text), c.ids, `case ${i}: ${JSON.stringify(c.text).slice(0, 80)}`);
      assert.equal(tok.decode(c.ids), c.decoded, `case ${i}: decode`);
      const d = new StreamDecoder(tok);
      let all = '';
      for (const id of c.ids) {
        const chunk = d.feed(id);
        assert.ok(!/[\ud800-\udbff]$/.test(chunk), `case ${i}: a chunk ends inside a surrogate pair`);
        all += chunk;
      }
      assert.equal(all + d.flush(), c.decoded, `case ${i}: streamed`);
    }
  });
}

test('a character split across tokens is held back until it is whole', () => {
  const tok = new Tokenizer(load('neox').text, 'neox'); // no prefix space
  const ids = tok.encode('é€😀');
  const d = new StreamDecoder(tok);
  const chunks = ids.map((id) => d.feed(id));
  assert.equal(chunks.join('') + d.flush(), 'é€😀');
  assert.ok(chunks.some((c) => c === ''), 'no token ended inside a character');
  // an incomplete sequence at the end becomes U+FFFD on flush
  const e = new StreamDecoder(tok);
  assert.equal(e.feed(tok.byteId[0xe2]), ''); // the lead byte of '€'
  assert.equal(e.flush(), '\ufffd');
  // a byte that cannot start a character is U+FFFD at once
  assert.equal(e.feed(tok.byteId[0xff]), '\ufffd');
  assert.throws(() => e.feed(-1), /token id -1 is not in the vocabulary/);
  // a model's padding ids (past the tokenizer) decode to nothing, as in transformers
  assert.equal(e.feed(tok.vocabSize + 5), '');
  assert.throws(() => tok.decode([tok.vocabSize + 5]), /token id \d+ is not in the vocabulary/);
});

test("pymamba's tokenizer gives the ids `ssmc tokenize` gives", () => {
  const path = join(ROOT, 'models/pymamba/tokenizer.json');
  const tok = new Tokenizer(readFileSync(path, 'utf8'), path);
  for (const text of ['def fibonacci(n):\n    return n', 'import os, sys\t# ümlaut → 😀\r\n\n  x = [1, 22, 333]']) {
    const want = ssmc(['tokenize', '--ids', '--tokenizer', path, text]).trim().split(',').map(Number);
    assert.deepEqual(tok.encode(text), want, JSON.stringify(text));
  }
});

// Beyond the fixtures' texts: the same ids as the C tokenizer (utf8proc and
// Oniguruma, checked against the library by tests/test_tokenizer.c) on
// text that exercises the SentencePiece, normalizer-chain and Qwen2 paths:
// Metaspace's "first" after an added token, byte fallback, unknown
// characters, Lowercase per character (no final sigma), a Replace at the
// start, Qwen2's single digits and case-insensitive contractions.
test('llama2, metaspace, normmix and qwen2 give the ids `ssmc tokenize` gives', () => {
  const texts = ['<s>hello  world</s>', ' lead and trail ', 'ΟΔΟΣ ΣΑΣ İstanbul', '\t\t x’y DON’T', 'Ｆｕｌｌ ＷＩＤＴＨ ＤＯＮ\'Ｔ',
                 "IT'S 12345 we'LL ſ's", '日本語 😀 \u0301é', ''];
  for (const name of ['llama2', 'metaspace', 'normmix', 'qwen2']) {
    const { path, text } = load(name);
    const tok = new Tokenizer(text, path);
    for (const t of texts) {
      const out = ssmc(['tokenize', '--ids', '--tokenizer', path, t]).trim();
      const want = out ? out.split(',').map(Number) : [];
      assert.deepEqual(tok.encode(t), want, `${name}: ${JSON.stringify(t)}`);
    }
  }
});

// Decoding ids that no encoding gives (a model may generate them): runs of
// byte tokens that are not valid UTF-8 (one U+FFFD per byte, the library's
// ByteFallback rule), a run cut by another token or by the end, special
// tokens first, spaces to strip: the text `ssmc tokenize --decode` gives,
// whole and streamed.
test('llama2 and metaspace decode odd id sequences as `ssmc tokenize --decode` does', () => {
  const seqs = [[229, 133, 175, 300], [229, 133, 300, 229], [229], [1, 300, 229, 133], [300, 259, 229, 133, 175],
                [0, 2, 1], [246, 160, 159, 133, 300, 246]];
  for (const name of ['llama2', 'metaspace']) {
    const { path, text } = load(name);
    const tok = new Tokenizer(text, path);
    for (const ids of seqs) {
      const want = ssmc(['tokenize', '--tokenizer', path, '--decode', ids.join(',')]).replace(/\n$/, '');
      assert.equal(tok.decode(ids), want, `${name}: ${ids}`);
      const d = new StreamDecoder(tok);
      assert.equal(ids.map((id) => d.feed(id)).join('') + d.flush(), want, `${name}: ${ids} streamed`);
    }
  }
});

test('unsupported or malformed tokenizer.json files are refused with the field named', () => {
  const base = JSON.parse(load('gpt2').text);
  const refuse = (patch, msg) => {
    const j = structuredClone(base);
    patch(j);
    assert.throws(() => new Tokenizer(JSON.stringify(j), 't.json'), (e) => e.message.startsWith('t.json') && msg.test(e.message));
  };
  assert.throws(() => new Tokenizer('{"model": ', 't.json'), /t\.json: not valid JSON/);
  refuse((j) => (j.model.type = 'Unigram'), /model\.type 'Unigram' is not supported \(only BPE\)/);
  refuse((j) => (j.model.unk_token = 'nope'), /model\.unk_token 'nope' is not in model\.vocab/);
  refuse((j) => (j.normalizer = { type: 'BertNormalizer' }), /normalizer\.type 'BertNormalizer' is not supported/);
  refuse((j) => (j.normalizer = { type: 'Sequence', normalizers: [{ type: 'NFKC' }, { type: 'Replace', pattern: { Regex: '\\s+' }, content: ' ' }] }),
         /normalizer\.normalizers\[1\]\.pattern\.Regex '\\s\+' is not supported/);
  refuse((j) => (j.pre_tokenizer = { type: 'Metaspace', prepend_scheme: 'sometimes' }), /pre_tokenizer\.prepend_scheme: expected "always", "first" or "never"/);
  refuse((j) => (j.decoder = { type: 'Sequence', decoders: [{ type: 'Strip', content: ' ', start: 1, stop: 0 }, { type: 'Fuse' }] }),
         /decoder\.decoders\[0\]\.type 'Strip' is not supported here/);
  refuse((j) => (j.pre_tokenizer = { type: 'Sequence', pretokenizers: [{ type: 'Split', pattern: { Regex: '\\w+' }, behavior: 'Isolated' }, { type: 'ByteLevel' }] }),
         /pre_tokenizer\.pretokenizers\[0\]\.pattern\.Regex '\\w\+' is not supported/);
  refuse((j) => (j.pre_tokenizer = { type: 'Sequence', pretokenizers: [{ type: 'ByteLevel' }, { type: 'ByteLevel' }] }),
         /pre_tokenizer: 2 ByteLevel pre-tokenizers \(at most one is supported\)/);
  refuse((j) => (j.decoder = { type: 'WordPiece' }), /decoder\.type 'WordPiece' is not supported/);
  refuse((j) => (j.post_processor = { type: 'TemplateProcessing' }), /post_processor\.type 'TemplateProcessing' is not supported/);
  refuse((j) => j.model.merges.push('Ġzzzq Ġq'), /model\.merges\[\d+\]: 'Ġzzzq' is not in model\.vocab/);
  refuse((j) => delete j.model.vocab['Ā'], /lacks the byte-level token 'Ā' for byte 0x00/);
  refuse((j) => (j.added_tokens[0].special = 'yes'), /added_tokens\[0\]\.special: expected true or false/);
});
