// tokenizer.test.mjs — the JavaScript tokenizer against the Hugging Face
// `tokenizers` goldens of tests/data/tokenizer (the ones tests/test_tokenizer.c
// uses): for every tokenizer and case, the library's ids, its decoded text,
// and the stream decoder fed one id at a time giving the same text without
// ever splitting a character. Also `ssmc tokenize` on pymamba's tokenizer,
// and the messages for tokenizer.json files it does not support.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ROOT, ssmc } from './helpers.mjs';
import { Tokenizer, StreamDecoder } from '../tokenizer.mjs';

const NAMES = ['gpt2', 'neox', 'falcon', 'llama3', 'splitmix'];

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
  assert.throws(() => e.feed(tok.vocabSize + 5), /token id \d+ is not in the vocabulary/);
});

test("pymamba's tokenizer gives the ids `ssmc tokenize` gives", () => {
  const path = join(ROOT, 'models/pymamba/tokenizer.json');
  const tok = new Tokenizer(readFileSync(path, 'utf8'), path);
  for (const text of ['def fibonacci(n):\n    return n', 'import os, sys\t# ümlaut → 😀\r\n\n  x = [1, 22, 333]']) {
    const want = ssmc(['tokenize', '--ids', '--tokenizer', path, text]).trim().split(',').map(Number);
    assert.deepEqual(tok.encode(text), want, JSON.stringify(text));
  }
});

// The C tokenizer (utf8proc + Oniguruma) also reads these; the JavaScript
// one does not yet, and must say so rather than give other ids.
test('the SentencePiece, normalizer-chain and Qwen2 tokenizers are refused, not misread', () => {
  const refused = {
    llama2: /llama2: model\.byte_fallback true is not supported \(only byte-level BPE\)/,
    metaspace: /metaspace: model\.byte_fallback true is not supported/,
    normmix: /normmix: normalizer: a Sequence other than \[\] or \[NFC\] is not supported/,
    qwen2: /qwen2: pre_tokenizer\.pretokenizers\[0\]\.pattern\.Regex '\(\?i:'s/,
  };
  for (const [name, msg] of Object.entries(refused))
    assert.throws(() => new Tokenizer(load(name).text, name), msg, name);
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
  refuse((j) => (j.model.byte_fallback = true), /model\.byte_fallback true is not supported/);
  refuse((j) => (j.normalizer = { type: 'NFKC' }), /normalizer\.type 'NFKC' is not supported/);
  refuse((j) => (j.pre_tokenizer = { type: 'Sequence', pretokenizers: [{ type: 'Split', pattern: { Regex: '\\w+' }, behavior: 'Isolated' }, { type: 'ByteLevel' }] }),
         /pre_tokenizer\.pretokenizers\[0\]\.pattern\.Regex '\\w\+' is not supported/);
  refuse((j) => (j.pre_tokenizer = null), /pre_tokenizer is null/);
  refuse((j) => (j.decoder = { type: 'WordPiece' }), /decoder\.type 'WordPiece' is not supported/);
  refuse((j) => (j.post_processor = { type: 'TemplateProcessing' }), /post_processor\.type 'TemplateProcessing' is not supported/);
  refuse((j) => j.model.merges.push('Ġzzzq Ġq'), /model\.merges\[\d+\]: 'Ġzzzq' is not in model\.vocab/);
  refuse((j) => delete j.model.vocab['Ā'], /lacks the byte-level token 'Ā' for byte 0x00/);
  refuse((j) => (j.added_tokens[0].special = 'yes'), /added_tokens\[0\]\.special: expected true or false/);
});
