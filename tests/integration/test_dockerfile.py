"""The Dockerfile, linted: no container engine runs here, so nothing is built at
test time. What a build would depend on is checked instead: pinned bases, a
non-root numeric USER (which Kubernetes' runAsNonRoot can verify), no secrets, a
HEALTHCHECK, the vendor extras as a build argument, both entry points, and a build
context (.dockerignore) that holds what the COPY lines need. The part of the build
that is Python packaging runs for real: a wheel is built from exactly the files
the Dockerfile copies.
"""

from __future__ import annotations

import fnmatch
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from tests.support.paths import REPO

DOCKERFILE = REPO / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())

SECRET_NAME = re.compile(r"PASSWORD|PASSWD|TOKEN|SECRET|KEY|CREDENTIAL", re.I)
KEY_FILES = ("*.pem", "*.key", "*.p12", "*.pfx", "id_rsa*", "id_ed25519*", ".env", "*.token")
# An exact release: python:3.11.13-slim-bookworm, not python:3.11-slim or :latest.
EXACT_TAG = re.compile(r"^\d+\.\d+\.\d+(-[a-z0-9.]+)*$")
DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")


@dataclass
class Instruction:
    keyword: str
    args: str
    line: int


@dataclass
class Stage:
    image: str
    name: str | None
    line: int
    body: list[Instruction] = field(default_factory=list)

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.body if i.keyword == keyword]


def parse(text: str) -> tuple[list[Instruction], list[Stage]]:
    """Dockerfile instructions with continuations joined and comments dropped (a
    comment line inside a continuation is dropped too, as Docker does), and the
    stages they fall in. Returns the instructions before the first FROM and the
    stages."""
    instructions: list[Instruction] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):
            continue
        if not pending:
            start = number
        if line.endswith("\\"):
            pending.append(line[:-1].strip())
            continue
        pending.append(line)
        joined = " ".join(p for p in pending if p)
        pending = []
        keyword, _, args = joined.partition(" ")
        instructions.append(Instruction(keyword.upper(), args.strip(), start))
    assert not pending, "the Dockerfile ends inside a continuation"
    preamble: list[Instruction] = []
    stages: list[Stage] = []
    for i in instructions:
        if i.keyword == "FROM":
            words = [w for w in i.args.split() if not w.startswith("--")]
            name = words[2] if len(words) >= 3 and words[1].upper() == "AS" else None
            stages.append(Stage(words[0], name, i.line))
        elif stages:
            stages[-1].body.append(i)
        else:
            preamble.append(i)
    return preamble, stages


def lint(text: str) -> list[str]:
    """Every problem with a Dockerfile, as "line N: what is wrong"."""
    preamble, stages = parse(text)
    if not stages:
        return ["no FROM: not a Dockerfile"]
    problems: list[str] = []
    args = {}
    for i in preamble:
        if i.keyword == "ARG" and "=" in i.args:
            key, _, value = i.args.partition("=")
            args[key] = value.strip("\"'")
    names: set[str] = set()
    for stage in stages:
        image = re.sub(r"\$\{?(\w+)\}?", lambda m: args.get(m[1], m[0]), stage.image)
        if image in names:
            pass  # an earlier stage of this file
        elif DIGEST.search(image):
            pass
        else:
            _, _, tag = image.rpartition(":")
            if "/" in tag or not tag or not EXACT_TAG.match(tag):
                problems.append(
                    f"line {stage.line}: FROM {stage.image}: pin the base image by digest "
                    "(@sha256:...) or an exact version tag (e.g. python:3.11.13-slim-bookworm)"
                )
        if stage.name:
            names.add(stage.name)
    final = stages[-1]
    users = final.all("USER")
    if not users:
        problems.append("the final stage has no USER: the image would run as root")
    else:
        user = users[-1].args.split(":")[0]
        if user in ("root", "0"):
            problems.append(f"line {users[-1].line}: USER {users[-1].args} is root")
        elif not user.isdigit():
            problems.append(
                f"line {users[-1].line}: USER {user}: use a numeric uid, which Kubernetes' "
                "runAsNonRoot can verify without reading the image's /etc/passwd"
            )
    checks = final.all("HEALTHCHECK")
    if not checks or checks[-1].args.upper().startswith("NONE"):
        problems.append("the final stage has no HEALTHCHECK")
    for stage in stages:
        for i in stage.body + preamble:
            if i.keyword in ("ENV", "ARG"):
                for key, value in _assignments(i.args):
                    if SECRET_NAME.search(key) and value:
                        problems.append(
                            f"line {i.line}: {i.keyword} {key} carries a value that looks like a "
                            "secret: pass it at run time (a mounted Secret), never in the image"
                        )
            if i.keyword in ("COPY", "ADD"):
                sources = [w for w in i.args.split() if not w.startswith("--")][:-1]
                for source in sources:
                    if any(fnmatch.fnmatch(Path(source).name, p) for p in KEY_FILES):
                        problems.append(f"line {i.line}: {i.keyword} {source}: a key file")
    return problems


