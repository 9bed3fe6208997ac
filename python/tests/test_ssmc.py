"""The Python package against the C library and the ssmc command line.

Run by ctest (test python_ssmc), which sets SSMC_LIBRARY to the build tree's
libssmc.so and SSMC_EXE to its ssmc; by hand, from the source root:

    SSMC_LIBRARY=build/libssmc.so SSMC_EXE=build/ssmc python3 python/tests/test_ssmc.py

Every model here is models/pymamba on the CPU backend (the reference
interpreter: no kernels to compile, so each open takes a fraction of a
second). What the command line prints is the expectation: the package must
generate the same text from the same prompt and sampler settings.
"""

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))

import ssmc  # noqa: E402

MODEL = os.path.join(ROOT, "models", "pymamba")
PROMPT = "def fibonacci(n):"


def cli_generate(prompt, n, *sampling, model=MODEL):
    """The text `ssmc run` generates after `prompt` (it prints the prompt,
    the text, and a newline)."""
    exe = os.environ.get("SSMC_EXE", os.path.join(ROOT, "build", "ssmc"))
    out = subprocess.run([exe, "run", model, "--backend", "cpu", "-q", "-n", str(n),
                          "--prompt", prompt] + list(sampling),
                         check=True, stdout=subprocess.PIPE).stdout.decode("utf-8")
    assert out.startswith(prompt) and out.endswith("\n"), out
    return out[len(prompt):-1]


class ModelTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.model = ssmc.Model(MODEL, backend="cpu")

    @classmethod
    def tearDownClass(cls):
        cls.model.close()

    def test_properties(self):
        m = self.model
        self.assertEqual(ssmc.version(), "0.2.0")
        self.assertEqual((m.architecture, m.device, m.vocab), ("mamba1", "cpu", 4096))
        self.assertEqual(m.eos, m.token_id("<|endoftext|>"))
        self.assertEqual(os.path.realpath(m.model_dir), os.path.realpath(MODEL))

    def test_generate_greedy_is_the_command_lines(self):
        for prompt in (PROMPT, "import os\n"):
            self.assertEqual(self.model.generate(prompt, max_tokens=24), cli_generate(prompt, 24,
                                                                                      "--greedy"))

    def test_generate_sampled_is_the_command_lines(self):
        args = dict(temperature=0.8, top_k=40, top_p=0.9, seed=7)
        want = cli_generate(PROMPT, 24, "--temperature", "0.8", "--top-k", "40", "--top-p",
                            "0.9", "--seed", "7")
        self.assertEqual(self.model.generate(PROMPT, 24, **args), want)
        self.assertNotEqual(self.model.generate(PROMPT, 24, **dict(args, seed=8)), want)

    def test_repeat_penalty_is_the_command_lines(self):
        want = cli_generate(PROMPT, 24, "--repeat-penalty", "1.5")
        self.assertEqual(self.model.generate(PROMPT, 24, repeat_penalty=1.5), want)
        self.assertNotEqual(self.model.generate(PROMPT, 24), want)

    def test_min_p_one_keeps_only_the_likeliest(self):
        hot = dict(temperature=2.0, seed=5)
        greedy = self.model.generate(PROMPT, 24)
        self.assertEqual(self.model.generate(PROMPT, 24, min_p=1.0, **hot), greedy)
        self.assertNotEqual(self.model.generate(PROMPT, 24, **hot), greedy)

    def test_stream_pieces_join_to_generate(self):
        pieces = list(self.model.stream(PROMPT, max_tokens=20))
        self.assertGreater(len(pieces), 5)
        self.assertEqual("".join(pieces), self.model.generate(PROMPT, max_tokens=20))
        ids = self.model.generate_ids(PROMPT, max_tokens=20)
        self.assertEqual(len(ids), 20)
        self.assertEqual(self.model.decode(ids), "".join(pieces))

    def test_stream_left_early_stops_and_the_session_goes_on(self):
        s = self.model.session()
        want = s.generate(PROMPT, 12)
        s.reset()
        stream = s.stream(PROMPT, 12)
        first = next(stream)
        with self.assertRaises(RuntimeError):
            s.feed("x")  # in use by the stream
        with self.assertRaises(RuntimeError):
            self.model.generate(PROMPT)  # the same loaded model: one thread at a time
        stream.close()
        self.assertTrue(want.startswith(first))
        self.assertLess(s.position, 12)
        s.generate(None, 4)  # usable again
        s.close()

    def test_session_turns_join_up(self):
        with self.model.session() as s:
            self.assertEqual(s.generate(PROMPT, 10) + s.generate(None, 14),
                             self.model.generate(PROMPT, 24))
            self.assertEqual(s.position, len(self.model.encode(PROMPT)) + 23)

    def test_feed_then_generate(self):
        with self.model.session() as s:
            s.feed(PROMPT)
            self.assertEqual(s.position, len(self.model.encode(PROMPT)))
            with self.assertRaises(ValueError):
                s.generate(None, 4)  # everything was fed: nothing to go on from
            ids = self.model.encode(PROMPT)
            s.reset()
            s.feed(ids[:-1])
            self.assertEqual(s.generate(ids[-1:], 16), self.model.generate(PROMPT, 16))

    def test_snapshot_restore_reproduces(self):
        with self.model.session() as s:
            s.feed("def f(")
            snap = s.snapshot()
            self.assertEqual(snap.position, s.position)
            self.assertGreater(snap.nbytes, 0)
            a = s.generate("x):", 12)
            s.restore(snap)
            self.assertEqual(s.position, snap.position)
            self.assertEqual(s.generate("x):", 12), a)
            with s.fork() as t:  # a snapshot restores into a fork too
                t.restore(snap)
                self.assertEqual(t.generate("x):", 12), a)
            snap.close()
            with self.assertRaises(ValueError):
                s.restore(snap)

    def test_fork_is_independent(self):
        with self.model.session() as u:
            u.feed("class A:\n")
            want = u.generate("    def", 12)
        with self.model.session() as s:
            s.feed("class A:\n")
            with s.fork() as t:
                s.generate("import sys; sys.exit(", 12)
                self.assertEqual(t.generate("    def", 12), want)
                self.assertNotEqual(s.position, t.position)

    def test_save_load_round_trip(self):
        with tempfile.TemporaryDirectory() as tmp, self.model.session() as s:
            path = os.path.join(tmp, "f.state")
            s.generate(PROMPT, 6)
            s.save(path)
            position = s.position
            want = s.generate("\n    return", 12)
            with self.model.session() as t:
                t.load(path)
                self.assertEqual(t.position, position)
                self.assertEqual(t.generate("\n    return", 12), want)
                with open(path, "r+b") as f:
                    f.truncate(os.path.getsize(path) // 2)
                before = t.position
                with self.assertRaises(ssmc.Error) as e:
                    t.load(path)  # refused, and changes nothing
                self.assertIn(path, str(e.exception))
                self.assertEqual(t.position, before)
                with self.assertRaises(ssmc.Error):
                    t.load(os.path.join(tmp, "missing.state"))

    def test_encode_decode_round_trip(self):
        text = "def héllo(wörld):\n    return '✓'  # 日本\n"
        ids = self.model.encode(text)
        self.assertTrue(ids and all(isinstance(i, int) for i in ids))
        self.assertEqual(self.model.decode(ids), text)
        self.assertEqual(self.model.encode(""), [])
        eos = self.model.eos
        self.assertEqual(self.model.decode(ids + [eos]), text)
        self.assertEqual(self.model.decode(ids + [eos], skip_special=False),
                         text + "<|endoftext|>")

    def test_tokenizer_alone(self):
        text = "import os\nprint(os.getcwd())\n"
        with ssmc.Tokenizer(os.path.join(MODEL, "tokenizer.json")) as t:
            self.assertEqual(t.encode(text), self.model.encode(text))
            self.assertEqual(t.decode(t.encode(text)), text)
            self.assertEqual(t.token_id("<|endoftext|>"), self.model.eos)
            self.assertIsNone(t.token_id("no such token"))
            self.assertEqual(t.vocab_size, self.model.vocab)  # pymamba's logits are not padded
        with self.assertRaises(ValueError):
            t.encode(text)  # closed
        bad = os.path.join(ROOT, "no", "tokenizer.json")
        with self.assertRaises(ssmc.Error) as e:
            ssmc.Tokenizer(bad)
        self.assertIn(bad, str(e.exception))

    def test_bad_path_raises_error_with_the_path(self):
        bad = os.path.join(ROOT, "no", "such", "model")
        with self.assertRaises(ssmc.Error) as e:
            ssmc.Model(bad, backend="cpu")
        self.assertIn(bad, str(e.exception))
        self.assertIsInstance(e.exception.code, int)
        self.assertNotEqual(e.exception.code, 0)

    def test_bad_arguments(self):
        m = self.model
        for call, exc in [
            (lambda: ssmc.Model(42), TypeError),
            (lambda: ssmc.Model(MODEL, backend="tpu"), ValueError),
            (lambda: ssmc.Model(MODEL, backend="cpu", colour=1), TypeError),
            (lambda: ssmc.Model(MODEL, backend="cpu", dtype=16), TypeError),
            (lambda: ssmc.Model(MODEL, backend="cpu", max_seq=-1), ValueError),
            (lambda: m.generate(PROMPT, max_tokens=0), ValueError),
            (lambda: m.generate(PROMPT, max_tokens=2**24), ValueError),
            (lambda: m.generate(PROMPT, max_tokens="8"), TypeError),
            (lambda: m.generate(PROMPT, max_tokens=True), TypeError),
            (lambda: m.generate(PROMPT, temperature=-1), ValueError),
            (lambda: m.generate(PROMPT, temperature="hot"), TypeError),
            (lambda: m.generate(PROMPT, top_p=0), ValueError),
            (lambda: m.generate(PROMPT, min_p=1.5), ValueError),
            (lambda: m.generate(PROMPT, min_p="x"), TypeError),
            (lambda: m.generate(PROMPT, repeat_penalty=0), ValueError),
            (lambda: m.generate(PROMPT, repeat_penalty=float("nan")), ValueError),
            (lambda: m.generate(PROMPT, top_k=-1), ValueError),
            (lambda: m.generate(PROMPT, seed=2**24), ValueError),
            (lambda: m.generate(PROMPT, beam=4), TypeError),
            (lambda: m.generate(None), TypeError),
            (lambda: m.generate(3), TypeError),
            (lambda: m.generate([1, "2"]), TypeError),
            (lambda: m.generate([1, -2]), ValueError),
            (lambda: m.encode(b"bytes"), TypeError),
            (lambda: m.decode("text"), TypeError),
            (lambda: m.session().restore("snapshot"), TypeError),
            (lambda: m.session().save(None), TypeError),
        ]:
            with self.assertRaises(exc):
                call()
        # ids past the vocabulary reach the library, which refuses them
        with self.assertRaises(ssmc.InvalidError) as e:
            m.generate([m.vocab + 5])
        self.assertEqual(e.exception.code, ssmc.InvalidError.code)

    def test_closed_objects_refuse(self):
        s = self.model.session()
        s.close()
        s.close()
        with self.assertRaises(ValueError):
            s.feed("x")
        with ssmc.Model(MODEL, backend="cpu") as m:
            t = m.session()
        with self.assertRaisesRegex(ValueError, "Model is closed"):
            m.generate(PROMPT)
        self.assertEqual(t.generate(PROMPT, 16), self.model.generate(PROMPT, 16))
        t.close()

    def test_auto_backend(self):
        """backend="auto" is the library's SSMC_BACKEND_AUTO: the session
        opens on the backend the library picks and generates the prompt's
        continuation."""
        with ssmc.Model(MODEL, backend="auto") as m:
            ids = m.generate_ids(PROMPT, 4)
        self.assertEqual(len(ids), 4)


class SlotsTest(unittest.TestCase):
    """A model opened with slots: prompts decoded together through the
    batched program give what each gives alone."""

    @classmethod
    def setUpClass(cls):
        cls.model = ssmc.Model(MODEL, backend="cpu", slots=4)

    @classmethod
    def tearDownClass(cls):
        cls.model.close()

    def test_generate_batch_is_generate(self):
        m = self.model
        self.assertEqual(m.slots, 4)
        prompts = [PROMPT, "import os\n", "class Tree:", "# a comment", "x = ["]
        alone = [m.generate(p, max_tokens=10) for p in prompts]
        # five prompts in four slots: two waves, the second with slots left idle
        self.assertEqual(m.generate_batch(prompts, max_tokens=10, steps_per_call=4), alone)
        self.assertEqual(m.generate_batch(prompts[:2], max_tokens=10), alone[:2])
        # sampled: each slot's sampler draws as the session's does
        sampled = dict(temperature=0.8, top_k=40, seed=7)
        self.assertEqual(m.generate_batch(prompts[:3], max_tokens=10, **sampled),
                         [m.generate(p, max_tokens=10, **sampled) for p in prompts[:3]])

    def test_join_step_take(self):
        m = self.model
        with m.session() as s, m.session() as t:
            ids = s.generate_ids(PROMPT, max_tokens=6)
            # the same continuation through a slot: the state without the last
            # id joins, the last id is the slot's first
            t.feed(PROMPT)
            t.feed(ids[:2])
            t.join_slot(3)
            rows = t.step_slots([0, 0, 0, ids[2]], 3)
            self.assertEqual([r[3] for r in rows], ids[3:6])
            t.take_slot(3)
            self.assertEqual(t.position, s.position)
            t.leave_slot(3)
            with self.assertRaisesRegex(ssmc.Error, "slot 3 holds no sequence"):
                t.take_slot(3)

    def test_refusals(self):
        m = self.model
        with m.session() as s:
            with self.assertRaisesRegex(ValueError, "expected 4 first ids"):
                s.step_slots([1, 2], 1)
            with self.assertRaisesRegex(ssmc.Error, "slot"):
                s.join_slot(4)
        with ssmc.Model(MODEL, backend="cpu") as plain:
            self.assertEqual(plain.slots, 0)
            with self.assertRaisesRegex(ValueError, "no slots"):
                plain.generate_batch([PROMPT])


class GenerationConfigTest(unittest.TestCase):
    """A model directory's generation_config.json gives generate() and its
    kin their defaults, as it gives `ssmc run` its own; arguments given
    override them. Each model is models/pymamba's files with a
    generation_config.json of the test's."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.plain = ssmc.Model(MODEL, backend="cpu")

    @classmethod
    def tearDownClass(cls):
        cls.plain.close()
        cls.tmp.cleanup()

    def model_dir(self, config):
        d = tempfile.mkdtemp(dir=self.tmp.name)
        for name in ("config.json", "model.safetensors", "tokenizer.json"):
            os.symlink(os.path.join(MODEL, name), os.path.join(d, name))
        with open(os.path.join(d, "generation_config.json"), "w") as f:
            json.dump(config, f)
        return d

    def test_repetition_penalty(self):
        d = self.model_dir({"repetition_penalty": 1.5})
        with ssmc.Model(d, backend="cpu", slots=2) as m:
            self.assertEqual(m.generation_defaults["repeat_penalty"], 1.5)
            self.assertEqual(m.generation_defaults["from"], ["repetition_penalty"])
            want = self.plain.generate(PROMPT, 24, repeat_penalty=1.5)
            self.assertNotEqual(want, self.plain.generate(PROMPT, 24))
            self.assertEqual(m.generate(PROMPT, 24), want)
            self.assertEqual(cli_generate(PROMPT, 24, model=d), want)
            with m.session() as s:
                self.assertEqual(s.generate(PROMPT, 24), want)
            self.assertEqual("".join(m.stream(PROMPT, 24)), want)
            self.assertEqual(m.generate(PROMPT, 24, repeat_penalty=1),
                             self.plain.generate(PROMPT, 24))
            # the batched program has no penalty: the prompts go one by one
            self.assertEqual(m.generate_batch([PROMPT, "import os\n"], 24),
                             [want, self.plain.generate("import os\n", 24, repeat_penalty=1.5)])
            with m.session() as s:
                s.feed(PROMPT)
                with self.assertRaisesRegex(ssmc.Error, "no repetition penalty"):
                    s.join_slot(0)
                s.join_slot(0, repeat_penalty=1)

    def test_do_sample(self):
        d = self.model_dir({"do_sample": True, "temperature": 0.8, "top_p": 0.9,
                            "unknown_field": [1]})
        hot = dict(temperature=0.8, top_k=50, top_p=0.9)
        with ssmc.Model(d, backend="cpu", slots=2) as m:
            self.assertEqual(m.generation_defaults["from"], ["do_sample", "temperature", "top_p"])
            self.assertEqual(m.generation_defaults["top_k"], 50)
            want = self.plain.generate(PROMPT, 24, seed=3, **hot)
            self.assertNotEqual(want, self.plain.generate(PROMPT, 24))
            self.assertEqual(m.generate(PROMPT, 24, seed=3), want)
            self.assertEqual(cli_generate(PROMPT, 24, "--seed", "3", model=d), want)
            self.assertEqual(m.generate_batch([PROMPT], 24, seed=3), [want])
            # each argument given overrides its default alone
            self.assertEqual(m.generate(PROMPT, 24, temperature=0), self.plain.generate(PROMPT, 24))
            self.assertEqual(m.generate(PROMPT, 24, top_k=5, seed=3),
                             self.plain.generate(PROMPT, 24, seed=3, **dict(hot, top_k=5)))

    def test_eos_token_id_list(self):
        ids = self.plain.generate_ids(PROMPT, 24)
        k = next(i for i in range(1, len(ids)) if ids[i] not in ids[:i])
        d = self.model_dir({"eos_token_id": [self.plain.eos, ids[k]]})
        with ssmc.Model(d, backend="cpu", slots=2) as m:
            self.assertEqual(m.eos, self.plain.eos)
            self.assertTrue(m.is_eos(ids[k]) and m.is_eos(m.eos))
            self.assertFalse(m.is_eos(ids[0]) or self.plain.is_eos(ids[k]))
            self.assertEqual(m.generate_ids(PROMPT, 24), ids[:k])
            self.assertEqual(m.generate_batch([PROMPT], 24), [self.plain.decode(ids[:k])])
            self.assertEqual(m.generate_ids(PROMPT, 24, stop_at_eos=False), ids)
        # the eos= option replaces the file's list
        with ssmc.Model(d, backend="cpu", eos=self.plain.eos) as m:
            self.assertFalse(m.is_eos(ids[k]))
            self.assertEqual(m.generate_ids(PROMPT, 24), ids)

    def test_malformed_file_names_the_field(self):
        d = self.model_dir({"top_p": 0})
        with self.assertRaisesRegex(ssmc.InvalidError, "generation_config.json: top_p: expected"):
            ssmc.Model(d, backend="cpu")


class LibraryTest(unittest.TestCase):
    def test_missing_library_says_how_to_point_at_it(self):
        code = "import ssmc\ntry:\n  ssmc.Model('x')\nexcept ssmc.LibraryNotFoundError as e:\n" \
               "  print(e)\n"
        env = dict(os.environ, SSMC_LIBRARY="/nonexistent/libssmc.so",
                   PYTHONPATH=os.path.join(ROOT, "python"))
        out = subprocess.run([sys.executable, "-c", code], env=env, check=True,
                             stdout=subprocess.PIPE).stdout.decode()
        self.assertIn("SSMC_LIBRARY=/nonexistent/libssmc.so", out)
        self.assertIn("set SSMC_LIBRARY", out)

    def test_pip_installs_the_package(self):
        missing = [m for m in ("pip", "setuptools", "wheel") if not importlib.util.find_spec(m)]
        if missing:
            self.skipTest("%s has no %s (Debian's python3-pip brings them: "
                          "tools/install-deps.sh --test)" % (sys.executable, ", ".join(missing)))
        with tempfile.TemporaryDirectory() as tmp:
            # from a copy: setuptools writes its build/ and egg-info beside the sources
            source = os.path.join(tmp, "source")
            shutil.copytree(os.path.join(ROOT, "python"), source,
                            ignore=shutil.ignore_patterns("__pycache__"))
            target = os.path.join(tmp, "target")
            subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index",
                            "--root-user-action=ignore", "--disable-pip-version-check",
                            "--no-build-isolation", "--no-deps", "--target", target, source],
                           check=True)
            code = "import ssmc; print(ssmc.__file__); print(ssmc.version())"
            library = os.path.abspath(os.environ.get("SSMC_LIBRARY", "build/libssmc.so"))
            out = subprocess.run([sys.executable, "-c", code], cwd=tmp, check=True,
                                 env=dict(os.environ, PYTHONPATH=target, SSMC_LIBRARY=library),
                                 stdout=subprocess.PIPE).stdout.decode().split()
            self.assertTrue(out[0].startswith(target), out)
            self.assertEqual(out[1], "0.2.0")


if __name__ == "__main__":
    if os.environ.get("SSM_TEST_SANITIZED"):
        print("python_ssmc: skipped in a sanitized build (python3 would have to run with "
              "libasan preloaded, and LeakSanitizer reports the interpreter's own memory)")
        sys.exit(77)
    unittest.main(verbosity=2)
