"""matplotlib is an extra: a chart asked for without it is a clear error naming the extra, before any
run; validate's chart needs none."""

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


def test_validate_draws_its_chart_without_matplotlib(no_matplotlib, tmp_path):
    """validate's chart is drawn with zlib alone (tf_autopar/_png.py): every quick start writes it."""
    from test_validation_headline import served_doc

    from tf_autopar.validation import chart

    chart.write(served_doc(), str(tmp_path / "v.png"))
    assert (tmp_path / "v.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_analyze_plot_without_matplotlib_fails_before_analysing(no_matplotlib, tmp_path, capsys):
    assert main(["analyze", "no_such_model", "--plot", str(tmp_path / "w.png")]) == 2
    assert "tf_autopar[plots]" in capsys.readouterr().err  # not the unknown model: the check comes first
