"""One forward pass, every layer's hidden state and attention handed out as soon as it exists
(forward hooks where the architecture is known, the model's own outputs otherwise), and the
two-token check that the probe can read a model at all.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from rankcollapse.probe.ablation import _TOKEN_MASK, ARCHS, Arch
from rankcollapse.probe.spec import FIRST_ID, ProbeError

# on_layer(layer, X, A): X (B, n, d) the hidden state entering layer+1 (layer 0: the embedding
# output, L: the last layer's output); A (B, H, n, n) the attention of that layer, None at 0.
OnLayer = Callable[[int, Tensor, Tensor | None], None]


@torch.no_grad()
def capture(net: nn.Module, kind: str, input_ids: Tensor, on_layer: OnLayer,
            attention_mask: Tensor | None = None, attentions: bool = True) -> int:
    """One forward pass of `net` (model type `kind`); calls on_layer for every layer in order,
    as soon as its output exists (nothing is kept). Returns the number of calls (depth + 1).

    attention_mask: (B, n), 1 on real tokens, passed to the model (None: no padding).
    attentions=False reads no attention matrices (on_layer gets A = None).
    """
    arch = ARCHS.get(kind)
    token = _TOKEN_MASK.set(None if attention_mask is None else attention_mask.bool())
    try:
        if arch is None:
            return _capture_outputs(net, kind, input_ids, on_layer, attention_mask, attentions)
        return _capture_hooks(net, arch, input_ids, on_layer, attention_mask, attentions)
    finally:
        _TOKEN_MASK.reset(token)


def _capture_hooks(net, arch: Arch, input_ids, on_layer, attention_mask, attentions) -> int:
    """Forward hooks on the layer modules, in call order (ALBERT's one shared layer gives all
    its applications), and on the attention modules; XLNet's (n, B, d) is transposed."""
    calls, pending = 0, []

    def state(x) -> Tensor:
        x = x[0] if isinstance(x, tuple) else x
        return x.transpose(0, 1) if arch.time_major else x

    def pre_hook(module, args, kwargs):
        nonlocal calls
        if calls == 0:
            on_layer(0, state(args[0] if args else next(iter(kwargs.values()))), None)
            calls = 1

    def hook(module, args, output):
        nonlocal calls
        on_layer(calls, state(output), pending.pop() if pending else None)
        calls += 1

    def attention_hook(module, args, output):
        probs = output[arch.probs_at]
        pending.append(probs.permute(2, 3, 0, 1) if arch.time_major else probs)  # (B, H, n, n)

    handles = []
    for module in dict.fromkeys(arch.layers(net)):  # unique, in order
        handles.append(module.register_forward_pre_hook(pre_hook, with_kwargs=True))
        handles.append(module.register_forward_hook(hook))
    if attentions:
        for module in dict.fromkeys(arch.attention(net)):
            handles.append(module.register_forward_hook(attention_hook))
    kwargs = dict(arch.call)
    if attentions and arch.probs_at == 2:  # XLNet returns its probabilities only when asked
        kwargs["output_attentions"] = True
    if attention_mask is not None:
        kwargs["attention_mask"] = attention_mask
    try:
        net(input_ids=input_ids, **kwargs)
    finally:
        for handle in handles:
            handle.remove()
    depth = arch.depth(net)
    if calls != depth + 1:
        raise RuntimeError(f"captured {calls} states, expected {depth + 1}")
    return calls


def _capture_outputs(net, kind, input_ids, on_layer, attention_mask, attentions) -> int:
    """Any other model type: its own output_hidden_states and output_attentions."""
    kwargs = {"output_hidden_states": True, "output_attentions": attentions}
    if attention_mask is not None:
        kwargs["attention_mask"] = attention_mask
    try:
        out = net(input_ids=input_ids, **kwargs)
    except TypeError as err:
        raise ProbeError(f"the {kind} model does not take output_hidden_states and "
                         f"output_attentions ({err}); the probe needs both") from err
    states = getattr(out, "hidden_states", None)
    probs = getattr(out, "attentions", None) if attentions else None
    if not states:
        raise ProbeError(f"the {kind} model returns no hidden states (output_hidden_states); "
                         "the probe measures every layer's")
    if attentions and (not probs or any(p is None for p in probs)
                       or len(probs) != len(states) - 1):
        raise ProbeError(f"the {kind} model returns no attention matrices (output_attentions: "
                         f"{'none' if not probs else len(probs)} for {len(states) - 1} layers); "
                         "the probe needs one per layer for |λ₂|")
    for layer, X in enumerate(states):
        on_layer(layer, X, probs[layer - 1] if attentions and layer else None)
    return len(states)


def hidden_states(net: nn.Module, kind: str, input_ids: Tensor,
                  attention_mask: Tensor | None = None) -> list[Tensor]:
    """Every layer's hidden state, [layer 0 (input to the first layer), ..., layer L], each
    (batch, tokens, width)."""
    states: list[Tensor] = []
    capture(net, kind, input_ids, lambda layer, X, A: states.append(X), attention_mask,
            attentions=False)
    return states


def check_model(net: nn.Module, kind: str, vocab_size: int) -> int:
    """A two-token forward pass that proves the probe can read this model: every layer's hidden
    state and, where `kind` has attention, one row-stochastic matrix per layer. Returns the
    depth; raises ProbeError naming what is missing."""
    seen: list[tuple[int, tuple, tuple | None]] = []
    ids = torch.tensor([[min(FIRST_ID, vocab_size - 1), min(FIRST_ID + 1, vocab_size - 1)]],
                       device=_device_of(net))

    def record(layer, X, A):
        seen.append((layer, tuple(X.shape), None if A is None else tuple(A.shape)))
        if A is not None and not torch.allclose(A.sum(-1), torch.ones((), dtype=A.dtype,
                                                                      device=A.device),
                                                atol=1e-3):
            raise ProbeError(f"the {kind} model's attention matrices are not row-stochastic "
                             "softmax weights; the probe needs those")

    try:
        calls = capture(net, kind, ids, record)
    except ProbeError:
        raise
    except Exception as err:  # the model's own failure on a plain input_ids call
        raise ProbeError(f"the {kind} model cannot be run by the probe on input_ids alone: "
                         f"{type(err).__name__}: {err}") from err
    for layer, shape, attention in seen:
        if len(shape) != 3 or shape[:2] != (1, 2):
            raise ProbeError(f"the {kind} model's hidden state {layer} has shape {shape}, not "
                             "(batch, tokens, width)")
        if layer and (attention is None or attention[-2:] != (2, 2)):
            raise ProbeError(f"the {kind} model returns no attention matrix for layer {layer}; "
                             "the probe needs one per layer for |λ₂|")
    return calls - 1


def _device_of(net: nn.Module) -> torch.device:
    return next(iter(net.parameters())).device
