"""Units of any ``nn.Module``: the pieces the runtime checkpoints, offloads and recomputes.

An ``nn.Sequential`` is cut as before (:func:`repro.papers.superneurons.liveness.flatten_units`: one unit
per non-Sequential child, nested Sequentials flattened), so that the paper's CNNs keep their plans.
Any other module is captured with ``torch.fx`` (symbolic tracing: the graph of the ops its
``forward`` runs, leaf modules such as ``nn.Conv2d`` or ``nn.LSTM`` as single nodes) and cut at the
graph's *articulation points*: a node after which exactly one value is still needed by the rest of
the graph. Between two such points everything is one unit (a ``torch.fx.GraphModule`` with one tensor
in and one tensor out, holding the same submodules and parameters as the model): a residual block
is one unit because its input is alive until the add, a DenseNet dense block because every
concatenated feature is, an attention block because the residual stream is, an ``nn.LSTM`` together
with the ``getitem`` that takes its output tensor, because its tuple is alive until then. Values
that are read several times (branches, shared tensors) therefore never cross a unit boundary;
parameters and buffers are not values (every unit reads them through its own attribute), so weight
tying needs no cut.

Refused, before the first step, with :class:`UnsupportedModel` naming the module and the construct:
what symbolic tracing cannot capture (data-dependent control flow, iterating a tensor, item
assignment, ...), a forward with more than one tensor input (extra arguments with defaults are fixed
to their defaults), and (when the plan is made, on the real input) a model whose output, or a unit
boundary's value, is not a tensor (a cut is then moved past it, and only the model's own output can
fail). Units that update a buffer in place other than batch-norm's running statistics are refused by
the profile (:func:`repro.papers.superneurons.liveness.profile_units`): recomputation would update it twice.
"""

from __future__ import annotations

import inspect
import operator

import torch
import torch.fx as fx
import torch.nn as nn
import torch.nn.functional as F

from repro.papers.superneurons.liveness import UnsupportedModel, flatten_units

# ops whose result is (or may be) a view of their first argument: an in-place op on it writes its input
_VIEW_METHODS = {"view", "view_as", "reshape", "reshape_as", "transpose", "permute", "t", "flatten", "unflatten",
                 "unsqueeze", "squeeze", "narrow", "select", "expand", "expand_as", "as_strided", "contiguous",
                 "detach", "chunk", "split", "unbind", "movedim", "swapaxes", "diagonal", "T", "mT", "type_as",
                 "to", "float", "half", "bfloat16", "real", "imag", "view_as_real", "__getitem__"}
_VIEW_FUNCTIONS = {operator.getitem, torch.reshape, torch.transpose, torch.permute, torch.flatten, torch.unsqueeze,
                   torch.squeeze, torch.narrow, torch.select, torch.chunk, torch.split, torch.unbind, torch.movedim,
                   torch.swapaxes, torch.diagonal, torch.t, torch.detach, torch.unflatten}
_INPLACE_OPERATORS = {operator.iadd, operator.isub, operator.imul, operator.itruediv, operator.ifloordiv,
                      operator.ipow, operator.iand, operator.ior, operator.ixor, operator.setitem}
# ops that make expensive units (their outputs are worth a checkpoint), besides conv / linear modules
_EXPENSIVE_FUNCTIONS = {torch.matmul, torch.bmm, torch.mm, torch.baddbmm, torch.addmm, torch.einsum, F.linear,
                        F.conv1d, F.conv2d, F.conv3d, F.scaled_dot_product_attention, operator.matmul}
_EXPENSIVE_METHODS = {"matmul", "bmm", "mm", "__matmul__"}
_RANDOM_FUNCTIONS = {torch.rand, torch.randn, torch.rand_like, torch.randn_like, torch.randint, torch.randint_like,
                     torch.bernoulli, torch.normal, torch.multinomial, torch.randperm, torch.dropout,
                     F.dropout, F.dropout1d, F.dropout2d, F.dropout3d, F.alpha_dropout, F.feature_alpha_dropout,
                     F.rrelu, F.gumbel_softmax}
_RANDOM_METHODS = {"bernoulli", "bernoulli_", "uniform_", "normal_", "random_", "exponential_", "geometric_",
                   "cauchy_", "log_normal_"}


class _Tracer(fx.Tracer):
    """Symbolic tracing that remembers the innermost module a failure happened in."""

    def call_module(self, m, forward, args, kwargs):
        try:
            return super().call_module(m, forward, args, kwargs)
        except Exception as e:
            if not hasattr(e, "_sn_module"):
                e._sn_module = self.path_of_module(m) or "(root)", type(m).__name__
            raise


def _construct(message: str) -> str:
    if "control flow" in message:
        return "data-dependent control flow (an if/while on a tensor's value)"
    if "iterated" in message or "iterate" in message:
        return "iteration over a tensor"
    if "item assignment" in message:
        return "item assignment into a tensor (x[...] = ...)"
    return "a construct torch.fx cannot trace"


