"""Progress bars: drawn on stderr when it is a terminal (a pseudo-terminal here), never on a pipe
or with --quiet; tqdm is loaded only when a bar may be drawn."""

from __future__ import annotations

import os
import select
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli._support import run_cli, torch_layout_arrays, write_weights
from weightstore.cli._progress import DELAY_VARIABLE

termios = pytest.importorskip("termios", reason="pseudo-terminals are POSIX")
fcntl = pytest.importorskip("fcntl", reason="pseudo-terminals are POSIX")

NOW = {DELAY_VARIABLE: "0"}  # draw at once, whatever the job's length


def _run_with_terminal_stderr(*args: object) -> tuple[int, str, str]:
    """Run the CLI with stderr on a pseudo-terminal; (exit code, stdout, what the terminal got)."""
    control, terminal = os.openpty()
    # A new pseudo-terminal is 0 x 0, where tqdm draws nothing; a real one has a size.
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    process = subprocess.Popen(
        [sys.executable, "-m", "weightstore", *map(str, args)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=terminal,
        env={**os.environ, **NOW},
    )
    os.close(terminal)
    received = bytearray()
    try:
        while select.select([control], [], [], 60)[0]:
            try:
                chunk = os.read(control, 4096)
            except OSError:  # EIO: the child closed its end
                break
            if not chunk:
                break
            received += chunk
        stdout, _ = process.communicate(timeout=60)
    finally:
        os.close(control)
    return process.returncode, stdout.decode(), received.decode(errors="replace")


@pytest.mark.parametrize("command", ["convert", "verify", "diff", "hash"])
def test_a_terminal_gets_a_bar(tmp_path: Path, command: str) -> None:
    src = write_weights("burnpack", tmp_path / "a.bpk", torch_layout_arrays())
    args = {
        "convert": [src, tmp_path / "b.safetensors"],
        "verify": [src],
        "diff": [src, src],
        "hash": [src],
    }[command]
    code, stdout, terminal = _run_with_terminal_stderr(command, *args)
    assert code == 0, terminal
    assert "%|" in terminal and "B/s" in terminal  # percent, bar, bytes and rate
    assert "%|" not in stdout


def test_quiet_and_pipes_get_none(tmp_path: Path) -> None:
    src = write_weights("burnpack", tmp_path / "a.bpk", torch_layout_arrays())
    code, _, terminal = _run_with_terminal_stderr("verify", src, "--quiet")
    assert code == 0 and terminal == ""
    piped = run_cli("verify", src, env=NOW)
    assert piped.returncode == 0 and piped.stderr == ""


def test_without_a_terminal_tqdm_is_never_imported() -> None:
    code = (
        "import sys, weightstore, weightstore.cli\n"
        "from weightstore.cli import main\n"
        "main(['--version']) if False else None\n"
        "print('tqdm' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
