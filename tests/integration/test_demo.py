"""`make demo` runs gangops itself on the local control plane; these tests run its
script (scripts/demo.sh) so it cannot rot: every step it narrates must happen,
and it must leave nothing behind, also when interrupted."""

from __future__ import annotations

import os
import re
import signal
import subprocess
from pathlib import Path

from tests.interrupt import ctrl_c_as_a_terminal

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "scripts" / "demo.sh"


def _processes_mentioning(text: str) -> list[str]:
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline:
            found.append(f"{proc.name}: {cmdline}")
    return found


def _workdir(output: str) -> Path:
    match = re.search(r"\(working directory (\S+)\)", output)
    assert match, output
    return Path(match.group(1))


def test_demo_shows_every_step_and_cleans_up(control_plane: object) -> None:
    out = subprocess.run(
        ["bash", str(DEMO)], cwd=REPO, capture_output=True, text=True, timeout=600, check=False
    )
    text = out.stdout + out.stderr
    assert out.returncode == 0, text[-6000:]
    for line in (
        "PolicySource platform-policies Ready",
        "sweep Running",
        "bert-training Running",
        "bert-training grown to 16 GPUs",
        "gpt-pretrain Running",
        "llama-ft to say why it waits",
        "Decision: waiting",  # gangops explain
        "llama-ft Running",
        "PolicySource Stalled",
        "GP307",  # the broken commit's diagnostic, at file:line
        "alice max: 48 GPUs",  # the last good revision kept (checked by the demo too)
        "bert-training-",  # its GPUs in PromQL, under its pods' names
        "a100-007's GPU 2 out of service",
        "GPUProblem=True UnhealthyGPUs",
        "a100-007 GPU 2: XID 48 x1",
        "GPUs out of service (never offered until the node agent says they are healthy):"
        " a100-007: GPU 2.",
        "demo finished in",
    ):
        assert line in text, f"{line!r} not in the demo's output:\n{text[-6000:]}"
    assert re.search(r"projects/nlp\.yaml:\d+:\d+", text), text[-6000:]
    work = _workdir(text)
    assert not work.exists()
    assert _processes_mentioning(str(work)) == []


def test_demo_interrupted_leaves_nothing_behind(control_plane: object) -> None:
    proc = subprocess.Popen(
        ["bash", str(DEMO)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        preexec_fn=ctrl_c_as_a_terminal,
    )
    assert proc.stdout is not None
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if line.startswith("== 3."):  # cluster, git daemon and controller all running
            break
    text = "".join(seen)
    assert "== 3." in text, text
    work = _workdir(text)
    os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C reaches the whole foreground group
    try:
        rest, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:  # a hung clean-up must not outlive the test; show what hangs
            tree = subprocess.run(["ps", "-o", "pid,stat,etime,args", "-g", str(proc.pid)],
                                  capture_output=True, text=True)  # fmt: skip
            print(tree.stdout)
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == 130, text + rest
    assert "interrupted; cleaning up" in rest
    assert not work.exists()
    assert _processes_mentioning(str(work)) == []
