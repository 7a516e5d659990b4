"""matplotlib is an extra: a chart asked for without it is a clear error naming the extra, before any run."""

import sys

import pytest

from tf_autopar import _plots
from tf_autopar.cli.main import main


@pytest.fixture
def no_matplotlib(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` now raises ImportError


def test_pyplot_without_matplotlib_names_the_extra(no_matplotlib):
    with pytest.raises(ValueError, match=r"tf_autopar\[plots\]"):
        _plots.pyplot()


def test_validate_plot_without_matplotlib_fails_before_running(no_matplotlib, tmp_path, capsys):
    assert main(["validate", "--quick", "--plot", str(tmp_path / "v.png"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "tf_autopar[plots]" in err and "validating" not in err
    assert not (tmp_path / "v.png").exists()


def test_analyze_plot_without_matplotlib_fails_before_analysing(no_matplotlib, tmp_path, capsys):
    assert main(["analyze", "no_such_model", "--plot", str(tmp_path / "w.png")]) == 2
    assert "tf_autopar[plots]" in capsys.readouterr().err  # not the unknown model: the check comes first
