"""The DTensor sharding strategies generated from the cards' layouts, in one
process: what each op accepts, the lazy registration, a user card's."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

import opbridge
from opbridge.ops import Card, Layout, _card, cards, register_card, sharding

ob = torch.ops.opbridge


R, P = "R", "P"


def S(dim):
    return f"S({dim})"


def short(rows):
    """Placements as R / P / S(dim), None for an absent tensor."""

    def one(p):
        if p is None:
            return None
        if p.is_replicate():
            return R
        if p.is_partial():
            return P
        return S(p.dim)

    return [([one(p) for p in outs], [one(p) for p in ins]) for outs, ins in rows]


def test_import_leaves_dtensor_alone_and_its_import_registers_every_op():
    code = textwrap.dedent(
        """
        import sys
        import opbridge, torch
        assert "torch.distributed.tensor" not in sys.modules
        from torch.distributed.tensor import DTensor
        funcs = DTensor._op_dispatcher.sharding_propagator.op_strategy_funcs
        missing = []
        for name in opbridge.specs():
            for packet in (getattr(torch.ops.opbridge, name),
                           getattr(torch.ops.opbridge, name + "_backward")):
                for overload in packet.overloads():
                    if getattr(packet, overload) not in funcs:
                        missing.append(f"{name}.{overload}")
        print(missing)
        """
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]"


def test_every_builtin_card_declares_a_layout_that_fits_its_ops():
    for card in cards().values():
        if card.namespace == "opbridge":
            assert card.layout is not None, card.name
            assert sharding.check_layout(card) == [], card.name


def test_rms_norm_shards_the_rows_never_the_normalised_dimension():
    x, w = torch.randn(2, 5, 8), torch.randn(8)
    assert short(sharding.shardings(ob.rms_norm.default, x, w, w)) == [
        ([R], [R, R, R]),
        ([S(0)], [S(0), R, R]),
        ([S(1)], [S(1), R, R]),  # sequence parallel
    ]
    # The backward: the weight's and bias's gradients are partial sums.
    rows = sharding.shardings(ob.rms_norm_backward.default, x, x, w, 1e-6, [True] * 3)
    assert short(rows)[2] == ([S(1), P, P], [S(1), S(1), R])
    # out=: the out tensor is placed as the output.
    rows = sharding.shardings(ob.rms_norm.out, x, w, None, out=x)
    assert short(rows)[2] == ([S(1)], [S(1), R, None, S(1)])


def test_bias_gelu_shards_its_bias_with_the_columns():
    x, bias = torch.randn(2, 5, 8), torch.randn(8)
    assert ([S(2)], [S(2), S(0)]) in short(sharding.shardings(ob.bias_gelu.default, x, bias))
    rows = sharding.shardings(ob.bias_gelu_backward.default, x, x, bias, "none", [True, True])
    assert ([S(2), S(0)], [S(2), S(2), S(0)]) in short(rows)
    assert ([S(1), P], [S(1), S(1), R]) in short(rows)


def test_rotary_embedding_shards_batch_sequence_and_heads_not_head_dim():
    x, cos = torch.randn(2, 5, 4, 8), torch.randn(5, 4)
    assert short(sharding.shardings(ob.rotary_embedding.default, x, cos, cos)) == [
        ([R], [R, R, R]),
        ([S(0)], [S(0), R, R]),
        ([S(1)], [S(1), S(0), S(0)]),  # the tables' rows go with the sequence
        ([S(2)], [S(2), R, R]),  # heads: tensor parallel
    ]
    # Per-row tables of batch 1 broadcast: replicated, their gradient partial.
    table = torch.randn(1, 5, 4)
    rows = sharding.shardings(
        ob.rotary_embedding_backward.default, x, x, table, table, False, [True] * 3
    )
    assert short(rows)[1] == ([S(0), P, P], [S(0), S(0), R, R])


def test_normalize_image_moves_the_sharded_dimension_to_its_nchw_place():
    image = torch.zeros(2, 6, 7, 3, dtype=torch.uint8)
    rows = short(sharding.shardings(ob.normalize_image.default, image, [0.5] * 3, [0.2] * 3))
    assert rows == [([R], [R]), ([S(0)], [S(0)]), ([S(2)], [S(1)]), ([S(3)], [S(2)])]
    nchw = torch.zeros(2, 3, 6, 7)
    rows = sharding.shardings(ob.normalize_image.default, nchw, [0.5] * 3, [0.2] * 3, False)
    assert short(rows) == [([R], [R]), ([S(0)], [S(0)]), ([S(2)], [S(2)]), ([S(3)], [S(3)])]


def test_add_rms_norm_backward_takes_its_gradients_layouts_from_the_card():
    x, w = torch.randn(2, 5, 8), torch.randn(8)
    rows = sharding.shardings(ob.add_rms_norm_backward.default, x, x, x, w, 1e-6, [True] * 3)
    assert short(rows)[2] == ([S(1), P, P], [S(1), S(1), S(1), R])


@torch.library.custom_op("opbridge_sharding_test::scale_rows", mutates_args=())
def scale_rows(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """x [..., d] times scale [d]."""
    return x * scale


@scale_rows.register_fake
def _(x, scale):
    return torch.empty_like(x)


SCALE_ROWS = torch.ops.opbridge_sharding_test.scale_rows.default


def user_card(layout) -> Card:
    return Card(
        name="scale_rows",
        namespace="opbridge_sharding_test",
        call=scale_rows,
        standard=None,
        reference=lambda x, scale: x * scale,
        samples=lambda dtype=torch.float32, requires_grad=False, *, large=True, seed=0: iter(()),
        bench_inputs=lambda shape, dtype, requires_grad=False: (),
        layout=layout,
    )


@pytest.fixture
def own_registry(monkeypatch):
    from torch.distributed.tensor import DTensor

    propagator = DTensor._op_dispatcher.sharding_propagator
    monkeypatch.setattr(_card, "_REGISTERED", dict(_card._REGISTERED))
    monkeypatch.setattr(propagator, "op_strategy_funcs", dict(propagator.op_strategy_funcs))
    monkeypatch.setattr(propagator, "op_to_schema_info", dict(propagator.op_to_schema_info))
    monkeypatch.setattr(sharding, "_OURS", set(sharding._OURS))
    return propagator


def test_a_user_card_layout_gives_its_op_a_strategy(own_registry):
    register_card(user_card(Layout({"x": "...d", "scale": "d", "output": "...d"})))
    assert SCALE_ROWS in own_registry.op_strategy_funcs
    x, scale = torch.randn(4, 6), torch.randn(6)
    assert short(sharding.shardings(SCALE_ROWS, x, scale)) == [
        ([R], [R, R]),
        ([S(0)], [S(0), R]),
        ([S(1)], [S(1), S(0)]),
    ]


def test_a_user_card_without_a_layout_is_replicated(own_registry):
    register_card(user_card(None))
    assert SCALE_ROWS in own_registry.op_strategy_funcs
    x, scale = torch.randn(4, 6), torch.randn(6)
    assert short(sharding.shardings(SCALE_ROWS, x, scale)) == [([R], [R, R])]


def test_a_strategy_the_user_registered_is_kept(own_registry):
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.experimental import register_sharding

    @register_sharding(SCALE_ROWS)
    def theirs(x, scale):
        return [([Replicate()], [Replicate(), Replicate()])]

    func = own_registry.op_strategy_funcs[SCALE_ROWS]
    register_card(user_card(Layout({"x": "...d", "scale": "d", "output": "...d"})))
    assert own_registry.op_strategy_funcs[SCALE_ROWS] is func


def test_a_card_registered_before_its_library_gets_its_strategies_when_it_loads(own_registry):
    """The card first (no op yet: no strategy), then the library's operators:
    load_library's hook registers the card's strategies."""
    from types import SimpleNamespace

    from opbridge import _library

    assert sharding._on_load in _library.ON_LOAD
    card = user_card(Layout({"x": "...d", "output": "...d"}, whole="d"))
    card.name, card.namespace = "late_op", "opbridge_sharding_late"
    register_card(card)

    @torch.library.custom_op("opbridge_sharding_late::late_op", mutates_args=())
    def late_op(x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    late_op.register_fake(lambda x: torch.empty_like(x))
    op = torch.ops.opbridge_sharding_late.late_op.default
    assert op not in own_registry.op_strategy_funcs
    sharding._on_load(SimpleNamespace(torch_namespace="opbridge_sharding_late"))
    assert op in own_registry.op_strategy_funcs
    assert short(sharding.shardings(op, torch.randn(4, 6))) == [([R], [R]), ([S(0)], [S(0)])]


def test_a_layout_that_misses_a_tensor_is_refused_naming_it(own_registry):
    card = user_card(Layout({"x": "...d", "output": "...d"}))
    with pytest.raises(sharding.LayoutError, match=r"scale_rows.*no entry for tensor 'scale'"):
        register_card(card)
    assert card.qualified_name not in _card._REGISTERED
    with pytest.raises(sharding.LayoutError, match=r"'\.\.\.d\.\.\.'.*at most one '\.\.\.'"):
        register_card(user_card(Layout({"x": "...d...", "scale": "d", "output": "...d"})))


def test_a_layout_of_another_rank_is_named_in_the_error():
    with pytest.raises(sharding.LayoutError, match=r"tensor 'x' is 3-D, its layout 'bshk'"):
        sharding.shardings(
            ob.rotary_embedding.default, torch.randn(2, 5, 8), *[torch.randn(5, 4)] * 2
        )


def test_the_ops_run_under_dtensor_on_a_one_rank_mesh():
    """The registered strategies as DTensor dispatches them (a 1-process gloo
    group); the 2-process runs are in test_distributed.py."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    store = dist.HashStore()
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        mesh = init_device_mesh("cpu", (1,))
        x, w = torch.randn(2, 5, 8, requires_grad=True), torch.randn(8, requires_grad=True)
        dx = distribute_tensor(x.detach(), mesh, [Shard(1)]).requires_grad_()
        dw = distribute_tensor(w.detach(), mesh, [Replicate()]).requires_grad_()
        y = opbridge.rms_norm(dx, dw)
        assert y.placements == (Shard(1),)
        y.sum().backward()
        opbridge.rms_norm(x, w).sum().backward()
        torch.testing.assert_close(y.full_tensor(), opbridge.rms_norm(x, w))
        torch.testing.assert_close(dw.grad.full_tensor(), w.grad)
    finally:
        dist.destroy_process_group()