def trace(model: nn.Module) -> fx.GraphModule:
    """The model's graph, as ``torch.fx.symbolic_trace`` captures it; refuses what it cannot capture."""
    name = type(model).__name__
    params = [p for p in inspect.signature(model.forward).parameters.values()
              if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if not params:
        raise UnsupportedModel(f"{name}.forward takes no input; the runtime needs one tensor argument")
    extra = params[1:]
    if any(p.default is inspect.Parameter.empty for p in extra):
        raise UnsupportedModel(
            f"{name}.forward takes {len(params)} arguments without defaults "
            f"({', '.join(p.name for p in params if p.default is inspect.Parameter.empty)}); "
            "the runtime trains models of one tensor input (bind the others, e.g. with a wrapper module)")
    tracer = _Tracer()
    try:
        graph = tracer.trace(model, concrete_args={p.name: p.default for p in extra} or None)
    except Exception as e:  # fx raises TraceError, TypeError, RuntimeError, ... for what it cannot trace
        where, kind = getattr(e, "_sn_module", ("(root)", name))
        raise UnsupportedModel(
            f"{name} cannot be captured by torch.fx: module {where} ({kind}) uses {_construct(str(e))}: "
            f"{type(e).__name__}: {e}. The runtime needs a traceable forward (or an nn.Sequential whose "
            "untraceable blocks are units of their own)") from e
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    if len(placeholders) != 1:
        raise UnsupportedModel(f"{name}'s traced graph has {len(placeholders)} inputs; the runtime needs one")
    return fx.GraphModule(tracer.root, graph, name)


def _is_view(node: fx.Node) -> bool:
    return ((node.op == "call_method" and node.target in _VIEW_METHODS)
            or (node.op == "call_function" and node.target in _VIEW_FUNCTIONS))


def _is_inplace(node: fx.Node, modules: dict) -> bool:
    if node.op == "call_module":
        return bool(getattr(modules[node.target], "inplace", False))
    if node.op == "call_method":
        return node.target.endswith("_") and not node.target.startswith("__")
    if node.op == "call_function":
        if node.target in _INPLACE_OPERATORS or node.kwargs.get("inplace", False):
            return True
        return getattr(node.target, "__name__", "").endswith("_") and not node.target.__name__.startswith("_")
    return False


class GraphUnit(fx.GraphModule):
    """One unit of a traced model: a GraphModule of one tensor in and one out. Its submodules are the
    model's own (named ``m0``, ``m1``, ... and its parameters ``a0``, ... so that identical blocks have
    identical code and are profiled once); the flags say what the runtime must know about it."""

    sn_mutates_input: bool = False  # an in-place op writes its input (or a view of it)
    sn_expensive: bool = False  # holds a conv / linear / matmul: its output is worth a checkpoint
    sn_stochastic: bool = False  # draws random numbers (dropout): recomputation restores the RNG


def _unit(traced: fx.GraphModule, nodes: list[fx.Node], inp: fx.Node, out: fx.Node, name: str) -> GraphUnit:
    modules = dict(traced.named_modules())
    root = nn.Module()
    graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {inp: graph.placeholder("x")}
    targets: dict[str, str] = {}

    def local(target: str, kind: str) -> str:
        if target not in targets:
            new = f"{kind}{len(targets)}"
            targets[target] = new
            if kind == "m":
                root.add_module(new, modules[target])
            else:
                owner, _, attr = target.rpartition(".")
                value = getattr(traced.get_submodule(owner) if owner else traced, attr)
                if isinstance(value, nn.Parameter):
                    root.register_parameter(new, value)
                elif isinstance(value, torch.Tensor):
                    root.register_buffer(new, value)
                else:
                    setattr(root, new, value)
        return targets[target]

    def arg(n: fx.Node) -> fx.Node:
        if n not in env:  # a parameter / buffer read here and in another unit
            assert n.op == "get_attr", n
            env[n] = graph.get_attr(local(n.target, "a"))
        return env[n]

    aliases = {inp}
    mutates = expensive = stochastic = False
    for n in nodes:
        if n.op == "get_attr":
            env[n] = graph.get_attr(local(n.target, "a"))
            continue
        copy = graph.node_copy(n, arg)
        if n.op == "call_module":
            copy.target = local(n.target, "m")
            m = modules[n.target]
            expensive |= any(isinstance(s, (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.Linear, nn.ConvTranspose2d,
                                            nn.RNNBase, nn.MultiheadAttention)) for s in m.modules())
            stochastic |= any(isinstance(s, (nn.modules.dropout._DropoutNd, nn.RReLU)) for s in m.modules())
        elif n.op == "call_function":
            expensive |= n.target in _EXPENSIVE_FUNCTIONS
            stochastic |= n.target in _RANDOM_FUNCTIONS
        elif n.op == "call_method":
            expensive |= n.target in _EXPENSIVE_METHODS
            stochastic |= n.target in _RANDOM_METHODS or n.target == "dropout"
        env[n] = copy
        first = n.args[0] if n.args else None
        if isinstance(first, fx.Node) and first in aliases:
            if _is_inplace(n, modules):
                mutates = True
            if _is_view(n) or _is_inplace(n, modules):
                aliases.add(n)
    graph.output(env[out])
    unit = GraphUnit(root, graph, name)
    unit.sn_mutates_input, unit.sn_expensive, unit.sn_stochastic = mutates, expensive, stochastic
    unit.train(traced.training)
    return unit


def cut_points(graph: fx.Graph) -> list[int]:
    """Positions (in the graph's node order) of the nodes after which they alone are needed later:
    the articulation points where the graph may be cut. Parameter / buffer reads are not values."""
    nodes = list(graph.nodes)
    position = {n: k for k, n in enumerate(nodes)}
    last_use = {}
    for n in nodes:
        if n.op == "get_attr":
            continue
        last_use[n] = max((position[u] for u in n.users), default=position[n])
    cuts, live = [], set()
    for k, n in enumerate(nodes):
        if n.op in ("get_attr", "output"):
            continue
        live.add(n)
        live = {v for v in live if last_use[v] > k}
        if live == {n} and any(u.op != "output" for u in n.users):
            cuts.append(k)
    return cuts


def _name(nodes: list[fx.Node]) -> str:
    targets = [n.target for n in nodes if n.op == "call_module"]
    if not targets:
        return nodes[-1].name if nodes else "unit"
    parts = [t.split(".") for t in targets]
    common = []
    for level in zip(*parts):
        if len(set(level)) != 1:
            break
        common.append(level[0])
    return ".".join(common) if common else f"{targets[0]}..{targets[-1]}"


def graph_units(traced: fx.GraphModule, tensor_nodes: set | None = None) -> list[tuple[str, GraphUnit]]:
    """The units of a traced model, cut at :func:`cut_points` (only at nodes in ``tensor_nodes``
    where given: the values known to be tensors)."""
    nodes = list(traced.graph.nodes)
    inp = next(n for n in nodes if n.op == "placeholder")
    out = next(n for n in nodes if n.op == "output").args[0]
    if not isinstance(out, fx.Node):
        raise UnsupportedModel(f"{traced._get_name()} returns {type(out).__name__} "
                               f"({out!r:.80}); the runtime needs a model that returns one tensor")
    cuts = [k for k in cut_points(traced.graph) if tensor_nodes is None or nodes[k] in tensor_nodes]
    bounds = [0] + [k + 1 for k in cuts]
    units, start_node, names = [], inp, {}
    for k, (a, b) in enumerate(zip(bounds, bounds[1:] + [len(nodes) - 1])):
        body = [n for n in nodes[a:b] if n.op != "placeholder"]
        end = nodes[b - 1] if k < len(cuts) else out
        if not [n for n in body if n.op != "get_attr"]:
            continue
        name = _name(body)
        names[name] = names.get(name, 0) + 1
        name = name if names[name] == 1 else f"{name}#{names[name]}"  # blocks.0, blocks.0#2 (attn, mlp)
        units.append((name, _unit(traced, body, start_node, end, "Unit")))
        start_node = end
    return units


def tensor_values(traced: fx.GraphModule, x: torch.Tensor) -> set:
    """The nodes whose value is a tensor on input ``x``: the graph run once without autograd on a copy
    of ``x`` (batch-norm statistics and the RNG left as they were), so that a cut never falls on a
    tuple (an ``nn.LSTM``'s output) or a Python number. Raises if the output is not a tensor."""
    from repro.papers.superneurons.liveness import frozen_batchnorm_stats

    found = set()

    class _Probe(fx.Interpreter):
        def run_node(self, n):
            value = super().run_node(n)
            if isinstance(value, torch.Tensor):
                found.add(n)
            return value

    fork = [x.device] if x.device.type == "cuda" else []
    with torch.no_grad(), torch.random.fork_rng(devices=fork), frozen_batchnorm_stats([traced]):
        result = _Probe(traced).run(x.clone())
    if not isinstance(result, torch.Tensor):
        raise UnsupportedModel(f"{traced._get_name()} returns {type(result).__name__}, not a tensor; "
                               "the runtime needs a model that returns one tensor (e.g. the logits)")
    return found


def find_units(model: nn.Module, x: torch.Tensor | None = None) -> list[tuple[str, nn.Module]]:
    """The units of ``model`` (module docstring): a Sequential's children, else the traced graph's
    pieces (cut only at tensors when an example input ``x`` is given)."""
    if isinstance(model, nn.Sequential):
        return flatten_units(model)
    traced = trace(model)
    return graph_units(traced, tensor_values(traced, x) if x is not None else None)
