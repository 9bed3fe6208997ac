"""Model, Session and Snapshot: the Python face of ssmc.h's sessions.

A Model is one ssmc_session kept at the zero state; Model.session() forks it
(ssmc_session_fork: the weights, kernels and device are shared). A Session
remembers the last id it generated, which ssmc_session_generate leaves out of
the state, and feeds it first next time, so that its turns join up as one
text.
"""

import ctypes
import math
import numbers
import os
import queue
import threading

from . import _capi
from ._capi import check, lib

_OPTION_FIELDS = ("backend", "device", "validation", "weights", "config", "tokenizer",
                  "chunk", "max_seq", "dtype", "eos", "cache_dir", "slots")


def _path(value, what):
    if isinstance(value, (str, os.PathLike)):
        return os.fsencode(value)
    raise TypeError("%s: expected a path (str or os.PathLike), got %s"
                    % (what, type(value).__name__))


def _int(value, what, lo, hi=None):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError("%s: expected an int, got %s" % (what, type(value).__name__))
    if value < lo or (hi is not None and value > hi):
        raise ValueError("%s: %d is not in [%d, %s]" % (what, value, lo,
                                                         "inf" if hi is None else hi))
    return int(value)


def _float(value, what):
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError("%s: expected a number, got %s" % (what, type(value).__name__))
    return float(value)


def _options(kwargs):
    o = _capi.Options()
    lib().ssmc_options_init(ctypes.byref(o))
    unknown = set(kwargs) - set(_OPTION_FIELDS)
    if unknown:
        raise TypeError("Model: unknown option %s (expected one of %s)"
                        % (", ".join(sorted(unknown)), ", ".join(_OPTION_FIELDS)))
    for name, value in kwargs.items():
        if value is None:
            continue
        if name in ("backend", "dtype"):
            table = _capi.BACKENDS if name == "backend" else _capi.DTYPES
            if not isinstance(value, str):
                raise TypeError("%s: expected a str, got %s" % (name, type(value).__name__))
            if value not in table:
                raise ValueError("%s: expected one of %s, got %r"
                                 % (name, ", ".join(table), value))
            setattr(o, name, table[value])
        elif name in ("weights", "config", "tokenizer", "cache_dir"):
            setattr(o, name, _path(value, name))
        elif name == "validation":
            o.validation = 1 if value else 0
        elif name == "eos":
            o.eos = _int(value, name, -1, 2**31 - 1)
        else:
            setattr(o, name, _int(value, name, -1 if name == "device" else 0, 2**31 - 1))
    return o


def _sampler(handle, max_tokens, temperature=None, top_k=None, top_p=None, min_p=None,
             repeat_penalty=None, seed=0, stop_at_eos=True):
    """The ssmc_generate_options of a call: the model's defaults
    (ssmc_session_generate_defaults: its generation_config.json), then each
    setting given (None: not given)."""
    # the sampler counts its draws in 24 bits (ssmc_generate_options.step)
    _int(max_tokens, "max_tokens", 1, 2**24 - 1)
    g = _capi.GenerateOptions()
    check(lib().ssmc_session_generate_defaults(handle, ctypes.byref(g), None))
    if temperature is not None:
        g.temperature = _float(temperature, "temperature")
        if not g.temperature >= 0:
            raise ValueError("temperature: %r is not >= 0" % temperature)
    if top_k is not None:
        g.top_k = _int(top_k, "top_k", 0, 2**31 - 1)
    if top_p is not None:
        g.top_p = _float(top_p, "top_p")
        if not 0 < g.top_p <= 1:
            raise ValueError("top_p: %r is not in (0, 1]" % top_p)
    if min_p is not None:
        g.min_p = _float(min_p, "min_p")
        if not 0 <= g.min_p <= 1:
            raise ValueError("min_p: %r is not in [0, 1]" % min_p)
    if repeat_penalty is not None:
        g.repeat_penalty = _float(repeat_penalty, "repeat_penalty")
        if not 0 < g.repeat_penalty < math.inf:
            raise ValueError("repeat_penalty: %r is not a number above 0" % repeat_penalty)
    g.seed = _int(seed, "seed", 0, 2**24 - 1)
    g.stop_at_eos = 1 if stop_at_eos else 0
    return g


