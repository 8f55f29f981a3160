"""Sessions of the monorepo, parametrized over the packages in packages/.

    nox -s tests                          # every package's tests and the repository's, each in its own environment
    nox -s "tests(package='deq-core')"    # one package
    nox -s "tests(package='repo')"        # the repository's own tests (tests/): READMEs, docs/, lab/, committed results
    nox -s lint                           # ruff on every package
    nox -s bench                          # benchmarks (deq-core: against TorchDEQ 0.1.0); -- --quick for a short run
    nox -s wheel                          # build the deq-core wheel, install it alone with torch, solve + backward
    nox -s docs                           # the pages' prose check, then the site (mkdocs.yml, docs/) built --strict

Torch: every install goes through constraints.txt (the repository's one torch / torchvision pair), as the READMEs'
commands do. Local packages are installed from their paths, deq-core first, so nothing of ours is looked up on a
package index. The deq-lm session (the README's main-job environment) also installs the other task packages and checks
that torch and torchvision stay what constraints.txt says. The docs session installs no package of ours and no torch:
the API reference is read from the sources statically.

Tests run in parallel workers (pytest-xdist, as many as the cores up to 4, one torch thread each unless
OMP_NUM_THREADS is set); `nox -s tests -- -n 0` runs them in one process.

Disk: each tests session's environment holds torch's CUDA build (about 5.5 GB); four side by side do not fit on a CI
machine's disk, so a tests session removes its environment when it ends (pass or fail).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import nox

ROOT = Path(__file__).parent
PACKAGES = sorted(p.name for p in (ROOT / "packages").iterdir() if (p / "pyproject.toml").is_file())
CONSTRAINTS = ROOT / "constraints.txt"
# Local packages each package depends on, in install order.
LOCAL_DEPS = {"deq-core": [], "deq-toy": ["deq-core"], "deq-lm": ["deq-core"], "deq-vision": ["deq-core"]}
# tests(package='repo'): the tests of what no package holds (root tests/: READMEs, docs/, lab/, committed results).
REPOSITORY = "repo"

nox.options.sessions = ["tests"]
nox.options.error_on_missing_interpreters = True


def _install(session: nox.Session, *args: str) -> None:
    """pip install under the repository's constraints (its torch / torchvision pair)."""
    session.install("-c", str(CONSTRAINTS), *args)


def _pinned() -> dict[str, str]:
    """constraints.txt as {name: version}."""
    lines = [line.strip() for line in CONSTRAINTS.read_text().splitlines()]
    return dict(line.split("==") for line in lines if line and not line.startswith("#"))


def _installed(session: nox.Session, names: list[str]) -> dict[str, str]:
    """The installed versions of ``names`` in the session's environment ("-" for one not installed)."""
    code = (
        "import importlib.metadata as m, json, sys\n"
        "def version(name):\n"
        "    try:\n        return m.version(name)\n"
        "    except m.PackageNotFoundError:\n        return '-'\n"
        "print(json.dumps({name: version(name) for name in sys.argv[1:]}))"
    )
    return json.loads(str(session.run("python", "-c", code, *names, silent=True)).strip().splitlines()[-1])


def _check_torch_kept(session: nox.Session, others: list[str]) -> None:
    """Install the ``others`` task packages into this environment as their READMEs say (under constraints.txt) and
    fail unless torch and torchvision end as constraints.txt pins them: one torch for the whole repository, never
    swapped by installing a package beside another."""
    pinned = _pinned()
    before = _installed(session, list(pinned))
    for package in others:
        _install(session, f"{ROOT / 'packages' / package}")
    after = _installed(session, list(pinned))
    if before["torch"] != pinned["torch"] or after != pinned:
        session.error(f"installing {', '.join(others)}: before {before}, after {after}; constraints.txt pins {pinned}")
    session.log(f"torch kept after installing {', '.join(others)}: {after}")


def _install_package(session: nox.Session, package: str, extra: str = "test") -> None:
    """Install ``package[extra]`` and its local dependencies from their paths; deq-core with its ``train`` and ``hub``
    extras (the task packages depend on ``deq-core[train,hub]``; deq-core's own training tests and benchmarks import
    them)."""
    _install(session, "torch", *(["torchvision"] if package == "deq-vision" else []))
    for dep in LOCAL_DEPS.get(package, ["deq-core"]):
        _install(session, f"{ROOT / 'packages' / dep}[train,hub]")
    extras = f"{extra},train,hub" if package == "deq-core" else extra
    _install(session, f"{ROOT / 'packages' / package}[{extras}]")


