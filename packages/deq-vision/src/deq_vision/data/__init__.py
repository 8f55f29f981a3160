"""Data: CIFAR-10 (own reader of the python batches), ImageNet-style image folders, scikit-learn's digits,
procedurally drawn glyphs, and the timm transforms of a run. Every missing or malformed dataset raises
:class:`DatasetError` saying where the files go, before training where it can be checked up front."""

from .build import (
    NORMALIZATION,
    balanced_subset,
    build_datasets,
    build_transform,
    data_config,
    resolve_num_classes,
)  # fmt: skip
from .cifar import CIFAR10, read_batch, write_cifar_folder
from .digits import Digits, load_digits_arrays
from .errors import DatasetError
from .glyphs import Glyphs, write_glyphs
from .imagefolder import check_image_files, class_folders, image_folder, load_image

__all__ = [
    "CIFAR10",
    "NORMALIZATION",
    "DatasetError",
    "Digits",
    "Glyphs",
    "balanced_subset",
    "build_datasets",
    "build_transform",
    "check_image_files",
    "class_folders",
    "data_config",
    "image_folder",
    "load_digits_arrays",
    "load_image",
    "read_batch",
    "resolve_num_classes",
    "write_cifar_folder",
    "write_glyphs",
]
