// chat.js — the chat page of `ssmc serve` (index.html). Each message goes,
// with the conversation before it, to the server's own
// /v1/chat/completions with stream: true; the reply is shown as its
// server-sent events arrive. Stop aborts the request (the server frees the
// request's place when its client hangs up); a stopped reply stays in the
// conversation as far as it got. New chat forgets the conversation. The
// state line (#state, its data-state: idle, generating, stopped, error)
// says what the page is doing, and an error quotes the server's message.

const $ = (id) => document.getElementById(id);
let messages = []; // the conversation: {role, content}
let controller = null; // the request in flight

function setState(state, text) {
  $('state').dataset.state = state;
  $('state').textContent = text;
}

function setBusy(busy) {
  $('send').disabled = busy;
  $('stop').disabled = !busy;
  $('new').disabled = busy;
}

function addMessage(role, text) {
  const div = document.createElement('div');
  div.className = `msg ${role}`;
  div.textContent = text;
  $('log').append(div);
  div.scrollIntoView({ block: 'end' });
  return div;
}

// The message of an error answer ({"error": {"message"}}), or its status.
async function errorOf(res) {
  const text = await res.text();
  try {
    return JSON.parse(text).error.message;
  } catch {
    return `HTTP ${res.status} ${res.statusText}${text ? `: ${text.slice(0, 200)}` : ''}`;
  }
}

// Reads the server-sent events of `res`, calling onData(parsed JSON) for
// each `data:` line but the final [DONE].
async function readEvents(res, onData) {
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += value;
    for (let at; (at = buf.indexOf('\n\n')) >= 0; buf = buf.slice(at + 2))
      for (const line of buf.slice(0, at).split('\n'))
        if (line.startsWith('data: ') && line !== 'data: [DONE]') onData(JSON.parse(line.slice(6)));
  }
}

function number(id, lo, hi, dflt) {
  const v = Number($(id).value);
  return $(id).value.trim() !== '' && v >= lo && v <= hi ? v : dflt;
}

async function send(text) {
  const user = addMessage('user', text);
  const out = addMessage('assistant', '');
  messages.push({ role: 'user', content: text });
  controller = new AbortController();
  setBusy(true);
  setState('generating', 'generating…');
  let reply = '', usage = null;
  const t0 = performance.now();
  try {
    const res = await fetch('v1/chat/completions', {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({
        messages, stream: true, stream_options: { include_usage: true },
        temperature: number('temperature', 0, 2, 0.7), max_tokens: Math.floor(number('max-tokens', 1, 1e9, 256)),
      }),
      signal: controller.signal,
    });
    if (!res.ok) throw new Error(await errorOf(res));
    await readEvents(res, (event) => {
      if (event.error) throw new Error(event.error.message);
      if (event.usage) usage = event.usage;
      const piece = event.choices?.[0]?.delta?.content;
      if (piece) {
        reply += piece;
        out.textContent = reply;
        out.scrollIntoView({ block: 'end' });
      }
    });
    messages.push({ role: 'assistant', content: reply });
    const s = (performance.now() - t0) / 1e3;
    setState('idle', usage ? `idle (the last reply: ${usage.completion_tokens} tokens in ${s.toFixed(1)} s)` : 'idle');
  } catch (e) {
    if (e.name === 'AbortError') { // Stop: the reply so far stays
      messages.push({ role: 'assistant', content: reply });
      setState('stopped', `stopped (${reply.length} characters of the reply kept)`);
    } else { // the message did not make it: it leaves the conversation
      messages.pop();
      user.classList.add('failed');
      out.remove();
      setState('error', `error: ${e.message}`);
    }
  } finally {
    controller = null;
    setBusy(false);
  }
}

$('form').addEventListener('submit', (e) => {
  e.preventDefault();
  const text = $('input').value;
  if (!text.trim() || controller) return;
  $('input').value = '';
  send(text);
});
$('input').addEventListener('keydown', (e) => {
  if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
    e.preventDefault();
    $('form').requestSubmit();
  }
});
$('stop').addEventListener('click', () => controller?.abort());
$('new').addEventListener('click', () => {
  messages = [];
  $('log').replaceChildren();
  setState('idle', 'idle');
  $('input').focus();
});
fetch('v1/models')
  .then((res) => (res.ok ? res.json() : null))
  .then((j) => { if (j?.data?.[0]?.id) $('model').textContent = j.data[0].id; })
  .catch(() => {});
setBusy(false);
