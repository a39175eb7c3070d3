"""The `gangops` command line: exit codes, output that parses back, help.

Commands run in-process through `controller.cli.main`; one test runs the
installed console script, as CI does.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from controller.cli import _parser, main
from tests.unit.policy.builders import REPO, policy_files, project


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


@pytest.fixture
def in_repo(monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(REPO)
    return REPO


@pytest.fixture
def invalid(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    files = policy_files(project("a").max(gpu="x").build(), project("b").max(gpu=-1).build())
    return _write(tmp_path / "pol", files)


def test_validate_valid(in_repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "policies"]) == 0
    out = capsys.readouterr().out
    files = len(list((in_repo / "policies").rglob("*.yaml")))
    assert out.endswith(f"0 errors, 0 warnings in {files} files\n")


def test_validate_invalid_reports_every_error(
    invalid: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["validate", "pol", "--format", "json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert [(d["file"], d["code"]) for d in doc["diagnostics"]] == [
        ("pol/projects/a.yaml", "GP202"),
        ("pol/projects/b.yaml", "GP204"),
    ]
    assert doc["summary"] == {"files": 4, "errors": 2, "warnings": 0, "valid": False}


def test_validate_several_paths(in_repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["validate", "policies/cluster-policy.yaml", "policies/tiers.yaml", "policies/projects"]
    assert main(args) == 0
    files = 2 + len(list((in_repo / "policies" / "projects").rglob("*.yaml")))
    assert capsys.readouterr().out.endswith(f"in {files} files\n")


def test_validate_warnings_do_not_fail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(_write(tmp_path, policy_files(project("a").jobs(tiers=[]).build())))
    assert main(["validate"]) == 0
    assert "warning GP318" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["validate", "nowhere"], "gangops validate: nowhere: no such file or directory"),
        (["render", "nowhere"], "gangops render: nowhere: no such file or directory"),
        (["plan", "nowhere", "--base", "HEAD"], "gangops plan: nowhere: no such file or directory"),
    ],
)
def test_a_missing_path_is_a_usage_error(
    in_repo: Path, capsys: pytest.CaptureFixture[str], argv: list[str], says: str
) -> None:
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert (out, err.strip()) == ("", says)


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["validate", "--format", "xml"],
        ["render", "-o", "toml"],
        ["plan", "policies"],  # --base is required
        ["plan", "--base", "HEAD", "--format", "html"],
        ["frobnicate"],
    ],
)
def test_bad_arguments_exit_2(
    in_repo: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    with pytest.raises(SystemExit) as exit:
        main(argv)
    assert exit.value.code == 2
    assert "usage: gangops" in capsys.readouterr().err


def _commands(
    parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()
) -> Iterator[tuple[str, ...]]:
    yield prefix
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _commands(sub, (*prefix, name))


COMMANDS = list(_commands(_parser()))


def test_the_policy_commands_are_there() -> None:
    assert {("validate",), ("render",), ("plan",)} <= set(COMMANDS)


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "gangops")
def test_help(command: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit:
        main([*command, "--help"])
    assert exit.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: gangops {' '.join(command)}".rstrip())


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit:
        main(["--version"])
    assert exit.value.code == 0
    assert capsys.readouterr().out.startswith("gangops ")


def _render(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert main(["render", "policies", "--revision", "r1", *args]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    return out


def test_render_yaml_and_json_agree(in_repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    as_yaml = list(YAML(typ="safe").load_all(_render(capsys)))
    as_json = json.loads(_render(capsys, "-o", "json"))
    assert as_json["kind"] == "List"
    assert as_yaml == as_json["items"]
    kinds = [o["kind"] for o in as_yaml]
    assert kinds == sorted(
        kinds, key=["PriorityClass", "Namespace", "ResourceQuota", "LimitRange", "ConfigMap"].index
    )
    assert {o["metadata"]["annotations"]["gangops.ai/revision"] for o in as_yaml} == {"r1"}


def test_render_system_namespace(in_repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = _render(capsys, "-o", "json", "--system-namespace", "ops")
    (configmap,) = [o for o in json.loads(out)["items"] if o["kind"] == "ConfigMap"]
    assert configmap["metadata"]["namespace"] == "ops"


def test_render_invalid_prints_diagnostics_and_no_objects(
    invalid: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["render", "pol"]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.splitlines() == [
        "pol/projects/a.yaml:10:7: error GP202: spec.quota.max.gpu: "
        'expected an integer, found string "x"',
        "pol/projects/b.yaml:10:7: error GP204: spec.quota.max.gpu: "
        "-1 is less than the minimum of 0",
        "2 errors, 0 warnings in 4 files",
    ]


def test_render_shows_warnings_but_not_notices(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    over = [project(n).max(gpu=40).jobs(tiers=[]).build() for n in ("a", "b")]
    monkeypatch.chdir(_write(tmp_path, policy_files(*over)))
    assert main(["render", "-o", "json", "--revision", "x"]) == 0
    out, err = capsys.readouterr()
    assert [line.split(": ")[1] for line in err.splitlines()[:-1]] == [
        "warning GP318",
        "warning GP318",
    ]
    assert "GP306" not in err
    assert json.loads(out)["items"]


def _git(root: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        cwd=root, check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip


def _revisions(capsys: pytest.CaptureFixture[str]) -> set[str]:
    assert main(["render", ".", "-o", "json"]) == 0
    items: list[dict[str, Any]] = json.loads(capsys.readouterr().out)["items"]
    return {o["metadata"]["annotations"]["gangops.ai/revision"] for o in items}


def test_render_revision_defaults_to_the_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    monkeypatch.chdir(_write(tmp_path, policy_files(project("a").build())))
    assert _revisions(capsys) == {"working-tree"}
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-q", "-m", "policies")
    sha = _git(tmp_path, "rev-parse", "HEAD")
    assert _revisions(capsys) == {sha}
    (tmp_path / "tiers.yaml").write_text((tmp_path / "tiers.yaml").read_text() + "# edit\n")
    assert _revisions(capsys) == {f"{sha}-dirty"}


def test_render_names_files_as_the_reconciler_does_from_any_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found by a review (D7): run from inside the tree, render annotated objects with
    `team.yaml`, `../tiers.yaml` and `..`; from elsewhere, with the host's paths. It
    names them from the repository's top now, as the reconciler applies them."""
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    _write(tmp_path / "pol", policy_files(project("a").build()))
    _git(tmp_path, "init", "-q")

    def render(cwd: Path, path: str) -> str:
        monkeypatch.chdir(cwd)
        assert main(["render", path, "-o", "json", "--revision", "r"]) == 0
        return capsys.readouterr().out

    top = render(tmp_path, "pol")
    assert render(tmp_path / "pol" / "projects", "..") == top
    assert render(tmp_path.parent, str(tmp_path / "pol")) == top
    files = {
        o["metadata"]["annotations"]["gangops.ai/source-file"] for o in json.loads(top)["items"]
    }
    assert files == {"pol", "pol/tiers.yaml", "pol/projects/a.yaml"}


