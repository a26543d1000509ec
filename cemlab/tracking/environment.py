"""What a run ran on, as MLflow tags of every trained run, columns of ``trials.csv`` and a line of the
report: the CPU model, the instruction set torch's kernels dispatch to, the torch build and its math
libraries, the thread count, the numerics setting (:mod:`cemlab.numerics`) and the cemlab commit.

Why: a trial's numbers depend on the CPU's instruction set as well as on its config. The same config
trained on an AVX-512 and on an AVX2 code path gives test perplexities that differ from the 7th
significant digit on (docs/reproducibility.md, with the runs that show it), so a committed result
names the machine it came from, and ``cemlab reproduce`` judges a rerun by whether its environment
is the committed one.

:func:`environment` reads this process (call it after the run's thread count is set);
:func:`env_tags` / :func:`from_tags` turn it into MLflow tags and back; :func:`kind` is the part
that decides the numbers (everything but the commit and the CPU's marketing name); :func:`summary`
is the report's one line, which says when the runs come from more than one kind.
"""

from __future__ import annotations

import platform
import re
from functools import lru_cache

from cemlab.tracking.schema import GIT_COMMIT

#: column (``trials.csv``) -> MLflow tag
TAGS: dict[str, str] = {
    "env_cpu": "cemlab.env.cpu",            # CPU model name (/proc/cpuinfo), e.g. "Intel(R) Xeon(R) Processor"
    "env_isa": "cemlab.env.isa",            # torch.backends.cpu.get_cpu_capability(): AVX512, AVX2, DEFAULT
    "env_cpu_flags": "cemlab.env.cpu_flags",  # the vector extensions the CPU has (avx2 avx512f amx_tile ...)
    "env_torch": "cemlab.env.torch",        # torch.__version__, e.g. 2.13.0+cpu
    "env_blas": "cemlab.env.blas",          # the BLAS torch was built with and its version (MKL 2024.2 ...)
    "env_onednn": "cemlab.env.onednn",      # oneDNN (MKL-DNN) version
    "env_threads": "cemlab.env.threads",    # torch.get_num_threads() when the run started
    "env_numerics": "cemlab.env.numerics",  # cemlab.numerics mode: native | avx2
    "env_commit": GIT_COMMIT,               # the cemlab commit (the tag every run already had)
}

#: The columns whose values decide a trial's numbers on the CPU (same values: bit-identical, measured).
KIND_COLUMNS = ("env_cpu", "env_isa", "env_cpu_flags", "env_torch", "env_blas", "env_onednn", "env_threads",
                "env_numerics")

#: The vector extensions listed in ``env_cpu_flags`` (of /proc/cpuinfo's many flags, the ones kernels dispatch on).
VECTOR_FLAGS = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16",
                "avx512_fp16", "amx_tile", "amx_bf16")


@lru_cache(maxsize=1)
def _cpuinfo() -> tuple[str, str]:
    """(model name, flags) of the first CPU in /proc/cpuinfo; ("", "") where there is none (macOS)."""
    try:
        text = open("/proc/cpuinfo", encoding="utf-8", errors="replace").read()
    except OSError:
        return platform.processor() or platform.machine(), ""
    model = re.search(r"^model name\s*:\s*(.+)$", text, re.M)
    flags = re.search(r"^flags\s*:\s*(.+)$", text, re.M)
    return (model.group(1).strip() if model else platform.machine()), (flags.group(1) if flags else "")


def cpu_flags() -> str:
    """The vector extensions of :data:`VECTOR_FLAGS` this CPU reports, space-separated, in that order."""
    have = set(_cpuinfo()[1].split())
    return " ".join(f for f in VECTOR_FLAGS if f in have)


@lru_cache(maxsize=1)
def _libraries() -> tuple[str, str]:
    """(BLAS, oneDNN) as torch's build describes them (``torch.__config__.show()``)."""
    import torch

    text = torch.__config__.show()
    mkl = re.search(r"Math Kernel Library Version ([\d.]+)", text)
    blas = re.search(r"BLAS_INFO=(\w+)", text)
    dnn = re.search(r"MKL-DNN v([\w.]+)", text)
    blas_name = (blas.group(1) if blas else "unknown")
    if mkl:
        blas_name = f"mkl {mkl.group(1)}"
    return blas_name, (dnn.group(1) if dnn else "none")


