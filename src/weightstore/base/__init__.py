"""The vocabulary every layer shares besides dtypes and errors: immutable records, bounded
rendering of file content, the collector pause, lazy exports, the version.
"""

__all__ = ["__version__"]

__version__ = "0.1.0"  # the package version, in one place (pyproject.toml states the same)
