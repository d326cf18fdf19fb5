"""The first screen a user meets (issue 31 item 8): results before log lines, prose that
wraps between tokens, and a ``capsim --help`` listing with every description whole."""

from __future__ import annotations

import re

import pytest
from rich.console import Console

from capsim.report.terminal import Prose, wrap_prose

SMALL = {
    "name": "first", "model": "llama-3.1-8b", "hardware": "h100-sxm",
    "engine": {"max_model_len": 4096},
    "workload": {"num_requests": 20, "arrival": {"process": "poisson", "rate_per_s": 5},
                 "classes": [{"name": "chat", "weight": 1,
                              "prompt_tokens": {"dist": "fixed", "value": 200},
                              "output_tokens": {"dist": "fixed", "value": 20}}]},
    "variants": [{"name": "a"}, {"name": "b", "engine": {"max_num_batched_tokens": 1024}}],
}

# A trust paragraph as capsim/profiles/trust.py writes it (Coverage.text), with the figure
# issue 31 saw cut in two ("±6.5" / "% (n 57)").
TRUST = ("how far to trust it: vllm-v1 on h100-sxm: median |error| (n: figures) over 11 measured "
         "case(s), 4 project-collected: TTFT ±11.2 % (n 4), TPOT/ITL ±5.2 % (n 14), "
         "throughput ±6.5 % (n 57), KV capacity ±0.0 % (n 40); not measured here, all "
         "cases: E2EL ±3.0 %")
FIGURES = re.findall(r"±[\d.]+ %(?: \(n \d+\))?", TRUST)


def test_run_prints_the_summary_without_start_up_lines(tmp_path, run_cli, write_scenario):
    path = write_scenario(tmp_path, SMALL)
    code, out, err = run_cli(["run", str(path), "-o", str(tmp_path / "r"), "--workers", "1",
                              "--no-charts"])
    assert code == 0, err
    assert "capsim summary" in out
    assert "GPU KV cache size" not in out and "Model loading took" not in out
    assert "capsim run -v" in out                       # says where the lines went
    # The report keeps them, folded.
    html = (tmp_path / "r" / "index.html").read_text()
    assert "<summary>Engine start-up logs</summary>" in html
    assert "GPU KV cache size: " in html


def test_run_verbose_prints_start_up_lines_before_the_summary(tmp_path, run_cli,
                                                              write_scenario):
    path = write_scenario(tmp_path, SMALL)
    code, out, err = run_cli(["run", str(path), "-o", str(tmp_path / "r"), "--workers", "1",
                              "--no-charts", "-v"])
    assert code == 0, err
    # vLLM's two lines per variant (2 variants), then the results.
    assert out.count("GPU KV cache size:") == 2 and out.count("Model loading took") == 2
    assert out.index("a: GPU KV cache size:") < out.index("capsim summary")
    assert "capsim run -v" not in out


@pytest.mark.parametrize("width", range(30, 141, 7))
def test_prose_wraps_between_tokens_never_inside(width):
    lines = wrap_prose(TRUST, width)
    for figure in FIGURES:                       # "±6.5 % (n 57)" whole, on one line
        assert any(figure in line for line in lines), (figure, lines)
    assert not any(line.rstrip().endswith(("±6.5", "(n")) for line in lines)
    assert " ".join(" ".join(lines).split()) == TRUST        # nothing lost or added
    assert all(len(line) <= width for line in lines)        # every token fits from 30
    assert all(line.startswith("  ") for line in lines[1:])    # hanging indent


def test_prose_renders_to_the_console_width():
    console = Console(width=70, record=True, color_system=None)
    console.print(Prose(TRUST))
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 70
    assert "throughput ±6.5 % (n 57)," in text
    assert text.splitlines()[0] == ("how far to trust it: vllm-v1 on h100-sxm: median "
                                    "|error| (n: figures)")


def test_help_lists_every_command_whole(run_cli, monkeypatch):
    from capsim.cli.main import SHORT_HELP

    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = run_cli(["--help"])
    assert code == 0
    listing = out.split("Commands:\n")[1].splitlines()
    assert not any("..." in line for line in listing)       # click's cut
    assert len(listing) == len(SHORT_HELP) == 11
    for command, short in SHORT_HELP.items():
        assert f"  {command.name:<10} {short}" in listing       # one line, whole
        assert len(short) <= 80 - 2 - 10 - 1 - 2