def environment(threads: int | None = None, commit: str | None = None) -> dict[str, str]:
    """This process's environment, by ``trials.csv`` column (see :data:`TAGS`); ``threads``: the run's
    thread count when known (else torch's current one); ``commit``: the cemlab commit when the caller
    already has it (else asked of git)."""
    import torch

    from cemlab import numerics
    from cemlab.tracking.mlflow_run import git_commit

    blas, onednn = _libraries()
    return {
        "env_cpu": _cpuinfo()[0],
        "env_isa": torch.backends.cpu.get_cpu_capability(),
        "env_cpu_flags": cpu_flags(),
        "env_torch": torch.__version__,
        "env_blas": blas,
        "env_onednn": onednn,
        "env_threads": str(threads if threads is not None else torch.get_num_threads()),
        "env_numerics": numerics.active_mode(),
        "env_commit": commit if commit is not None else git_commit() or "",
    }


def env_tags(env: dict[str, str]) -> dict[str, str]:
    """MLflow tags of an environment (empty values left out)."""
    return {TAGS[k]: v for k, v in env.items() if k in TAGS and v}


def from_tags(tags: dict[str, str]) -> dict[str, str]:
    """The environment a run's tags record, by column; "" for what a run (an older one) did not record."""
    return {col: tags.get(tag, "") for col, tag in TAGS.items()}


def kind(env: dict[str, str]) -> tuple[str, ...]:
    """The part of an environment that decides the numbers (all but the commit)."""
    return tuple(str(env.get(c, "") or "") for c in KIND_COLUMNS)


def describe(env: dict[str, str]) -> str:
    """One environment in a line: CPU, ISA, torch, BLAS, oneDNN, threads, numerics."""
    if not env.get("env_isa"):
        return "not recorded (runs made before cemlab recorded environments)"
    return (f"{env.get('env_cpu', '?')}, {env.get('env_isa', '?')} kernels, torch {env.get('env_torch', '?')}, "
            f"{env.get('env_blas', '?')}, oneDNN {env.get('env_onednn', '?')}, {env.get('env_threads', '?')} "
            f"thread(s), numerics {env.get('env_numerics', '?')}")


def summary(rows) -> str:
    """The report's line about environments, from ``trials.csv`` rows (a DataFrame, or dicts) with runs:
    one environment, or "mixed environments" and how many runs each had."""
    records = rows.to_dict("records") if hasattr(rows, "to_dict") else list(rows)
    records = [r for r in records if str(r.get("run_id", "") or "")]
    if not records:
        return "no runs"
    counts: dict[tuple[str, ...], tuple[int, dict]] = {}
    for r in records:
        env = {c: ("" if _blank(r.get(c)) else str(r.get(c))) for c in TAGS}
        k = kind(env)
        n, first = counts.get(k, (0, env))
        counts[k] = (n + 1, first)
    if len(counts) == 1:
        return describe(next(iter(counts.values()))[1])
    parts = "; ".join(f"{n} run(s): {describe(env)}" for n, env in sorted(counts.values(), key=lambda x: -x[0]))
    return (f"MIXED ENVIRONMENTS ({len(counts)}): trials from different CPU kinds or builds are not bit-identical "
            f"(docs/reproducibility.md). {parts}")


def _blank(v) -> bool:
    return v is None or (isinstance(v, float) and v != v) or str(v) == ""


def this_kind_matches(env: dict[str, str], threads: int | None = None) -> bool:
    """Whether a recorded environment is the kind a run here with ``threads`` threads would record
    (default: torch's current count): the same numbers are then expected, bit for bit."""
    here = environment(threads=threads)
    return all(env.get(c) for c in KIND_COLUMNS) and kind(env) == kind(here)