def _check_wheel(session: nox.Session) -> Path:
    """Build deq-core's wheel, install it with torch only, and run a solve and a backward through it (and check that
    ``deq_core.train`` asks for its extra); returns the wheel."""
    _install(session, "torch")
    out = Path(session.create_tmp()) / "wheelhouse"
    session.run(
        "python", "-m", "pip", "wheel", "--no-deps", "--wheel-dir", str(out), str(ROOT / "packages" / "deq-core")
    )
    wheels = sorted(out.glob("deq_core-*.whl"))
    if len(wheels) != 1:
        session.error(f"expected one deq-core wheel in {out}, found {wheels}")
    session.install("--force-reinstall", "--no-deps", str(wheels[0]))
    session.run("python", "-m", "pip", "check")
    session.run("python", str(ROOT / "packages" / "deq-core" / "tests" / "wheel_smoke.py"))
    return wheels[0]


def _remove_environment(session: nox.Session) -> None:
    """Delete the session's virtualenv (see the module docstring: disk)."""
    location = getattr(session.virtualenv, "location", None)
    if location and Path(location).is_dir():
        shutil.rmtree(location, ignore_errors=True)
        session.log(f"removed {location} (torch's build is 5.5 GB per environment)")


@nox.session
@nox.parametrize("package", [*PACKAGES, REPOSITORY])
def tests(session: nox.Session, package: str) -> None:
    """Run one package's tests (deq-core: against its built wheel, after the install check), or the repository's own
    (``package='repo'``: tests/, with every package installed), then remove the session's environment."""
    try:
        _run_tests(session, package)
    finally:
        _remove_environment(session)


def _run_tests(session: nox.Session, package: str) -> None:
    folder = ROOT / "packages" / package
    if package == REPOSITORY:  # every package with its test extra; lab/ is read from the checkout (pytest.ini)
        _install(session, "torch", "torchvision")
        _install(session, f"{ROOT / 'packages' / 'deq-core'}[train,hub,test]")
        _install(session, *(f"{ROOT / 'packages' / name}[test]" for name in PACKAGES if name != "deq-core"))
        folder = ROOT / "tests"
    elif package == "deq-core":
        wheel = _check_wheel(session)
        session.install(f"{wheel}[train]")  # the deq_core.train tests: the wheel's training extra
        # numpy: the random-state tests; torchdeq: the end-to-end benchmark's test (the peer it compares against,
        # never a dependency of deq-core)
        session.install("pytest>=8", "hypothesis>=6.100", "numpy", "torchdeq==0.1.0")
    else:
        _install_package(session, package)
    if package == "deq-lm":  # the README's main-job environment: the other task packages install beside it
        _check_torch_kept(session, ["deq-toy", "deq-vision"])
    session.install("pytest-xdist")
    # See the module docstring (parallel workers); measured on 2 cores: deq-core's suite 133 s instead of 233 s.
    env = {"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    parallel = ["-n", "auto", "--maxprocesses", "4", "--dist", "worksteal"]
    session.run("python", "-m", "pytest", str(folder), "-q", *parallel, *session.posargs, env=env)


@nox.session
def wheel(session: nox.Session) -> None:
    """What `pip install deq-core` users get: the wheel alone, with torch, runs a solve and a backward."""
    _check_wheel(session)


@nox.session
@nox.parametrize("package", PACKAGES)
def lint(session: nox.Session, package: str) -> None:
    session.install("ruff")
    session.run("ruff", "check", str(ROOT / "packages" / package))


@nox.session
@nox.parametrize("package", PACKAGES)
def bench(session: nox.Session, package: str) -> None:
    """Run a package's benchmarks/*.py scripts; pass -- --quick for the short versions."""
    scripts = sorted((ROOT / "packages" / package / "benchmarks").glob("[!_]*.py"))
    scripts = [s for s in scripts if s.name != "problems.py"]
    if not scripts:
        session.skip(f"{package} has no benchmarks")
    _install_package(session, package)
    if package == "deq-core":
        session.install("torchdeq==0.1.0")  # the peer compared against; never a dependency of deq-core
    for script in scripts:
        session.run("python", str(script), *session.posargs)


# What the docs build needs: mkdocs 1.6 (validation of links and anchors), Material, mkdocstrings' Python handler 2.x
# (``filters: public``, griffe extensions by path, ``docstring_options``) and ruff, with which it formats signatures.
DOCS_REQUIREMENTS = [
    "mkdocs>=1.6",
    "mkdocs-material>=9.6",
    "mkdocstrings[python]>=1.0",
    "mkdocstrings-python>=2.0",
    "ruff",
]


@nox.session
def docs(session: nox.Session) -> None:
    """Check the pages' prose, then build the documentation site with --strict.

    The prose check (``docs/prose_check.py``, standard library only) fails when a page has more than 3,000 words of
    prose, a median sentence over 20 words or a sentence over 50. The strict build fails on a broken link or anchor, a
    missing included file (snippets) or an API reference that does not resolve. griffe reads the packages' sources from
    mkdocs.yml's ``paths`` without importing them, so neither torch nor our packages are installed here."""
    session.run("python", str(ROOT / "docs" / "prose_check.py"), "--quiet")
    session.install(*DOCS_REQUIREMENTS)
    site = ROOT / "site"
    session.run("mkdocs", "build", "--strict", "--config-file", str(ROOT / "mkdocs.yml"), "--site-dir", str(site))
