"""The LSTM and GRU presets: torch's gate-stacked weights as Burn's per-gate Linear layers.
The Burn-side weights, run by hand as Burn's gates compute, give torch's output (so the gate
order is right), and a burnpack written through the preset reads back into torch bit-exact."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from tests._optional import need

torch = need("torch")

from weightstore.adapters import layout_preset  # noqa: E402
from weightstore.stores import BurnpackStore  # noqa: E402


def _sigmoid(x: Any) -> Any:
    return 1.0 / (1.0 + np.exp(-x))


class _Holder(torch.nn.Module):  # type: ignore[misc]
    def __init__(self, cell: Any) -> None:
        super().__init__()
        self.rnn = cell


def _burn_weights(holder: Any, preset: str, path: Path) -> dict[str, Any]:
    BurnpackStore.from_file(path).with_to_adapter(layout_preset(preset)).collect_from(holder)
    snapshots = BurnpackStore.from_file(path).get_all_snapshots()
    return {name: s.to_numpy().astype(np.float64) for name, s in snapshots.items()}


def _gate(w: dict[str, Any], gate: str, x: Any, h: Any) -> Any:
    into = x @ w[f"rnn.{gate}.input_transform.weight"] + w[f"rnn.{gate}.input_transform.bias"]
    return into, h @ w[f"rnn.{gate}.hidden_transform.weight"] + w[
        f"rnn.{gate}.hidden_transform.bias"
    ]


def test_lstm_per_gate_weights_compute_torch_s_step_and_round_trip(tmp_path: Path) -> None:
    torch.manual_seed(0)
    holder = _Holder(torch.nn.LSTM(5, 3, batch_first=True))
    w = _burn_weights(holder, "lstm-torch-to-burn", tmp_path / "lstm.bpk")
    assert w["rnn.forget_gate.input_transform.weight"].shape == (5, 3)  # Burn: [in, out]
    x = torch.randn(2, 1, 5)
    with torch.no_grad():
        expected = holder.rnn(x)[0][:, 0].numpy()
    xs, h = x[:, 0].numpy().astype(np.float64), np.zeros((2, 3))
    i, f, g, o = (sum(_gate(w, gate, xs, h)) for gate in
                  ("input_gate", "forget_gate", "cell_gate", "output_gate"))  # fmt: skip
    cell = _sigmoid(i) * np.tanh(g) + _sigmoid(f) * 0.0
    assert np.allclose(_sigmoid(o) * np.tanh(cell), expected, atol=1e-6)
    back = _Holder(torch.nn.LSTM(5, 3, batch_first=True))
    store = BurnpackStore.from_file(tmp_path / "lstm.bpk")
    result = store.with_from_adapter(layout_preset("lstm-torch-to-burn").inverse()).apply_to(back)
    assert result.missing == [] and result.unused == [] and result.errors == []
    for name, value in holder.state_dict().items():
        assert torch.equal(back.state_dict()[name], value), name


def test_gru_per_gate_weights_compute_torch_s_step_and_round_trip(tmp_path: Path) -> None:
    torch.manual_seed(1)
    holder = _Holder(torch.nn.GRU(4, 3, batch_first=True))
    w = _burn_weights(holder, "gru-torch-to-burn", tmp_path / "gru.bpk")
    x = torch.randn(2, 1, 4)
    with torch.no_grad():
        expected = holder.rnn(x)[0][:, 0].numpy()
    xs, h = x[:, 0].numpy().astype(np.float64), np.zeros((2, 3))
    r = _sigmoid(sum(_gate(w, "reset_gate", xs, h)))
    z = _sigmoid(sum(_gate(w, "update_gate", xs, h)))
    n_in, n_hidden = _gate(w, "new_gate", xs, h)
    n = np.tanh(n_in + r * n_hidden)
    assert np.allclose((1 - z) * n + z * h, expected, atol=1e-6)
    back = _Holder(torch.nn.GRU(4, 3, batch_first=True))
    store = BurnpackStore.from_file(tmp_path / "gru.bpk")
    result = store.with_from_adapter(layout_preset("gru-torch-to-burn").inverse()).apply_to(back)
    assert result.missing == [] and result.errors == []
    for name, value in holder.state_dict().items():
        assert torch.equal(back.state_dict()[name], value), name
