"""Every public name of deq_core (``__all__`` of its public modules, the training extra included) is in its README."""

from pathlib import Path

from deq_core.train.docs import undocumented_names


def test_readme_names_every_public_name() -> None:
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    missing = undocumented_names("deq_core", readme)
    assert not missing, f"README.md does not name: {', '.join(missing)}"
