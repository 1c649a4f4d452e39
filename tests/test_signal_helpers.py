"""The signal tests' helper delivers Ctrl-C however pytest was started: from a parent that ignores
SIGINT (a shell's background job, ``nohup make test &``), its child still stops on SIGINT and
exits 130, where a child started plainly would inherit "ignore" and run to its end."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from helpers import REPO

# a stand-in for a command of the product: it says it is ready, then waits as long as it is told;
# Ctrl-C ends it with 130, and running to its end exits 0
CHILD = textwrap.dedent(
    """
    import pathlib, sys, time
    try:  # ready only once a Ctrl-C would be caught
        pathlib.Path(sys.argv[1]).touch()
        time.sleep(float(sys.argv[2]))
    except KeyboardInterrupt:
        sys.exit(130)
    """
)

# the parent: SIGINT ignored, as a shell starts a background job; it prints the child's status
PARENT = textwrap.dedent(
    """
    import json, signal, subprocess, sys
    from pathlib import Path
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.path.insert(0, "tests")
    import helpers
    root = Path(sys.argv[1])
    wait = "60" if sys.argv[3] == "helper" else "2"  # the plain child runs to its end
    command = [sys.executable, "-c", sys.argv[2], str(root / "ready"), wait]
    if sys.argv[3] == "helper":
        code, _, _ = helpers.signal_after(command, "ready", root, signal.SIGINT, timeout=60)
    else:  # a plain start: the child inherits "ignore SIGINT"
        proc = subprocess.Popen(command)
        while not (root / "ready").exists():
            pass
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=60)
    print(json.dumps(code))
    """
)


def _child_status(tmp_path, how: str) -> int:
    folder = tmp_path / how
    folder.mkdir()
    done = subprocess.run(
        [sys.executable, "-c", PARENT, str(folder), CHILD, how],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_child_started_by_the_helper_stops_on_sigint_from_a_parent_that_ignores_it(tmp_path):
    assert _child_status(tmp_path, "helper") == 130


def test_a_plain_child_of_that_parent_ignores_sigint_which_is_why_the_helper_resets_it(tmp_path):
    assert _child_status(tmp_path, "plain") == 0
