"""``cemlab.lazy.frozen_imports``: heavy imports without the cyclic garbage collector, then frozen
out of its later collections. In child interpreters: the collector's state is the whole process's."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _child(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_imports_run_without_collections_and_are_frozen_after():
    out = _child("""\
        import gc, sys
        from cemlab.lazy import frozen_imports

        collections = []
        gc.callbacks.append(lambda phase, info: phase == "start" and collections.append(info["generation"]))
        before = gc.get_freeze_count()
        with frozen_imports():
            inside = gc.isenabled()
            import decimal, fractions, statistics  # thousands of objects: collections would run
            kept = [[i] for i in range(50_000)]
        during = list(collections)
        frozen = gc.get_freeze_count() - before
        assert not inside and during == [] and gc.isenabled(), (inside, during)
        assert frozen > 50_000, frozen  # the new module objects and what the block kept
        assert gc.is_tracked(kept) and all(m in sys.modules for m in ("decimal", "fractions", "statistics"))
        gc.collect()  # a later full collection does not walk (or free) what is frozen
        assert gc.get_freeze_count() - before == frozen
        print("ok", frozen)
        """)
    assert out.startswith("ok")


def test_the_collectors_state_is_restored_also_after_an_error():
    out = _child("""\
        import gc
        from cemlab.lazy import frozen_imports

        gc.disable()  # a process that runs without the collector keeps it off
        with frozen_imports():
            pass
        assert not gc.isenabled()
        gc.enable()
        try:
            with frozen_imports():
                import cemlab_no_such_module  # noqa: F401
        except ImportError:
            pass
        assert gc.isenabled()  # a failed import does not leave the collector off
        print("ok")
        """)
    assert out.startswith("ok")
