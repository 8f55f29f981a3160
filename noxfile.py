"""Sessions of the monorepo, parametrized over the packages in packages/.

    nox -s tests                          # every package's tests, each in its own environment
    nox -s "tests(package='deq-core')"    # one package
    nox -s lint                           # ruff on every package
    nox -s bench                          # benchmarks (deq-core: against TorchDEQ 0.1.0); -- --quick for a short run
    nox -s wheel                          # build the deq-core wheel, install it alone with torch, solve + backward

Torch: deq-core, deq-toy and deq-lm use the small CPU build torch==2.13.0; deq-vision needs torchvision, which
imports only beside torch==2.14.1 here. Local packages are installed from their paths, deq-core first, so nothing
of ours is looked up on a package index.
"""

from __future__ import annotations

from pathlib import Path

import nox

ROOT = Path(__file__).parent
PACKAGES = sorted(p.name for p in (ROOT / "packages").iterdir() if (p / "pyproject.toml").is_file())
TORCH_CPU = ["torch==2.13.0"]
TORCH_VISION = ["torch==2.14.1", "torchvision==0.29.1"]
# Local packages each package depends on, in install order.
LOCAL_DEPS = {"deq-core": [], "deq-toy": ["deq-core"], "deq-lm": ["deq-core"], "deq-vision": ["deq-core"]}

nox.options.sessions = ["tests"]
nox.options.error_on_missing_interpreters = True


def _torch(package: str) -> list[str]:
    return TORCH_VISION if package == "deq-vision" else TORCH_CPU


def _install_package(session: nox.Session, package: str, extra: str = "test") -> None:
    """Install ``package[extra]`` and its local dependencies from their paths; deq-core with its ``train`` extra (the
    task packages depend on ``deq-core[train]``; deq-core's own training tests and benchmarks import it)."""
    session.install(*_torch(package))
    for dep in LOCAL_DEPS.get(package, ["deq-core"]):
        session.install(f"{ROOT / 'packages' / dep}[train]")
    extras = f"{extra},train" if package == "deq-core" else extra
    session.install(f"{ROOT / 'packages' / package}[{extras}]")


def _check_wheel(session: nox.Session) -> Path:
    """Build deq-core's wheel, install it with torch only, and run a solve and a backward through it (and check that
    ``deq_core.train`` asks for its extra); returns the wheel."""
    session.install(*TORCH_CPU)
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


@nox.session
@nox.parametrize("package", PACKAGES)
def tests(session: nox.Session, package: str) -> None:
    """Run one package's tests (deq-core: against its built wheel, after the install check)."""
    if package == "deq-core":
        wheel = _check_wheel(session)
        session.install(f"{wheel}[train]")  # the deq_core.train tests: the wheel's training extra
        # numpy: the random-state tests; torchdeq: the end-to-end benchmark's test (the peer it compares against,
        # never a dependency of deq-core)
        session.install("pytest>=8", "hypothesis>=6.100", "numpy", "torchdeq==0.1.0")
    else:
        _install_package(session, package)
    session.run("python", "-m", "pytest", str(ROOT / "packages" / package), "-q", *session.posargs)


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
