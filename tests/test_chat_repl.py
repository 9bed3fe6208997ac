#!/usr/bin/env python3
"""test_chat_repl.py SSMC — `ssmc run -i` on a terminal, driven through a
pseudo-terminal (Python's pty): the prompt, turns that go on from one state
(each reply compared with the same conversation run without a terminal),
history recalled with the Up arrow, Ctrl-C during a reply, at a typed line
and at an empty prompt, the commands (/help, an unknown one, /save, /reset,
/load, a /load that fails) and Ctrl-D; with a chat template
(tests/data/chat_turns.jinja) each line is a user message; with one whose
turns end with text (tests/data/chat_text_end.jinja) a reply ends before
that text, as at a --stop string. The CPU backend
on models/pymamba, greedy."""
import os
import pty
import select
import subprocess
import sys
import tempfile
import time

SSMC = os.path.abspath(sys.argv[1])
PY = "models/pymamba"
TEMPLATE = "tests/data/chat_turns.jinja"
BASE = [SSMC, "run", PY, "--backend", "cpu", "-q"]
failures = 0


def check(ok, what, detail=""):
    global failures
    if not ok:
        failures += 1
        print(f"FAIL: {what}\n{detail}", file=sys.stderr)


def ssmc(*args, stdin=None):
    r = subprocess.run(list(args), input=stdin, capture_output=True, check=True)
    return r.stdout.decode()


class Term:
    """ssmc run -i on the slave side of a pseudo-terminal."""

    def __init__(self, *extra):
        self.pid, self.fd = pty.fork()
        if self.pid == 0:
            os.execv(SSMC, BASE + ["-i", *extra])
        self.seen = b""

    def until(self, pattern, timeout=30):
        """Reads until `pattern` follows what was read before; returns the
        text read (newlines as the terminal sends them turned back to \\n)."""
        start, end = len(self.seen), time.time() + timeout
        while time.time() < end:
            if select.select([self.fd], [], [], 0.1)[0]:
                try:
                    data = os.read(self.fd, 4096)
                except OSError:
                    break
                if not data:
                    break
                self.seen += data
                if pattern.encode() in self.seen[start:]:
                    break
        return self.seen[start:].decode(errors="replace").replace("\r\n", "\n")

    def send(self, keys):
        time.sleep(0.15)  # as a person would: the line editor has set the terminal up
        os.write(self.fd, keys.encode())

    def turn(self, keys):
        """Sends a line and returns what came back up to the next prompt."""
        self.send(keys + "\r")
        return self.until("\n> ")

    def exit_status(self, timeout=10):
        end = time.time() + timeout
        while time.time() < end:
            self.until("\0", 0.2)
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                return os.waitstatus_to_exitcode(status)
        os.kill(self.pid, 9)
        os.waitpid(self.pid, 0)
        return "still running"


def reply_of(out, line):
    """The reply in `out`: after the echoed line, before the next prompt."""
    at = out.find(line + "\n")
    return out[at + len(line) + 1:out.rfind("\n> ")] if at >= 0 else None


A, B, C, E = "def add(a, b):", "    return a + b", "class Point:", "s = '\u00e9t\u00e9'"
N = "6"
os.environ["LC_ALL"] = "C.UTF-8"  # the editor takes UTF-8 as the terminal's characters


def piped_replies(*lines):
    """The reply to each line when the lines are piped in: each is echoed and
    continued, and a newline ends the output."""
    replies, before = [], ""
    for k in range(1, len(lines) + 1):
        out = ssmc(*BASE, "-i", "-n", N, stdin="".join(l + "\n" for l in lines[:k]).encode())
        check(out.startswith(before[:-1] + lines[k - 1] + "\n"), "piped turns", out)
        replies.append(out[len(before) - (k > 1) + len(lines[k - 1]) + 1:-1])
        before = out
    return replies


g1, g2, g3, g4 = piped_replies(A, B, B, E)

t = Term("-n", N)
out = t.until("> ")
check("no chat template" in out and out.endswith("> "), "the notice and a prompt", out)
out = t.turn(A)
check(reply_of(out, A) == g1, "turn 1's reply", f"got {reply_of(out, A)!r}\nwant {g1!r}")
out = t.turn(B)
check(reply_of(out, B) == g2, "turn 2 goes on from turn 1's state",
      f"got {reply_of(out, B)!r}\nwant {g2!r}")
out = t.turn("\x1b[A")  # Up: the last line again
echo, _, got = out.partition("\n")  # the line redrawn, with the terminal's escapes
check(echo.endswith(B.strip()) and got == g3 + "\n> ", "Up arrow recalls the last line",
      f"got {out!r}\nwant {g3!r}")
out = t.turn(E)
check(reply_of(out, E) == g4, "a line of UTF-8", f"got {reply_of(out, E)!r}\nwant {g4!r}")
out = t.turn("/help")
check("/save FILE" in out and "/reset" in out, "/help lists the commands", out)
out = t.turn("/bogus")
check("unknown command '/bogus'" in out, "an unknown command is said", out)
with tempfile.TemporaryDirectory() as tmp:
    saved = os.path.join(tmp, "chat.state")
    out = t.turn("/load " + saved)
    check("/load " + saved + ": " in out and out.endswith("\n> "),
          "a failed /load is said and the chat goes on", out)
    out = t.turn("/save " + saved)
    check(os.path.exists(saved) and os.path.exists(saved + ".chat"), "/save writes its files", out)
    want = reply_of(t.turn(C), C)
    out = t.turn("/reset")
    check("fresh conversation" in out, "/reset", out)
    fresh = reply_of(t.turn(C), C)
    out = t.turn("/load " + saved)
    check("loaded from" in out, "/load", out)
    again = reply_of(t.turn(C), C)
    check(again == want, "after /load the reply is the one before /reset",
          f"got {again!r}\nwant {want!r}")
