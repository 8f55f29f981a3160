"""Every public name of deq_core (``__all__`` of its public modules, the training extra included) is in its README."""

from pathlib import Path

from deq_core.train.docs import modules_without_all, undocumented_names


def test_readme_names_every_public_name() -> None:
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    missing = undocumented_names("deq_core", readme)
    assert not missing, f"README.md does not name: {', '.join(missing)}"


def test_every_public_module_defines_all() -> None:
    missing = modules_without_all("deq_core")
    assert not missing, f"public modules without __all__ (their names escape the README check): {', '.join(missing)}"