@pytest.mark.parametrize(
    ("namespace", "claimed", "rc"),
    [("gangops", "gangops", 1), ("gangops", "gangops-system", 0), (None, "gangops-system", 1)],
    ids=["its own namespace", "another's default", "the default"],
)
def test_validate_takes_the_controllers_namespace(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    namespace: str | None,
    claimed: str,
    rc: int,
) -> None:
    """Found by a review (D8): validate always assumed gangops-system, so it passed a
    project claiming the controller's namespace that render and the reconciler refuse
    (GP309), and refused one they accept."""
    monkeypatch.chdir(tmp_path)
    _write(tmp_path / "pol", policy_files(project("a").namespaces("a", claimed).max(gpu=8)
                                          .jobs(maxGPU=4).build()))  # fmt: skip
    args = ["--system-namespace", namespace] if namespace else []
    assert main(["validate", "pol", *args]) == rc
    assert ("GP309" in capsys.readouterr().out) == bool(rc)
    assert main(["render", "pol", "--revision", "r", *args]) == rc


def test_max_file_size(in_repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "policies", "--max-file-size", "100"]) == 1
    assert "error GP103" in capsys.readouterr().out
    for bad in ("0", "-5", "ten"):  # a usage error, not every file refused (found by a review)
        with pytest.raises(SystemExit) as e:
            main(["validate", "policies", "--max-file-size", bad])
        assert e.value.code == 2
        assert "--max-file-size" in capsys.readouterr().err


def test_the_installed_console_script() -> None:
    script = Path(sys.executable).with_name("gangops")
    assert script.exists(), "the package is not installed into this environment"
    ok = subprocess.run(
        [str(script), "validate", "policies", "--format", "sarif"],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["version"] == "2.1.0"
    missing = subprocess.run(
        [str(script), "validate", "nowhere"],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert missing.returncode == 2
    assert missing.stderr.strip() == "gangops validate: nowhere: no such file or directory"


_A_CLUSTER = "kind: Cluster\nspec:\n  pools: [{name: a, count: 8, gpusPerNode: 8}]\n"


@pytest.mark.parametrize("how", ["dot-dot", "symlink"])
def test_capacity_from_never_reads_outside_the_repository(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], how: str
) -> None:
    """Outside a Git repository the policy root is the repository; `..` and a
    symbolic link leading out of it are refused as the Git reader refuses them."""
    (tmp_path / "host.yaml").write_text(_A_CLUSTER)
    ref = "../host.yaml" if how == "dot-dot" else "data/link.cl"
    files = policy_files(
        project("a").build(), cluster_doc={**_cluster_doc(), "spec": {"capacityFrom": ref}}
    )
    root = _write(tmp_path / "pol", files)
    if how == "symlink":
        (root / "data").mkdir()
        (root / "data" / "link.cl").symlink_to(tmp_path / "host.yaml")
    monkeypatch.chdir(tmp_path)
    assert main(["validate", "pol"]) == 1
    out = capsys.readouterr().out
    assert f"error GP317: capacityFrom: '{ref}' is outside the repository" in out, out


def test_capacity_from_may_name_any_file_of_the_repository(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    _write(tmp_path, {"clusters/c.yaml": _A_CLUSTER})
    files = policy_files(
        project("a").build(),
        cluster_doc={**_cluster_doc(), "spec": {"capacityFrom": "../clusters/c.yaml"}},
    )
    _write(tmp_path / "pol", files)
    monkeypatch.chdir(tmp_path)
    assert main(["validate", "pol"]) == 0, capsys.readouterr().out


def _cluster_doc() -> dict[str, Any]:
    return {
        "apiVersion": "policy.ai.operator/v1",
        "kind": "ClusterPolicy",
        "metadata": {"name": "c"},
    }