want_fresh = ssmc(*BASE, "-n", N, "--prompt", C + "\n")[len(C) + 1:-1]
check(fresh == want_fresh, "the reply after /reset is the fresh run's",
      f"got {fresh!r}\nwant {want_fresh!r}")
t.send("\x04")  # Ctrl-D
check(t.exit_status() == 0, "Ctrl-D exits 0")

# Ctrl-C during a long reply: it stops, the prompt comes back, turns go on;
# Ctrl-C at an empty prompt exits 0.
t = Term("-n", "100000")
t.until("> ")
t.send(A + "\r")
t.until(A + "\r\n")
t.until("\n", 30)  # the reply has begun
t.send("\x03")
began = time.time()
out = t.until("\n> ", 10)
check(out.endswith("\n> ") and time.time() - began < 5, "Ctrl-C stops the reply", out)
t.send("x = 1\r")
out = t.until("\n", 10)
check(out.startswith("x = 1"), "the next turn is read", out)
t.until("\n", 30)
t.send("\x03")
out = t.until("\n> ", 10)
check(out.endswith("\n> "), "... and can be stopped too", out)
t.send("never sent")
t.send("\x03")
out = t.until("\n> ", 10)
check(out.endswith("\n> "), "Ctrl-C at a typed line drops it", out)
t.send("\x03")
check(t.exit_status() == 0, "Ctrl-C at an empty prompt exits 0")

# A chat template: each line a user message; turn 2 feeds only what the
# rendering adds to what the state covers, the same ids as one run of all.
def render(*msgs, gen=True):
    text = "".join(f"### {role}:\n{content}\n" + ("<|endoftext|>" if role == "assistant" else "")
                   for role, content in msgs)
    return text + ("### assistant:\n" if gen else "")


def ids(text):
    return ssmc(SSMC, "tokenize", "--tokenizer", PY, "--ids", text).strip()


def decode(ids):
    return ssmc(SSMC, "tokenize", "--tokenizer", PY, "--decode", ids).rstrip("\n")


t = Term("-n", N, "--chat-template", TEMPLATE)
out = t.until("> ")
check("chat template: " + TEMPLATE in out, "the template is named", out)
r1 = render(("user", "hi"))
gen1 = ssmc(*BASE, "-n", N, "--tokens", ids(r1)).strip().splitlines()[-1]
out = t.turn("hi")
check(reply_of(out, "hi") == decode(gen1), "template turn 1",
      f"got {reply_of(out, 'hi')!r}\nwant {decode(gen1)!r}")
check(gen1.count(",") == int(N) - 1 and "0" not in gen1.split(","), "turn 1 runs to -n", gen1)
suffix = render(("user", "hi"), ("assistant", decode(gen1)), ("user", "again"))[len(r1) + len(decode(gen1)):]
gen2 = ssmc(*BASE, "-n", N, "--tokens", f"{ids(r1)},{gen1},{ids(suffix)}").strip().splitlines()[-1]
out = t.turn("again")
check(reply_of(out, "again") == decode(gen2), "template turn 2 goes on from turn 1's state",
      f"got {reply_of(out, 'again')!r}\nwant {decode(gen2)!r}")
t.send("/quit\r")
check(t.exit_status() == 0, "/quit exits 0")

# A template whose assistant turns end with text ("\n#\n#", which the model
# writes after its first reply): the reply ends right before it, and the
# state goes on from the ids before the last one drawn. A --stop string ends
# turn 2, whichever comes first.
END, STOP, N2 = "\n#\n#", "get_call_path", "32"


def text_render(*msgs, gen=True):
    text = "".join(f"### {role}:\n{content}" + ("\n#\n#\n" if role == "assistant" else "\n")
                   for role, content in msgs)
    return text + ("### assistant:\n" if gen else "")


def cut(text, *stops):
    return text[:min([text.find(s) for s in stops if s in text] or [len(text)])]


t = Term("-n", N2, "--chat-template", "tests/data/chat_text_end.jinja", "--stop", STOP)
t.until("> ")
r1 = text_render(("user", "hi"))
gen1 = ssmc(*BASE, "-n", N2, "--tokens", ids(r1)).strip().splitlines()[-1].split(",")
k = next((k for k in range(1, len(gen1) + 1) if END in decode(",".join(gen1[:k]))), 0)
check(k > 1, "the model writes the end of turn", decode(",".join(gen1)))
want1 = cut(decode(",".join(gen1)), END)
out = t.turn("hi")
check(reply_of(out, "hi") == want1, "a reply ends before the template's end of turn",
      f"got {reply_of(out, 'hi')!r}\nwant {want1!r}")
covered = decode(",".join(gen1[:k - 1]))
suffix = text_render(("user", "hi"), ("assistant", want1), ("user", "again"))[len(r1) + len(covered):]
gen2 = ssmc(*BASE, "-n", N2, "--tokens", ",".join([ids(r1)] + gen1[:k - 1] + [ids(suffix)]))
want2 = cut(decode(gen2.strip().splitlines()[-1]), END, STOP)
out = t.turn("again")
check(reply_of(out, "again") == want2 and STOP in decode(gen2.strip().splitlines()[-1]),
      "turn 2 goes on from the ids fed, and ends at --stop",
      f"got {reply_of(out, 'again')!r}\nwant {want2!r}")
t.send("/quit\r")
check(t.exit_status() == 0, "/quit exits 0")

sys.exit(1 if failures else 0)
