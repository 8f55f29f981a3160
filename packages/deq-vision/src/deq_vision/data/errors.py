"""The one error type of the data loaders."""


class DatasetError(FileNotFoundError):
    """A dataset is missing or malformed. The message says which files were expected and where to put them."""