class _Closing:
    """close() when leaving a with block, or when collected."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown: the module may be gone
            pass


class _Handle(_Closing):
    """Owns one C object: freed by close(), by leaving a with block, or when
    collected."""

    _free = None  # the C function that frees the handle

    def __init__(self, handle):
        self._h = handle

    def close(self):
        """Frees the C object; the Python one is unusable after (closing twice
        is fine)."""
        h, self._h = self._h, None
        if h:
            getattr(lib(), self._free)(h)

    def _handle(self):
        if not self._h:
            raise ValueError("%s is closed" % type(self).__name__)
        return self._h


class Snapshot(_Handle):
    """A copy of a session's state, kept where the model runs (device memory
    on Vulkan). It restores into the session it came from or any session of
    the same Model (ssmc_session_restore)."""

    _free = "ssmc_snapshot_free"

    def __init__(self, handle, pending):
        super().__init__(handle)
        self._pending = pending

    @property
    def position(self):
        """Tokens the state covers."""
        return lib().ssmc_snapshot_position(self._handle())

    @property
    def nbytes(self):
        """The size of the state."""
        return lib().ssmc_snapshot_bytes(self._handle())


class _Texts:
    """Encoding and decoding with the tokenizer of a C session."""

    def _tokenizer(self):
        t = ctypes.c_void_p()
        check(lib().ssmc_session_tokenizer(self._handle(), ctypes.byref(t)))
        return t

    def encode(self, text):
        """Text to token ids (a list of int), nothing added around it."""
        if not isinstance(text, str):
            raise TypeError("encode: expected a str, got %s" % type(text).__name__)
        data = text.encode("utf-8", "surrogatepass")
        ids = ctypes.POINTER(ctypes.c_int32)()
        n = ctypes.c_size_t()
        check(lib().ssmc_tokenizer_encode(self._tokenizer(), data, len(data), ctypes.byref(ids),
                                          ctypes.byref(n)))
        try:
            return ids[:n.value]
        finally:
            _capi.free(ids)

    def decode(self, ids, skip_special=True):
        """Token ids to text, leaving special tokens out when `skip_special`."""
        arr = _id_array(ids, "decode")
        out = ctypes.c_void_p()
        n = ctypes.c_size_t()
        check(lib().ssmc_tokenizer_decode(self._tokenizer(), arr, len(arr),
                                          1 if skip_special else 0, ctypes.byref(out),
                                          ctypes.byref(n)))
        try:
            return ctypes.string_at(out, n.value).decode("utf-8", "replace")
        finally:
            _capi.free(out)

    def token_id(self, token):
        """The id of the token spelled exactly `token` ("<|endoftext|>"), or None."""
        if not isinstance(token, str):
            raise TypeError("token_id: expected a str, got %s" % type(token).__name__)
        i = lib().ssmc_tokenizer_token_id(self._tokenizer(), token.encode("utf-8"))
        return None if i < 0 else i

    def _ids(self, prompt, what):
        if isinstance(prompt, str):
            return self.encode(prompt)
        return list(_id_array(prompt, what))


def _id_array(ids, what):
    if isinstance(ids, (str, bytes)) or not hasattr(ids, "__iter__"):
        raise TypeError("%s: expected a sequence of int token ids, got %s"
                        % (what, type(ids).__name__))
    ids = [_int(i, what + ": token id", 0, 2**31 - 1) for i in ids]
    return (ctypes.c_int32 * len(ids))(*ids)


class Tokenizer(_Handle, _Texts):
    """A Hugging Face tokenizer.json on its own (ssmc_tokenizer_open): `path`
    is the file or a directory that holds one."""

    _free = "ssmc_tokenizer_close"

    def __init__(self, path):
        super().__init__(None)
        out = ctypes.c_void_p()
        check(lib().ssmc_tokenizer_open(_path(path, "Tokenizer"), ctypes.byref(out)))
        self._h = out.value

    def _tokenizer(self):
        return self._handle()

    @property
    def vocab_size(self):
        """Largest id + 1."""
        return lib().ssmc_tokenizer_vocab_size(self._handle())


class Session(_Handle, _Texts):
    """A conversation with the model: its state after every token fed so far.
    Made by Model.session() or Session.fork()."""

    _free = "ssmc_session_close"

    def __init__(self, handle, model, family=None):
        super().__init__(handle)
        self._model = model  # keeps the Model (and its library) alive
        self._pending = []   # the last id generated, not yet in the state
        # what the sessions of one loaded model share: one of them streaming
        # (on a thread of its own) keeps the others from the backend
        self._family = family or {"streaming": False}

    def _handle(self):
        if self._family["streaming"]:
            raise RuntimeError("ssmc: a stream of this model is running: finish it or close() "
                               "it first")
        return super()._handle()

    @property
    def position(self):
        """Tokens the state covers (the last generated id joins it with the
        next feed or generate)."""
        return lib().ssmc_session_position(self._handle())

    def feed(self, text):
        """Runs `text` (a str, or a sequence of token ids) through the model."""
        ids = self._pending + self._ids(text, "feed")
        if not ids:
            return
        arr = (ctypes.c_int32 * len(ids))(*ids)
        check(lib().ssmc_session_feed(self._handle(), arr, len(ids), _capi.logits_fn(), None))
        self._pending = []

    def generate(self, prompt=None, max_tokens=16, *, temperature=None, top_k=None, top_p=None,
                 min_p=None, repeat_penalty=None, seed=0, stop_at_eos=True):
        """Feeds `prompt` (a str, a sequence of token ids, or None to go on
        from what was fed and generated so far) and returns the text of up to
        `max_tokens` generated tokens. temperature 0 is greedy (the first
        largest logit); otherwise it samples with top_k (0: off), top_p (1:
        off), min_p (0: off; tokens less likely than min_p times the likeliest
        are left out) and seed (in [0, 2^24): the same seed draws the same tokens).
        repeat_penalty (above 0; 1: off) first divides the positive logits of
        the tokens already in the sequence by it and multiplies their negative
        ones (transformers' repetition_penalty), greedy or sampled.
        A setting left out (None) is the model's default
        (Model.generation_defaults: its generation_config.json, as `ssmc run`
        takes it; greedy and no penalty without one).
        With stop_at_eos, generation stops at an end-of-text token
        (Model.is_eos), which is not returned."""
        return "".join(self.stream(prompt, max_tokens, temperature=temperature, top_k=top_k,
                                   top_p=top_p, min_p=min_p, repeat_penalty=repeat_penalty,
                                   seed=seed, stop_at_eos=stop_at_eos))

    def generate_ids(self, prompt=None, max_tokens=16, **sampling):
        """generate(), returning the generated token ids (a list of int)."""
        ids = []
        for _ in self._stream(*self._start(prompt, max_tokens, sampling), ids):
            pass
        return ids

    def stream(self, prompt=None, max_tokens=16, **sampling):
        """generate(), yielding the text as it is generated: each piece whole
        UTF-8 characters, the pieces together generate()'s text. Leaving the
        loop early stops generation; the session goes on from the last id
        drawn."""
        return self._stream(*self._start(prompt, max_tokens, sampling), None)

    def _start(self, prompt, max_tokens, sampling):
        unknown = set(sampling) - {"temperature", "top_k", "top_p", "min_p", "repeat_penalty", "seed",
                                   "stop_at_eos"}
        if unknown:
            raise TypeError("generate: unknown argument %s" % ", ".join(sorted(unknown)))
        g = _sampler(self._handle(), max_tokens, **sampling)
        ids = list(self._pending)
        if prompt is not None:
            ids += self._ids(prompt, "prompt")
        if not ids:
            raise ValueError("generate: no prompt, and nothing generated to go on from")
        return ids, max_tokens, g

    def _stream(self, ids, max_tokens, g, out_ids):
        # ssmc_session_generate runs on a thread of its own (ctypes lets go of
        # the GIL) while this generator hands out what its callback decodes.
        h = self._handle()
        decoder = ctypes.c_void_p()
        check(lib().ssmc_decoder_create(self._tokenizer(), 1, ctypes.byref(decoder)))
        pieces = queue.Queue()
        stop = threading.Event()
        failures = []

        def put(status, text, n):
            if status:
                failures.append(status)
                return 1
            if n.value:
                pieces.put(ctypes.string_at(text, n.value).decode("utf-8", "replace"))
            return 0

        def on_token(token, user):
            text, n = ctypes.c_void_p(), ctypes.c_size_t()
            if put(lib().ssmc_decoder_feed(decoder, token, ctypes.byref(text), ctypes.byref(n)),
                   text, n):
                return 1
            return 1 if stop.is_set() else 0

        callback = _capi.token_fn(on_token)
        g.on_token = callback
        prompt = (ctypes.c_int32 * len(ids))(*ids)
        out = (ctypes.c_int32 * max_tokens)()
        count = ctypes.c_size_t()

        def work():
            try:
                failures.insert(0, lib().ssmc_session_generate(h, prompt, len(ids), max_tokens,
                                                               ctypes.byref(g), out,
                                                               ctypes.byref(count)))
                text, n = ctypes.c_void_p(), ctypes.c_size_t()
                put(lib().ssmc_decoder_flush(decoder, ctypes.byref(text), ctypes.byref(n)),
                    text, n)
            finally:
                pieces.put(None)

        self._family["streaming"] = True
        worker = threading.Thread(target=work, daemon=True)
        worker.start()
        finished = False
        try:
            while True:
                p = pieces.get()
                if p is None:
                    break
                yield p
            finished = True
        finally:
            stop.set()
            worker.join()
            self._family["streaming"] = False
            lib().ssmc_decoder_destroy(decoder)
            generated = out[:count.value]
            if out_ids is not None:
                out_ids.extend(generated)
            failures = [f for f in failures if f]
            # generate feeds the prompt and every id it returns but the last,
            # and that one too when it stopped at the end-of-text id
            hit_eos = finished and len(generated) < max_tokens
            self._pending = [] if failures or hit_eos or not generated else [generated[-1]]
            for status in failures[1:]:
                lib().ssmc_status_free(status)
            check(failures[0] if failures else None)

    def reset(self):
        """Back to the zero state: nothing fed."""
        check(lib().ssmc_session_reset(self._handle()))
        self._pending = []

    def snapshot(self):
        """A Snapshot of the state now."""
        snap = ctypes.c_void_p()
        check(lib().ssmc_session_snapshot(self._handle(), ctypes.byref(snap)))
        return Snapshot(snap.value, list(self._pending))

    def restore(self, snapshot):
        """Sets the state to `snapshot`'s (one of the same Model)."""
        if not isinstance(snapshot, Snapshot):
            raise TypeError("restore: expected a Snapshot, got %s" % type(snapshot).__name__)
        check(lib().ssmc_session_restore(self._handle(), snapshot._handle()))
        self._pending = list(snapshot._pending)

    def fork(self):
        """A new Session whose state starts as a copy of this one's and then
        goes its own way."""
        out = ctypes.c_void_p()
        check(lib().ssmc_session_fork(self._handle(), ctypes.byref(out)))
        s = Session(out.value, self._model, self._family)
        s._pending = list(self._pending)
        return s

    def save(self, path):
        """Saves the state to the file `path`, atomically. The last generated
        id is fed first, so the file holds everything so far; the next
        generate then needs a prompt."""
        p = _path(path, "save")
        self.feed([])
        check(lib().ssmc_session_save_state(self._handle(), p))

    def load(self, path):
        """Restores a state saved by save() (or `ssmc run --state-out`) from
        a model with the same architecture and weights."""
        check(lib().ssmc_session_load_state(self._handle(), _path(path, "load")))
        self._pending = []

    # ---- many sequences in one step (a Model opened with slots=N) ----------

    @property
    def slots(self):
        """The slots of the model's batched program (0: none)."""
        return lib().ssmc_session_slots(self._handle())

    def join_slot(self, slot, *, temperature=None, top_k=None, top_p=None, min_p=None,
                  repeat_penalty=None, seed=0):
        """Copies this session's state (what it was fed; not the last
        generated id, which step_slots() then takes as the slot's first) into
        slot `slot` of the batched program, with these sampler settings (None:
        the model's default, as for generate()). The batched program has no
        repetition penalty: a penalty other than 1, given or the model's
        default, is refused."""
        g = _sampler(self._handle(), 1, temperature=temperature, top_k=top_k, top_p=top_p,
                     min_p=min_p, repeat_penalty=repeat_penalty, seed=seed)
        check(lib().ssmc_session_join_slot(self._handle(), _int(slot, "slot", 0, 2**31 - 1),
                                           ctypes.byref(g)))

    def take_slot(self, slot):
        """Copies slot `slot`'s state into this session: what it held when a
        session joined it and every id fed to it since."""
        check(lib().ssmc_session_take_slot(self._handle(), _int(slot, "slot", 0, 2**31 - 1)))
        self._pending = []

    def leave_slot(self, slot):
        """Marks slot `slot` as holding no sequence until a session joins it."""
        check(lib().ssmc_session_leave_slot(self._handle(), _int(slot, "slot", 0, 2**31 - 1)))

    def step_slots(self, first, steps):
        """Runs `steps` steps of every slot: slot i is fed first[i] (one id
        a slot) and then each id it draws. Returns the ids drawn, a list of
        `steps` lists of one id a slot (those of slots that no session joined
        mean nothing)."""
        n = self.slots
        if n == 0:
            raise ValueError("step_slots: the model has no slots (open it with slots=N)")
        first = list(first)
        if len(first) != n:
            raise ValueError("step_slots: expected %d first ids (one a slot), got %d" % (n, len(first)))
        steps = _int(steps, "steps", 1, 2**24 - 1)
        arr = _id_array(first, "step_slots")
        out = (ctypes.c_int32 * (steps * n))()
        check(lib().ssmc_session_step_slots(self._handle(), arr, steps, out))
        return [list(out[j * n:(j + 1) * n]) for j in range(steps)]


class Model(_Texts, _Closing):
    """A model loaded on one backend: a Hugging Face model directory, an
    architecture YAML (with config=), or a compiled .ssmb bundle (Vulkan).
    Keyword options are ssmc_options' fields: backend ("vulkan", "cpu" or "auto"),
    device, validation, weights, config, tokenizer, chunk, max_seq, dtype
    ("auto", "f32", "f16", "bf16", "q8_0", "q4_0"), eos, cache_dir, slots (sequences
    that generate_batch and the slot methods of its sessions step together; 0: none).

    generate() and stream() start from nothing each time; session() gives a
    Session that keeps its state from one call to the next. close() (or a
    with block) frees the model once its sessions are closed too."""

    def __init__(self, path, **options):
        self._root = None
        p = _path(path, "Model")
        o = _options(options)
        out = ctypes.c_void_p()
        check(lib().ssmc_session_open(p, ctypes.byref(o), ctypes.byref(out)))
        self._root = Session(out.value, self)  # kept at the zero state

    def close(self):
        """Frees this model's own session (its Sessions stay usable)."""
        if self._root is not None:
            self._root.close()

    def _handle(self):
        if self._root is None or not self._root._h:
            raise ValueError("Model is closed")
        return self._root._handle()

    def _tokenizer(self):
        self._handle()
        return self._root._tokenizer()

    def generate(self, prompt, max_tokens=16, **sampling):
        """Session.generate() from the zero state."""
        return "".join(self.stream(prompt, max_tokens, **sampling))

    def generate_ids(self, prompt, max_tokens=16, **sampling):
        """Session.generate_ids() from the zero state."""
        self._handle()
        try:
            return self._root.generate_ids(prompt, max_tokens, **sampling)
        finally:
            self._root.reset()

    def stream(self, prompt, max_tokens=16, **sampling):
        """Session.stream() from the zero state."""
        if prompt is None:
            raise TypeError("stream: a Model needs a prompt (a Session goes on from one)")
        self._handle()
        inner = self._root.stream(prompt, max_tokens, **sampling)

        def run():
            try:
                yield from inner
            finally:
                inner.close()
                self._root.reset()
        return run()

    def session(self):
        """A new Session of this model at the zero state, sharing its weights,
        kernels and device (ssmc_session_fork)."""
        return self._root.fork()

    @property
    def slots(self):
        """The slots of the batched program (the slots= option; 0: none)."""
        return lib().ssmc_session_slots(self._handle())

    def generate_batch(self, prompts, max_tokens=16, *, temperature=None, top_k=None, top_p=None,
                       min_p=None, repeat_penalty=None, seed=0, stop_at_eos=True,
                       steps_per_call=16):
        """The text generate() gives each of `prompts` (str or sequences of
        ids), decoded together: up to `slots` prompts at a time step in one
        batched program, reading each weight once for all of them. Each
        prompt's sampler draws as generate()'s with the same settings would
        (None: the model's default). The batched program has no repetition
        penalty, so with a penalty other than 1 (given, or the model's
        default) the prompts are generated one after another instead. Needs a
        Model opened with slots=N. Returns a list of str."""
        n = self.slots
        if n == 0:
            raise ValueError("generate_batch: the model has no slots (open it with slots=N)")
        sampling = dict(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p, seed=seed)
        g = _sampler(self._handle(), max_tokens, repeat_penalty=repeat_penalty, **sampling)
        steps_per_call = _int(steps_per_call, "steps_per_call", 1, 2**24 - 1)
        ids = [self._ids(p, "prompt") for p in prompts]
        if any(not p for p in ids):
            raise ValueError("generate_batch: an empty prompt")
        if g.repeat_penalty not in (0.0, 1.0):
            return [self.generate(p, max_tokens, repeat_penalty=g.repeat_penalty,
                                  stop_at_eos=stop_at_eos, **sampling) for p in ids]
        texts = [None] * len(ids)
        sessions = [self.session() for _ in range(min(n, len(ids)))]
        try:
            for wave in range(0, len(ids), n):
                batch = list(range(wave, min(wave + n, len(ids))))
                for i, k in enumerate(batch):
                    s = sessions[i]
                    s.reset()
                    s.feed(ids[k][:-1])
                    s.join_slot(i, repeat_penalty=1, **sampling)
                last = [ids[k][-1] for k in batch] + [0] * (n - len(batch))
                out = [[] for _ in batch]
                done = [False] * len(batch)
                while not all(done):
                    for row in sessions[0].step_slots(last, steps_per_call):
                        for i in range(len(batch)):
                            if done[i]:
                                continue
                            if stop_at_eos and self.is_eos(row[i]):
                                done[i] = True
                            else:
                                out[i].append(row[i])
                                done[i] = len(out[i]) == max_tokens
                        last = row
                for i, k in enumerate(batch):
                    sessions[i].leave_slot(i)
                    texts[k] = self.decode(out[i])
        finally:
            for s in sessions:
                s.close()
        return texts

    @property
    def vocab(self):
        """The vocabulary size of the model's logits."""
        return lib().ssmc_session_vocab(self._handle())

    @property
    def eos(self):
        """The end-of-text id, or None: the eos= option, else the first of
        generation_config.json's eos_token_id, else config.json's, else the
        tokenizer's <|endoftext|>."""
        e = lib().ssmc_session_eos(self._handle())
        return None if e < 0 else e

    def is_eos(self, token):
        """Whether id `token` ends generation (stop_at_eos): the eos= option
        when given, else any id of generation_config.json's eos_token_id (an
        id or a list), else Model.eos."""
        return bool(lib().ssmc_session_is_eos(self._handle(), _int(token, "token", -2**31,
                                                                    2**31 - 1)))

    @property
    def generation_defaults(self):
        """The sampler settings that generate() and its kin take when one is
        left out, from the model directory's generation_config.json as `ssmc
        run` takes them (with do_sample true: temperature, default 1, top_k,
        default 50 as transformers, top_p and min_p; repetition_penalty in
        any case): a dict with temperature, top_k, top_p, min_p and
        repeat_penalty, and "from", the list of the file's fields taken."""
        g = _capi.GenerateOptions()
        fields = ctypes.c_char_p()
        check(lib().ssmc_session_generate_defaults(self._handle(), ctypes.byref(g),
                                                   ctypes.byref(fields)))
        names = _capi.text(fields.value)
        return {"temperature": g.temperature, "top_k": g.top_k, "top_p": g.top_p,
                "min_p": g.min_p, "repeat_penalty": g.repeat_penalty,
                "from": names.split(", ") if names else []}

    @property
    def chunk(self):
        """Prompt tokens one prefill run processes."""
        return lib().ssmc_session_chunk(self._handle())

    @property
    def max_seq(self):
        """The most positions a session holds (0: no bound)."""
        return lib().ssmc_session_max_seq(self._handle())

    @property
    def dtype(self):
        """How the matmul and embedding weights are kept: "f32", "bf16", ..."""
        return _capi.text(lib().ssmc_session_dtype(self._handle()))

    @property
    def architecture(self):
        """"mamba", "mamba2", "jamba", ..."""
        return _capi.text(lib().ssmc_session_architecture(self._handle()))

    @property
    def device(self):
        """"cpu", or the GPU's name."""
        return _capi.text(lib().ssmc_session_device(self._handle()))

    @property
    def model_dir(self):
        """Where the model's own files (tokenizer.json) are looked for."""
        return _capi.text(lib().ssmc_session_model_dir(self._handle()))
