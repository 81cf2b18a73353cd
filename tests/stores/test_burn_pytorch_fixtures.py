"""Burn's own PyTorch fixtures loaded with `PytorchStore` into torch twins of Burn's test models.

Each test mirrors a Rust test of tracel-ai/burn, ``crates/burn-store/pytorch-tests/tests/<case>``
(the files in shared/fixtures/burn, with the outputs Burn's tests list): the same layers, the
same input, and the output Burn asserts with Burn's tolerance, so a number here is Burn's, never
ours. The twins are written for torch: a Burn ``Vec<M>`` is an ``nn.ModuleList``, a Burn enum
module is the variant's own module, and batch norm runs in eval mode (Burn's inference backend).
Where Burn ignores a tensor torch keeps (``num_batches_tracked`` is a torch buffer) the report
shows it applied. The fixtures live in ``../shared``; every test skips when that folder is absent.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pytest

from tests.conftest import burn_fixture
from weightstore import ApplyResult, LoadFailedError, PytorchStore, load_from

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

# Burn's `Tolerance::default()` (balanced): relative 0.5 %, absolute 1e-5.
BURN_DEFAULT_RTOL = 0.005
BURN_DEFAULT_ATOL = 1e-5


# -- helpers ---------------------------------------------------------------------------------------


def _store(relative: str) -> PytorchStore:
    return PytorchStore.from_file(burn_fixture(f"pytorch-tests/{relative}"))


def _tensor(values: Any) -> Any:
    return torch.tensor(values, dtype=torch.float32)


def _assert_burn_close(
    actual: Any, expected: Any, *, atol: float, rtol: float = 0.0, name: str = "output"
) -> None:
    """Burn's `assert_approx_eq::<f32>`: equal, or ``|x - y| < max(atol, rtol * max(|x|, |y|))``.

    Computed in float32 as Burn does, against the float32 rounding of Burn's literals.
    """
    got = actual.detach().numpy().astype(np.float32)
    want = np.asarray(expected, dtype=np.float32)
    assert got.shape == want.shape, f"shape {got.shape}, expected {want.shape}"
    diff = np.abs(got - want)
    bound = np.maximum(np.float32(atol), np.float32(rtol) * np.maximum(np.abs(got), np.abs(want)))
    close = (got == want) | (diff < bound)
    assert close.all(), (
        f"{name}: {int((~close).sum())} of {close.size} values off, max |diff| "
        f"{float(diff.max()):.3g} (atol {atol}, rtol {rtol})\ngot:\n{got}\nexpected:\n{want}"
    )


def _load(model: Any, store: PytorchStore) -> ApplyResult:
    """`load_from` into a model whose tensors were first poisoned (NaN, -1, flipped bools).

    Some fixtures hold torch's initial values (norm weights 1, biases 0), so a tensor the load
    skipped would otherwise go unnoticed; poisoned, it spoils the output.
    """
    with torch.no_grad():
        for tensor in [*model.parameters(), *model.buffers()]:
            if tensor.dtype == torch.bool:
                tensor.logical_not_()
            elif tensor.is_floating_point():
                tensor.fill_(float("nan"))
            else:
                tensor.fill_(-1)
    return load_from(model, store)


def _assert_equals_torch_load(model: Any, relative: str, key: str) -> None:
    """Every model tensor equals what torch's own reader finds under `key` (no numbers in Burn)."""
    path = burn_fixture(f"pytorch-tests/{relative}")
    state = torch.load(path, weights_only=True)[key]
    assert set(state) == set(model.state_dict())
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, state[name]), name


def _missing(result: ApplyResult) -> set[str]:
    return {path for path, _ in result.missing}


def _names(prefix: str, leaves: Iterable[str]) -> set[str]:
    return {f"{prefix}.{leaf}" for leaf in leaves}


BN_LEAVES = ("weight", "bias", "running_mean", "running_var", "num_batches_tracked")


# -- torch twins of the Burn test models -----------------------------------------------------------


class TwoConv1d(nn.Module):
    """conv1d: ``conv1`` Conv1d(2, 2, 2), ``conv2`` the same without bias."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv1d(2, 2, 2)
        self.conv2 = nn.Conv1d(2, 2, 2, bias=False)

    def forward(self, x: Any) -> Any:
        return self.conv2(self.conv1(x))


class TwoConv2d(nn.Module):
    """conv2d and key_remap: Conv2d(2, 2, (2, 2)) twice, the second without bias."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(2, 2, (2, 2))
        self.conv2 = nn.Conv2d(2, 2, (2, 2), bias=False)

    def forward(self, x: Any) -> Any:
        return self.conv2(self.conv1(x))


