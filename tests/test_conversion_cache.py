"""Converted models kept on disk (engines/conversion_cache.py): kept whole, found by their key,
dropped when damaged, bounded, and off when asked. Files only: no TensorFlow here (the real
conversions through it are in test_engines.py)."""

from __future__ import annotations

import logging
import os
import time

import pytest

from tf_autopar.runtime.fastpath.engines import conversion_cache as cc

NAMES = {"inputs": ["x:0"], "outputs": ["y:0"]}


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TF_AUTOPAR_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv(cc.LIMIT_VAR, "1")  # 1 MB
    return tmp_path / "cache" / "conversions"


def _converted(tmp_path, name: str, size: int) -> str:
    """A conversion's folder as the child leaves it: its inputs and what it wrote."""
    directory = tmp_path / f"converted-{name}"
    directory.mkdir()
    (directory / "graph.pb").write_bytes(b"g" * 10)
    (directory / "names.json").write_text("{}")
    (directory / "model.xml").write_text(f"<net name='{name}'/>")
    (directory / "model.bin").write_bytes(os.urandom(size))
    return str(directory)


def test_a_kept_conversion_is_found_whole_and_its_inputs_are_not_kept(cache, tmp_path):
    made = _converted(tmp_path, "a", 1000)
    entry = cc.key("openvino", b"graph", NAMES)
    cc.store(entry, made)
    assert sorted(os.listdir(cache / entry)) == [cc.MANIFEST, "model.bin", "model.xml"]
    target = tmp_path / "fresh"
    target.mkdir()
    assert cc.fetch(entry, str(target), "model.xml")
    for name in ("model.xml", "model.bin"):
        assert (target / name).read_bytes() == open(os.path.join(made, name), "rb").read()
    assert not cc.fetch(cc.key("openvino", b"another graph", NAMES), str(tmp_path), "model.xml")


def test_the_key_follows_the_graph_the_names_and_the_engine():
    base = cc.key("onnx", b"graph", NAMES)
    assert base == cc.key("onnx", b"graph", dict(NAMES))
    assert len({base, cc.key("onnx", b"graph!", NAMES), cc.key("openvino", b"graph", NAMES)}) == 3
    assert base != cc.key("onnx", b"graph", {"inputs": ["x:0"], "outputs": ["z:0"]})


def test_a_damaged_copy_is_dropped_and_said_then_converted_again(cache, tmp_path, caplog):
    entry = cc.key("openvino", b"graph", NAMES)
    cc.store(entry, _converted(tmp_path, "a", 1000))
    with open(cache / entry / "model.bin", "r+b") as fh:
        fh.truncate(10)  # a disk that filled up, a copy cut short
    target = tmp_path / "fresh"
    target.mkdir()
    with caplog.at_level(logging.WARNING, logger="tf_autopar.runtime"):
        assert not cc.fetch(entry, str(target), "model.xml")
    assert "is damaged (model.bin is not 1000 bytes): converting again" in caplog.text
    assert not (cache / entry).exists() and os.listdir(target) == []


def test_a_copy_without_the_model_the_engine_reads_is_dropped_and_nothing_linked(cache, tmp_path, caplog):
    entry = cc.key("onnx", b"graph", NAMES)
    cc.store(entry, _converted(tmp_path, "a", 1000))  # an OpenVINO pair where an ONNX model is looked for
    target = tmp_path / "fresh"
    target.mkdir()
    with caplog.at_level(logging.WARNING, logger="tf_autopar.runtime"):
        assert not cc.fetch(entry, str(target), "model.onnx")
    assert "is damaged (no model.onnx): converting again" in caplog.text
    assert not (cache / entry).exists() and os.listdir(target) == []


def test_the_least_recently_used_go_first_beyond_the_bound(cache, tmp_path):
    keys = [cc.key("onnx", bytes([i]), NAMES) for i in range(3)]
    for i, entry in enumerate(keys[:2]):
        cc.store(entry, _converted(tmp_path, str(i), 400_000))
        os.utime(cache / entry, (time.time() - 100 + i, time.time() - 100 + i))
    target = tmp_path / "fresh"
    target.mkdir()
    assert cc.fetch(keys[0], str(target), "model.xml")  # used now: the second is now the least recently used
    cc.store(keys[2], _converted(tmp_path, "2", 400_000))  # 1.2 MB in all against 1 MB
    assert sorted(os.listdir(cache)) == sorted([keys[0], keys[2]])


def test_one_larger_than_the_bound_is_not_kept(cache, tmp_path):
    cc.store(cc.key("onnx", b"g", NAMES), _converted(tmp_path, "big", 2 << 20))
    assert not cache.exists() or os.listdir(cache) == []


def test_zero_keeps_none_and_reads_none(cache, tmp_path, monkeypatch):
    entry = cc.key("onnx", b"g", NAMES)
    cc.store(entry, _converted(tmp_path, "a", 100))
    monkeypatch.setenv(cc.LIMIT_VAR, "0")
    assert not cc.fetch(entry, str(tmp_path), "model.xml")
    cc.store(cc.key("onnx", b"h", NAMES), _converted(tmp_path, "b", 100))
    assert os.listdir(cache) == [entry]


def test_a_garbled_bound_is_named_and_nothing_is_kept(cache, tmp_path, monkeypatch):
    monkeypatch.setenv(cc.LIMIT_VAR, "lots")
    with pytest.raises(ValueError, match=f"{cc.LIMIT_VAR} must be a number of MB .* got 'lots'"):
        cc.limit_bytes()
    cc.store(cc.key("onnx", b"g", NAMES), _converted(tmp_path, "a", 100))
    assert not cache.exists()
    assert cc.limit_bytes({}) == cc.DEFAULT_LIMIT_MB << 20
    assert cc.limit_bytes({cc.LIMIT_VAR: "0.5"}) == 1 << 19


def test_an_unwritable_cache_is_said_and_loses_nothing(tmp_path, monkeypatch, caplog):
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the cache folder would be")
    monkeypatch.setenv("TF_AUTOPAR_CACHE_DIR", str(blocked))
    monkeypatch.setenv(cc.LIMIT_VAR, "1")
    made = _converted(tmp_path, "a", 100)
    with caplog.at_level(logging.WARNING, logger="tf_autopar.runtime"):
        cc.store(cc.key("onnx", b"g", NAMES), made)
    assert "could not keep the conversion" in caplog.text
    assert sorted(os.listdir(made)) == ["graph.pb", "model.bin", "model.xml", "names.json"]
