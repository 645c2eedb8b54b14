"""Optional dependencies: a missing one gives one line naming the pip extra that brings it."""

from __future__ import annotations

import builtins
import sys

import pytest

from perfmodel.extras import MissingExtra, require


def block(monkeypatch, *names):
    """Make ``names`` (and their submodules) unimportable for this test: a None
    entry in sys.modules, and an import hook refusing them."""
    for name in list(sys.modules):
        if any(name == n or name.startswith(n + ".") for n in names):
            monkeypatch.delitem(sys.modules, name)
    for name in names:
        monkeypatch.setitem(sys.modules, name, None)
    real_import = builtins.__import__

    def refusing(name, *args, **kwargs):
        if any(name == n or name.startswith(n + ".") for n in names):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", refusing)


def test_require_returns_the_module():
    import json

    assert require("json", "report") is json
    assert require("os.path", "mpi") is sys.modules["os.path"]


def test_missing_module_names_the_extra(monkeypatch):
    block(monkeypatch, "mpi4py")
    with pytest.raises(MissingExtra) as info:
        require("mpi4py.MPI", "mpi")
    assert str(info.value) == \
        "perfmodel: multi-rank runs need MPI: pip install 'perfmodel[mpi]'"
    assert isinstance(info.value, ImportError) and info.value.name == "mpi4py.MPI"


def test_unknown_extra_is_a_bug():
    with pytest.raises(ValueError, match="unknown extra 'gpu'"):
        require("json", "gpu")


def test_multirank_world_without_mpi4py(monkeypatch):
    """Under a launcher, the world needs mpi4py: one line naming [mpi]."""
    import perfmodel.world as world

    block(monkeypatch, "mpi4py")
    monkeypatch.setattr(world, "_WORLD", None)
    monkeypatch.setenv("PMI_RANK", "0")
    monkeypatch.setenv("PMI_SIZE", "2")
    with pytest.raises(MissingExtra, match=r"pip install 'perfmodel\[mpi\]'$"):
        world.mpi_world()


def test_single_process_world_needs_no_mpi4py(monkeypatch):
    import perfmodel.world as world

    block(monkeypatch, "mpi4py")
    monkeypatch.setattr(world, "_WORLD", None)
    for var in world.RANK_VARS + world.SIZE_VARS:
        monkeypatch.delenv(var, raising=False)
    assert world.mpi_world().size == 1


def test_report_without_matplotlib_is_one_line(monkeypatch, tmp_path, capsys):
    from perfmodel.cli.main import main

    block(monkeypatch, "matplotlib")
    (tmp_path / "cpu-x-2c" / "runs").mkdir(parents=True)
    assert main(["report", "--results", str(tmp_path), "--device", "cpu-x-2c"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["perfmodel: `perfmodel report` draws its figures with matplotlib: "
                   "pip install 'perfmodel[report]'"]


def test_figures_without_matplotlib(monkeypatch):
    from perfmodel.report.plots import collectives_figure

    block(monkeypatch, "matplotlib")
    with pytest.raises(MissingExtra, match=r"perfmodel\[report\]"):
        collectives_figure({})


def test_importing_perfmodel_needs_neither():
    """The modules that use them import without them (in a fresh interpreter)."""
    import subprocess

    code = ("import sys; sys.modules['mpi4py'] = sys.modules['matplotlib'] = None\n"
            "import perfmodel.world, perfmodel.report.plots, perfmodel.report.build\n"
            "import perfmodel.cli.main, perfmodel.store.prune\n"
            "assert perfmodel.world.mpi_world().size == 1\n")
    env = {k: v for k, v in __import__("os").environ.items()
           if k not in ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                        "PMIX_RANK")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=120)
    assert done.returncode == 0, done.stderr