def _assignments(args: str) -> list[tuple[str, str]]:
    """ENV/ARG's KEY=VALUE pairs (or the legacy `ENV KEY VALUE`)."""
    if "=" not in args.split()[0]:
        key, _, value = args.partition(" ")
        return [(key, value.strip())]
    return [
        (k, v.strip("\"'"))
        for k, _, v in (w.partition("=") for w in re.findall(r'\S+="[^"]*"|\S+', args))
    ]


TEXT = DOCKERFILE.read_text()
PREAMBLE, STAGES = parse(TEXT)


def test_the_dockerfile_passes_the_lint() -> None:
    assert lint(TEXT) == []


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (("FROM python:3.11.13-slim-bookworm AS build", "FROM python:3.11-slim AS build"), "pin"),
        (("FROM python:3.11.13-slim-bookworm\n", "FROM python:latest\n"), "pin"),
        (("FROM python:3.11.13-slim-bookworm\n", "FROM python\n"), "pin"),
        (("USER 65532:65532", "USER root"), "is root"),
        (("USER 65532:65532", "USER 0"), "is root"),
        (("USER 65532:65532", "USER accel"), "numeric uid"),
        (("USER 65532:65532", ""), "no USER"),
        (("HEALTHCHECK --interval", "HEALTHCHECK NONE\n# --interval"), "no HEALTHCHECK"),
        (("ARG EXTRAS=all\n", "ARG EXTRAS=all\nENV API_TOKEN=s3cr3t\n"), "secret"),
        (("ARG EXTRAS=all\n", "ARG EXTRAS=all\nENV DB_PASSWORD hunter2\n"), "secret"),
        (("ARG EXTRAS=all\n", "ARG EXTRAS=all\nCOPY id_rsa /root/.ssh/\n"), "key file"),
        (("ARG EXTRAS=all\n", "ARG EXTRAS=all\nADD --chown=1:1 tls.key /etc/\n"), "key file"),
    ],
)
def test_the_lint_catches(change: tuple[str, str], expected: str) -> None:
    """The lint can fail: each broken variant of the real Dockerfile is caught."""
    old, new = change
    assert old in TEXT, f"the Dockerfile changed: {old!r} is gone; update this case"
    problems = lint(TEXT.replace(old, new))
    assert any(expected in p for p in problems), problems


def test_multi_stage_on_the_same_slim_python() -> None:
    assert len(STAGES) >= 2, "a build stage and a runtime stage"
    images = {s.image for s in STAGES}
    assert len(images) == 1, f"both stages must use the same base (the venv moves): {images}"
    image = images.pop()
    assert re.fullmatch(r"python:3\.11\.\d+-slim(-\w+)?", image), image
    runtime = STAGES[-1]
    copies = [i.args for i in runtime.all("COPY")]
    assert any(f"--from={STAGES[0].name}" in c for c in copies), "the runtime copies the venv"
    # Nothing to build with in the runtime stage: no compiler, no pip install.
    assert not any("pip install" in i.args for i in runtime.all("RUN"))


