"""Tests of weightstore.distributed: sliced loads and rank-aware saves."""
