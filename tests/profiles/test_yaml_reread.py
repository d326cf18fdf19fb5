"""read_yaml_mapping parses a file's text once (a 1,000-point sweep loads the scenario and
its profiles once per point: ``capsim validate`` of such a grid took 44 s of wall time, over
13 s of CPU, re-parsing the same YAML), and hands each caller its own copy."""

from __future__ import annotations

from capsim.profiles import files
from capsim.profiles.files import read_yaml_mapping


def test_a_file_read_twice_is_parsed_once_and_each_caller_gets_its_own_copy(tmp_path,
                                                                            monkeypatch):
    calls = []
    real = files.load_yaml
    monkeypatch.setattr(files, "load_yaml", lambda text: calls.append(text) or real(text))
    path = tmp_path / "s.yaml"
    path.write_text("engine: {max_num_seqs: 8}\nname: cached-once\n")
    first = read_yaml_mapping(path)
    first["engine"]["max_num_seqs"] = 64         # as --set edits what it read
    second = read_yaml_mapping(path)
    assert second == {"engine": {"max_num_seqs": 8}, "name": "cached-once"}
    assert len(calls) == 1


def test_an_edited_file_is_parsed_again(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("a: 1\n")
    assert read_yaml_mapping(path) == {"a": 1}
    path.write_text("a: 2\n")                   # same size, maybe the same mtime
    assert read_yaml_mapping(path) == {"a": 2}