def test_vendor_extras_are_a_build_arg() -> None:
    extras = set(PYPROJECT["project"]["optional-dependencies"]) - {"test"}
    for stage in STAGES:
        defaults = [i.args for i in stage.all("ARG") if i.args.startswith("EXTRAS")]
        assert defaults == ["EXTRAS=all"], f"stage {stage.name}: ARG EXTRAS=all"
    assert "all" in extras
    install = next(i.args for i in STAGES[0].all("RUN") if "pip install" in i.args)
    assert '".[$EXTRAS]"' in install and "none" in install
    # The runtime's Intel packages follow the same argument.
    assert "$EXTRAS" in " ".join(i.args for i in STAGES[-1].all("RUN"))


def test_the_extras_case_picks_the_pip_spec() -> None:
    """The build stage's shell `case` run for real with /bin/sh, for each value."""
    install = next(i.args for i in STAGES[0].all("RUN") if "pip install" in i.args)
    case = install.split("&&")[0]
    for extras, spec in (("all", ".[all]"), ("none", "."), ("nvidia,amd", ".[nvidia,amd]")):
        proc = subprocess.run(
            ["sh", "-c", f'{case} && printf %s "$spec"'],
            env={"EXTRAS": extras, "PATH": "/usr/bin:/bin"},
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
        assert proc.stdout == spec, (extras, proc.stdout, proc.stderr)


def test_both_entry_points_and_the_default_command() -> None:
    scripts = PYPROJECT["project"]["scripts"]
    assert {"accel-exporter", "accel-autoscaler"} <= scripts.keys()
    build = " ".join(i.args for i in STAGES[0].all("RUN"))
    assert "accel-exporter --version" in build and "accel-autoscaler --help" in build
    runtime = STAGES[-1]
    env = " ".join(i.args for i in runtime.all("ENV"))
    assert "PATH=/opt/accel-fleet/bin:$PATH" in env
    assert runtime.all("CMD")[-1].args == '["accel-exporter"]'
    assert not runtime.all("ENTRYPOINT"), "no ENTRYPOINT: `docker run IMAGE accel-autoscaler`"
    # The manifests run the two commands from this image.
    for path, command in (
        ("deploy/base/exporter.yaml", "accel-exporter"),
        ("deploy/base/autoscaler.yaml", "accel-autoscaler"),
    ):
        assert f"command: [{command}]" in (REPO / path).read_text()


def test_user_and_healthcheck_agree_with_the_manifests() -> None:
    runtime = STAGES[-1]
    uid = runtime.all("USER")[-1].args.split(":")[0]
    docs = list(yaml.safe_load_all((REPO / "deploy/base/autoscaler.yaml").read_text()))
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    assert deployment["spec"]["template"]["spec"]["securityContext"]["runAsUser"] == int(uid)
    assert f"--uid {uid}" in " ".join(i.args for i in runtime.all("RUN"))
    env = " ".join(i.args for i in runtime.all("ENV"))
    assert "ACCEL_HEALTHCHECK_URL=http://127.0.0.1:9835/healthz" in env
    check = runtime.all("HEALTHCHECK")[-1].args
    assert "ACCEL_HEALTHCHECK_URL" in check
    exposed = runtime.all("EXPOSE")[-1].args.split()
    assert exposed == ["9835", "9836"]


def test_the_healthcheck_command_runs(tmp_path: Path) -> None:
    """The HEALTHCHECK's own command against a live exporter (exit 0), and against
    a closed port (exit non-zero)."""
    import json

    from tests.support.procs import free_port, wait_http

    check = STAGES[-1].all("HEALTHCHECK")[-1].args
    argv = json.loads(check.split("CMD", 1)[1].strip())
    argv[0] = sys.executable
    port = free_port()
    exporter = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "exporter.cli",
            f"--web.listen-address=127.0.0.1:{port}",
            "--backends=sim",
            "--sim-devices=nvidia:1",
        ],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz")
        url = f"http://127.0.0.1:{port}/healthz"
        ok = subprocess.run(argv, env={"ACCEL_HEALTHCHECK_URL": url}, timeout=10, check=False)
        assert ok.returncode == 0
    finally:
        exporter.terminate()
        exporter.wait(timeout=10)
    closed = f"http://127.0.0.1:{free_port()}/healthz"
    bad = subprocess.run(
        argv, env={"ACCEL_HEALTHCHECK_URL": closed}, timeout=10, check=False, capture_output=True
    )
    assert bad.returncode != 0


