"""TreeShape: structure, rank paths, networkx and YAML round trips."""

import networkx as nx
import pytest

from treespec.decode.tree import TreeShape, chain, kary
from treespec.errors import ConfigError


def test_structure_of_a_small_tree():
    tree = TreeShape((-1, 0, 0, 1, 1, 2, 3))
    assert tree.size == 7 and tree.levels == 4
    assert tree.depths == (0, 1, 1, 2, 2, 2, 3)
    assert tree.children == ((1, 2), (3, 4), (5,), (6,), (), (), ())
    assert tree.ranks == (0, 0, 1, 0, 1, 0, 0)
    assert tree.level_nodes == ((0,), (1, 2), (3, 4, 5), (6,))
    assert tree.path(6) == (0, 0, 0) and tree.path(5) == (1, 0)


@pytest.mark.parametrize("parents", [(), (0,), (-1, 1), (-1, 0, 2), (-1, -1)])
def test_invalid_parents_are_rejected(parents):
    with pytest.raises(ConfigError):
        TreeShape(parents)


def test_paths_round_trip_and_canonical_order():
    paths = [(1,), (0, 0), (0,), (0, 1), (1, 0), (0, 0, 0)]
    tree = TreeShape.from_paths(paths)
    assert tree.parents == (-1, 0, 0, 1, 1, 2, 3)
    assert sorted(tree.to_paths()) == sorted(paths)
    assert TreeShape.from_paths(tree.to_paths()) == tree


@pytest.mark.parametrize("paths, message", [([(0, 0)], "no parent"), ([(1,)], "skips rank"), ([(0,), (-1,)], ">= 0")])
def test_invalid_paths(paths, message):
    with pytest.raises(ConfigError, match=message):
        TreeShape.from_paths(paths)


def test_networkx_view():
    tree = kary([2, 2])
    graph = tree.to_networkx()
    assert nx.is_arborescence(graph)
    assert graph.number_of_nodes() == 7
    assert graph.nodes[6]["path"] == (1, 1) and graph.nodes[6]["depth"] == 2


def test_yaml_round_trip_keeps_provenance(tmp_path):
    tree = TreeShape((-1, 0, 0, 1), {"policy": "sequoia", "acceptance": [0.6, 0.2], "budget": 4, "depth": 3})
    path = tmp_path / "tree.yaml"
    tree.to_yaml(path)
    back = TreeShape.from_yaml(path)
    assert back == tree and dict(back.provenance) == dict(tree.provenance)
    from_text = TreeShape.from_yaml(tree.to_yaml())
    assert from_text.parents == tree.parents
    assert TreeShape.from_dict({"paths": [[0], [0, 0]]}).parents == (-1, 0, 1)


def test_chain_and_kary_shapes():
    assert chain(0).parents == (-1,)
    assert chain(3).parents == (-1, 0, 1, 2) and chain(3).levels == 4
    tree = kary([3, 2])
    assert tree.size == 1 + 3 + 6 and tree.levels == 3
    assert [len(c) for c in tree.children[:4]] == [3, 2, 2, 2]
    with pytest.raises(ConfigError):
        chain(-1)
