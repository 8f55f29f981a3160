"""Data: CIFAR-10 (own reader of the python batches), ImageNet-style ImageFolders, scikit-learn's digits, procedurally
drawn glyphs, and the timm transforms of a run. Every missing or malformed dataset raises :class:`DatasetError` saying
where the files go."""

from .build import NORMALIZATION, build_datasets, build_transform
from .cifar import CIFAR10, read_batch, write_cifar_folder
from .digits import Digits, load_digits_arrays
from .errors import DatasetError
from .glyphs import Glyphs, write_glyphs
from .imagefolder import image_folder

__all__ = [
    "CIFAR10",
    "NORMALIZATION",
    "DatasetError",
    "Digits",
    "Glyphs",
    "build_datasets",
    "build_transform",
    "image_folder",
    "load_digits_arrays",
    "read_batch",
    "write_cifar_folder",
    "write_glyphs",
]
