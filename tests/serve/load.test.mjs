// load.test.mjs — 8 concurrent clients x 50 short requests against
// `ssmc serve` at $URL (pid $SERVER_PID): every request succeeds, and the
// server's resident memory after all of them is within 24 MiB of what it
// was after the first round (the prompt cache is capped at 8 MiB by
// tests/serve/run.sh, so growth past that is a leak).
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import OpenAI from "openai";

const client = new OpenAI({ baseURL: `${process.env.URL}/v1`, apiKey: "not-needed", maxRetries: 0 });
const CLIENTS = 8, REQUESTS = 50, BOUND_MIB = 24;

function rssMiB() {
  const status = readFileSync(`/proc/${process.env.SERVER_PID}/status`, "utf8");
  return Number(/VmRSS:\s+(\d+) kB/.exec(status)[1]) / 1024;
}

// Short completions (every third one streamed, every tenth a chat): the
// CPU interpreter runs about 30 prompt tokens a second on 2 cores, so the
// requests are kept small to fit CI's time.
async function clientLoop(c, rounds, from) {
  let ok = 0;
  for (let i = from; i < from + rounds; i++) {
    const stream = i % 3 === 0;
    const r = i % 10 === 9
      ? await client.chat.completions.create({
          model: "pymamba", max_tokens: 2, seed: i, stream,
          messages: [{ role: "user", content: `c${c} r${i}` }],
        })
      : await client.completions.create({ model: "pymamba", prompt: `x${c} = ${i}`, max_tokens: 2, seed: i, stream });
    if (stream) {
      let finished = false;
      for await (const chunk of r) if (chunk.choices[0]?.finish_reason) finished = true;
      if (finished) ok++;
    } else if (r.choices[0].finish_reason) {
      ok++;
    }
  }
  return ok;
}

test(`${CLIENTS} clients x ${REQUESTS} requests: no failure, bounded memory`, { timeout: 600000 }, async () => {
  const first = await Promise.all([...Array(CLIENTS).keys()].map((c) => clientLoop(c, 5, 0)));
  const base = rssMiB();
  const rest = await Promise.all([...Array(CLIENTS).keys()].map((c) => clientLoop(c, REQUESTS - 5, 5)));
  const total = [...first, ...rest].reduce((a, b) => a + b, 0);
  assert.equal(total, CLIENTS * REQUESTS);
  const end = rssMiB();
  console.log(`# ${total} requests; server RSS ${base.toFixed(1)} MiB after the first round, ${end.toFixed(1)} MiB at the end`);
  assert.ok(end - base < BOUND_MIB, `RSS grew by ${(end - base).toFixed(1)} MiB`);
  const metrics = await (await fetch(`${process.env.URL}/metrics`)).text();
  const failed = Number(/ssmc_requests_failed_total (\d+)/.exec(metrics)[1]);
  const done = Number(/ssmc_requests_total (\d+)/.exec(metrics)[1]);
  assert.equal(failed, 0);
  assert.ok(done >= CLIENTS * REQUESTS);
});
