"""Every weightstore error survives a pickle round trip with its type, message and attributes:
errors cross process boundaries (`multiprocessing` workers, `torch.distributed.checkpoint`'s
exchange of a failing rank's exception), and one that cannot be rebuilt turns a typed error
into a `TypeError` on the receiving side."""

from __future__ import annotations

import inspect
import pickle

import pytest

from weightstore import errors
from weightstore.report import ApplyResult

EXAMPLES: list[errors.WeightstoreError] = [
    errors.LimitExceeded("header size", 10**12, 10**8, path="m.safetensors", tensor="w"),
    errors.SaveFailedError("out.bpk", 28),
    errors.TruncatedError("tensor data", 100, 40, path="cut.bpk", tensor="fc.weight"),
    errors.UnsupportedVersionError(9, 1, path="new.bpk"),
    errors.FileMissingError("absent.safetensors"),
    errors.PathIsDirectoryError("some/dir"),
    errors.FileMissingError("bad\ud800.safetensors", "holds U+D800"),
    errors.SplitPartMissingError(
        "m-00002-of-00003.gguf", part=2, count=3, opened="m-00001-of-00003.gguf"
    ),
    errors.NotAFileError("model.safetensors", "a FIFO"),
    errors.InvalidOptionError("bad regex", option="filter", format="burnpack"),
    errors.LayoutError(
        "sizes add up to 95",
        operation="Split(dim=0, sizes=(95,))",
        shapes=((96, 32),),
        tensor="qkv",
    ),
    errors.SetError("shard missing", path="idx.json", tensor="w", shard="model-1.safetensors"),
    errors.SetMismatchError("other save", path="idx.json", shard="s.safetensors"),
    errors.DigestError("unknown algorithm", path="m.safetensors", algorithm="md4"),
    errors.DigestMismatchError("sha256", "ab" * 32, "cd" * 32, path="m.bpk", tensor="fc.w"),
    errors.DescriptorError("offsets overlap", path="x.bpk", tensor="b"),
    errors.QuantizeError("value 3 is nan; Q8_0 has no code for NaN or infinity", tensor="w"),
    errors.QuantizedLayoutError(
        "scale shape (2, 3), the codes' 128x128 blocks need (2, 4)",
        group="w",
        codes="w",
        companion="w_scale_inv",
        path="m.safetensors",
    ),
    errors.UnsupportedFormatError("not a burnpack file", path="x.pt", found="pytorch"),
    errors.TensorNotFoundError("fc.weight", path="m.bpk", known=3),
    errors.NotWeightsError("is an HTML page, likely a failed download", "html", path="m.bin"),
    errors.LfsPointerError(
        "sha256:" + "4d" * 32, 123, path="m-1.safetensors", others=("m-2.safetensors",)
    ),
    errors.DestinationExistsError("m.bpk"),
    errors.RemapCollisionError("a.w", "x.w", "y.w", path="m.bpk", cause="remapping"),
    errors.PickleError("bad opcode", offset=12, opcode="REDUCE", path="m.pt"),
    errors.MissingStorageError("3", path="m.pt", tensor="w"),
    errors.ArchiveError("bad entry", entry="data/0", path="m.pt"),
    errors.UnsupportedObjectError("torch._utils._rebuild_qtensor", "quantized", path="q.pt"),
    errors.QuantizedTensorError("per_channel_affine", "qint8", path="q.pt", tensor="w"),
    errors.KeyNotFoundError("model", ["state_dict", "epoch"], path="ckpt.pt"),
    errors.RemoteReadError("s3://b/m.safetensors", 8, 64, "connection reset"),
    errors.CredentialsMissingError("s3://b/m.safetensors", "Unable to locate credentials"),
    errors.CodeObjectError(("os.system",), "config.hook", complete=False, path="m.pt"),
    errors.LoadFailedError(
        ApplyResult(applied=["a.w"], missing=[("b.w", "Net.Linear")], source="m.bpk"),
        "missing",
        "use .allow_partial(True)",
        path="m.bpk",
    ),
    errors.ModuleTypeNeededError(
        "cannot tell",
        tensors=("emb.weight",),
        candidates=("Linear", "Embedding"),
        misfit=False,
        subject="'emb.weight' (a 2-D weight)",
        others="",
    ),
]


def _state(error: BaseException) -> dict[str, object]:
    return {k: v for k, v in vars(error).items() if k != "__traceback__"}


@pytest.mark.parametrize("error", EXAMPLES, ids=lambda e: type(e).__name__)
def test_an_error_round_trips_through_pickle(error: errors.WeightstoreError) -> None:
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is type(error)
    assert str(back) == str(error)
    assert back.args == error.args
    assert _state(back) == _state(error)


def test_the_examples_cover_every_error_whose_constructor_is_not_the_base_one() -> None:
    base = inspect.signature(errors.WeightstoreError.__init__)
    special = {
        cls
        for cls in vars(errors).values()
        if inspect.isclass(cls)
        and issubclass(cls, errors.WeightstoreError)
        and inspect.signature(cls.__init__) != base
    }
    covered = {type(error) for error in EXAMPLES}
    assert special - covered == set(), "add an example of each"
