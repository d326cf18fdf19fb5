"""The ``capsim`` command line: run | validate | hardware | engines | models | shapes |
roofline | sweep | size | compare | calibrate, one module each, registered on the click group here.

User mistakes (:class:`~capsim.common.errors.ScenarioError`) print one line on
stderr and exit with code 2, without a traceback. SIGTERM and SIGINT end worker processes
and print one line, exit 143 / 130 (:mod:`capsim.cli.stop`). Warnings the layers below log on the
``capsim`` logger (a profile without sources, trace rows adjusted) print as
``warning: …`` on stderr, each once per command.
"""

from __future__ import annotations

import logging
import sys

import click

from capsim import __version__
from capsim.cli.calibrate import calibrate
from capsim.cli.collector import fewer_collections
from capsim.cli.compare import compare
from capsim.cli.engines import engines
from capsim.cli.hardware import hardware
from capsim.cli.models import models
from capsim.cli.roofline import roofline
from capsim.cli.run import run
from capsim.cli.shapes import shapes
from capsim.cli.size import size
from capsim.cli.stop import Stopped, stop_on_signals
from capsim.cli.sweep import sweep
from capsim.cli.validate import validate
from capsim.common.errors import ScenarioError


class _WarningLines(logging.Handler):
    """``warning: MESSAGE`` on stderr for each distinct warning of the ``capsim`` logger (a
    profile loaded once per variant warns once)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.seen: set[str] = set()

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if text not in self.seen:
            self.seen.add(text)
            click.echo(f"warning: {text}", err=True)


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``capsim`` console script and ``python -m capsim``."""
    logger, handler = logging.getLogger("capsim"), _WarningLines()
    logger.addHandler(handler)
    try:
        with stop_on_signals(), fewer_collections():
            _main(argv)
    except Stopped as stop:                 # SIGTERM / SIGINT, workers already ended
        click.echo(stop.line, err=True)
        sys.exit(stop.exit_code)
    finally:
        logger.removeHandler(handler)


def _main(argv: list[str] | None) -> None:
    try:
        cli.main(args=argv, prog_name="capsim", standalone_mode=False)
    except ScenarioError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        click.echo(f"error: {exc.format_message()}", err=True)   # one line, no usage block
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)


@click.group(help="Capacity-planning simulator for LLM serving.")
@click.version_option(__version__, prog_name="capsim")
def cli() -> None:
    pass


#: Each command's line in ``capsim --help``: whole at 80 columns (click cut the first
#: sentence of the longer helps to "..."); ``capsim COMMAND --help`` has the full text.
SHORT_HELP = {
    run: "Simulate every variant; print the summary, write the report.",
    validate: "Check a scenario without running it (schema, memory, trace).",
    hardware: "List the GPU profiles, or write a template for your own.",
    engines: "List the engine presets: version, memory rule, scheduler.",
    models: "List the model presets, or write a template for your own.",
    shapes: "List the workload shapes (sharegpt) a request class can draw.",
    roofline: "Price one engine step with the roofline, per operator.",
    sweep: "Run the scenario's sweep grid; write the sweep report.",
    size: "Fewest GPUs meeting every SLO target, or the most rate N take.",
    compare: "Replay a benchmark result file; measured vs simulated.",
    calibrate: "Fit a GPU profile's efficiencies to measured timings.",
}

for _command, _short in SHORT_HELP.items():
    _command.short_help = _short
    cli.add_command(_command)