class TwoConvTranspose1d(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.ConvTranspose1d(2, 2, 2)
        self.conv2 = nn.ConvTranspose1d(2, 2, 2, bias=False)

    def forward(self, x: Any) -> Any:
        return self.conv2(self.conv1(x))


class TwoConvTranspose2d(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.ConvTranspose2d(2, 2, (2, 2))
        self.conv2 = nn.ConvTranspose2d(2, 2, (2, 2), bias=False)

    def forward(self, x: Any) -> Any:
        return self.conv2(self.conv1(x))


class Norm(nn.Module):
    """batch_norm, group_norm, layer_norm: one norm layer called ``norm1``."""

    def __init__(self, norm: nn.Module) -> None:
        super().__init__()
        self.norm1 = norm

    def forward(self, x: Any) -> Any:
        return self.norm1(x)


class Embed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 3)

    def forward(self, x: Any) -> Any:
        return self.embed(x)


class LinearNet(nn.Module):
    """linear: fc1 Linear(2, 3), relu, fc2 Linear(3, 4) without bias."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(2, 3)
        self.fc2 = nn.Linear(3, 4, bias=False)

    def forward(self, x: Any) -> Any:
        return self.fc2(F.relu(self.fc1(x)))


class LinearWithBias(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(2, 3)

    def forward(self, x: Any) -> Any:
        return self.fc1(x)


class WithBuffer(nn.Module):
    """boolean, buffer, integer: one persistent buffer called ``buffer``."""

    def __init__(self, initial: Any) -> None:
        super().__init__()
        self.register_buffer("buffer", initial)


class ConvBn(nn.Module):
    """A conv followed by a batch norm (key_remap_chained's and complex_nested's blocks)."""

    def __init__(self, conv: nn.Module, norm_name: str, channels: int) -> None:
        super().__init__()
        self.conv = conv
        self.norm_name = norm_name
        self.add_module(norm_name, nn.BatchNorm2d(channels))

    def forward(self, x: Any) -> Any:
        return getattr(self, self.norm_name)(self.conv(x))


class ModuleBlock(nn.Module):
    def __init__(self, blocks: Sequence[nn.Module]) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(blocks)

    def forward(self, x: Any) -> Any:
        for block in self.blocks:
            x = block(x)
        return x


class ChainedModel(nn.Module):
    """key_remap_chained: conv 3->6 (3x3, no bias), bn, then ``layer.blocks`` of two conv+bn."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 6, (3, 3), bias=False)
        self.bn = nn.BatchNorm2d(6)
        self.layer = ModuleBlock(
            [ConvBn(nn.Conv2d(6, 6, (1, 1), bias=False), "bn", 6) for _ in range(2)]
        )

    def forward(self, x: Any) -> Any:
        return self.layer(self.bn(self.conv(x)))


class ConvList(nn.Module):
    """non_contiguous_indexes as Burn has it: ``fc`` a list of five 3x3 'same' Conv2d."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.ModuleList([nn.Conv2d(2, 2, (3, 3), padding=1) for _ in range(5)])

    def forward(self, x: Any) -> Any:
        for conv in self.fc:
            x = F.relu(conv(x))
        return x


class ConvSequential(nn.Module):
    """non_contiguous_indexes as the file was written: Conv2d and ReLU alternating."""

    def __init__(self) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for _ in range(5):
            layers += [nn.Conv2d(2, 2, (3, 3), padding=1), nn.ReLU()]
        self.fc = nn.Sequential(*layers)

    def forward(self, x: Any) -> Any:
        return self.fc(x)


class ComplexNet(nn.Module):
    """complex_nested: two conv+norm blocks, norm1, fc1 (120->12), relu, fc2, log_softmax."""

    def __init__(self) -> None:
        super().__init__()
        self.conv_blocks = nn.ModuleList(
            [ConvBn(nn.Conv2d(2, 4, (3, 2)), "norm", 4), ConvBn(nn.Conv2d(4, 6, (3, 2)), "norm", 6)]
        )
        self.norm1 = nn.BatchNorm2d(6)
        self.fc1 = nn.Linear(120, 12)
        self.fc2 = nn.Linear(12, 10)

    def forward(self, x: Any) -> Any:
        for block in self.conv_blocks:
            x = block(x)
        x = self.norm1(x).flatten(1)
        return F.log_softmax(self.fc2(F.relu(self.fc1(x))), dim=1)


class PartialNet(nn.Module):
    """complex_nested's partial model: the first block alone, called ``conv1``."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = ConvBn(nn.Conv2d(2, 4, (3, 2)), "norm", 4)
        self.extra_field = True  # Burn's PartialWithExtraNet: a plain field, not a tensor

    def forward(self, x: Any) -> Any:
        return self.conv1(x)


class DwsConv(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.dconv = nn.Conv2d(2, 2, (3, 3), groups=2)
        self.pconv = nn.Conv2d(2, 2, (1, 1))

    def forward(self, x: Any) -> Any:
        return self.pconv(self.dconv(x))


class EnumNet(nn.Module):
    """enum_module: Burn's ``conv: enum Conv {DwsConv, Conv(Conv2d)}`` is here the variant."""

    def __init__(self, depthwise: bool) -> None:
        super().__init__()
        self.conv = DwsConv() if depthwise else nn.Conv2d(2, 2, (3, 3))

    def forward(self, x: Any) -> Any:
        return self.conv(x)


def _eval(model: nn.Module) -> nn.Module:
    return model.eval()


# -- inputs and outputs of the Rust tests ----------------------------------------------------------

CONV2D_INPUT = [[
    [[0.0245958, 0.25883394, 0.93905586, 0.4167155, 0.7139797],
     [0.2676443, 0.990609, 0.28845078, 0.8749624, 0.5059208],
     [0.23659128, 0.7570074, 0.23458993, 0.64705235, 0.3556214],
     [0.4451828, 0.01930594, 0.26160914, 0.771317, 0.37846136],
     [0.99802476, 0.9007942, 0.4765882, 0.16625845, 0.8044811]],
    [[0.65517855, 0.17679012, 0.8247723, 0.8035509, 0.9434475],
     [0.21972018, 0.417697, 0.49031407, 0.57302874, 0.12054086],
     [0.14518881, 0.7720023, 0.38275403, 0.7442367, 0.52850497],
     [0.6641724, 0.60994434, 0.6817997, 0.74785537, 0.03694397],
     [0.7516757, 0.1484384, 0.12274551, 0.5304072, 0.4147964]],
]]  # fmt: skip
CONV2D_OUTPUT = [[
    [[-0.02502128, 0.00250649, 0.04841233],
     [0.04589614, -0.00296854, 0.01991477],
     [0.02920526, 0.0594973, 0.04326791]],
    [[-0.04825336, 0.0801909, -0.02375088],
     [0.02885434, 0.09638263, -0.07460806],
     [0.02004079, 0.06244051, 0.0358871]],
]]  # fmt: skip
LINEAR_INPUT = [[
    [[0.63968194, 0.97427773], [0.8300299, 0.04443115]],
    [[0.0245958, 0.25883394], [0.93905586, 0.4167155]],
]]  # fmt: skip
ENUM_INPUT = [[
    [[0.7139797, 0.2676443, 0.990609, 0.28845078, 0.8749624],
     [0.5059208, 0.23659128, 0.7570074, 0.23458993, 0.64705235],
     [0.3556214, 0.4451828, 0.01930594, 0.26160914, 0.771317],
     [0.37846136, 0.99802476, 0.9007942, 0.4765882, 0.16625845],
     [0.8044811, 0.65517855, 0.17679012, 0.8247723, 0.8035509]],
    [[0.9434475, 0.21972018, 0.417697, 0.49031407, 0.57302874],
     [0.12054086, 0.14518881, 0.7720023, 0.38275403, 0.7442367],
     [0.52850497, 0.6641724, 0.60994434, 0.6817997, 0.74785537],
     [0.03694397, 0.7516757, 0.1484384, 0.12274551, 0.5304072],
     [0.4147964, 0.793662, 0.21043217, 0.05550903, 0.8638844]],
]]  # fmt: skip


def _forward(model: nn.Module, values: Any) -> Any:
    inputs = values if isinstance(values, torch.Tensor) else _tensor(values)
    with torch.no_grad():
        return model(inputs)


# -- convolutions ----------------------------------------------------------------------------------


def test_conv1d() -> None:
    model = TwoConv1d()
    result = _load(model, _store("conv1d/conv1d.pt"))
    assert set(result.applied) == {"conv1.weight", "conv1.bias", "conv2.weight"}
    assert result.is_success() and not result.missing and not result.unused
    x = [[
        [0.93708336, 0.65559506, 0.31379688, 0.19801933, 0.41619217, 0.28432965],
        [0.33977574, 0.5239408, 0.7980639, 0.77176833, 0.01122457, 0.80996025],
    ]]  # fmt: skip
    expected = [[
        [0.02987457, 0.03134188, 0.04234261, -0.02437721],
        [-0.03788019, -0.02972012, -0.00806090, -0.01981254],
    ]]  # fmt: skip
    _assert_burn_close(_forward(model, x), expected, atol=1e-7)


def test_conv2d() -> None:
    model = TwoConv2d()
    result = _load(model, _store("conv2d/conv2d.pt"))
    assert set(result.applied) == {"conv1.weight", "conv1.bias", "conv2.weight"}
    assert result.is_success() and not result.missing and not result.unused
    _assert_burn_close(_forward(model, CONV2D_INPUT), CONV2D_OUTPUT, atol=1e-7)


def test_conv_transpose1d() -> None:
    model = TwoConvTranspose1d()
    result = _load(model, _store("conv_transpose1d/conv_transpose1d.pt"))
    assert set(result.applied) == {"conv1.weight", "conv1.bias", "conv2.weight"}
    assert not result.missing and not result.unused
    x = [[[0.93708336, 0.65559506], [0.31379688, 0.19801933]]]
    expected = [[
        [0.02935525, 0.01119324, -0.01356167, -0.00682688],
        [0.01644749, -0.01429807, 0.00083987, 0.00279229],
    ]]  # fmt: skip
    _assert_burn_close(_forward(model, x), expected, atol=1e-8)


def test_conv_transpose2d() -> None:
    model = TwoConvTranspose2d()
    result = _load(model, _store("conv_transpose2d/conv_transpose2d.pt"))
    assert set(result.applied) == {"conv1.weight", "conv1.bias", "conv2.weight"}
    assert not result.missing and not result.unused
    x = [[
        [[0.0245958, 0.25883394], [0.93905586, 0.4167155]],
        [[0.7139797, 0.2676443], [0.990609, 0.28845078]],
    ]]  # fmt: skip
    expected = [[
        [[0.04547675, 0.01879685, -0.01636661, 0.00310803],
         [0.02090115, 0.01192738, -0.0482402, 0.02252235],
         [0.03249975, -0.00460748, 0.05003899, 0.04029131],
         [0.02185687, -0.10226749, -0.06508022, -0.01267705]],
        [[0.00277598, -0.00513832, -0.0590483, 0.00567626],
         [-0.03149522, -0.1957574, 0.03474613, 0.01997269],
         [-0.10096474, 0.00679589, 0.0419197, -0.02464108],
         [-0.03174751, 0.02963913, -0.02703723, -0.01860938]],
    ]]  # fmt: skip
    _assert_burn_close(_forward(model, x), expected, atol=1e-7)


# -- norms and embedding ---------------------------------------------------------------------------


def test_batch_norm() -> None:
    model = _eval(Norm(nn.BatchNorm2d(5)))
    result = _load(model, _store("batch_norm/batch_norm2d.pt"))
    # Burn leaves num_batches_tracked unused; a torch BatchNorm has it as a buffer and takes it.
    assert set(result.applied) == _names("norm1", BN_LEAVES)
    assert not result.missing and not result.unused
    assert model.norm1.num_batches_tracked.dtype == torch.int64
    assert int(model.norm1.num_batches_tracked) == 1
    output = _forward(model, torch.ones(1, 5, 2, 2) - 0.3)
    expected = np.full((1, 5, 2, 2), 0.68515635)
    _assert_burn_close(output, expected, atol=BURN_DEFAULT_ATOL, rtol=BURN_DEFAULT_RTOL)


def test_group_norm() -> None:
    model = Norm(nn.GroupNorm(2, 6))
    result = _load(model, _store("group_norm/group_norm.pt"))
    assert set(result.applied) == {"norm1.weight", "norm1.bias"}
    assert not result.missing and not result.unused
    x = [[
        [[0.7576316, 0.27931088], [0.40306926, 0.73468447]],
        [[0.02928156, 0.7998586], [0.39713734, 0.75437194]],
        [[0.5695085, 0.43877792], [0.63868046, 0.5246659]],
        [[0.6826141, 0.3051495], [0.46354562, 0.45498633]],
        [[0.572472, 0.4980026], [0.93708336, 0.65559506]],
        [[0.31379688, 0.19801933], [0.41619217, 0.28432965]],
    ]]  # fmt: skip
    expected = [[
        [[1.0425785, -1.1220167], [-0.56195974, 0.9387336]],
        [[-2.2535007, 1.2336729], [-0.5888041, 1.0278273]],
        [[0.19124532, -0.40036356], [0.5042765, -0.01168585]],
        [[1.0138292, -0.8919846], [-0.09224463, -0.13546038]],
        [[0.45772314, 0.08172822], [2.2986414, 0.8774104]],
        [[-0.84832406, -1.4328834], [-0.3313315, -0.9971037]],
    ]]  # fmt: skip
    _assert_burn_close(_forward(model, x), expected, atol=1e-3)


def test_layer_norm() -> None:
    model = Norm(nn.LayerNorm(2))
    result = _load(model, _store("layer_norm/layer_norm.pt"))
    assert set(result.applied) == {"norm1.weight", "norm1.bias"}
    assert not result.missing and not result.unused
    x = [[
        [[0.7576316, 0.27931088], [0.40306926, 0.73468447]],
        [[0.02928156, 0.7998586], [0.39713734, 0.75437194]],
    ]]  # fmt: skip
    expected = [[
        [[0.99991274, -0.9999125], [-0.9998183, 0.9998183]],
        [[-0.9999662, 0.99996626], [-0.99984336, 0.99984336]],
    ]]  # fmt: skip
    _assert_burn_close(_forward(model, x), expected, atol=1e-3)


def test_embedding() -> None:
    model = Embed()
    result = _load(model, _store("embedding/embedding.pt"))
    assert result.applied == ["embed.weight"] and not result.missing and not result.unused
    # The table is not transposed: row 0 as Burn's test lists it.
    _assert_burn_close(
        model.embed.weight[0], [-1.5255959, -0.7502318, -0.6539809], atol=BURN_DEFAULT_ATOL
    )
    with torch.no_grad():
        output = model(torch.tensor([[1, 2, 4, 5], [4, 3, 2, 9]]))
    row1, row2, row4 = (
        [-1.6094849, -0.10016718, -0.6091889],
        [-0.97977227, -1.6090963, -0.7121446],
        [-0.22227049, 1.6871134, -0.32062083],
    )
    expected = [
        [row1, row2, row4, [-0.29934573, 1.8793457, -0.07213178]],
        [row4, [0.303722, -0.7773143, -0.25145486], row2, [-0.02878714, 2.357111, -1.0373387]],
    ]
    _assert_burn_close(output, expected, atol=1e-3)


# -- linear ----------------------------------------------------------------------------------------


def test_linear() -> None:
    model = LinearNet()
    result = _load(model, _store("linear/linear.pt"))
    assert result.applied == ["fc1.weight", "fc1.bias", "fc2.weight"]
    assert not result.missing and not result.unused
    # torch layout [out, in], as stored: no transpose on the way in.
    _assert_burn_close(model.fc1.weight[0], [0.36434609, -0.31210154], atol=BURN_DEFAULT_ATOL)
    expected = [[
        [[0.09778349, -0.13756673, 0.04962806, 0.08856435],
         [0.03163241, -0.02848549, 0.01437942, 0.11905234]],
        [[0.07628226, -0.10757702, 0.03656857, 0.03824598],
         [0.05443089, -0.06904714, 0.02744314, 0.09997337]],
    ]]  # fmt: skip
    _assert_burn_close(_forward(model, LINEAR_INPUT), expected, atol=1e-7)


def test_linear_with_bias() -> None:
    model = LinearWithBias()
    result = _load(model, _store("linear/linear_with_bias.pt"))
    assert result.applied == ["fc1.weight", "fc1.bias"]
    assert not result.missing and not result.unused
    expected = [[
        [[-0.00432095, -1.1071012, 0.8706914], [0.0245955, -0.9544629, 0.48518157]],
        [[0.34315687, -0.7573842, 0.548288], [-0.06608963, -1.0720727, 0.6458005]],
    ]]  # fmt: skip
    output = _forward(model, LINEAR_INPUT)
    _assert_burn_close(output, expected, atol=BURN_DEFAULT_ATOL, rtol=BURN_DEFAULT_RTOL)


# -- buffers: bool, float, int ---------------------------------------------------------------------


def test_boolean_buffer() -> None:
    model = WithBuffer(torch.zeros(3, dtype=torch.bool))
    result = _load(model, _store("boolean/boolean.pt"))
    assert result.applied == ["buffer"] and not result.missing and not result.unused
    assert model.buffer.dtype == torch.bool
    assert model.buffer.tolist() == [True, False, True]


def test_float_buffer() -> None:
    model = WithBuffer(torch.zeros(3, 3))
    result = _load(model, _store("buffer/buffer.pt"))
    assert result.applied == ["buffer"] and not result.missing and not result.unused
    output = model.buffer + torch.ones(3, 3)  # Burn's forward: buffer + x
    _assert_burn_close(output, np.full((3, 3), 2.0), atol=BURN_DEFAULT_ATOL, rtol=BURN_DEFAULT_RTOL)


def test_integer_buffer_stays_int64() -> None:
    model = WithBuffer(torch.zeros(3, dtype=torch.int64))
    result = _load(model, _store("integer/integer.pt"))
    assert result.applied == ["buffer"] and not result.missing and not result.unused
    assert model.buffer.dtype == torch.int64
    assert model.buffer.tolist() == [1, 2, 3]


@pytest.mark.parametrize(
    ("relative", "initial", "values"),
    [
        ("debug_test.pt", torch.zeros(4), [1.0, 2.0, 3.0, 4.0]),
        ("test_int.pt", torch.zeros(3, dtype=torch.int64), [1, 2, 3]),
    ],
    ids=["debug_test", "test_int"],
)
def test_loose_single_tensor_files(relative: str, initial: Any, values: list[float]) -> None:
    """The two files no Burn test uses: ``{"test": tensor}``."""
    model = nn.Module()
    model.register_buffer("test", initial)
    result = _load(model, _store(relative))
    assert result.applied == ["test"] and not result.missing and not result.unused
    assert model.test.dtype == initial.dtype
    assert model.test.tolist() == values


# -- key remapping ---------------------------------------------------------------------------------


def test_key_remap() -> None:
    store = _store("key_remap/key_remap.pt")
    assert set(store.keys()) == {"conv.conv1.weight", "conv.conv1.bias", "conv.conv2.weight"}
    with pytest.raises(LoadFailedError) as failed:
        load_from(TwoConv2d(), store)
    assert _missing(failed.value.result) == {"conv1.weight", "conv1.bias", "conv2.weight"}

    model = TwoConv2d()
    result = _load(model, store.with_key_remapping(r"conv\.(.*)", "$1"))
    assert set(result.applied) == {"conv1.weight", "conv1.bias", "conv2.weight"}
    assert not result.missing and not result.unused
    output = _forward(model, CONV2D_INPUT)
    _assert_burn_close(output, CONV2D_OUTPUT, atol=BURN_DEFAULT_ATOL, rtol=BURN_DEFAULT_RTOL)


CHAINED_BLOCK_REMAPS = (
    (r"(.+)\.block\.0\.(.+)", "$1.conv.$2"),
    (r"(.+)\.block\.1\.(.+)", "$1.bn.$2"),
)
CHAINED_LAYER_REMAP = (r"layer\.([0-9])\.(.+)", "layer.blocks.$1.$2")
CHAINED_MODEL_PATHS = (
    {"conv.weight"}
    | _names("bn", BN_LEAVES)
    | {f"layer.blocks.{i}.conv.weight" for i in range(2)}
    | _names("layer.blocks.0.bn", BN_LEAVES)
    | _names("layer.blocks.1.bn", BN_LEAVES)
)


def _chained_store(*remaps: tuple[str, str]) -> PytorchStore:
    store = _store("key_remap_chained/key_remap.pt")
    for pattern, replacement in remaps:
        store = store.with_key_remapping(pattern, replacement)
    return store


def test_key_remap_chained_without_layer_rule_fails() -> None:
    with pytest.raises(LoadFailedError) as failed:
        load_from(_eval(ChainedModel()), _chained_store(*CHAINED_BLOCK_REMAPS))
    assert "layer.blocks" in str(failed.value)
    result = failed.value.result
    blocks = {p for p in CHAINED_MODEL_PATHS if p.startswith("layer.blocks.")}
    # BatchNorm's own load code fills a missing num_batches_tracked (our files carry no torch
    # version, so torch treats them as old checkpoints), as load_state_dict would.
    counts = {p for p in blocks if p.endswith("num_batches_tracked")}
    assert _missing(result) == blocks - counts
    # A failed strict load writes nothing: what would have loaded is held back.
    assert not result.applied
    assert set(result.held_back) == CHAINED_MODEL_PATHS - blocks | counts
    # the file's names after the two block rules: layer.<i>.conv.* and layer.<i>.bn.*
    assert set(result.unused) == {p.replace("layer.blocks.", "layer.") for p in blocks}


def test_key_remap_chained() -> None:
    model = _eval(ChainedModel())
    result = _load(model, _chained_store(*CHAINED_BLOCK_REMAPS, CHAINED_LAYER_REMAP))
    assert set(result.applied) == CHAINED_MODEL_PATHS
    assert not result.missing and not result.unused
    x = [[
        [[0.76193494, 0.6265461, 0.49510366, 0.11974698],
         [0.07161391, 0.03232569, 0.704681, 0.254516],
         [0.3993737, 0.21224737, 0.40888822, 0.14808255],
         [0.17329216, 0.6658554, 0.3514018, 0.8086716]],
        [[0.33959562, 0.13321638, 0.41178054, 0.2576263],
         [0.3470292, 0.02400219, 0.77974546, 0.15189773],
         [0.75130886, 0.7268921, 0.85721636, 0.11647397],
         [0.8595984, 0.2636242, 0.6855346, 0.96955734]],
        [[0.42948407, 0.49613327, 0.38488472, 0.08250773],
         [0.73995143, 0.00364107, 0.81039995, 0.87411255],
         [0.9728532, 0.38206023, 0.08917904, 0.61241513],
         [0.77621365, 0.00234562, 0.38650817, 0.20027226]],
    ]]  # fmt: skip
    expected = [[
        [[0.1989671, 0.17847246], [0.06883702, 0.20012866]],
        [[0.17582723, 0.11344293], [0.05444185, 0.13307181]],
        [[0.1922295, 0.20391327], [0.06150475, 0.22688155]],
        [[0.00230906, -0.02177845], [0.01129148, 0.00925517]],
        [[0.14751078, 0.14433631], [0.05498439, 0.29049855]],
        [[0.16868964, 0.1332693], [0.06917118, 0.35094324]],
    ]]  # fmt: skip
    _assert_burn_close(_forward(model, x), expected, atol=BURN_DEFAULT_ATOL, rtol=BURN_DEFAULT_RTOL)


# -- non-contiguous indices ------------------------------------------------------------------------

NON_CONTIGUOUS_INPUT = [[
    [[0.67890584, 0.3075372, 0.2651562, 0.5283188, 0.86194897],
     [0.14828813, 0.73480314, 0.8212207, 0.9890986, 0.15003455],
     [0.62109494, 0.13028657, 0.9268751, 0.30604684, 0.80117637],
     [0.5148857, 0.46105868, 0.4840461, 0.58499724, 0.73569804],
     [0.58018994, 0.65252745, 0.05023766, 0.8642687, 0.935932]],
    [[0.9133029, 0.8696113, 0.1391843, 0.31465, 0.94086266],
     [0.11917073, 0.9536106, 0.10675198, 0.14779574, 0.744439],
     [0.14075547, 0.38544965, 0.8637459, 0.89604443, 0.97287786],
     [0.39854127, 0.11136961, 0.99230546, 0.39348692, 0.29428244],
     [0.6218869, 0.15033776, 0.8286401, 0.81336635, 0.10325938]],
]]  # fmt: skip


def _non_contiguous_expected() -> Any:
    expected = np.zeros((1, 2, 5, 5))
    expected[0, 0, 4] = [0.04485746, 0.03582812, 0.03432692, 0.02892298, 0.0138443]
    return expected


@pytest.mark.parametrize("twin", [ConvList, ConvSequential], ids=["module_list", "sequential"])
def test_non_contiguous_indexes(twin: type[nn.Module]) -> None:
    model = twin()
    result = _load(model, _store("non_contiguous_indexes/non_contiguous_indexes.pt"))
    assert len(result.applied) == 10 and not result.missing and not result.unused
    # the Burn test's contiguous list: fc.0 .. fc.4 take the file's fc.0, fc.2 .. fc.8
    convs = [m for m in model.fc if isinstance(m, nn.Conv2d)]
    assert len(convs) == 5
    output = _forward(model, NON_CONTIGUOUS_INPUT)
    _assert_burn_close(output, _non_contiguous_expected(), atol=1e-7)


def test_non_contiguous_indexes_without_mapping() -> None:
    store = _store("non_contiguous_indexes/non_contiguous_indexes.pt")
    # With mapping (the default) keys() shows fc.0 .. fc.4, as Burn's does;
    # without it, the file's own numbering.
    mapped_names = {f"fc.{i}.{leaf}" for i in range(5) for leaf in ("weight", "bias")}
    assert set(store.keys()) == mapped_names
    file_names = {f"fc.{i}.{leaf}" for i in (0, 2, 4, 6, 8) for leaf in ("weight", "bias")}
    unmapped = store.map_indices_contiguous(False)
    assert set(unmapped.keys()) == file_names
    with pytest.raises(LoadFailedError) as failed:
        load_from(ConvList(), unmapped)
    result = failed.value.result
    assert _missing(result) == {f"fc.{i}.{leaf}" for i in (1, 3) for leaf in ("weight", "bias")}
    assert not result.applied  # a failed strict load writes nothing
    assert set(result.held_back) == {
        f"fc.{i}.{leaf}" for i in (0, 2, 4) for leaf in ("weight", "bias")
    }
    assert set(result.unused) == {f"fc.{i}.{leaf}" for i in (6, 8) for leaf in ("weight", "bias")}

    # The original Sequential keeps the file's own numbering, so it needs no mapping.
    model = ConvSequential()
    result = _load(model, unmapped)
    assert len(result.applied) == 10 and not result.missing and not result.unused
    output = _forward(model, NON_CONTIGUOUS_INPUT)
    _assert_burn_close(output, _non_contiguous_expected(), atol=1e-7)


# -- top-level key, missing field ------------------------------------------------------------------


def test_top_level_key() -> None:
    store = _store("top_level_key/top_level_key.pt")
    with pytest.raises(LoadFailedError) as failed:
        load_from(_conv1_net(), store)
    result = failed.value.result
    assert _missing(result) == {"conv1.weight", "conv1.bias"}
    assert set(result.unused) == {"my_state_dict.conv1.weight", "my_state_dict.conv1.bias"}

    model = _conv1_net()
    result = _load(model, store.with_top_level_key("my_state_dict"))
    assert result.applied == ["conv1.weight", "conv1.bias"]
    assert not result.missing and not result.unused
    _assert_equals_torch_load(model, "top_level_key/top_level_key.pt", "my_state_dict")


def _conv1_net() -> nn.Module:
    model = nn.Module()
    model.conv1 = nn.Conv2d(2, 2, (2, 2))
    return model


def test_missing_module_field() -> None:
    model = nn.Module()
    model.do_not_exist_in_pt = nn.Conv2d(2, 2, (2, 2))
    with pytest.raises(LoadFailedError, match="do_not_exist_in_pt") as failed:
        load_from(model, _store("missing_module_field/missing_module_field.pt"))
    result = failed.value.result
    assert _missing(result) == {"do_not_exist_in_pt.weight", "do_not_exist_in_pt.bias"}
    assert set(result.unused) == {"conv1.weight", "conv1.bias"}
    assert not result.applied


# -- complex nested --------------------------------------------------------------------------------

COMPLEX_OUTPUT = [[
    -2.306613, -2.0589454, -2.2983727, -2.358294, -2.2963955,
    -2.4160905, -2.107669, -2.4284208, -2.526469, -2.3199186,
]]  # fmt: skip
COMPLEX_PATHS = (
    {f"conv_blocks.{i}.conv.{leaf}" for i in range(2) for leaf in ("weight", "bias")}
    | _names("conv_blocks.0.norm", BN_LEAVES)
    | _names("conv_blocks.1.norm", BN_LEAVES)
    | _names("norm1", BN_LEAVES)
    | {f"fc{i}.{leaf}" for i in (1, 2) for leaf in ("weight", "bias")}
)


def test_complex_nested() -> None:
    model = _eval(ComplexNet())
    result = _load(model, _store("complex_nested/complex_nested.pt"))
    assert set(result.applied) == COMPLEX_PATHS
    assert not result.missing and not result.unused
    assert int(model.norm1.num_batches_tracked) == 2
    output = _forward(model, torch.ones(1, 2, 9, 6) - 0.5)
    _assert_burn_close(output, COMPLEX_OUTPUT, atol=1e-8)


def test_complex_nested_partial() -> None:
    model = _eval(PartialNet())
    store = (
        _store("complex_nested/complex_nested.pt")
        .with_key_remapping(r"conv_blocks\.0\.(.*)", "conv1.$1")
        .allow_partial(True)
    )
    result = _load(model, store)
    assert set(result.applied) == (
        {"conv1.conv.weight", "conv1.conv.bias"} | _names("conv1.norm", BN_LEAVES)
    )
    assert not result.missing
    assert len(result.unused) == len(COMPLEX_PATHS) - 7
    assert {p.split(".")[0] for p in result.unused} == {"conv_blocks", "norm1", "fc1", "fc2"}
    assert model.extra_field is True
    output = _forward(model, torch.ones(1, 2, 9, 6) - 0.5)
    assert abs(float(output.sum()) - 4.871538) < 2e-6


# -- enum module -----------------------------------------------------------------------------------


def test_enum_module_conv_variant() -> None:
    model = EnumNet(depthwise=False)
    result = _load(model, _store("enum_module/enum_depthwise_false.pt"))
    assert set(result.applied) == {"conv.weight", "conv.bias"}
    assert not result.missing and not result.unused
    expected = [[
        [[0.35449377, -0.02832414, 0.4909761],
         [0.29709217, 0.3325863, 0.30594018],
         [0.18101373, 0.30932188, 0.30558896]],
        [[-0.17683622, -0.13244139, -0.05608707],
         [0.23467252, -0.07038684, 0.2550441],
         [-0.2419313, -0.20476191, -0.14468731]],
    ]]  # fmt: skip
    output = _forward(model, ENUM_INPUT)
    _assert_burn_close(output, expected, atol=BURN_DEFAULT_ATOL, rtol=BURN_DEFAULT_RTOL)


def test_enum_module_depthwise_variant() -> None:
    model = EnumNet(depthwise=True)
    result = _load(model, _store("enum_module/enum_depthwise_true.pt"))
    assert set(result.applied) == {
        f"conv.{name}.{leaf}" for name in ("dconv", "pconv") for leaf in ("weight", "bias")
    }
    assert not result.missing and not result.unused
    expected = [[
        [[0.77874625, 0.8590176, 0.8342835],
         [0.7730564, 0.73817325, 0.78292674],
         [0.7107752, 0.7471872, 0.7332644]],
        [[-0.44891885, -0.49027523, -0.3941707],
         [-0.43836114, -0.33961445, -0.3873115],
         [-0.5811343, -0.34197026, -0.5350357]],
    ]]  # fmt: skip
    output = _forward(model, ENUM_INPUT)
    _assert_burn_close(output, expected, atol=BURN_DEFAULT_ATOL, rtol=BURN_DEFAULT_RTOL)


# -- a model with its config (the config object itself: tests/pytorch_reader) ----------------


def test_config_file_weights_under_top_level_key() -> None:
    model = LinearNet()
    result = _load(model, _store("config/weights_with_config.pt").with_top_level_key("my_model"))
    assert result.applied == ["fc1.weight", "fc1.bias", "fc2.weight"]
    assert not result.missing and not result.unused
    _assert_equals_torch_load(model, "config/weights_with_config.pt", "my_model")


# -- store fixture (Burn's store test) -------------------------------------------------------------


class EnumModelTwin(nn.Module):
    """Burn's ModelWithEnum; torch has no enum, so ``feature`` is the BaseConv variant's Linear."""

    def __init__(self) -> None:
        super().__init__()
        self.feature = nn.Linear(3, 64)
        self.classifier = nn.Linear(64, 10)


def test_store_model_without_enum_variants() -> None:
    path = burn_fixture("store/model_without_enum_variants.pt")
    model = EnumModelTwin()
    result = _load(model, PytorchStore.from_file(path))
    assert result.applied == [
        "feature.weight",
        "feature.bias",
        "classifier.weight",
        "classifier.bias",
    ]
    assert not result.missing and not result.unused and result.is_success()
    # generate_enum_test.py: seed 42, then normal(0, 0.1) into each parameter in model order.
    generator = torch.Generator().manual_seed(42)
    for name, tensor in model.state_dict().items():
        regenerated = torch.empty(tensor.shape).normal_(0, 0.1, generator=generator)
        _assert_burn_close(tensor, regenerated.numpy(), atol=1e-6, name=name)
