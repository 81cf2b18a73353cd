"""The vocabulary every layer shares besides dtypes and errors: immutable records, bounded
rendering of file content, the collector pause, lazy exports, the version.
"""