def ignored(path: str, patterns: list[str]) -> bool:
    """Whether .dockerignore keeps `path` out of the context (its simple forms:
    names and globs at any depth via **/, no negations, which this file has none of)."""
    for pattern in patterns:
        bare = pattern.removeprefix("**/")
        parts = Path(path).parts
        if any(fnmatch.fnmatch(p, bare) for p in parts) or fnmatch.fnmatch(path, pattern):
            return True
    return False


def dockerignore() -> list[str]:
    lines = [ln.strip() for ln in DOCKERIGNORE.read_text().splitlines()]
    patterns = [ln for ln in lines if ln and not ln.startswith("#")]
    assert not any(p.startswith("!") for p in patterns), "negations: extend ignored()"
    return patterns


def copied_sources() -> list[str]:
    sources = []
    for i in STAGES[0].all("COPY"):
        words = [w for w in i.args.split() if not w.startswith("--")]
        sources += [w.rstrip("/") for w in words[:-1]]
    return sources


def test_the_build_context_holds_what_copy_needs_and_no_secrets() -> None:
    patterns = dockerignore()
    for source in copied_sources():
        assert (REPO / source).exists(), f"COPY {source}: no such path"
        assert not ignored(source, patterns), f".dockerignore keeps out {source}, which COPY needs"
    packages = PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"]
    for package in packages:
        assert package.rstrip("*") in copied_sources(), f"package {package} is not copied"
    assert PYPROJECT["project"]["readme"] in copied_sources()
    for local in (".git", ".venv", "tests", "server.key", "tls.pem", ".env"):
        assert ignored(local, patterns), f".dockerignore lets {local} into the context"


def test_a_wheel_builds_from_exactly_the_copied_files(tmp_path: Path) -> None:
    """The build stage's packaging step, without an engine: the files the Dockerfile
    copies, alone in a directory, build a wheel that carries both entry points and
    the package data the exporter reads at run time."""
    context = tmp_path / "src"
    context.mkdir()
    patterns = dockerignore()
    for source in copied_sources():
        origin = REPO / source
        if origin.is_dir():
            shutil.copytree(
                origin,
                context / source,
                ignore=lambda d, names: [
                    n for n in names if ignored(str(Path(d, n).relative_to(REPO)), patterns)
                ],
            )
        else:
            shutil.copy2(origin, context / source)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--wheel-dir",
            str(tmp_path / "dist"),
            str(context),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    wheel = next((tmp_path / "dist").glob("accel_fleet-*.whl"))
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        entry_points = next(n for n in names if n.endswith("entry_points.txt"))
        text = z.read(entry_points).decode()
    assert "accel-exporter = exporter.cli:main" in text
    assert "accel-autoscaler = autoscaler.cli:main" in text
    assert any(n.startswith("exporter/data/") and n.endswith(".yaml") for n in names)
    assert "exporter/kubelet/podresources.proto" in names
    assert not any(n.startswith("tests/") for n in names)
