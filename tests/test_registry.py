"""Registries of named variants and the plugins that add to them (cemlab/models/registry.py)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from cemlab.models.registry import Registry, UnknownName


def test_unknown_name_names_the_field_and_the_choices():
    reg = Registry("colour", field="paint.colour")
    reg.register("red", 1)

    @reg.register("blue")
    class Blue:
        pass

    assert reg.names() == ["red", "blue"] and reg["blue"] is Blue and "red" in reg and "green" not in reg
    with pytest.raises(UnknownName, match=r"paint.colour='green': unknown colour; choose one of \['red', 'blue'\]"):
        reg.get("green")
    with pytest.raises(ValueError, match="already registered"):
        reg.register("red", 2)
    reg.register("red", 3, replace=True)
    assert reg["red"] == 3


def test_a_plugin_named_in_the_environment_is_imported_when_a_name_is_missing(tmp_path):
    (tmp_path / "my_plugin.py").write_text(textwrap.dedent("""
        from cemlab.models.registry import Registry
        import cemlab_test_registry as host
        host.REG.register("added", 42)
    """))
    (tmp_path / "cemlab_test_registry.py").write_text("from cemlab.models.registry import Registry\nREG = Registry('thing')\n")
    code = ("import cemlab_test_registry as h; print(h.REG.get('added'), h.REG.names())")
    env = {"PYTHONPATH": str(tmp_path), "CEMLAB_PLUGINS": "my_plugin", "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["42", "['added']"]
    env["CEMLAB_PLUGINS"] = "no_such_plugin"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and "cemlab plugin 'no_such_plugin'" in out.stderr and "PYTHONPATH" in out.stderr


def test_plugins_scope_forgets_what_a_plugin_registered_and_imports_it_afresh(tmp_path, monkeypatch):
    from cemlab.models.registry import plugins_scope

    reg = Registry("thing")
    reg.register("built-in", 0)
    (tmp_path / "scoped_plugin.py").write_text(
        "import sys\nsys.modules['cemlab.models.registry']._registries[-1].register('added', 42)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for _ in range(2):  # the second time, the plugin is imported again and registers again
        monkeypatch.setenv("CEMLAB_PLUGINS", "scoped_plugin")
        with plugins_scope():
            assert reg.get("added") == 42 and reg.names() == ["built-in", "added"]
        monkeypatch.delenv("CEMLAB_PLUGINS")
        assert reg.names() == ["built-in"] and "scoped_plugin" not in sys.modules
