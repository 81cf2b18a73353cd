"""Coverage-guided fuzzing of weightstore's container and index readers (docs/security.md).

    targets.py    one target per parser: an input's bytes through every read path; what counts
                  as a finding (anything but a `WeightstoreError`, a CLI exit of 3, a leaked fd)
    mutators.py   structure-aware mutations: burnpack CBOR, SafeTensors JSON, pickle opcodes
    gguf_mutators.py  GGUF headers decoded, edited field by field and re-encoded
    seeds.py      ``python -m fuzz.seeds``: regenerate the seed corpora in fuzz/corpus/<parser>/
    run.py        ``python -m fuzz.run --parser P --runs N``: atheris under a supervisor that
                  restarts it after a timeout or memory kill, and sums the counts

Findings are saved in fuzz/crashers/<parser>/; tests/test_fuzz_harness.py replays every file
there and runs a short smoke fuzz of each target.
"""
