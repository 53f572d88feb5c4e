"""mooncake.store.EngramStore / EngramStoreConfig against a live master + storage server, as
upstream's scripts/test_engram_store.py exercises them: metadata, populate, lookup through
nested lists and NumPy ids (checked row by row against the tables), remove_from_store, and the
errors upstream raises."""
import itertools

import numpy as np
import pytest

from mooncake.store import EngramStore, EngramStoreConfig, MooncakeDistributedStore

_layers = itertools.count(1000)


def make_config(vocab=(17, 19, 23, 29), dim=8):
    cfg = EngramStoreConfig()
    cfg.table_vocab_sizes = list(vocab)
    cfg.embedding_dim = dim
    return cfg


def tables_for(es):
    dim = es.get_embedding_dim()
    return [np.arange(n * dim, dtype=np.float32).reshape(n, dim) + h * 1000
            for h, n in enumerate(es.get_table_vocab_sizes())]


@pytest.fixture
def es(store):
    created = []

    def make(layer_id=None, cfg=None):
        e = EngramStore(layer_id=next(_layers) if layer_id is None else layer_id,
                        config=cfg or make_config(), store=store)
        created.append(e)
        return e
    yield make
    for e in created:
        e.remove_from_store(force=True)


def test_config_defaults_and_types():
    cfg = EngramStoreConfig()
    assert cfg.table_vocab_sizes == [1024]
    assert cfg.embedding_dim == 64
    cfg.table_vocab_sizes = (3, 4)
    assert cfg.table_vocab_sizes == [3, 4]
    with pytest.raises(TypeError):
        cfg.table_vocab_sizes = 5
    with pytest.raises(TypeError):
        cfg.embedding_dim = "8"


def test_metadata_without_store():
    cfg = make_config()
    e = EngramStore(7, cfg)
    assert e.get_num_heads() == 4
    assert e.get_embedding_dim() == 8
    assert e.get_table_vocab_sizes() == [17, 19, 23, 29]
    assert e.get_store_keys() == [f"engram:l7:h{h}" for h in range(4)]
    # metadata only: every store operation fails as upstream's
    with pytest.raises(RuntimeError, match="rc=-600"):
        e.remove_from_store()
    with pytest.raises(RuntimeError, match="populate failed"):
        e.populate(tables_for(e))
    with pytest.raises(RuntimeError, match="lookup failed"):
        e.lookup([[[0, 1, 2, 3]]])


def test_constructor_validation(store):
    for vocab, dim in (([], 8), ([4, 0], 8), ([4, -1], 8), ([4], 0), ([4], -3)):
        with pytest.raises(ValueError):
            EngramStore(1, make_config(vocab, dim), store)
    with pytest.raises(RuntimeError, match="store parameter"):
        EngramStore(1, make_config(), object())
    with pytest.raises(TypeError):
        EngramStore(1, {"table_vocab_sizes": [4]}, store)


def test_populate_and_lookup_rows(es, store):
    e = es()
    tables = tables_for(e)
    assert e.populate(tables) is None
    for key, t in zip(e.get_store_keys(), tables):
        assert store.get(key) == t.tobytes()
    ids = np.array([[[0, 1, 2, 3], [4, 5, 6, 7], [16, 18, 22, 28]]], dtype=np.int64)
    out = e.lookup(ids)
    assert out.dtype == np.float32 and out.shape == (1, 3, 4, 8)
    for pos in range(3):
        for h in range(4):
            np.testing.assert_array_equal(out[0, pos, h], tables[h][ids[0, pos, h]])


def test_list_and_numpy_paths_match(es):
    e = es()
    e.populate(tables_for(e))
    ids = [[[0, 1, 2, 3], [4, 5, 6, 7]], [[1, 2, 3, 4], [8, 9, 10, 11]]]
    a = e.lookup(ids)
    b = e.lookup(np.asarray(ids, dtype=np.int32))  # converted to int64 as upstream
    assert a.shape == (2, 2, 4, 8)
    np.testing.assert_array_equal(a, b)
    assert np.isfinite(a).all()


def test_remove_from_store(es, store):
    e = es()
    e.populate(tables_for(e))
    assert e.remove_from_store(force=True) == 4
    assert [store.is_exist(k) for k in e.get_store_keys()] == [0, 0, 0, 0]
    assert e.remove_from_store(force=True) == 0
    # create-only: the layer can be populated again once removed
    e.populate(tables_for(e))
    assert store.batch_is_exist(e.get_store_keys()) == [1, 1, 1, 1]


def test_populate_is_create_only(es, store):
    e = es()
    e.populate(tables_for(e))
    with pytest.raises(RuntimeError, match="populate failed"):
        e.populate(tables_for(e))
    # one head key existing is enough to refuse, and nothing else gets written
    e2 = es()
    k1 = e2.get_store_keys()[1]
    assert store.put(k1, b"x") == 0
    with pytest.raises(RuntimeError):
        e2.populate(tables_for(e2))
    assert store.batch_is_exist(e2.get_store_keys()) == [0, 1, 0, 0]


def test_populate_input_errors(es, store):
    e = es()
    t = tables_for(e)
    with pytest.raises(RuntimeError, match="shape"):
        e.populate([t[0][:-1]] + t[1:])
    with pytest.raises(RuntimeError, match="num_heads"):
        e.populate(t[:3])
    with pytest.raises(RuntimeError, match="NumPy"):
        e.populate([t[0].tolist()] + t[1:])
    with pytest.raises(RuntimeError, match="2D"):
        e.populate([t[0].reshape(-1)] + t[1:])
    with pytest.raises(TypeError):
        e.populate(tuple(t))
    assert store.batch_is_exist(e.get_store_keys()) == [0, 0, 0, 0]
    # float64 tables are converted to float32 as upstream (forcecast)
    e.populate([x.astype(np.float64) for x in t])
    np.testing.assert_array_equal(e.lookup([[[3, 3, 3, 3]]])[0, 0, 2], t[2][3])


def test_lookup_errors(es):
    e = es()
    with pytest.raises(RuntimeError):  # tables missing
        e.lookup([[[0, 1, 2, 3]]])
    e.populate(tables_for(e))
    with pytest.raises(RuntimeError, match="empty"):
        e.lookup([])
    with pytest.raises(RuntimeError, match="empty"):
        e.lookup([[]])
    with pytest.raises(RuntimeError, match="num_heads"):
        e.lookup(np.zeros((1, 1, 3), dtype=np.int64))
    with pytest.raises(RuntimeError, match="shape"):
        e.lookup(np.zeros((1, 4), dtype=np.int64))
    with pytest.raises(RuntimeError):
        e.lookup([[[999, 1, 2, 3]]])
    with pytest.raises(RuntimeError):
        e.lookup([[[-1, 1, 2, 3]]])
    with pytest.raises(RuntimeError):  # 17 is one past head 0's table
        e.lookup(np.array([[[17, 0, 0, 0]]]))
    with pytest.raises(RuntimeError):  # ragged
        e.lookup([[[0, 1, 2, 3], [0, 1, 2]]])
    with pytest.raises(RuntimeError):
        e.lookup(np.zeros((0, 1, 4), dtype=np.int64))
    # the store still serves afterwards
    assert e.lookup([[[16, 18, 22, 28]]]).shape == (1, 1, 4, 8)


def test_upstream_signature_keywords(store):
    e = EngramStore(layer_id=3, config=make_config(), store=None)
    assert e.get_store_keys()[0] == "engram:l3:h0"
    assert isinstance(store, MooncakeDistributedStore)
