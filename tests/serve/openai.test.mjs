// openai.test.mjs — the official OpenAI client (npm "openai", pinned in
// package.json) against `ssmc serve` at $URL (tests/serve/run.sh starts it):
// completions and chat, streamed and not, usage with cached tokens, two
// conversations at once whose second turns come from the prompt cache, and
// the client's errors for bad requests.
import assert from "node:assert/strict";
import { test } from "node:test";
import OpenAI from "openai";

const client = new OpenAI({ baseURL: `${process.env.URL}/v1`, apiKey: "not-needed", maxRetries: 0 });
const model = "pymamba";

test("models.list names the served model", async () => {
  const ids = [];
  for await (const m of client.models.list()) ids.push(m.id);
  assert.deepEqual(ids, [model]);
});

test("models.retrieve finds the served model, and only it", async () => {
  const m = await client.models.retrieve(model);
  assert.equal(m.id, model);
  assert.equal(m.object, "model");
  await assert.rejects(client.models.retrieve("no-such-model"), (e) => e.status === 404);
});

test("completions.create: text, finish_reason and usage", async () => {
  const r = await client.completions.create({ model, prompt: "import os\n", max_tokens: 8, temperature: 0 });
  assert.equal(r.object, "text_completion");
  assert.equal(r.choices.length, 1);
  assert.equal(typeof r.choices[0].text, "string");
  assert.ok(r.choices[0].text.length > 0);
  assert.ok(["length", "stop"].includes(r.choices[0].finish_reason));
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
  assert.ok(r.usage.completion_tokens <= 8);
});

test("a streamed completion is the same text as a whole one", async () => {
  const args = { model, prompt: "class Stack:\n", max_tokens: 12, temperature: 0.7, seed: 11 };
  const whole = await client.completions.create(args);
  const stream = await client.completions.create({ ...args, stream: true });
  let text = "", finish = null;
  for await (const chunk of stream) {
    text += chunk.choices[0]?.text ?? "";
    finish = chunk.choices[0]?.finish_reason ?? finish;
  }
  assert.equal(text, whole.choices[0].text);
  assert.equal(finish, whole.choices[0].finish_reason);
});

test("chat.completions.create, whole and streamed with usage", async () => {
  const messages = [{ role: "system", content: "You write Python." }, { role: "user", content: "Parse a CSV file" }];
  const whole = await client.chat.completions.create({ model, messages, max_tokens: 10, temperature: 0 });
  assert.equal(whole.object, "chat.completion");
  assert.equal(whole.choices[0].message.role, "assistant");
  const stream = await client.chat.completions.create({
    model, messages, max_tokens: 10, temperature: 0, stream: true, stream_options: { include_usage: true },
  });
  let text = "", usage = null;
  for await (const chunk of stream) {
    text += chunk.choices[0]?.delta?.content ?? "";
    if (chunk.usage) usage = chunk.usage;
  }
  assert.equal(text, whole.choices[0].message.content);
  assert.equal(usage.completion_tokens, whole.usage.completion_tokens);
  assert.equal(usage.prompt_tokens, whole.usage.prompt_tokens);
});

// Two conversations at once, two turns each: every second turn starts from
// the state cached after the first (usage.prompt_tokens_details.cached_tokens
// covers at least the first turn's prompt), and the texts are what each
// conversation gives alone.
async function conversation(topic, seed) {
  const messages = [{ role: "user", content: `Write ${topic}` }];
  const turns = [];
  for (let t = 0; t < 2; t++) {
    const r = await client.chat.completions.create({ model, messages, max_tokens: 12, temperature: 0.8, seed });
    turns.push({ text: r.choices[0].message.content, prompt: r.usage.prompt_tokens,
                 cached: r.usage.prompt_tokens_details.cached_tokens });
    messages.push(r.choices[0].message, { role: "user", content: "Now add tests" });
  }
  return turns;
}

test("two concurrent conversations: second turns come from the prompt cache", async () => {
  // the state is cached at the last chunk boundary of each prompt and at the
  // end of each request (serve/sched.c)
  const metrics = await (await fetch(`${process.env.URL}/metrics`)).text();
  const chunk = Number(/^ssmc_prefill_chunk (\d+)$/m.exec(metrics)[1]);
  assert.ok(chunk >= 1);
  const [a, b] = await Promise.all([conversation("a parser", 5), conversation("a web server", 6)]);
  for (const c of [a, b]) {
    const boundary = Math.floor((c[0].prompt - 1) / chunk) * chunk;
    assert.ok(boundary > 0 && c[1].cached >= boundary, `second turn cached ${c[1].cached}, first prompt ${c[0].prompt}`);
    assert.ok(c[1].cached < c[1].prompt);
  }
  const alone = await conversation("a parser", 5);
  assert.deepEqual(alone.map((t) => t.text), a.map((t) => t.text));
});

test("bad requests throw the client's errors with status and param", async () => {
  await assert.rejects(client.completions.create({ model, prompt: "x", temperature: 9 }), (e) => {
    assert.ok(e instanceof OpenAI.BadRequestError);
    assert.equal(e.status, 400);
    assert.equal(e.param, "temperature");
    assert.match(e.message, /temperature: expected a number from 0 to 2/);
    return true;
  });
  await assert.rejects(client.chat.completions.create({ model, messages: [], max_tokens: 2 }), (e) => {
    assert.equal(e.status, 400);
    assert.equal(e.param, "messages");
    return true;
  });
  const other = new OpenAI({ baseURL: `${process.env.URL}/v2`, apiKey: "x", maxRetries: 0 });
  await assert.rejects(other.completions.create({ model, prompt: "x" }), (e) => {
    assert.ok(e instanceof OpenAI.NotFoundError);
    return true;
  });
});
